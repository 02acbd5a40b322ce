"""Training recipes that produce the shipped assets under ``assets/``.

Each recipe is registered as ``"name": "module.path:function"`` and imported lazily, so importing
this package never pulls in the training dependencies of every recipe.

>>> from leapgen.train import run_recipe
>>> metrics = run_recipe("text-code", out_dir="/tmp/text-code", target_tokens=20_000, draft_tokens=20_000)
"""

from __future__ import annotations

import importlib
from typing import Any

RECIPES: dict[str, str] = {
    "text-code": "leapgen.train.text_code:main",
    "text-code-heads": "leapgen.train.text_code_heads:main",
    "image-emoji": "leapgen.train.image_emoji:main",
    "molecule-safe": "leapgen.train.molecule_safe:main",
    "asr-en": "leapgen.train.asr_en:main",
    "asr-de": "leapgen.train.asr_de:main",
    "text-code-diffusion": "leapgen.train.text_code_diffusion:main",
    "text-code-diffusion-adapted": "leapgen.train.text_code_diffusion:main_adapted",
    "parallel-tasks": "leapgen.train.parallel_tasks:main",
    "audio-codec": "leapgen.train.audio_codec:main",
    "audio-music": "leapgen.train.audio_music:main",
    "image-nar": "leapgen.train.image_nar:main",
    "image-var": "leapgen.train.image_var:main",
    "image-nfig": "leapgen.train.image_var:main_nfig",
    "image-ctf": "leapgen.train.image_ctf:main",
    "image-mar": "leapgen.train.image_mar:main",
    "image-dd": "leapgen.train.image_dd:main",
    "ocr-en": "leapgen.train.ocr_en:main",
    "peptide": "leapgen.train.peptide:main",
    "tts-en": "leapgen.train.tts_en:main",
    "s2st-en-de": "leapgen.train.s2st:main",
    "language-id": "leapgen.train.language_id:main",
}


def list_recipes() -> list[str]:
    """Names of the registered training recipes, sorted."""
    return sorted(RECIPES)


def get_recipe(name: str):
    """Import and return the entry point of recipe ``name``."""
    try:
        target = RECIPES[name]
    except KeyError:
        raise ValueError(
            f"unknown training recipe {name!r}; available recipes: {', '.join(list_recipes())}"
        ) from None
    module_name, _, func_name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, func_name)


def run_recipe(name: str, **kwargs: Any) -> Any:
    """Run recipe ``name`` with keyword arguments (e.g. ``out_dir``, ``seed``) and return its result."""
    return get_recipe(name)(**kwargs)


__all__ = ["RECIPES", "get_recipe", "list_recipes", "run_recipe"]
