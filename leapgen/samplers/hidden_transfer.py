"""Hidden Transfer: drafts from pseudo hidden states made inside the verifying forward.

Paper: Wu et al., "Parallel Decoding via Hidden Transfer for Lossless Large Language Model
Acceleration", arXiv 2404.12022.

Every target forward of this sampler is fused: besides scoring the current token tree, it turns
the layer-``l`` hidden state of each tree node into ``k`` pseudo hidden states of the tokens that
would follow it (:class:`~leapgen.models.hidden_transfer.HiddenTransfer`, trained by
``leapgen train text-code-heads``), and runs them through the upper layers in the same pass
(:meth:`~leapgen.models.text_heads.HeadedLM.request_transfer`). After the walk, the pseudo
distributions of the last accepted node are the drafts of the next step: a tree whose main chain
is their argmax at depths ``1..depth`` and whose ``branches - 1`` siblings at each depth are the
next most likely tokens there (Medusa-style top-k candidates). The drafts cost no extra forward,
only the pseudo positions' share of the upper layers.

Pseudo states are made at the root and the main-chain nodes only (``depth + 1`` columns, ``depth``
pseudo states each), not at the siblings: on a CPU every extra position costs (the bench's
``verify_cost``), and a walk mostly ends on the main chain. A walk that ends on a sibling takes
the drafts of its parent's pseudo states, shifted by one position (one fewer draft).

Verification: the tree loop's walk (greedy match at T=0; above it the deterministic-children
rule of :func:`~leapgen.samplers.verify.verify_tree`, q one-hot), and the pseudo positions are
invisible to the real ones, so the output is the target's.

Guarantee: ``distribution-exact`` (greedy-identical at T=0). Contract ``text-heads`` (a
:class:`~leapgen.models.text_heads.HeadedLM` holding the ``transfer`` part). Defaults:
``depth=None`` (the transforms' ``k``, 4 in the shipped heads; an explicit depth must not exceed it),
``branches=2``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError
from .base import check_int, register_sampler
from .loops.tree import TreeLoopSampler
from .lossy_common import headed
from .proposers.base import Proposer, TreeProposal, Verdict


def tree_template(depth: int, branches: int) -> tuple[list[int], list[tuple[int, int]]]:
    """``(parent, slots)`` of the draft tree in breadth-first order: node 0 is the root; at each
    depth d the main-chain node (pseudo rank 0) comes first, then its ``branches - 1`` siblings
    (ranks 1..), all children of the main-chain node of depth d-1. ``slots[i] = (d-1, rank)`` of
    node i >= 1."""
    parent, slots, main = [-1], [], 0
    for d in range(1, depth + 1):
        first = len(parent)
        for r in range(branches):
            parent.append(main)
            slots.append((d - 1, r))
        main = first
    return parent, slots


class PseudoStateTree(Proposer):
    """Drafts the tree of :func:`tree_template` from the last step's pseudo distributions."""

    @classmethod
    def check(cls, sampler, models: dict[str, Any], config) -> None:
        lm = headed(models, "transfer", sampler.name)
        k = lm.heads.transfer.k
        if sampler.depth is not None and sampler.depth > k:
            raise ConfigError(f"depth={sampler.depth} exceeds the {k} future tokens the trained transforms predict; use depth <= {k}")
        if sampler.branches > lm.vocab_size:
            raise ConfigError(f"branches={sampler.branches} exceeds the vocabulary ({lm.vocab_size})")
        depth = k if sampler.depth is None else sampler.depth
        nodes = 1 + depth * sampler.branches
        if nodes > lm.max_length:  # every step scores the whole tree: branches=1000 took minutes
            raise ConfigError(
                f"hidden_transfer's draft tree of depth {depth} with branches={sampler.branches} has {nodes} nodes, "
                f"more than the model's context window of {lm.max_length}; use branches <= {(lm.max_length - 1) // depth}."
            )
        if lm.router is not None:
            raise ConfigError("hidden_transfer does not run on a FiRST-routed target; drop the router")

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.lm = run.target.lm
        self.depth = self.lm.heads.transfer.k if sampler.depth is None else sampler.depth
        self.branches = sampler.branches
        parent, slots = tree_template(self.depth, self.branches)
        self.parent = parent
        self.slot_depth = torch.tensor([d for d, _ in slots], dtype=torch.long, device=self.lm.device)
        self.slot_rank = torch.tensor([r for _, r in slots], dtype=torch.long, device=self.lm.device)
        self.node_depth = [0] + [d + 1 for d, _ in slots]
        #: node -> (its main-chain column, drafts to skip): the root and the main chain carry pseudo
        #: states; a sibling uses its parent's, one position further on
        self.source = [(0, 0)] + [(d if r == 0 else d - 1, 0 if r == 0 else 1) for d, r in ((d + 1, r) for d, r in slots)]
        #: row -> top-``branches`` pseudo tokens ``[n, branches]`` after its last accepted node (device)
        self.state: dict[int, torch.Tensor] = {}
        self.pseudo_positions = 0

    def _main_columns(self, n_nodes: int) -> list[int]:
        """Tree-node indices of the root and the main chain among the first ``n_nodes`` nodes."""
        return [0] + [1 + d * self.branches for d in range(self.depth) if 1 + d * self.branches < n_nodes]

    def propose(self) -> TreeProposal:
        run, dev = self.run, self.lm.device
        act = run.target.active
        limits = [min(self.depth, len(self.state[r]), run.rows.remaining(r) - 1) if r in self.state else 0 for r in act]
        n_nodes = [sum(1 for dd in self.node_depth if dd <= lim) for lim in limits]
        width = max(n_nodes)
        roots = torch.tensor([run.rows.tokens[r][-1] for r in act], dtype=torch.long, device=dev)
        if width > 1:
            pad = next(iter(self.state.values()))
            top = torch.stack([self._padded(self.state.get(r, pad)) for r in act])  # [B, depth, branches]
            drafts = top[:, self.slot_depth[: width - 1], self.slot_rank[: width - 1]]
            tokens = torch.cat([roots[:, None], drafts], 1)
        else:
            tokens = roots[:, None]
        parent = torch.tensor([self.parent[:m] + [-2] * (width - m) for m in n_nodes], dtype=torch.long, device=dev)
        # pseudo states at the root and main chain of every row (short rows repeat their last one)
        pend = [len(run.target.pending(i)) for i in range(len(act))]
        main = [self._main_columns(m) for m in n_nodes]
        w = max(len(c) for c in main)
        cols = [[p - 1 + c[min(j, len(c) - 1)] for j in range(w)] for p, c in zip(pend, main)]
        self.lm.request_transfer(torch.tensor(cols, dtype=torch.long, device=dev), n_states=self.depth)
        self.pseudo_positions += len(act) * w * self.depth
        return TreeProposal(tokens=tokens, parent=parent)

    def _padded(self, top: torch.Tensor) -> torch.Tensor:
        return top if len(top) == self.depth else torch.cat([top, top[-1:].expand(self.depth - len(top), -1)])

    def update(self, verdict: Verdict) -> None:
        logits = self.lm.transfer_logits  # [B, main columns, depth, V] of this step's forward
        col, skip = zip(*(self.source[p[-1] if p else 0] for p in verdict.paths))
        rows = torch.arange(logits.shape[0], device=logits.device)
        top = logits[rows, torch.tensor(col, dtype=torch.long, device=logits.device)].topk(self.branches, dim=-1).indices
        for i, r in enumerate(self.run.target.active):
            if skip[i] < len(top[i]):
                self.state[r] = top[i, skip[i]:]
            else:  # depth 1 and the walk ended on a sibling: nothing to draft from
                self.state.pop(r, None)

    def finish(self) -> None:
        self.run.stats.extra["pseudo_positions"] = self.pseudo_positions


@register_sampler(
    "hidden_transfer",
    family="ar-tree",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Wu et al. 2024 (Hidden Transfer), arXiv 2404.12022",
    contracts=("text-heads",),
)
class HiddenTransferSampler(TreeLoopSampler):
    """Pseudo hidden states at an intermediate layer draft a top-k tree inside the verifying forward."""

    kind = "deterministic"
    defaults = {"depth": None, "branches": 2}
    proposer = PseudoStateTree

    def validate(self) -> None:
        if self.depth is not None:
            check_int("depth", self.depth)
        check_int("branches", self.branches)
