"""Fast-dLLM: confidence-aware parallel decoding (threshold / factor rules) with the block KV cache.

Paper: Wu et al., "Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache
and Parallel Decoding", NVIDIA 2025; NVlabs/Fast-dLLM ``llada/generate.py`` (reference notes
masked.md §6). Guarantee: **lossy** (approximate cache and parallel commits; the paper's
argument: when every committed marginal is above about 1 - ε, greedy parallel decoding matches
sequential greedy decoding; quality is measured by the benches).

LLaDA's semi-AR blocks (:mod:`~leapgen.samplers.masked.llada`), but the number of tokens per
step is data-dependent:

* ``policy="threshold"`` (default, ``threshold=0.9``): among the block's masked positions,
  always commit the most confident and every other one with ``p >= threshold``;
* ``policy="factor"`` (``factor=1.0``): sort the confidences ``c(1) >= c(2) >= ...`` and commit
  the largest ``n`` with ``c(n) >= 1 - factor / (n + 1)`` (``(n+1)(1 - c(n)) <= f``; the code's
  ``threshs[i] = 1 - factor / (i + 2)``), at least one.

Cache (``cache=``): ``"dual"`` (default) reuses the keys/values of the prefix *and* of the masked
suffix after the block, recomputing only the block (``generate_with_dual_cache``); ``"prefix"``
recomputes the block and everything after it (``generate_with_prefix_cache``); ``"none"``.
The cache is refreshed by a full forward at every block start (the block's first decoding step)
and, with ``cache_refresh=k``, every k steps inside a block (1 = every step: the cache-free path
exactly). On a model without a masked cache the default falls back to no cache.

Defaults: ``block_length=32``, ``threshold=0.9``, temperature 0, ``scorer="prob"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import register_sampler
from .llada import DLLM_DEFAULTS, DLLMSampler
from .parts import POLICIES, UnmaskPolicy, finite
from .state import MaskedDecodeState


def factor_commit(score: Tensor, pool: Tensor, factor: float) -> Tensor:
    """Bool ``[A, N]``: the units the factor rule commits (the top ``n`` of the pool by score, n
    the largest with ``c(n) >= 1 - factor / (n + 1)``, at least 1 where the pool is not empty)."""
    s = score.masked_fill(~pool, float("-inf"))
    order = torch.sort(s, dim=1, descending=True, stable=True)
    rank = torch.arange(s.shape[1], device=s.device, dtype=torch.float64)
    thresh = 1.0 - factor / (rank + 2.0)  # rank 0 = n 1: 1 - f/2
    ok = order.values.double() >= thresh[None]
    # the largest n such that the n-th passes; the sorted scores fall while the thresholds rise,
    # so the passing ranks form a prefix
    n = ok.long().cumprod(1).sum(1).clamp(min=1)
    n = torch.minimum(n, pool.sum(1))
    take_sorted = rank[None] < n[:, None]
    return torch.zeros_like(pool).scatter(1, order.indices, take_sorted) & pool


@POLICIES.register("factor")
class Factor(UnmaskPolicy):
    """Fast-dLLM's factor rule (commit-only; ignores the schedule): see :func:`factor_commit`."""

    uses_schedule = False

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = finite(factor, "factor", low=0.0, open_low=True)

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:
        return pool & ~factor_commit(score, pool, self.factor)


@register_sampler(
    "fast_dllm",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Wu et al. 2025 (Fast-dLLM, NVIDIA)",
)
class FastDLLM(DLLMSampler):
    """Fast-dLLM threshold / factor parallel decoding with the dual (or prefix) cache (module docstring)."""

    defaults: ClassVar[dict[str, Any]] = {
        **DLLM_DEFAULTS,
        "policy": "threshold",
        "threshold": 0.9,
        "factor": 1.0,
        "cache": "dual",
        "cache_refresh": None,
    }

    def validate(self) -> None:
        super().validate()
        p = self.params
        if p["policy"] == "threshold" and p["scorer"] in ("prob", "margin") and not 0.0 <= float(p["threshold"]) <= 1.0:
            raise ConfigError(f"threshold is a probability with scorer={p['scorer']!r}: give 0 <= threshold <= 1, got {p['threshold']!r}.")
