"""Autoregressive decoding of the **bidirectional-augmented** AR decoder (CrossNovo).

Paper: "Bidirectional Representations Augmented Autoregressive Biological Sequence Generation"
(CrossNovo, NeurIPS 2025, arXiv 2510.08169; BEAM-Labs/denovo). The NAR decoder runs once per
spectrum (when the decoder's cache is created) and the AR decoder cross-attends to its hidden
states at every step, so inference is still autoregressive: one target forward per residue plus one
NAR forward (counted in ``stats.other_forwards``).

Contract ``"peptide-bidirectional"``: a :class:`~leapgen.models.peptide_lm.PeptideBiARLM`.
Guarantee: ``greedy-exact`` — it is the KV-cached chain loop of ``ar`` on that decoder (at
temperature 0 token for token the greedy decode of the bidirectional decoder; at temperature > 0
plain ancestral sampling of it). Defaults: none.
"""

from __future__ import annotations

from typing import Any

import torch

from ..models.peptide_lm import PeptideBiARLM
from .ar import AutoRegressive
from .base import DecodeConfig, register_contract, register_sampler

register_contract("peptide-bidirectional", lambda m: isinstance(m, PeptideBiARLM))


@register_sampler("ar_bidirectional", family="baseline", guarantee="greedy-exact", needs=("model",),
                  paper="CrossNovo (NeurIPS 2025)", contracts=("peptide-bidirectional",))
class ARBidirectional(AutoRegressive):
    """AR decoding of the NAR-augmented decoder (see the module docstring)."""

    contracts = ("peptide-bidirectional",)
    defaults: dict = {}

    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None):
        self.check_models(models)
        model = models["model"]
        before = model.nar_forwards
        res = super().generate(models, prompts, config, generator, cond)
        res.stats.other_forwards += model.nar_forwards - before
        res.stats.sampler = self.name
        return res
