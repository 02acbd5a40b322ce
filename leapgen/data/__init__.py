"""Offline corpus builders: the data every shipped asset is trained on, available without network.

* :mod:`leapgen.data.code`: the Python standard library's sources, split into train / held-out by a
  hash of each file's path (text recipe, text benchmark prompts).
* :mod:`leapgen.data.emoji`: every emoji of Noto Color Emoji rendered to small RGB images, with
  Unicode names and eight classes (image recipe, image benchmark references).
* :mod:`leapgen.data.emoji_classifier`: the small CNN whose penultimate features give
  "FID (emoji features)"; trained by :mod:`leapgen.train.feature_classifier`, used by the image bench.
* :mod:`leapgen.data.speech_de`: the s2st grammar's German sentences voiced by espeak-ng (the
  German ASR that judges S2ST output).
* :mod:`leapgen.data.molecules`: MOSES SMILES as SAFE strings (molecule recipe, novelty reference).

Layering: this package sits beside the main stack. It imports only :mod:`leapgen.errors` and third-party
libraries (never samplers, pipelines, bench or train), so the training recipes, the benchmarks and
the pipelines can all depend on it without pointing at each other.
"""


import importlib
from collections.abc import Callable
from typing import Any

# Corpus builders for ``leapgen data NAME``: ``"name": "module.path:function"``, imported lazily.
# A builder takes ``out_dir`` and ``seed`` (and its own keyword options) and returns a small summary.
DATASETS: dict[str, str] = {
    "speech-en": "leapgen.data.speech:build",
    "speech-de": "leapgen.data.speech_de:build",
    "audio-music": "leapgen.data.audio_music:build",
    "ocr-en": "leapgen.data.ocr:build",
    "peptide": "leapgen.data.peptide:build",
    "tts-en": "leapgen.data.tts_en:build",
    "s2st-en-de": "leapgen.data.s2st:build",
}


def list_datasets() -> list[str]:
    """Names of the registered corpus builders, sorted."""
    return sorted(DATASETS)


def get_dataset_builder(name: str) -> Callable[..., Any]:
    """Import and return the builder of dataset ``name``."""
    try:
        target = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; available datasets: {', '.join(list_datasets())}") from None
    module_name, _, func_name = target.partition(":")
    return getattr(importlib.import_module(module_name), func_name)
