"""Joint-Viterbi decoding of a DAG: the exact best path under length normalisation.

Paper: Shao, Zhang, Feng, "Viterbi Decoding of Directed Acyclic Transformer for Non-Autoregressive
Machine Translation", Findings of EMNLP 2022 (DA-T ``inference_jointviterbi``). Maximises
``(log P(A | X) + sum_t max_y log P(y | v_{a_t})) / (|A| - 1)^beta`` over every path length by
dynamic programming (``joint=False``: ``log P(A | X)`` only, plain Viterbi). Unlike the reference
(``.cuda`` calls, lengths capped at ``2L/lambda``) it runs on CPU and searches every length.
Guarantee: ``lossy``. Defaults: ``beta = 1.0`` (``--decode-viterbibeta``), ``joint = True``.
"""

from __future__ import annotations

import math

from ...errors import ConfigError
from ..base import register_sampler
from .common import DAGSampler, joint_viterbi_path


@register_sampler("dag_viterbi", family="nar", guarantee="lossy", needs=("model",),
                  paper="Shao et al. 2022 (joint Viterbi for DA-T)", contracts=("dag",))
class DAGViterbi(DAGSampler):
    """Joint Viterbi: the best length-normalised path (exact DP)."""

    defaults = {"beta": 1.0, "joint": True}

    def validate(self) -> None:
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta >= 0):
            raise ConfigError(f"beta must be a finite number >= 0, got {self.beta!r}")
        if not isinstance(self.joint, bool):
            raise ConfigError(f"joint must be True or False, got {self.joint!r}")

    def path(self, graph):
        return joint_viterbi_path(graph["emit"], graph["links"], graph["lengths"], beta=float(self.beta),
                                  joint=bool(self.joint))
