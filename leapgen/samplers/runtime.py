"""The mechanics every autoregressive loop shares: feeding each row's pending tokens to a model,
rolling its cache back to what was accepted, and dropping finished rows.

A :class:`Runner` pairs a :class:`CausalLM` with its :class:`KVCache` and, per active row, the
number of that row's tokens already in the cache (``consumed``). Rows of a batch may differ in
how many tokens they feed in a step; shorter rows are right-padded and the padding slots become
holes via ``KVCache.keep_new``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..models.base import CausalLM
from .base import DecodeConfig, DecodeResult, Rows, Sampler, new_stats
from .logits import LogitsProcessor, chain_seen, sample, seen_mask, tree_seen
from .trees import DraftTree, accepted_slots, ancestor_mask, depth, tree_layout
from .verify import greedy_match, rejection_sample, verify_tree


class DecodeRun:
    """Setup and teardown that every autoregressive-family ``generate`` shares: the clock, the
    stats, per-row bookkeeping, the logits processor, a Runner for the target (and the draft when
    ``draft=True``) and the progress bar. :meth:`finish` fills the forward counts from the model
    adapters' counters and returns the result."""

    def __init__(
        self,
        sampler: Sampler,
        models: dict[str, Any],
        prompts: list[list[int]],
        config: DecodeConfig,
        draft: bool = False,
        cond: Any = None,
    ) -> None:
        self.t0 = time.perf_counter()
        self.stats = new_stats(sampler, len(prompts))
        self.rows = Rows(prompts, config, self.stats)
        self.proc = LogitsProcessor(config)
        self.config = config
        self.target = Runner(models["model"], self.rows, config.pad_token_id, cond)
        self.draft = Runner(models["draft"], self.rows, config.pad_token_id, cond) if draft else None
        self._f0 = (self.target.lm.forwards, self.draft.lm.forwards if self.draft else 0)
        self.bar = tqdm(total=config.max_new_tokens, disable=not config.progress, desc=sampler.name, leave=False)

    def plain_step(self, generator: torch.Generator | None) -> None:
        """One ordinary decode step: feed each active row's pending tokens to the target, pick its
        next token (argmax or a sample of the processed distribution) and commit it. This is all
        of ``ar``, and the prefill step of the draft-model samplers. The caller drops finished rows."""
        rows, proc, target = self.rows, self.proc, self.target
        logits = target.feed_pending()
        seen = seen_mask([rows.tokens[r] for r in target.active], logits.shape[-1]) if proc.uses_context else None
        tok = proc.argmax(logits, seen) if proc.greedy else sample(proc.probs(logits, seen), generator)
        self.stats.accepted_per_step.append([rows.commit(r, [t]) for r, t in zip(target.active, tok.tolist())])
        self.step_done(1)

    def chain_step(
        self,
        drafts: Sequence[Sequence[int]],
        generator: torch.Generator | None,
        q: Tensor | None = None,
        accept: Callable[[Tensor, Tensor | None, Tensor, Tensor], tuple[Tensor, Tensor] | None] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One target forward over each active row's pending tokens plus its draft chain (n-gram
        copies, a Jacobi guess ...); verify with :func:`verify.greedy_match` at temperature 0 or
        :func:`verify.rejection_sample` above; commit; keep the accepted KV. ``q [B, g, V]``: the
        distributions the drafts were sampled from (SJD's previous Jacobi iterate; None = one-hot,
        deterministic drafts). ``accept(p, q, chain, draft_len)``: an optional relaxed acceptance
        test returning ``(num, den)`` for ``rejection_sample(ratio=...)`` (GSD), or None for the
        exact one. Returns ``(n_accepted [B], y)`` with ``y`` the target argmax ``[B, g+1]`` at
        temperature 0 and the processed target distributions ``[B, g+1, V]`` when sampling; the
        caller drops finished rows."""
        rows, proc, target, stats = self.rows, self.proc, self.target, self.stats
        act = target.active
        pend = [target.pending(k) for k in range(len(act))]
        dlen = torch.tensor([len(d) for d in drafts], dtype=torch.long)
        g = int(dlen.max())
        chain = torch.zeros(len(act), g, dtype=torch.long)
        for k, d in enumerate(drafts):
            if len(d):
                chain[k, : len(d)] = torch.as_tensor(list(d), dtype=torch.long)
        stats.drafted_tokens += int(dlen.sum())
        logits, start, _ = target.forward([list(p) + list(d) for p, d in zip(pend, drafts)])
        p_log = gather_positions(logits, torch.tensor([len(p) - 1 for p in pend]), g + 1)
        seen = (
            chain_seen(seen_mask([rows.tokens[r] for r in act], target.lm.vocab_size), chain)
            if proc.uses_context
            else None
        )
        if proc.greedy:
            y = proc.argmax(p_log, seen)
            n, nxt = greedy_match(chain, y, dlen)
        else:
            y = proc.probs(p_log, seen)
            ratio = None if accept is None else accept(y, q, chain, dlen)
            n, nxt = rejection_sample(chain, y, q, generator, dlen, ratio=ratio)
        committed = [rows.commit(r, list(drafts[k][: int(n[k])]) + [int(nxt[k])]) for k, r in enumerate(act)]
        stats.accepted_per_step.append(committed)
        stats.accepted_draft_tokens += int(n.sum())
        target.keep(start, torch.tensor([len(p) for p in pend]) + n)
        self.step_done(max(committed))
        return n, y

    def step_done(self, advanced: int) -> None:
        """End of a target step: advance the progress bar by the longest row's new tokens and
        call the user's per-step callback (``DecodeConfig.step_callback``)."""
        self.bar.update(advanced)
        if self.config.step_callback is not None:
            self.config.step_callback(len(self.stats.accepted_per_step), self.stats)

    def finish(self) -> DecodeResult:
        self.bar.close()
        self.stats.target_forwards = self.target.lm.forwards - self._f0[0]
        if self.draft is not None:
            self.stats.draft_forwards = self.draft.lm.forwards - self._f0[1]
        return self.rows.result(self.t0)


