"""The mechanics every autoregressive loop shares: feeding each row's pending tokens to a model,
rolling its cache back to what was accepted, and dropping finished rows.

A :class:`Runner` pairs a :class:`CausalLM` with its :class:`KVCache` and, per active row, the
number of that row's tokens already in the cache (``consumed``). Rows of a batch may differ in
how many tokens they feed in a step; shorter rows are right-padded and the padding slots become
holes via ``KVCache.keep_new``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..models.base import CausalLM
from .base import Rows
from .trees import DraftTree, accepted_slots, ancestor_mask, depth


class Runner:
    def __init__(self, lm: CausalLM, rows: Rows, pad_id: int = 0) -> None:
        self.lm = lm
        self.rows = rows
        self.pad_id = pad_id
        self.active = list(rows.active)
        self.cache = lm.new_cache(len(self.active))
        self.consumed = [0] * len(self.active)  # per position in self.active

    def pending(self, i: int) -> list[int]:
        """Committed tokens of active row i not yet in the cache."""
        return self.rows.tokens[self.active[i]][self.consumed[i] :]

    def forward(self, seqs: Sequence[Sequence[int]]) -> tuple[Tensor, int, Tensor]:
        """Run one forward over one token list per active row (right-padded).

        Returns ``(logits [B, L, V], start_slot, lengths [B])``. The caller decides what to keep
        with :meth:`keep` (nothing is consumed until then)."""
        lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        width = int(lens.max())
        batch = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for b, s in enumerate(seqs):
            if len(s):
                batch[b, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        start = len(self.cache)
        logits = self.lm(batch.to(self.lm.device), self.cache)
        return logits, start, lens

    def keep(self, start: int, counts: Tensor | Sequence[int]) -> None:
        """Row b keeps the first ``counts[b]`` slots written since ``start``; they count as
        consumed tokens of that row."""
        counts = torch.as_tensor(counts, dtype=torch.long)
        self.cache.keep_new(start, counts)
        for b, c in enumerate(counts.tolist()):
            self.consumed[b] += c

    def forward_tree(self, tree: DraftTree) -> tuple[Tensor, int]:
        """One forward over a batch of draft trees whose roots are each row's single pending
        token. Nodes see only their ancestors (``ancestor_mask``) at positions ``length + depth``.
        Returns ``(logits [B, N, V], start_slot)``; keep the accepted path with :meth:`keep_path`."""
        for i in range(len(self.active)):
            if len(self.pending(i)) != 1:
                raise RuntimeError("forward_tree needs exactly one pending token per row (the tree root)")
        anc = ancestor_mask(tree.parent)
        pos = self.cache.position_ids(tree.tokens.shape[1], depth(anc))
        start = len(self.cache)
        logits = self.lm(tree.tokens.to(self.lm.device), self.cache, position_ids=pos, attn_mask=anc)
        return logits, start

    def keep_path(self, start: int, paths: Sequence[Sequence[int]]) -> None:
        """Row b keeps the tree nodes ``paths[b]`` (root first), compacted to contiguous slots."""
        idx, counts = accepted_slots(paths, max(len(p) for p in paths))
        self.cache.select(start, idx, counts)
        for b, c in enumerate(counts.tolist()):
            self.consumed[b] += c

    def feed_pending(self) -> Tensor:
        """Feed every row's pending tokens; keep them; return the logits after each row's last
        token ``[B, V]``."""
        seqs = [self.pending(i) for i in range(len(self.active))]
        logits, start, lens = self.forward(seqs)
        self.keep(start, lens)
        return logits[torch.arange(len(seqs)), lens - 1]

    def drop_finished(self) -> None:
        """Remove rows that finished from the batch and the cache."""
        keep = [i for i, r in enumerate(self.active) if not self.rows.finished[r]]
        if len(keep) == len(self.active):
            return
        self.active = [self.active[i] for i in keep]
        self.consumed = [self.consumed[i] for i in keep]
        if keep:
            self.cache.select_rows(torch.tensor(keep, dtype=torch.long))


def gather_positions(logits: Tensor, offsets: Tensor, n: int) -> Tensor:
    """``[B, n, V]``: for row b, ``logits[b, offsets[b] + i]`` for i < n (clamped at the end)."""
    b, length, v = logits.shape
    idx = (offsets[:, None] + torch.arange(n)[None]).clamp_max(length - 1).to(logits.device)
    return logits.gather(1, idx[..., None].expand(b, n, v))
