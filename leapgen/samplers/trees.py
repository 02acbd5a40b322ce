"""Draft trees: ancestor masks, position ids, and keeping the accepted path.

A tree of N nodes is given by ``parent`` in topological order (``parent[i] < i``, the root,
node 0, is the last committed token and has parent -1). Chains, SpecInfer / EAGLE / RSD trees
and lookahead guess sets (disjoint chains sharing the root) are all instances.

One target forward over all nodes with the ancestor mask gives, at every node, exactly the
logits of running that node's path alone (tested in ``tests/test_trees.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..kernels import reference as kernel_reference


@dataclass
class DraftTree:
    """A batch of draft trees, padded to N nodes. Padding nodes have ``parent == -2``."""

    tokens: Tensor  # [B, N]
    parent: Tensor  # [B, N]

    @property
    def n_nodes(self) -> Tensor:
        return (self.parent >= -1).sum(-1)

    @classmethod
    def from_lists(cls, tokens: Sequence[Sequence[int]], parents: Sequence[Sequence[int]], pad: int = 0) -> DraftTree:
        n = max(len(t) for t in tokens)
        tok = torch.full((len(tokens), n), pad, dtype=torch.long)
        par = torch.full((len(tokens), n), -2, dtype=torch.long)
        for b, (t, pr) in enumerate(zip(tokens, parents)):
            tok[b, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
            par[b, : len(pr)] = torch.as_tensor(list(pr), dtype=torch.long)
        return cls(tok, par)

    @classmethod
    def chain(cls, root: Tensor, draft: Tensor) -> DraftTree:
        """Root token ``[B]`` followed by a chain ``[B, g]``."""
        b, g = draft.shape
        par = torch.arange(-1, g, device=draft.device)[None].expand(b, g + 1).clone()
        return cls(torch.cat([root[:, None], draft], 1), par)


def ancestor_mask(parent: Tensor) -> Tensor:
    """``[B, N, N]`` bool: ``anc[b, i, j]`` iff j is i or an ancestor of i. Padding nodes see
    only themselves."""
    return kernel_reference.ancestor_mask(parent[None] if parent.dim() == 1 else parent)


def depth(anc: Tensor) -> Tensor:
    """Depth of every node (root 0) from its ancestor mask."""
    return anc.sum(-1) - 1


def path_to(parent: Sequence[int], node: int) -> list[int]:
    """Nodes from the root to ``node`` inclusive."""
    out = []
    while node >= 0:
        out.append(node)
        node = int(parent[node])
    return out[::-1]


def leaf_paths(parent: Sequence[int]) -> list[list[int]]:
    """One root-to-leaf path per leaf (transformers/EAGLE ``retrieve_indices``)."""
    par = [int(x) for x in parent if int(x) >= -1]
    is_parent = set(par)
    return [path_to(par, i) for i in range(len(par)) if i not in is_parent]


def accepted_slots(paths: Sequence[Sequence[int]], width: int) -> tuple[Tensor, Tensor]:
    """Index ``[B, width]`` (padded with 0) and counts ``[B]`` for :meth:`KVCache.select`:
    row b keeps the tree slots of ``paths[b]`` (root first)."""
    idx = torch.zeros(len(paths), max(width, 1), dtype=torch.long)
    counts = torch.zeros(len(paths), dtype=torch.long)
    for b, p in enumerate(paths):
        idx[b, : len(p)] = torch.as_tensor(list(p), dtype=torch.long)
        counts[b] = len(p)
    return idx, counts


def trie_from_sequences(
    seqs: Sequence[Sequence[int]], root_token: int
) -> tuple[list[int], list[int], list[list[int]]]:
    """Merge candidate continuations of ``root_token`` into one prefix tree (a trie).

    Shared prefixes become shared nodes, so siblings carry distinct tokens (what V3 with one-hot
    q requires: lookahead n-gram guesses, ADED / prompt-lookup candidates). Returns
    ``(tokens, parent, nodes)``: node 0 is the root (parent -1), nodes are numbered in insertion
    order (topological), and ``nodes[k][j]`` is the node holding ``seqs[k][j]``.
    """
    tokens, parent = [int(root_token)], [-1]
    child: dict[tuple[int, int], int] = {}
    nodes: list[list[int]] = []
    for seq in seqs:
        cur, path = 0, []
        for t in seq:
            key = (cur, int(t))
            if key not in child:
                child[key] = len(tokens)
                tokens.append(int(t))
                parent.append(cur)
            cur = child[key]
            path.append(cur)
        nodes.append(path)
    return tokens, parent, nodes


@functools.lru_cache(maxsize=4096)
def tree_layout(parent: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """Ancestor mask (``[N, N]`` bool numpy array, read-only) and depths of ONE tree given as a
    ``parent`` tuple (node 0 the root): the per-row, cached counterpart of :func:`ancestor_mask`
    for samplers that build a different small tree for every row (n-gram tries, MCTS trees)."""
    n = len(parent)
    anc = np.eye(n, dtype=bool)
    for i in range(1, n):
        anc[i] |= anc[parent[i]]
    anc.setflags(write=False)
    return anc, tuple(int(d) for d in anc.sum(1) - 1)