class Runner:
    """A :class:`CausalLM`, its :class:`KVCache` and, per active row, how much of the row the
    cache holds.

    The condition (``cond``) goes to the model once, when the cache is created. A model that puts
    its condition into leading sequence slots (an image GPT's class and text embeddings) declares
    their number, ``lm.condition_slots(cond)``; until they are fed, each row's pending list starts
    with that many placeholder ids (``pad_id``; the model reads the condition, not the ids), so
    every loop feeds them like prompt tokens while drafters, which read ``Rows.tokens``, never see
    them. Prompts may then be empty.
    """

    def __init__(self, lm: CausalLM, rows: Rows, pad_id: int = 0, cond: Any = None) -> None:
        self.lm = lm
        self.rows = rows
        self.pad_id = pad_id
        self.active = list(rows.active)
        self.cache = lm.new_cache(len(self.active), cond)
        self.consumed = [0] * len(self.active)  # per position in self.active: tokens in the cache
        self.slots_left = [lm.condition_slots(cond)] * len(self.active)  # condition slots not yet fed

    def pending(self, i: int) -> list[int]:
        """What active row i still has to feed: unfed condition slots (placeholders), then
        committed tokens not yet in the cache."""
        toks = self.rows.tokens[self.active[i]][self.consumed[i] :]
        return [self.pad_id] * self.slots_left[i] + toks if self.slots_left[i] else toks

    def _consume(self, counts: Sequence[int]) -> None:
        for b, c in enumerate(counts):
            slots = min(c, self.slots_left[b])
            self.slots_left[b] -= slots
            self.consumed[b] += c - slots

    def forward(self, seqs: Sequence[Sequence[int]], clamp_positions: bool = False) -> tuple[Tensor, int, Tensor]:
        """Run one forward over one token list per active row (right-padded).

        Returns ``(logits [B, L, V], start_slot, lengths [B])``. The caller decides what to keep
        with :meth:`keep` (nothing is consumed until then). ``clamp_positions``: positions past the
        context window are clamped to its last one (only for tokens whose outputs are never used,
        e.g. draft tokens beyond a row's token budget)."""
        lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        width = int(lens.max())
        batch = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for b, s in enumerate(seqs):
            if len(s):
                batch[b, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        start = len(self.cache)
        pos = None
        if clamp_positions:
            pos = self.cache.position_ids(width).clamp_max(self.lm.max_length - 1)
        elif int(lens.min()) < width:
            # right-padding of a row near the end of the context window (an image grid fills it
            # exactly) must not push positions past it: pad slots are discarded, so clamp theirs
            pos = self.cache.position_ids(width)
            real = torch.arange(width, device=pos.device)[None] < lens.to(pos.device)[:, None]
            pos = torch.where(real, pos, pos.clamp_max(self.lm.max_length - 1))
        logits = self.lm(batch.to(self.lm.device), self.cache, position_ids=pos)
        return logits, start, lens

    def keep(self, start: int, counts: Tensor | Sequence[int]) -> None:
        """Row b keeps the first ``counts[b]`` slots written since ``start``; they count as
        consumed tokens of that row."""
        counts = torch.as_tensor(counts, dtype=torch.long)
        self.cache.keep_new(start, counts)
        self._consume(counts.tolist())

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
        self._consume(counts.tolist())

    def forward_block(
        self,
        extras: Sequence[Sequence[int]],
        blocks: Sequence[Tensor],
        offsets: Sequence[Sequence[int]],
        clamp_positions: bool = False,
    ) -> tuple[Tensor, int, Tensor]:
        """One forward over each row's pending tokens (causal among themselves) followed by extra
        tokens with their own mask: the generalisation of :meth:`forward_tree` that token trees
        with several pending tokens (the prefill step) and Jacobi / lookahead windows need.

        Row b's ``extras[b]`` (m_b tokens) all see every pending token of row b; among
        themselves they see what ``blocks[b]`` (``[m_b, m_b]`` bool, diagonal set) allows; their
        positions are the position of the row's last pending token plus ``offsets[b]`` (>= 1).
        With ``clamp_positions`` positions past the context window are clamped to its last
        position (only for purely speculative slots, e.g. a lookahead window, whose outputs need
        not be exact). Returns ``(logits [B, L, V], start_slot, n_pending [B])``: row b's
        pending tokens are at columns ``0..p_b-1`` and extra j at ``p_b + j``. Keep slots with
        :meth:`keep_path` (slot lists relative to ``start``, pending slots first).
        """
        b = len(self.active)
        pend = [self.pending(i) for i in range(b)]
        n_pend = [len(p) for p in pend]
        if min(n_pend, default=1) < 1:
            raise RuntimeError("forward_block needs at least one pending token per row")
        width = max(len(p) + len(e) for p, e in zip(pend, extras))
        toks = np.full((b, width), self.pad_id, dtype=np.int64)
        mask = np.broadcast_to(np.eye(width, dtype=bool), (b, width, width)).copy()  # padding sees itself
        offs = np.zeros((b, width), dtype=np.int64)
        for i, (p, e) in enumerate(zip(pend, extras)):
            np_, m = len(p), len(e)
            toks[i, :np_] = p
            mask[i, :np_, :np_] = np.tri(np_, dtype=bool)
            offs[i, :np_] = np.arange(np_)
            if m:
                toks[i, np_ : np_ + m] = e
                mask[i, np_ : np_ + m, :np_] = True
                mask[i, np_ : np_ + m, np_ : np_ + m] = np.asarray(blocks[i], dtype=bool)
                offs[i, np_ : np_ + m] = np.asarray(offsets[i], dtype=np.int64) + (np_ - 1)
        pos = self.cache.position_ids(width, torch.from_numpy(offs).to(self.cache.device))
        if clamp_positions:
            pos = pos.clamp_max(self.lm.max_length - 1)
        start = len(self.cache)
        logits = self.lm(
            torch.from_numpy(toks).to(self.lm.device),
            self.cache,
            position_ids=pos,
            attn_mask=torch.from_numpy(mask).to(self.cache.device),
        )
        return logits, start, torch.tensor(n_pend, dtype=torch.long)

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
        self.slots_left = [self.slots_left[i] for i in keep]
        if keep:
            self.cache.select_rows(torch.tensor(keep, dtype=torch.long))


def gather_positions(logits: Tensor, offsets: Tensor, n: int) -> Tensor:
    """``[B, n, V]``: for row b, ``logits[b, offsets[b] + i]`` for i < n (clamped at the end)."""
    b, length, v = logits.shape
    idx = (offsets[:, None] + torch.arange(n)[None]).clamp_max(length - 1).to(logits.device)
    return logits.gather(1, idx[..., None].expand(b, n, v))


def verify_deterministic_trees(
    proc: LogitsProcessor,
    trees: Sequence[tuple[Sequence[int], Sequence[int]]],
    node_logits: Sequence[Tensor],
    contexts: Sequence[Sequence[int]],
    generator: torch.Generator | None = None,
) -> list[tuple[list[int], int]]:
    """Verify one draft tree per row whose tokens carry no draft probabilities (n-gram pools,
    lookahead guesses, ADED's tri-gram retrieval).

    ``trees[b] = (tokens, parent)`` (node 0 the root, distinct sibling tokens, e.g. from
    :func:`~leapgen.samplers.trees.trie_from_sequences`), ``node_logits[b]`` the raw target
    logits ``[N_b, V]`` at its nodes, ``contexts[b]`` the row's committed tokens (for the
    repetition penalty). Greedy: V1 walk (longest path equal to the target's argmax).
    Sampling: V3 with one-hot q (``verify_tree(kind="deterministic")``), exact when the tree
    was built without looking at this step's target outputs. Returns per row
    ``(accepted nodes without the root, next token)``.
    """
    if not len(trees):
        return []
    sizes = [len(t) for t, _ in trees]
    flat = torch.cat(list(node_logits), 0)  # process every row's nodes in one call
    seen = None
    if proc.uses_context:
        vocab = flat.shape[-1]
        parts = []
        for (tokens, parent), ctx in zip(trees, contexts):
            anc = torch.from_numpy(tree_layout(tuple(int(x) for x in parent))[0].copy())[None]
            tok = torch.as_tensor(list(tokens), dtype=torch.long)[None]
            parts.append(tree_seen(seen_mask([list(ctx)], vocab, flat.device), tok, anc)[0])
        seen = torch.cat(parts, 0)
    probs = proc.process(flat, seen) if proc.greedy else proc.probs(flat, seen)
    out = []
    for (tokens, parent), p in zip(trees, probs.split(sizes, 0)):
        out.append(verify_tree(tokens, parent, p, None, "deterministic", proc.greedy, generator))
    return out
