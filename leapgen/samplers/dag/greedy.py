"""DA-Transformer greedy decoding: follow the most probable transition from ``<s>`` to ``</s>``.

Paper: Huang et al., ICML 2022 (``inference_greedy``). Guarantee: ``lossy`` (its own NAR model,
not a stand-in for the AR translator). Defaults: none (temperature / top-k / top-p apply to the
token read at each vertex; the path is always argmax). One decoder pass (see
:mod:`leapgen.samplers.dag.common`).
"""

from __future__ import annotations

from ..base import register_sampler
from .common import DAGSampler, greedy_path


@register_sampler("dag_greedy", family="nar", guarantee="lossy", needs=("model",), paper="Huang et al. 2022 (DA-Transformer)",
                  contracts=("dag",))
class DAGGreedy(DAGSampler):
    """Greedy path: ``j <- argmax_k links[j, k]``."""

    defaults: dict = {}

    def path(self, graph):
        return greedy_path(graph["links"], graph["lengths"])
