"""ADED: adaptive draft-verification with an online tri-gram table and MCTS-style tree retrieval.

Paper: Liu, Lei, Zhang, Xu, "Adaptive Draft-Verification for Efficient Large Language Model
Decoding", AAAI 2025 (arXiv 2407.12021). The authors' code is not public (an anonymous link
only), so the search below follows the paper's description and this file documents its choices.

No draft model. A tri-gram table (:class:`TrigramTable`: counts of c after (a, b), with bigram
and unigram back-off) approximates the model's next-token distribution. It is built **online**
from the prompts and every token the model commits (the paper also initialises it from a
corpus; here it starts empty for each call, shared by the rows of a batch).

Each step, from a row's last two tokens, a small MCTS (:func:`mcts_tree`) grows a draft tree:
``num_simulations`` times it descends from the root choosing the child maximising the PUCT score
``Q + c_puct * P * sqrt(N_parent) / (1 + N_child)`` (P: the table's probability of the child's
token, Q: mean value backed up through the child, N: visit counts), expands the leaf it reaches
with the table's ``top_k`` continuations, and backs up the leaf's path probability (the product
of P along the path: the chance the target follows it). The draft is the ``max_nodes`` best
nodes (most visits, then path probability), at most ``max_depth`` deep, closed under ancestors.

The target scores the whole tree in one forward (ancestor mask, positions length + depth,
:meth:`Runner.forward_block`); greedy decoding accepts the longest path equal to the target's
argmax (V1 walk of ``verify.verify_tree``); sampling uses V3 with one-hot q
(``verify_tree(kind="deterministic")``, siblings carry distinct tokens), so the output follows
the target's distribution exactly. The accepted path is kept with :meth:`Runner.keep_path`.

Proposer: :class:`TrigramTree`; acceptance: the tree walk (``deterministic``); loop: the tree loop.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults (our choices; the paper reports tree sizes of this order): ``max_nodes=16`` draft
nodes, ``max_depth=6``, ``top_k=4`` children per expansion, ``num_simulations=32``,
``c_puct=1.0`` (AlphaZero's scale for priors in [0, 1]). ``num_simulations`` is at most
:data:`MAX_SIMULATIONS` (each one is a Python descent of the tree, per row and step).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

from ..errors import ConfigError
from .base import register_sampler
from .loops.tree import TreeLoopSampler
from .proposers.base import Proposer, TreeProposal, Verdict

#: the most MCTS simulations per draft tree (the default is 32): past it a draft step takes seconds
MAX_SIMULATIONS = 10_000


class TrigramTable:
    """Online n-gram statistics with back-off: P(c | a, b) from tri-gram counts when (a, b) was
    seen, else P(c | b) from bi-gram counts, else the unigram distribution."""

    def __init__(self) -> None:
        self.tri: dict[tuple[int, int], Counter] = {}
        self.bi: dict[int, Counter] = {}
        self.uni: Counter = Counter()

    def add(self, tokens: list[int], start: int = 0) -> None:
        """Count every token of ``tokens`` at index >= ``start`` after its one and two predecessors."""
        for i in range(max(0, start), len(tokens)):
            c = int(tokens[i])
            self.uni[c] += 1
            if i >= 1:
                self.bi.setdefault(int(tokens[i - 1]), Counter())[c] += 1
            if i >= 2:
                self.tri.setdefault((int(tokens[i - 2]), int(tokens[i - 1])), Counter())[c] += 1

    def counts(self, a: int | None, b: int) -> Counter:
        """The counts the prediction after (a, b) is based on (after back-off)."""
        if a is not None and (a, b) in self.tri:
            return self.tri[(a, b)]
        if b in self.bi:
            return self.bi[b]
        return self.uni

    def top(self, a: int | None, b: int, k: int) -> list[tuple[int, float]]:
        """The ``k`` most likely next tokens after (a, b) with their probabilities."""
        cnt = self.counts(a, b)
        total = sum(cnt.values())
        if not total:
            return []
        return [(t, n / total) for t, n in cnt.most_common(k)]

    def prob(self, a: int | None, b: int, c: int) -> float:
        cnt = self.counts(a, b)
        total = sum(cnt.values())
        return cnt[c] / total if total else 0.0


class _Node:
    __slots__ = ("token", "parent", "depth", "prior", "path_prob", "visits", "value", "children", "expanded")

    def __init__(self, token: int, parent: int, depth: int, prior: float, path_prob: float) -> None:
        self.token, self.parent, self.depth = token, parent, depth
        self.prior, self.path_prob = prior, path_prob
        self.visits, self.value = 0, 0.0
        self.children: list[int] = []
        self.expanded = False


def mcts_tree(
    table: TrigramTable,
    prev: int | None,
    root: int,
    *,
    max_nodes: int,
    max_depth: int,
    top_k: int,
    num_simulations: int,
    c_puct: float,
) -> tuple[list[int], list[int]]:
    """Draft tree ``(tokens, parent)`` (node 0 = ``root``) retrieved from ``table`` after the
    context ``(prev, root)`` by PUCT-guided simulations; see the module docstring."""
    nodes = [_Node(root, -1, 0, 1.0, 1.0)]

    def context(i: int) -> tuple[int | None, int]:
        n = nodes[i]
        a = nodes[n.parent].token if n.parent >= 0 else prev
        return a, n.token

    def expand(i: int) -> None:
        n = nodes[i]
        n.expanded = True
        if n.depth >= max_depth:
            return
        for tok, p in table.top(*context(i), top_k):
            n.children.append(len(nodes))
            nodes.append(_Node(tok, i, n.depth + 1, p, n.path_prob * p))

    for _ in range(max(1, num_simulations)):
        i, path = 0, [0]
        while nodes[i].expanded and nodes[i].children:
            par = nodes[i]
            sq = math.sqrt(max(par.visits, 1))
            i = max(
                par.children,
                key=lambda c: (
                    (nodes[c].value / nodes[c].visits if nodes[c].visits else 0.0)
                    + c_puct * nodes[c].prior * sq / (1 + nodes[c].visits)
                ),
            )
            path.append(i)
        if not nodes[i].expanded:
            expand(i)
        v = nodes[i].path_prob
        for j in path:
            nodes[j].visits += 1
            nodes[j].value += v
        if nodes[0].expanded and not nodes[0].children:
            break  # nothing to draft from

    # best-first selection: most visited, then most probable, always after the parent
    tokens, parent = [root], [-1]
    heap = [(-nodes[c].visits, -nodes[c].path_prob, c, 0) for c in nodes[0].children]
    heapq.heapify(heap)
    while heap and len(tokens) - 1 < max_nodes:
        _, _, c, par_out = heapq.heappop(heap)
        tokens.append(nodes[c].token)
        parent.append(par_out)
        me = len(tokens) - 1
        for cc in nodes[c].children:
            heapq.heappush(heap, (-nodes[cc].visits, -nodes[cc].path_prob, cc, me))
    return tokens, parent


class TrigramTree(Proposer):
    """The batch's online tri-gram table and, per row, its MCTS draft tree (``ADED.draft``)."""

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.table = TrigramTable()
        for r in run.rows.active:
            self.table.add(run.rows.tokens[r])

    def propose(self) -> TreeProposal:
        rows, target, tokens, parent = self.run.rows, self.run.target, [], []
        for k, r in enumerate(target.active):
            room = rows.remaining(r) - 1  # drafts past the token budget are never committed
            text = rows.tokens[r]
            tok, par = self.sampler.draft(self.table, text, room) if room > 0 and text else ([target.pending(k)[-1]], [-1])
            tokens.append(tok)
            parent.append(par)
        return TreeProposal(tokens=tokens, parent=parent)

    def update(self, verdict: Verdict) -> None:
        rows = self.run.rows
        for k, r in enumerate(self.run.target.active):
            self.table.add(rows.tokens[r], len(rows.tokens[r]) - verdict.committed[k])


