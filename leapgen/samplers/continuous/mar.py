"""``mar``: masked autoregressive generation of continuous tokens with a diffusion head.

Paper: Li et al. 2024, "Autoregressive Image Generation without Vector Quantization" (MAR;
``LTH14/mar``, ``models/mar.py::sample_tokens``). Guarantee: **lossy** (as MaskGIT: the tokens
of one step are drawn independently given the known ones, an approximation of the joint that
shrinks with more steps); it is the reference the ``cspd`` sampler is exact against.

Per step: one transformer forward over the current state (conditional and null condition in one
batched call when guiding), then the MLP diffusion head samples the positions of this step in the
row's random order, from the noise bank (initial noise + one vector per head step). Schedules,
order and guidance: :mod:`leapgen.samplers.continuous.common`.

Defaults: ``num_iter=16`` (MAR uses 64 steps for 256 tokens; 16 keeps its ratio for the 64 emoji
tokens), ``cfg_schedule="linear"``, ``head_steps=None`` (the model's ``sampling_steps``, 16 in
the shipped model; MAR uses 100). Guidance scale and temperature come from the condition and
``DecodeConfig.temperature`` (MAR's ``temperature`` scales the head's per-step noise).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch

from ..base import DecodeConfig, Sampler, new_stats, register_sampler
from ..refusals import NO_FILTERS
from .common import (
    ContinuousDecodeResult,
    cfg_per_step,
    check_condition,
    check_head_params,
    cosine_counts,
    head_steps_of,
    mar_step,
    noise_bank,
    random_orders,
    step_of_position,
)


def finish(stats: Any, values: torch.Tensor, token_steps: torch.Tensor, t0: float, num_iter: int) -> ContinuousDecodeResult:
    stats.new_tokens = values.shape[0] * values.shape[1]
    stats.baseline_steps = values.shape[1]
    stats.wall_time = time.perf_counter() - t0
    stats.extra.setdefault("num_iter", num_iter)
    return ContinuousDecodeResult(sequences=values.reshape(values.shape[0], -1).tolist(), stats=stats,
                                  token_steps=token_steps.tolist(), values=values)


@register_sampler("mar", family="continuous", guarantee="lossy", needs=("model",),
                  paper="Li et al. 2024 (MAR, NeurIPS)", contracts=("mar",))
class MAR(Sampler):
    """MAR: random-order masked generation on the cosine schedule, diffusion-head tokens, linear CFG."""

    ignores: ClassVar[dict[str, str]] = dict.fromkeys(
        ("top_k", "top_p", "min_p"), NO_FILTERS + ": the diffusion head samples continuous tokens (temperature scales its noise)")
    defaults: ClassVar[dict[str, Any]] = {"num_iter": 16, "cfg_schedule": "linear", "head_steps": None}

    def validate(self) -> None:
        check_head_params(self.num_iter, self.head_steps, self.cfg_schedule)

    @torch.no_grad()
    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> ContinuousDecodeResult:
        self.check_models(models)
        model = models["model"]
        t0 = time.perf_counter()
        b, n, d = len(prompts), model.seq_len, model.token_dim
        cond, cfg = check_condition(cond, b)
        dev = model.device
        counts = cosine_counts(n, self.num_iter)
        k = head_steps_of(model, self.head_steps)
        order = random_orders(b, n, generator, dev)
        bank = noise_bank(b, n, k, d, generator, dev)
        step_of = step_of_position(order, counts)
        cfgs = cfg_per_step(counts, cfg, self.cfg_schedule)
        stats = new_stats(self, b)
        values = torch.zeros((b, n, d), device=dev)
        known = torch.zeros((b, n), dtype=torch.bool, device=dev)
        start = model.forwards
        for s, c in enumerate(counts):
            commit = step_of == s
            cfg_tok = torch.full((b, n), cfgs[s], device=dev)
            tok, _, _ = mar_step(model, values, known, commit, cond, bank, cfg_tok, config.temperature, k)
            values[commit] = tok.to(values.dtype)
            known |= commit
            stats.accepted_per_step.append([c] * b)
            if config.step_callback is not None:
                config.step_callback(s, stats)
        stats.target_forwards = model.forwards - start
        return finish(stats, values, step_of, t0, self.num_iter)


__all__ = ["MAR", "finish"]
