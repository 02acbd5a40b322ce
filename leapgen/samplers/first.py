"""FiRST: per-layer routers skip layers of the target for a given input (KV-cache compatible).

Paper: Jain et al., "FiRST: Finetuning Router-Selective Transformers for Input-Adaptive Latency
Reduction", Findings of EMNLP 2025 (arXiv 2410.12513).

A model option: :class:`~leapgen.models.text_variants.VariantLM` with ``router=`` skips, for each
row, the layers its router chooses at the prefill forward (from the mean hidden state entering
each layer over the prompt) and keeps that choice for every later step, so the KV cache stays
consistent. Any sampler can decode over such a model (it is a ``causal`` model); this registered
sampler is plain autoregressive decoding over the shipped target with its trained routers
(:class:`~leapgen.models.text_heads.Routers`, ``leapgen train text-code-heads``).

Guarantee: ``lossy``. ``threshold``: a layer is skipped when its router's probability exceeds
it; ``threshold=1`` keeps every layer (then it is ``ar`` token for token). ``max_skip`` caps the
layers one row skips (the most confident routers win). Defaults: ``threshold=0.5``, ``max_skip=2``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..models.text_heads import HeadedLM
from .ar import NoDraft
from .base import DecodeResult, check_int, register_sampler
from .loops.chain import ChainSampler
from .lossy_common import check_float, headed


def router_fn(routers: Any, threshold: float, max_skip: int, n_layers: int):
    """``decide(layer, h) -> bool [B]`` for :class:`VariantLM`: skip where the router is confident,
    at most ``max_skip`` layers per row (decided layer by layer, in order)."""
    taken: dict[str, torch.Tensor] = {}

    def decide(layer: int, h: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        if threshold >= 1.0 or max_skip == 0:
            return torch.zeros(h.shape[0], dtype=torch.bool, device=h.device)
        with torch.inference_mode():
            p = routers.prob(layer, h, valid)
        used = taken.setdefault("n", torch.zeros(h.shape[0], dtype=torch.long, device=h.device))
        skip = (p > threshold) & (used < max_skip)
        taken["n"] = used + skip.long()
        return skip

    decide.takes_valid = True  # VariantLM passes each row's real positions (batch-independent decisions)
    return decide


class RoutedNoDraft(NoDraft):
    @classmethod
    def check(cls, sampler, models, config) -> None:
        headed(models, "routers", sampler.name)


@register_sampler(
    "first",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model",),
    paper="Jain et al. 2024 (FiRST), arXiv 2410.12513",
    contracts=("text-heads",),
)
class FiRST(ChainSampler):
    """Autoregressive decoding over the target with FiRST layer routers (skips chosen at prefill)."""

    defaults = {"threshold": 0.5, "max_skip": 2}
    proposer = RoutedNoDraft

    def validate(self) -> None:
        check_float("threshold", self.threshold, 0.0, 1.0)
        check_int("max_skip", self.max_skip, low=0)

    def generate(self, models, prompts, config, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        lm = headed(models, "routers", self.name)
        decide = router_fn(lm.heads.routers, self.threshold, self.max_skip, lm.net.c.n_layers)
        routed = HeadedLM(lm.base, lm.heads, gear=lm.gear, router=decide)
        res = super().generate({**models, "model": routed}, prompts, config, generator, cond)
        lm.forwards += routed.forwards
        n = lm.net.c.n_layers
        res.stats.extra["layers_run_per_forward"] = routed.layers_run / max(1, routed.forwards)
        res.stats.extra["layers"] = n
        return res

