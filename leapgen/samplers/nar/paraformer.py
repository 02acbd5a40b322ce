"""Paraformer one-pass decoding: CIF fires ``floor(sum alpha)`` token embeddings, one non-causal
decoder pass scores every position, argmax per position (or a draw at ``temperature > 0``).

Paper: Gao, Zhang, McLoughlin, Yan, "Paraformer: Fast and Accurate Parallel Transformer for
Non-autoregressive End-to-End Speech Recognition", Interspeech 2022 (FunASR ``Paraformer.inference``).
Guarantee: ``lossy`` (its own model: it is not an exact stand-in for any autoregressive decoder).
Defaults: none (temperature / top-k / top-p of the DecodeConfig apply per position).
Alignment: the CIF fire frame of every token (word timestamps in the ASR pipeline).
"""

from __future__ import annotations

from typing import Any

import torch

from ..base import DecodeConfig, register_sampler
from ..logits import LogitsProcessor, sample
from .common import NARSampler


@register_sampler("paraformer", family="nar", guarantee="lossy", needs=("model",), paper="Gao et al. 2022",
                  contracts=("paraformer",))
class Paraformer(NARSampler):
    """Paraformer: CIF + one non-causal decoder pass (argmax per position at temperature 0)."""

    defaults: dict = {}

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        out = model.propose(state)
        logits, num, frames = out["logits"], out["token_num"], out["fire_frames"]
        if config.greedy or logits.shape[1] == 0:
            ids = logits.argmax(-1)
        else:
            proc = LogitsProcessor(config)
            b, n, v = logits.shape
            ids = sample(proc.probs(logits.reshape(b * n, v)), generator).view(b, n)
        seqs = [ids[r, : int(num[r])].tolist() for r in range(ids.shape[0])]
        align = [frames[r, : int(num[r])].tolist() for r in range(ids.shape[0])]
        return seqs, align
