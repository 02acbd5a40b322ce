"""Bookkeeping shared by the fixed-order image loops: statistics, per-token forward indices, the
checks of the call (empty prompts, ``max_new_tokens`` equal to the number of tokens the order fills)
and :func:`sample_finite`, the draw that refuses logits guidance or temperature pushed out of range."""

from __future__ import annotations

import time
from typing import Any

import torch

from ...errors import ConfigError, InputError, NumericalError
from ..base import DecodeConfig, DecodeResult, DecodeStats, Sampler, new_stats
from ..logits import LogitsProcessor

NONFINITE = ("the logits are NaN or out of float range after guidance and temperature (temperature={t!r}); "
             "lower cfg_scale or use a temperature nearer 1 (0 = greedy)")


class OrderedRun:
    """One call of a fixed-order loop over ``batch`` rows filling ``total`` tokens each."""

    def __init__(self, sampler: Sampler, prompts: list[list[int]], config: DecodeConfig, total: int) -> None:
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise InputError("prompts must be a non-empty list (one empty list per image: the condition fills the prefix)")
        if any(len(p) for p in prompts):
            raise InputError(
                f"sampler {sampler.name!r} decodes images from their condition only; pass empty prompts ([[]] * batch)"
            )
        if config.max_new_tokens != total:
            raise ConfigError(
                f"sampler {sampler.name!r} fills {total} tokens per image (its model's fixed order); "
                f"set max_new_tokens={total}, got {config.max_new_tokens}"
            )
        self.config = config
        self.batch = len(prompts)
        self.total = total
        self.stats: DecodeStats = new_stats(sampler, self.batch)
        self.stats.baseline_steps = total
        self.steps = torch.full((self.batch, total), -1, dtype=torch.long, device="cpu")  # host bookkeeping
        self.forward = 0
        #: a device flag: some draw read NaN / out-of-range logits (:func:`sample_finite`)
        self.nonfinite: torch.Tensor | None = None
        self.t0 = time.perf_counter()

    def record(self, positions: torch.Tensor | list[int], forwards: int = 1) -> None:
        """``positions`` of every row were produced by the forward just run (one target forward)."""
        pos = torch.as_tensor(positions, dtype=torch.long).cpu()
        self.steps[:, pos] = self.forward
        self.stats.target_forwards += forwards
        self.stats.new_tokens += self.batch * pos.numel()
        self.stats.accepted_per_step.append([int(pos.numel())] * self.batch)
        if self.config.step_callback is not None:
            self.config.step_callback(self.forward, self.stats)
        self.forward += 1

    def result(self, tokens: torch.Tensor, **extra: Any) -> DecodeResult:
        if self.nonfinite is not None and bool(self.nonfinite):  # the run's one check of its draws
            raise NumericalError(NONFINITE.format(t=self.config.temperature))
        if int((self.steps < 0).sum()):
            raise RuntimeError("the order left some tokens undecoded")
        self.stats.wall_time = time.perf_counter() - self.t0
        self.stats.extra.update(extra)
        seqs = tokens.detach().cpu().tolist()
        return DecodeResult(sequences=seqs, stats=self.stats, token_steps=self.steps.tolist())


def sample_finite(proc: LogitsProcessor, logits: torch.Tensor, generator: torch.Generator | None,
                  run: OrderedRun | None = None) -> torch.Tensor:
    """``proc.sample(logits)``, refused (``NumericalError``) where the draw would read NaN: a NaN or
    +inf logit (a huge ``cfg_scale`` overflows ``uncond + s (cond - uncond)``), a row with no finite
    logit, or a best logit that the temperature scales out of float range. The kernel's argmax
    would otherwise return token 0 for every such cell, silently. With ``run`` the check stays on
    the device and :meth:`OrderedRun.result` raises once at the end (no host sync per step);
    without it, it raises here."""
    top = logits.amax(-1)
    bad = torch.isnan(logits).any() | ~torch.isfinite(top).all()
    if not proc.greedy:
        t = float(proc.temperature)
        if t > torch.finfo(top.dtype).max:  # the division makes -inf / inf = NaN of masked logits
            raise NumericalError(NONFINITE.format(t=proc.temperature))
        bad = bad | ~torch.isfinite(top / t).all()
    if run is not None:
        run.nonfinite = bad if run.nonfinite is None else run.nonfinite | bad
    elif bool(bad):
        raise NumericalError(NONFINITE.format(t=proc.temperature))
    return proc.sample(logits, None, generator)


__all__ = ["OrderedRun", "sample_finite"]