@register_sampler(
    "aded",
    family="ar-parallel",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Liu et al. 2025 (ADED, arXiv 2407.12021)",
)
class ADED(TreeLoopSampler):
    """ADED: online tri-gram table + MCTS draft trees, verified by the target; exact."""

    defaults = {"max_nodes": 16, "max_depth": 6, "top_k": 4, "num_simulations": 32, "c_puct": 1.0}
    limits = {"num_simulations": (MAX_SIMULATIONS, "each simulation is a Python descent of the draft tree, run per row "
                                                   "and step; 10**9 hung the decode")}
    proposer = TrigramTree

    def validate(self) -> None:
        for name, lo in (("max_nodes", 1), ("max_depth", 1), ("top_k", 1), ("num_simulations", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}.")
        if not (isinstance(self.c_puct, (int, float)) and math.isfinite(self.c_puct) and self.c_puct >= 0):
            raise ConfigError(f"c_puct must be a finite number >= 0, got {self.c_puct!r}.")

    def draft(self, table: TrigramTable, text: list[int], room: int) -> tuple[list[int], list[int]]:
        """Draft tree after ``text`` (at most ``room`` deep)."""
        prev = text[-2] if len(text) >= 2 else None
        tokens, parent = mcts_tree(
            table,
            prev,
            text[-1],
            max_nodes=self.max_nodes,
            max_depth=min(self.max_depth, max(room, 0)),
            top_k=self.top_k,
            num_simulations=self.num_simulations,
            c_puct=float(self.c_puct),
        )
        return tokens, parent

