"""ASR-BLEU for ``leapgen bench s2st``: a German ASR transcribes the output speech, sacrebleu scores it.

* **Judge**: an ASR pipeline (default ``leapgen/asr-de``, trained by ``leapgen train asr-de`` on
  ``leapgen data speech-de``: the s2st grammar's German sentences minus the S2ST test sentences,
  voiced by the S2ST target voice and variants). :func:`load_judge` returns it, or None with the
  reason (e.g. the asset is not installed), which the bench writes out instead of the numbers.
* **ASR-BLEU**: ``sacrebleu.corpus_bleu(transcripts, [references])`` (default tokenisation)
  against the reference German text (the ``de`` field of the s2st manifest); the transcripts
  come from the judge's ``paraformer`` sampler, batched (:func:`transcribe`).
* **Reference rows** (:func:`reference_rows`), so judge error and system error can be told apart:
  the real German target speech (``tgt_audio``: the judge's own error on the target voice, with
  its WER) and the real target speech through the S2ST pipeline's own vocoder (log-mel ->
  Griffin-Lim, ``pipe.mel``: the ceiling of any system that outputs perfect mels).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

DEFAULT_JUDGE = "leapgen/asr-de"
#: Griffin-Lim iterations used to vocode mels for the judge (the S2ST pipeline's default)
GL_ITERS = 32


def load_judge(asr: str | None = DEFAULT_JUDGE) -> tuple[Any | None, str | None]:
    """The judge pipeline and None, or None and why it is unavailable (``asr=None``: switched off)."""
    from ..errors import AssetNotFoundError, ConfigError
    from ..pipelines import Pipeline

    if not asr:
        return None, "not run (--asr none)"
    try:
        return Pipeline.from_pretrained(asr), None
    except (AssetNotFoundError, ConfigError, OSError) as err:
        logger.warning("ASR-BLEU judge %s unavailable: %s", asr, err)
        return None, f"missing: German ASR {asr!r} not available ({err}); train it with `leapgen train asr-de`"


def transcribe(judge: Any, waves: list[np.ndarray | None], sample_rate: int, batch_size: int = 16) -> list[str]:
    """The judge's ``paraformer`` transcripts of ``waves`` ('' for a missing or empty wave)."""
    idx = [i for i, w in enumerate(waves) if w is not None and len(w) > 0]
    out = [""] * len(waves)
    if idx:
        res = judge([waves[i] for i in idx], sampling_rate=sample_rate, sampler="paraformer", batch_size=batch_size)
        for i, text in zip(idx, res.texts):
            out[i] = text or ""
    return out


def score(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """ASR-BLEU (sacrebleu corpus BLEU) and WER (jiwer) of transcripts against reference texts."""
    import jiwer
    import sacrebleu

    if len(hyps) != len(refs) or not refs:
        raise ValueError(f"need as many transcripts as references (>= 1), got {len(hyps)} and {len(refs)}")
    return {"utterances": len(refs), "asr_bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "asr_wer": round(jiwer.wer(refs, [h or "<empty>" for h in hyps]), 4),
            "asr_examples": [[r, h] for r, h in zip(refs[:3], hyps[:3])]}


def vocode(pipe: Any, mels: list[torch.Tensor | None], iters: int = GL_ITERS) -> list[np.ndarray | None]:
    """Waves of log-mels ``[T, n_mels]`` by the S2ST pipeline's Griffin-Lim (None stays None)."""
    return [pipe.mel.griffin_lim(m, iters=iters).numpy() if m is not None and m.shape[0] else None for m in mels]


def of_mels(judge: Any, pipe: Any, mels: list[torch.Tensor | None], refs: list[str]) -> dict[str, Any]:
    """ASR-BLEU of a sampler's output mels, vocoded as the pipeline does."""
    return score(transcribe(judge, vocode(pipe, mels), pipe.mel.config.sample_rate), refs)


def reference_rows(judge: Any, pipe: Any, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The judge on the real target speech (``real_target``) and on it after the pipeline's
    mel -> Griffin-Lim round trip (``vocoded_target``)."""
    import soundfile as sf

    refs = [r["de"] for r in rows]
    waves, rates = zip(*(sf.read(r["tgt_audio"], dtype="float32") for r in rows))
    if len(set(rates)) != 1:
        raise ValueError(f"target audio at several sample rates: {sorted(set(rates))}")
    real = score(transcribe(judge, list(waves), rates[0]), refs)
    mels = [pipe.mel(torch.from_numpy(w)) for w in waves]
    return {"real_target": real, "vocoded_target": of_mels(judge, pipe, mels, refs)}


__all__ = ["DEFAULT_JUDGE", "load_judge", "of_mels", "reference_rows", "score", "transcribe", "vocode"]
