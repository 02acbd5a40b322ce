"""CPPD one-pass decoding: ``max_len + 1`` position nodes, one decoder pass, argmax per slot, cut
at the first ``</s>`` (the end token).

Paper: Du et al., "Context Perception Parallel Decoder for Scene Text Recognition", TPAMI 2025
(arXiv 2307.12270; PaddleOCR ``CPPDHead.forward_test`` + ``CPPDLabelDecode``).
Contract ``"cppd"``: a :class:`~leapgen.models.ocr_lm.CPPDLM` (``propose(state)`` -> slot logits and
the end-token cut). Guarantee: ``lossy`` (its own decoder, not a stand-in for the AR decoder).
Defaults: none (temperature / top-k / top-p of the DecodeConfig apply per slot; at temperature > 0
the cut is where the first drawn ``</s>`` falls). One target forward for the whole word.
"""

from __future__ import annotations

from typing import Any

import torch

from ...models.ocr import EOS, cut_at_eos
from ...models.ocr_lm import CPPDLM
from ..base import DecodeConfig, register_contract, register_sampler
from ..logits import LogitsProcessor, sample
from .common import NARSampler

register_contract("cppd", lambda m: isinstance(m, CPPDLM))


@register_sampler("cppd", family="nar", guarantee="lossy", needs=("model",), paper="Du et al. 2023 (CPPD)",
                  contracts=("cppd",))
class CPPD(NARSampler):
    """CPPD: one parallel pass over the position nodes, argmax per slot, cut at ``</s>``."""

    contracts = ("cppd",)
    defaults: dict = {}

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        logits = model.propose(state)["logits"]
        if config.greedy:
            ids = logits.argmax(-1)
        else:
            b, n, v = logits.shape
            ids = sample(LogitsProcessor(config).probs(logits.reshape(b * n, v)), generator).view(b, n)
        seqs = []
        for row in ids.tolist():
            chars = cut_at_eos(row)
            seqs.append(chars + [EOS] if len(chars) < len(row) else chars)
        return seqs, [list(range(len(s))) for s in seqs]
