"""Token-tree speculative decoding with a draft model: SpecInfer trees and EAGLE-2 dynamic trees.

Papers: Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
Speculative Inference and Verification", ASPLOS 2024 (arXiv 2305.09781); Li et al., "EAGLE-2:
Faster Inference of Language Models with Dynamic Draft Trees", EMNLP 2024 (arXiv 2406.16858).

Each step the draft model grows a token tree level by level (one draft forward per level, tree
attention on the draft's cache), the target scores every node in one forward with the ancestor
mask, and the tree is walked from the root:

* ``expansion="dynamic"`` (EAGLE-2): every frontier node proposes its ``top_k`` most likely
  children, the ``top_k`` children with the highest cumulative draft log-probability form the next
  frontier, and the tree keeps the ``num_nodes`` best nodes over all depths.
* ``expansion="topk"`` (SpecInfer's expansion config): the nodes at depth d-1 each propose their
  ``widths[d-1]`` most likely children (the last width repeats past ``len(widths)``), and the tree
  keeps the ``num_nodes`` best nodes by cumulative log-probability (the node budget).

Verification: at temperature 0 follow the child equal to the target's argmax (identical tokens to
greedy ``ar``); above it, multi-step speculative sampling with deterministic distinct children
(``verify.verify_tree(kind="deterministic")``: accept child x with probability p(x), else p(x)
:= 0 and renormalise - EAGLE's ``evaluate_posterior``). The tree is a deterministic function of the
draft's distribution, so q is one-hot per child and the output follows the target exactly.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).

Defaults: ``expansion="dynamic"``, ``num_nodes=16``, ``depth=5``, ``top_k=4``,
``widths=(4, 2, 2, 1, 1)``, ``schedule="heuristic"`` (depth +2 after a step in which every row
accepted a full-depth path, else -1; it was faster than ``"constant"`` in all four tables of the
text bench's schedule comparison, 1.02-1.37x; ``"constant"`` keeps ``depth``). EAGLE-2's reference defaults are total_token=60,
depth=7, top_k=10 for 7B-70B models on GPUs; they are scaled down here because the target's cost
per step grows with the number of nodes on a CPU and a tiny draft's acceptance along a path
saturates after a few tokens.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import check_int, register_sampler
from .tree_draft import (
    TreeSampler,
    check_widths,
    cumulative_logprob,
    depth_controller,
    expand_best_first,
)

EXPANSIONS = ("dynamic", "topk")


@register_sampler(
    "spec_tree",
    family="ar-tree",
    guarantee="distribution-exact",
    needs=("model", "draft"),
    paper="Miao et al. 2024 (SpecInfer); Li et al. 2024 (EAGLE-2)",
)
class SpecTree(TreeSampler):
    """Draft-model token tree (SpecInfer top-k widths or EAGLE-2 dynamic), greedy-exact at T=0."""

    kind = "deterministic"

    defaults = {
        "expansion": "dynamic",
        "num_nodes": 16,
        "depth": 5,
        "top_k": 4,
        "widths": (4, 2, 2, 1, 1),
        "schedule": "heuristic",
    }

    def validate(self) -> None:
        if self.expansion not in EXPANSIONS:
            raise ConfigError(f"expansion must be one of {EXPANSIONS}, got {self.expansion!r}.")
        check_int("num_nodes", self.num_nodes)
        check_int("depth", self.depth)
        check_int("top_k", self.top_k)
        self.widths = check_widths("widths", self.widths)
        depth_controller(self.schedule, self.depth)

    def _build(self, drafter, proc, roots, root_logits, depth, seen_base, generator):
        if self.expansion == "dynamic":
            per_node, beam = (lambda d: self.top_k), self.top_k
        else:
            per_node, beam = (lambda d: self.widths[min(d, len(self.widths)) - 1]), None
        return expand_best_first(
            drafter,
            proc,
            roots,
            root_logits,
            depth=depth,
            num_nodes=self.num_nodes,
            per_node=per_node,
            beam=beam,
            scorer=cumulative_logprob,
            seen_base=seen_base,
        )

