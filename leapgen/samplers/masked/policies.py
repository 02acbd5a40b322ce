"""Unmask policies: which units of the pool stay masked after a step.

``select(score [A,N], pool [A,N], target [A], state) -> keep_masked [A,N]``; everything else in
the pool is committed. ``target`` is the schedule's count after the loop's clamping.

| name | rule | revises earlier commits | source |
|---|---|---|---|
| ``topk`` | keep the ``target`` lowest-scoring masked units masked, commit the rest | no | MaskGIT, MAGNeT, MaskGCT, GenMol, LLaDA |
| ``threshold`` | commit masked units with score >= ``threshold`` and always the best one; ignores the schedule | no | Fast-dLLM (0.9 on ``prob``) |
| ``remask_lowest`` | the pool is every generated unit of the stage (committed ones keep the score they were predicted with); keep the ``target`` lowest masked | yes | Mask-Predict ``select_worst`` |
"""

from __future__ import annotations

import torch
from torch import Tensor

from .parts import POLICIES, UnmaskPolicy, _finite
from .state import MaskedDecodeState
from .step import lowest


@POLICIES.register("topk")
class TopK(UnmaskPolicy):
    """Commit-only: reveal the highest-scoring masked units, as many as the schedule allows."""

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:
        return lowest(score, pool, target)


@POLICIES.register("threshold")
class Threshold(UnmaskPolicy):
    """Commit-only: commit every masked unit whose score reaches ``threshold``, and at least the best.

    With ``scorer="prob"``, ``threshold=0`` commits everything in one forward and ``threshold=1``
    (in practice) one unit per step.
    """

    uses_schedule = False

    def __init__(self, threshold: float = 0.9) -> None:
        self.threshold = _finite(threshold, "threshold")

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:
        commit = pool & (score >= self.threshold)
        best = score.masked_fill(~pool, float("-inf")).argmax(1)
        commit = commit | (torch.nn.functional.one_hot(best, pool.shape[1]).bool() & pool)
        return pool & ~commit


@POLICIES.register("remask_lowest")
class RemaskLowest(UnmaskPolicy):
    """Mask-Predict: after predicting the masked units, re-mask the ``target`` least confident of
    *all* generated units, so tokens committed earlier can be revised."""

    revises = True

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:
        return lowest(score, pool, target)
