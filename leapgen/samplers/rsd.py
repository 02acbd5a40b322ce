"""Recursive Speculative Decoding: draft trees sampled without replacement.

Paper: Jeon, Gagrani, Goel, Park, Lee, Lott, "Recursive Speculative Decoding: Accelerating LLM
Inference via Sampling Without Replacement", arXiv 2402.14160 (2024).

The draft tree is built from the draft model with the Gumbel-top-k trick, so the children of a
node are distinct tokens forming a sample *without replacement* from the draft distribution q,
listed in draw order; the target walks it with recursive rejection sampling
(``verify.verify_tree(kind="without_replacement")``: child j is tested against q renormalised
without its earlier siblings, the residual shrinks after each rejection). Every node carries a
hierarchical Gumbel value (Kool et al. 2019): the root 0, a child of u the Gumbel-perturbed
log q(x|u) conditioned on the children's maximum being u's value. Values never increase along a
path, and a node's children ordered by value are its Gumbel-top-k sample.

* ``variant="constant"`` (RSD-C): each node at depth d-1 keeps its ``branches[d-1]`` best children
  (the last entry repeats past ``len(branches)``).
* ``variant="sbs"`` (RSD-S, stochastic beam search): each level keeps the ``beam_width`` nodes with
  the highest values among all children of the previous level (Gumbel-top-k over sequences).

Both trees are then cut to the ``num_nodes`` highest values over all depths (the node budget; a
subtree, since values decrease along paths). Whether a sibling survives depends only on values
that do not reveal its token (the j-th largest value of a Gumbel-top-k sample is independent of
the j-th token given the earlier ones), so the surviving siblings remain a without-replacement
prefix and the recursion stays exact - the distribution test checks both variants by
enumeration.

At temperature 0 the Gumbel noise vanishes (the limit T -> 0 of sampling without replacement
from q^(1/T) is q's top-k): RSD-C becomes a top-b tree and RSD-S beam search over the draft's
cumulative log-probability, walked greedily - identical tokens to greedy ``ar``.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).

Defaults: ``variant="constant"``, ``num_nodes=16``, ``depth=5``, ``branches=(2, 2, 2, 1, 1)``,
``beam_width=4``, ``schedule="constant"`` (``"heuristic"``: depth +2/-1). The paper compares
methods at fixed draft length and fixed target budget; these values keep the tree at the same
16-node budget as ``spec_tree``'s defaults for tiny CPU models.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from .base import check_int, register_sampler
from .tree_draft import (
    TreeSampler,
    check_widths,
    cumulative_logprob,
    depth_controller,
    expand_best_first,
    gumbel,
)

VARIANTS = ("constant", "sbs")


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x <= 0, accurately (Maechler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def conditioned_gumbel(q: Tensor, parent_value: Tensor, generator: torch.Generator | None) -> Tensor:
    """Hierarchical Gumbel values of the children ``[B, F, V]`` of nodes with values
    ``parent_value [B, F]``: perturb log q with Gumbel noise, then shift so that the maximum over
    the children equals the parent's value (Kool, van Hoof, Welling 2019, eq. (10), in the
    numerically stable form of their appendix). Order among siblings = order of log q + Gumbel."""
    phi = q.log() + gumbel(q.shape, generator, q.device)
    z = phi.max(-1, keepdim=True).values
    g = parent_value[..., None]
    v = g - phi + _log1mexp((phi - z).clamp_max(0))
    out = g - v.clamp_min(0) - torch.log1p(torch.exp(-v.abs()))
    ok = torch.isfinite(phi) & torch.isfinite(g)
    return torch.where(ok, out, torch.full_like(out, float("-inf")))


@register_sampler(
    "rsd",
    family="ar-tree",
    guarantee="distribution-exact",
    needs=("model", "draft"),
    paper="Jeon et al. 2024 (arXiv 2402.14160)",
)
class RecursiveSpeculative(TreeSampler):
    """Recursive Speculative Decoding: Gumbel-top-k draft trees (RSD-C / RSD-S), recursive rejection."""

    kind = "without_replacement"

    defaults = {
        "variant": "constant",
        "num_nodes": 16,
        "depth": 5,
        "branches": (2, 2, 2, 1, 1),
        "beam_width": 4,
        "schedule": "constant",
    }

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"variant must be one of {VARIANTS} (RSD-C, RSD-S), got {self.variant!r}.")
        check_int("num_nodes", self.num_nodes)
        check_int("depth", self.depth)
        check_int("beam_width", self.beam_width)
        self.branches = check_widths("branches", self.branches)
        depth_controller(self.schedule, self.depth)

    def _build(self, drafter, proc, roots, root_logits, depth, seen_base, generator):
        if self.variant == "constant":
            per_node, beam = (lambda d: self.branches[min(d, len(self.branches)) - 1]), None
        else:
            per_node, beam = (lambda d: self.beam_width), self.beam_width
        return expand_best_first(
            drafter,
            proc,
            roots,
            root_logits,
            depth=depth,
            num_nodes=self.num_nodes,
            per_node=per_node,
            beam=beam,
            scorer=cumulative_logprob if proc.greedy else (lambda q, v: conditioned_gumbel(q, v, generator)),
            seen_base=seen_base,
            keep_q=not proc.greedy,
        )

