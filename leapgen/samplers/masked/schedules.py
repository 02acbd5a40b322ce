"""Mask schedules: how many units of a stage stay masked after each step.

``num_masked(step, total, n_initial)`` for 0-based ``step`` of ``total`` steps, where
``n_initial`` is the number of masked units when the stage began. The loop then clamps it: at
least one unit is revealed per step, at least one stays masked until the last step, none after.

| name | units still masked after step i (N = n_initial, T = steps) | source |
|---|---|---|
| ``cosine`` | ``floor(N * clip(cos(pi/2 * (i+1)/T), 1e-6, 1))`` | MaskGIT ``mask_schedule.schedule("cosine")``; MAGNeT |
| ``sin`` | ``floor(N * sin(pi/2 * t_{i+1}))``, ``t_j = 1 - j/T`` | MaskGCT ``reverse_diffusion`` (equals cosine without the clip) |
| ``linear`` | ``floor(N * (T - (i+1)) / T)`` | Mask-Predict ``n = N (T - t) / T``; MaskGIT ``uniform`` |
| ``one_per_step`` | ``N - (i+1)``; T = N (the steps parameter is ignored) | GenMol (one ``topk(k=1)`` per step) |
| ``per_block`` | ``N - sum_{j<=i} (N // T + [j < N % T])`` | LLaDA ``get_num_transfer_tokens`` (equal counts per step of a block) |
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .parts import SCHEDULES, Schedule


@SCHEDULES.register("cosine")
class Cosine(Schedule):
    """MaskGIT / MAGNeT cosine: ``cos(pi/2 * r)`` with ``r = (i+1)/T``, clipped to [1e-6, 1]."""

    def mask_ratio(self, ratio: Tensor) -> Tensor:
        return torch.cos(math.pi / 2 * ratio).clamp(1e-6, 1.0)


@SCHEDULES.register("sin")
class Sin(Schedule):
    """MaskGCT: ``sin(pi/2 * t)`` with ``t`` going 1 -> 0 over the steps (``t_{i+1} = 1 - (i+1)/T``)."""

    def mask_ratio(self, ratio: Tensor) -> Tensor:
        return torch.sin(math.pi / 2 * (1.0 - ratio)).clamp(min=0.0)


@SCHEDULES.register("linear")
class Linear(Schedule):
    """Mask-Predict: ``N * (T - t) / T`` masked before iteration ``t = i + 1``."""

    def num_masked(self, step: int, total: Tensor, n_initial: Tensor) -> Tensor:
        # integer arithmetic: floor(N * (T - t) / T) exactly, as Mask-Predict computes it
        return torch.div(n_initial * (total - (step + 1)).clamp(min=0), total, rounding_mode="floor")


@SCHEDULES.register("one_per_step")
class OnePerStep(Schedule):
    """GenMol: one unit per step, so a stage takes as many steps as it has masked units."""

    needs_steps = False

    def total_steps(self, steps: int | None, n_initial: Tensor) -> Tensor:
        return n_initial.clamp(min=1)

    def num_masked(self, step: int, total: Tensor, n_initial: Tensor) -> Tensor:
        return (n_initial - (step + 1)).clamp(min=0)


@SCHEDULES.register("per_block")
class PerBlock(Schedule):
    """LLaDA ``get_num_transfer_tokens``: ``N // T`` per step, the remainder on the first steps.

    Used per block with ``region="blocks"``: each block gets its share of the steps.
    """

    def num_masked(self, step: int, total: Tensor, n_initial: Tensor) -> Tensor:
        base = torch.div(n_initial, total, rounding_mode="floor")
        rem = n_initial - base * total
        done = (step + 1) * base + torch.clamp(rem, max=step + 1)
        return (n_initial - done).clamp(min=0)
