"""Where the TTS loses intelligibility: each stage of the pipeline fed the real thing, scored by the ASR.

Part of ``leapgen bench speech``. On the bench's items (unseen voices, the prompt is another clip
of the same voice) the shipped ASR transcribes:

* ``real``: the real espeak-ng speech;
* ``codec``: the real speech through the codec (encode -> decode): the ceiling the codec sets;
* ``semantic_probe``: the real speech, with the ASR's encoder states replaced by their k-means
  centroids (rescaled to the state's norm): the ASR information the **semantic tokens** keep;
* ``s2a_from_real_semantic``: the real speech's semantic tokens -> ``maskgct_s2a`` (the prompt's
  codes as its prefix) -> codec: the **S2A** alone, with T2S taken out;
* ``s2a_real_layer0``: the same S2A output with its first RVQ layer replaced by the real speech's
  codes: how much of the S2A's loss is in that coarsest layer.

The generated speech's WER (the main table) minus these says which stage is the bottleneck.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)


def _transcribe(asr: Any, waves: list[np.ndarray], texts: list[str]) -> float:
    from .tts import _wer  # the bench's one WER rule (short or missing audio read as silence)

    return round(_wer(asr, list(waves), texts), 4)


@contextlib.contextmanager
def quantised_encoder(model: Any, codebook: Any) -> Iterator[None]:
    """Within the block, ``model.encode`` (an ASR model) returns its states replaced by the nearest
    centroid of ``codebook`` (a :class:`SemanticCodebook`), rescaled to each state's norm."""
    encode = model.encode

    def quantised(feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mem, mask = encode(feats, lengths)
        q = codebook.centroids[codebook.encode(mem)] * mem.float().norm(dim=-1, keepdim=True)
        return q.to(mem.dtype), mask

    model.encode = quantised
    try:
        yield
    finally:
        del model.encode  # back to the class's method


def semantic_probe_wer(pipe: Any, asr: Any, real: list[np.ndarray], texts: list[str]) -> float:
    """WER of ``asr`` when its encoder states are replaced by the TTS semantic codebook's centroids.

    ``asr`` must run the encoder the codebook was fitted on (the TTS asset's ``asr_model``)."""
    with quantised_encoder(asr.model, pipe.semantic):
        return _transcribe(asr, real, texts)


def stage_ablation(pipe: Any, judge: Any, items: list[dict[str, Any]], real: list[np.ndarray], seed: int = 0) -> dict[str, Any]:
    """The module docstring's WERs (``judge``: the ASR pipeline that scores the bench)."""
    from ..pipelines.asr import ASRPipeline
    from ..pipelines.tts import HOP, trim_trailing_silence

    texts = [it["text"] for it in items]
    gen = torch.Generator().manual_seed(seed)
    codec_out, s2a_out, layer0_out = [], [], []
    for it, wave in zip(items, real):
        w = trim_trailing_silence(wave)
        w = np.pad(w, (0, (-w.size) % HOP))
        real_codes = pipe.codec.encode(w)[0].cpu()
        codec_out.append(pipe.codec.decode(real_codes[None])[0].cpu().numpy())
        spoken = pipe.speak_semantic(pipe.semantic_of(w), it["prompt"], generator=gen)
        c = spoken.codes[0]
        s2a_out.append(spoken.audios[0])
        n = min(c.shape[1], real_codes.shape[1])
        c = c.clone()
        c[0, :n] = real_codes[0, :n]
        layer0_out.append(pipe.codec.decode(c[None])[0].cpu().numpy())
    own_asr = ASRPipeline(model=pipe.asr_model, frontend=pipe.frontend, vocab=pipe.asr_vocab)
    rec = {"codec": _transcribe(judge, codec_out, texts),
           "semantic_probe": semantic_probe_wer(pipe, own_asr, real, texts),
           "semantic_probe_unquantised": _transcribe(own_asr, real, texts),
           "s2a_from_real_semantic": _transcribe(judge, s2a_out, texts),
           "s2a_real_layer0": _transcribe(judge, layer0_out, texts)}
    logger.info("tts stage ablation: %s", rec)
    return rec


def render_ablation(rec: dict[str, Any], real_wer: float, generated: dict[str, float]) -> list[str]:
    """Markdown lines of the ablation table."""
    from .common import markdown_table

    rows = [["real espeak-ng speech", real_wer, "the judge's own error"],
            ["real speech through the codec", rec["codec"], "codec"],
            ["S2A on the real semantic tokens, real layer-0 codes", rec["s2a_real_layer0"], "S2A fine layers 1-3"],
            ["S2A on the real semantic tokens", rec["s2a_from_real_semantic"], "S2A (T2S taken out)"]]
    rows += [[f"generated ({name})", w, "T2S + S2A"] for name, w in generated.items()]
    return ["", "## Where intelligibility is lost (stages fed the real thing)", "",
            markdown_table(["speech", "ASR WER", "stage it measures"], rows), "",
            f"Semantic tokens: the TTS asset's own ASR reads the real speech at WER {rec['semantic_probe_unquantised']:.2f} and at "
            f"WER {rec['semantic_probe']:.2f} when its encoder states are replaced by their k-means centroids (the information "
            "the semantic tokens keep)."]


__all__ = ["quantised_encoder", "render_ablation", "semantic_probe_wer", "stage_ablation"]
