"""Recipe ``leapgen train asr-de``: the German ASR that judges S2ST output (ASR-BLEU of ``leapgen bench s2st``).

The same recipe as ``asr-en`` (:func:`leapgen.train.asr_en.main`: Paraformer + CTC + AR on one
encoder, the same losses, schedule, quick WER and closing calibrations), pointed at the German
corpus (``leapgen data speech-de``, :mod:`leapgen.data.speech_de`: the s2st grammar's German
sentences minus the S2ST test sentences, voiced by the S2ST target voice and variants; built
here when missing) and initialised from the English ASR ``assets/asr-en`` (``init_from``: the
encoder and the CMVN transfer, the rows of words both vocabularies share are kept, the other
German words start fresh; :func:`~leapgen.train.asr_en.remap_vocab`).

Defaults differ from asr-en's only where a fine-tune from asr-en wants it: ``minutes`` 40 (the
features, about 32 minutes of training on one thread and the closing evaluation),
``lr`` 1e-3 with 100 warm-up steps, SpecAugment (2 masks) and AR token dropout 0.3 (the shipped
asr-en continuation's settings). Every other option is asr-en's and can be passed as well.
Output: ``assets/asr-de`` (loads as ``Pipeline.from_pretrained("leapgen/asr-de")``).
"""

from __future__ import annotations

from typing import Any

from . import asr_en
from .common import check_options


def main(out_dir: str = "assets/asr-de", seed: int = 0, corpus: str | None = None, init_from: str | None = "assets/asr-en",
         minutes: float = 40.0, lr: float = 1e-3, warmup: int = 100, spec_augment_masks: int = 2,
         ar_token_dropout: float = 0.3, **options: Any) -> dict[str, Any]:
    """Train and save the German ASR pipeline (see the module docstring); ``options`` go to
    :func:`leapgen.train.asr_en.main` (``max_steps``, ``batch_size``, ``threads``, ...)."""
    check_options("asr-de", asr_en.main, options, exclude=("dataset",))
    return asr_en.main(out_dir=out_dir, seed=seed, corpus=corpus, init_from=init_from, minutes=minutes, lr=lr,
                       warmup=warmup, spec_augment_masks=spec_augment_masks, ar_token_dropout=ar_token_dropout,
                       dataset="speech-de", **options)
