"""The mechanics every autoregressive loop shares: feeding each row's pending tokens to a model,
rolling its cache back to what was accepted, and dropping finished rows.

A :class:`Runner` pairs a :class:`CausalLM` with its :class:`KVCache` and, per active row, the
number of that row's tokens already in the cache (``consumed``). Rows of a batch may differ in
how many tokens they feed in a step; shorter rows are right-padded and the padding slots become
holes via ``KVCache.keep_new``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..models.base import CausalLM
from .base import DecodeConfig, DecodeResult, Sampler, new_stats
from .logits import LogitsProcessor, context
from .rows import Rows, check_ids
from .trees import DraftTree, accepted_slots, tree_layout


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
        self._eos_masks: dict[tuple[torch.device, int], Tensor] = {}  # min_new_tokens: EOS ids as a [V] mask
        # the counters before the caches exist: a model whose cache creation runs its network (a NAR
        # hypothesis drafting for an AR verifier) counts that pass in this decode's statistics
        self._f0 = (models["model"].forwards, models["draft"].forwards if draft else 0)
        self.target = Runner(models["model"], self.rows, config.pad_token_id, cond)
        self.draft = Runner(models["draft"], self.rows, config.pad_token_id, cond) if draft else None
        self.bar = tqdm(total=config.max_new_tokens, disable=not config.progress, desc=sampler.name, leave=False)

    def plain_step(self, generator: torch.Generator | None) -> None:
        """One ordinary decode step: feed each active row's pending tokens to the target, pick its
        next token (argmax or a sample of the processed distribution) and commit it. This is all
        of ``ar``, and the prefill step of the draft-model samplers. The caller drops finished rows."""
        rows, proc, target = self.rows, self.proc, self.target
        logits = self.ban_eos(target.feed_pending())
        seen = context(proc, rows, target.active, logits.shape[-1], logits.device)
        tok = proc.sample(logits, seen, generator)  # argmax when greedy; one fused kernel on CUDA
        self.stats.accepted_per_step.append([rows.commit(r, [t]) for r, t in zip(target.active, tok.tolist())])
        self.step_done(1)

    def ban_eos(self, logits: Tensor, depth: Tensor | None = None) -> Tensor:
        """``DecodeConfig.min_new_tokens``: the target's raw logits of the active rows with every EOS id
        at -inf where the token they predict would come before the row's ``min_new_tokens``-th.

        ``logits [B, V]`` predict each row's next token; ``[B, n, V]`` predict, at column j, the token
        j places later (a chain), or ``depth[b, j]`` places later (a tree's nodes). Done before any
        processing (as transformers' ``MinNewTokensLengthLogitsProcessor`` leads its list), so greedy
        and sampled rules alike see a distribution without EOS there. The generated counts are host
        ints: no sync; nothing is done once every row is past the bound."""
        if not self.eos_ban_active():
            return logits
        cfg = self.config
        done = [self.rows.n_generated(r) for r in self.target.active]
        at = torch.tensor(done, dtype=torch.long, device=logits.device)
        if logits.dim() == 3:
            ahead = depth if depth is not None else torch.arange(logits.shape[1], device=logits.device)[None]
            at = at[:, None] + ahead.to(logits.device)
        key = (logits.device, logits.shape[-1])
        if key not in self._eos_masks:  # built once per call (from host ids: no sync)
            ids = [t for t in cfg.eos_ids if 0 <= t < logits.shape[-1]]
            mask = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            mask[ids] = True
            self._eos_masks[key] = mask
        return logits.masked_fill((at < cfg.min_new_tokens)[..., None] & self._eos_masks[key], float("-inf"))

    def eos_ban_active(self) -> bool:
        """Whether some active row has generated fewer than ``min_new_tokens`` tokens (and EOS ids are
        set): host bookkeeping only."""
        cfg = self.config
        if not cfg.min_new_tokens or not cfg.eos_ids:
            return False
        return any(self.rows.n_generated(r) < cfg.min_new_tokens for r in self.target.active)

    def drop_finished(self) -> None:
        """Drop finished rows from the target's and the draft's batch."""
        self.target.drop_finished()
        if self.draft is not None:
            self.draft.drop_finished()

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
        self.cond = cond
        self.active = list(rows.active)
        slots = lm.condition_slots(cond)
        vocab = getattr(lm, "vocab_size", None)
        if isinstance(vocab, int):  # before any cache or forward: a bad id is the caller's, named here
            check_ids([rows.tokens[r] for r in self.active], vocab, pad_id, slots > 0, lm.describe())
        self.cache = lm.new_cache(len(self.active), cond)
        self.consumed = [0] * len(self.active)  # per position in self.active: tokens in the cache
        self.slots_left = [slots] * len(self.active)  # condition slots not yet fed

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

    def forward(
        self,
        seqs: Sequence[Sequence[int]],
        clamp_positions: bool = False,
        tail: Tensor | None = None,
        tail_lens: Sequence[int] | None = None,
    ) -> tuple[Tensor, int, Tensor]:
        """Run one forward over one token list per active row (right-padded), each followed by
        the first ``tail_lens[b]`` tokens of ``tail [B, g]`` (a chain of drafts already on the
        model's device: it is placed there without a round trip through the host).

        Returns ``(logits [B, L, V], start_slot, lengths [B])``. The caller decides what to keep
        with :meth:`keep` (nothing is consumed until then). ``clamp_positions``: positions past the
        context window are clamped to its last one (only for tokens whose outputs are never used,
        e.g. draft tokens beyond a row's token budget)."""
        dev = self.lm.device
        g = 0 if tail is None else tail.shape[1]
        n_tail = list(tail_lens) if tail_lens is not None else [g] * len(seqs)
        head = [len(s) for s in seqs]
        lens_l = [h + t for h, t in zip(head, n_tail)]
        width = max(lens_l)
        batch = torch.tensor(
            [list(s) + [self.pad_id] * (width + g - len(s)) for s in seqs], dtype=torch.long, device=dev
        ).reshape(len(seqs), width + g)
        if g:
            j = torch.arange(g, device=dev)[None]
            at = torch.tensor(head, dtype=torch.long, device=dev)[:, None] + j
            cap = torch.tensor(n_tail, dtype=torch.long, device=dev)[:, None]
            batch.scatter_(1, at, torch.where(j < cap, tail.to(dev), torch.full_like(tail, self.pad_id)))
        batch = batch[:, :width]
        lens = torch.tensor(lens_l, dtype=torch.long)
        start = len(self.cache)
        pos = None
        if clamp_positions:
            pos = self.cache.position_ids(width).clamp_max(self.lm.max_length - 1)
        elif min(lens_l) < width:
            # right-padding of a row near the end of the context window (an image grid fills it
            # exactly) must not push positions past it: pad slots are discarded, so clamp theirs
            pos = self.cache.position_ids(width)
            real = torch.arange(width, device=pos.device)[None] < lens.to(pos.device)[:, None]
            pos = torch.where(real, pos, pos.clamp_max(self.lm.max_length - 1))
        # the rows' real token counts (the rest is right-padding): a per-row decision made from a
        # whole forward (FiRST's routers at the prefill, leapgen.models.text_variants) reads them
        self.cache.real_lengths = lens
        try:
            logits = self.lm(batch, self.cache, position_ids=pos)
        finally:
            self.cache.real_lengths = None  # it describes this block only
        return logits, start, lens

    def keep(self, start: int, counts: Tensor | Sequence[int]) -> None:
        """Row b keeps the first ``counts[b]`` slots written since ``start``; they count as
        consumed tokens of that row."""
        counts = torch.as_tensor(counts, dtype=torch.long)
        self.cache.keep_new(start, counts)
        self._consume(counts.tolist())

    def keep_path(self, start: int, paths: Sequence[Sequence[int]]) -> None:
        """Row b keeps the tree nodes ``paths[b]`` (root first), compacted to contiguous slots."""
        idx, counts = accepted_slots(paths, max(len(p) for p in paths))
        self.cache.select(start, idx, counts)
        self._consume(counts.tolist())

    def forward_tree(self, tree: DraftTree) -> tuple[Tensor, int]:
        """One forward over a batch of draft trees (``DraftTree``: tokens/parent ``[B, N]``, padding parent -2)
        whose roots are each row's single pending token: nodes see their ancestors, at positions
        root + depth (:meth:`forward_block`). Returns ``(logits [B, N, V], start_slot)``, column i
        the logits after node i; keep the accepted path with :meth:`keep_path`."""
        if any(len(self.pending(i)) != 1 for i in range(len(self.active))):
            raise RuntimeError("forward_tree needs exactly one pending token per row (the tree root)")
        extras, blocks, offsets = [], [], []
        for tok, par in zip(tree.tokens.tolist(), tree.parent.tolist()):
            n = sum(1 for x in par if x >= -1)
            anc, dep = tree_layout(tuple(par[:n]))
            extras.append(tok[1:n])
            blocks.append(anc[1:, 1:])
            offsets.append(list(dep[1:]))
        logits, start, _ = self.forward_block(extras, blocks, offsets)
        return logits, start

    def forward_block(
        self,
        extras: Sequence[Sequence[int]],
        blocks: Sequence[Tensor],
        offsets: Sequence[Sequence[int]],
        clamp_positions: bool = False,
        clamp_from: Sequence[int] | None = None,
    ) -> tuple[Tensor, int, Tensor]:
        """One forward over each row's pending tokens (causal among themselves) followed by extra
        tokens with their own mask: what token trees (their root is the row's last pending token;
        the prefill step has several) and Jacobi / lookahead windows need.

        Row b's ``extras[b]`` (m_b tokens) all see every pending token of row b; among
        themselves they see what ``blocks[b]`` (``[m_b, m_b]`` bool, diagonal set) allows; their
        positions are the position of the row's last pending token plus ``offsets[b]`` (>= 1).
        With ``clamp_positions`` the positions of row b's extras from ``clamp_from[b]`` on (all
        of them when None) are clamped to the window's last position (only for purely speculative
        slots, e.g. a lookahead window, whose outputs need not be exact); a pending token or an
        exact extra past the window is refused by the model as in ``ar``. Returns ``(logits [B, L, V], start_slot, n_pending [B])``: row b's
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
        loose = np.zeros((b, width), dtype=bool)  # the slots whose positions may be clamped
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
                loose[i, np_ + (0 if clamp_from is None else clamp_from[i]) : np_ + m] = True
        # built on the host (per-row numpy layouts), moved to the model's device once each
        pos = self.cache.position_ids(width, torch.from_numpy(offs).to(self.cache.device))
        if clamp_positions:  # the pending tokens keep theirs: past the window the model refuses them (as in ar)
            pos = torch.where(torch.from_numpy(loose).to(pos.device), pos.clamp_max(self.lm.max_length - 1), pos)
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
        return logits[torch.arange(len(seqs), device=logits.device), (lens - 1).to(logits.device)]

    def drop_finished(self) -> None:
        """Remove rows that finished from the batch and the cache."""
        keep = [i for i, r in enumerate(self.active) if not self.rows.finished[r]]
        if len(keep) == len(self.active):
            return
        self.active = [self.active[i] for i in keep]
        self.consumed = [self.consumed[i] for i in keep]
        self.slots_left = [self.slots_left[i] for i in keep]
        if keep:
            self.cache.select_rows(torch.tensor(keep, dtype=torch.long, device=self.cache.device))


def gather_positions(logits: Tensor, offsets: Tensor | Sequence[int], n: int) -> Tensor:
    """``[B, n, V]``: for row b, ``logits[b, offsets[b] + i]`` for i < n (clamped at the end)."""
    b, length, v = logits.shape
    offsets = torch.as_tensor(offsets, dtype=torch.long).to(logits.device)
    idx = (offsets[:, None] + torch.arange(n, device=logits.device)[None]).clamp_max(length - 1)
    return logits.gather(1, idx[..., None].expand(b, n, v))
