"""DA-Transformer lookahead decoding: the next vertex maximises transition + ``beta`` x its best token score.

Paper: Huang et al., ICML 2022 (``inference_lookahead``, ``--decode-beta``). Guarantee: ``lossy``.
Defaults: ``beta = 1.0`` (the reference default). One decoder pass (see
:mod:`leapgen.samplers.dag.common`).
"""

from __future__ import annotations

import math

from ...errors import ConfigError
from ..base import register_sampler
from .common import DAGSampler, lookahead_path


@register_sampler("dag_lookahead", family="nar", guarantee="lossy", needs=("model",),
                  paper="Huang et al. 2022 (DA-Transformer)", contracts=("dag",))
class DAGLookahead(DAGSampler):
    """Lookahead path: ``j <- argmax_k (links[j, k] + beta * max_y log P(y | v_k))``."""

    defaults = {"beta": 1.0}

    def validate(self) -> None:
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta >= 0):
            raise ConfigError(f"beta must be a finite number >= 0, got {self.beta!r}")

    def path(self, graph):
        return lookahead_path(graph["emit"], graph["links"], graph["lengths"], beta=float(self.beta))
