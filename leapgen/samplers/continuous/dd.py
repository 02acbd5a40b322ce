"""``dd``: Distilled Decoding (DD1) -- one or two generator forwards from noise to all tokens.

Paper: Liu et al., "Distilled Decoding 1: One-step Sampling of Image Auto-regressive Models with
Flow Matching", ICLR 2025 (``imagination-research/distilled-decoding``). Guarantee: **lossy**
(a distilled generator approximates the raster AR model's flow-matching map; no exactness claim).

The sampler draws the noise ``[B, n, d]`` from the caller's generator and runs the
:class:`~leapgen.models.dd.DDModel` once (``num_steps=1``) or twice (``num_steps=2``: the first
``split`` tokens of the first pass are kept and the rest predicted again from them); token ids
are the argmax of the generator's logits (the map is deterministic given the noise).

It reads no sampling setting: ``temperature``, ``top_k``, ``top_p`` and ``min_p`` other than
their off values are refused (``Sampler.ignores``, :mod:`leapgen.samplers.refusals`).

Defaults: ``num_steps=1``. A value the generator was not distilled for (not in its
``supported_steps``, (1, 2) for the shipped one) is a ``ConfigError``. Statistics:
``target_forwards = num_steps``, ``baseline_steps = n`` (raster AR needs one forward per token).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch

from ...models.dd import DDModel
from ..base import (
    DecodeConfig,
    DecodeResult,
    Sampler,
    check_int,
    new_stats,
    register_contract,
    register_sampler,
)
from ..refusals import NO_FILTERS
from .common import check_condition

register_contract("dd", lambda m: isinstance(m, DDModel))


@register_sampler("dd", family="continuous", guarantee="lossy", needs=("model",),
                  paper="Liu et al. 2025 (Distilled Decoding 1, ICLR)", contracts=("dd",))
class DistilledDecoding(Sampler):
    """Distilled Decoding: noise -> all image tokens in 1 or 2 forwards of a distilled generator."""

    ignores: ClassVar[dict[str, str]] = {
        "temperature": "the distilled generator maps noise to tokens deterministically (the argmax of its logits), "
                       "with the teacher's temperature built in at distillation; for a temperature use the raster "
                       "model (ar on leapgen/image-emoji) or mar",
        **dict.fromkeys(("top_k", "top_p", "min_p"), NO_FILTERS + ": a distilled generator maps noise to continuous tokens"),
    }
    defaults: ClassVar[dict[str, Any]] = {"num_steps": 1}

    def validate(self) -> None:
        check_int("num_steps", self.num_steps, 1, " (1 or 2 for the shipped generator)")

    @torch.no_grad()
    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> DecodeResult:
        self.check_models(models)
        model: DDModel = models["model"]
        model.check_steps(self.num_steps)
        t0 = time.perf_counter()
        b = len(prompts)
        cond, _ = check_condition(cond, b)
        cfg = model.config
        noise = torch.randn((b, cfg.num_tokens, cfg.noise_dim), generator=generator, device=model.device)
        start = model.forwards
        tokens = model.generate(noise, cond, self.num_steps)
        stats = new_stats(self, b)
        stats.target_forwards = model.forwards - start
        stats.new_tokens = b * cfg.num_tokens
        stats.baseline_steps = cfg.num_tokens
        k = cfg.split_at
        steps = torch.zeros(cfg.num_tokens, dtype=torch.long, device="cpu")  # host bookkeeping (token_steps)
        if self.num_steps == 2:
            steps[k:] = 1
            stats.accepted_per_step = [[k] * b, [cfg.num_tokens - k] * b]
        else:
            stats.accepted_per_step = [[cfg.num_tokens] * b]
        if config.step_callback is not None:
            config.step_callback(self.num_steps - 1, stats)
        stats.wall_time = time.perf_counter() - t0
        return DecodeResult(sequences=tokens.tolist(), stats=stats, token_steps=[steps.tolist()] * b)


__all__ = ["DistilledDecoding"]
