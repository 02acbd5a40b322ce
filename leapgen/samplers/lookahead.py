"""Lookahead decoding: a 2-D Jacobi window fills an n-gram pool; pool guesses are verified in the
same forward.

Paper: Fu, Bailis, Stoica, Zhang, "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding", ICML 2024 (hao-ai-lab/LookaheadDecoding, ``lade/decoding.py``).

Per row, every step runs ONE target forward over
``[pending tokens, verification branch, lookahead branch]`` through one attention mask
(:meth:`Runner.forward_block`):

* **lookahead branch** - a window of ``window`` (W) columns over ``level - 1`` (N-1) levels, the
  trajectory of the last Jacobi iterations. Level l, column i sits at position
  ``root + i + l`` and sees level 0 up to column i (the root is level 0, column 0) and the
  levels 1..l of its own column. The argmax outputs of the last level are the next iterate;
  every column then yields an n-gram (level 0..N-2 of the column plus the new output), stored in
  the pool under its first token. The window moves one level per step (lade's
  ``ALWAYS_FWD_ONE``); during the first N-2 steps it is filled level by level, starting from
  W+N-3 tokens drawn at random from the row's text so that it is exactly W wide once full.
  Window tokens equal to EOS are replaced by random ones (as in lade).
* **verification branch** - the pool's n-grams for the row's last token (at most
  ``guess_set_size`` (G) per key, least-recently-used evicted), merged into a trie
  (:func:`trees.trie_from_sequences`). Greedy: the longest candidate prefix equal to the
  target's argmax (V1 walk of ``verify_tree``), identical to greedy AR. Sampling: V3 with
  one-hot q (``verify_tree(kind="deterministic")``, the multi-candidate rule of the lade
  reference), distributed exactly as the target. Only the accepted path's KV is kept
  (:meth:`Runner.keep_path`); window slots and other guesses are discarded.

The pool is also seeded with the prompt's n-grams and the n-grams of the generated text
(lade's ``POOL_FROM_PROMPT``; off by default there, **on** here: it costs nothing and helps
the repetitive inputs, e.g. code, that this library targets). Batch rows have their own window
and pool and finish independently.

Proposer: :class:`PoolAndWindow` (the pool's trie as the tree; the window as side slots of the
same forward, whose logits come back to it); acceptance: the tree walk (``deterministic``); loop:
the tree loop, which owns the cache. Random window fillers come from the caller's generator.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults (the lade README example ``config_lade(LEVEL=5, WINDOW_SIZE=7, GUESS_SET_SIZE=7)``):
``level=5``, ``window=7``, ``guess_set_size=7``, ``pool_from_prompt=True``. A window of more slots
than the model's context window (:func:`window_slots`) and than the paper's largest setting (level
7, window 15) is refused with a ``ConfigError``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np
import torch

from ..errors import ConfigError
from .base import register_sampler
from .jacobi import pad_tokens
from .loops.tree import TreeLoopSampler
from .proposers.base import Proposer, TreeProposal, Verdict
from .trees import trie_from_sequences


class NGramPool:
    """n-grams keyed by their first token; at most ``size`` continuations per key, LRU order."""

    def __init__(self, n: int, size: int) -> None:
        self.n = n
        self.size = size
        self.map: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, key: int, cont: tuple[int, ...]) -> None:
        if self.size <= 0:
            return
        d = self.map.setdefault(int(key), OrderedDict())
        if cont in d:
            d.move_to_end(cont)
        else:
            d[cont] = None
            if len(d) > self.size:
                d.popitem(last=False)

    def add_text(self, tokens: list[int], start: int = 0) -> None:
        """Add every n-gram of ``tokens`` that starts at index >= ``start``."""
        for s in range(max(0, start), len(tokens) - self.n + 1):
            self.add(tokens[s], tuple(tokens[s + 1 : s + self.n]))

    def get(self, key: int) -> list[tuple[int, ...]]:
        """Continuations of ``key``, most recently used first."""
        return list(reversed(self.map.get(int(key), {})))


@functools.lru_cache(maxsize=64)
def window_layout(w0: int, n_levels: int) -> tuple[np.ndarray, list[int], list[int]]:
    """Mask, position offsets and last-level output slots of a window whose level 0 holds
    ``w0`` tokens after the root and whose ``n_levels - 1`` further levels hold ``w0 + 1``.

    Level l, column i sits at offset ``i + l`` from the root and sees level 0 up to column i
    and levels 1..l of column i (lade's ``j_make_causal_mask_multilevel``)."""
    slot: dict[tuple[int, int], int] = {}
    offs: list[int] = []
    for i in range(1, w0 + 1):
        slot[(0, i)] = len(offs)
        offs.append(i)
    for lvl in range(1, n_levels):
        for i in range(w0 + 1):
            slot[(lvl, i)] = len(offs)
            offs.append(i + lvl)
    mask = np.eye(len(offs), dtype=bool)
    for (lvl, i), s in slot.items():
        for j in range(1, min(i, w0) + 1):
            mask[s, slot[(0, j)]] = True
        for l2 in range(1, lvl):
            mask[s, slot[(l2, i)]] = True
    last = n_levels - 1
    out = (
        [-1] + [slot[(0, i)] for i in range(1, w0 + 1)]
        if last == 0
        else [slot[(last, i)] for i in range(w0 + 1)]
    )
    mask.setflags(write=False)
    return mask, offs, out


def window_slots(level: int, width: int) -> int:
    """The most window slots one forward holds: the largest :func:`window_layout` while the window
    fills (level 0 starts ``width + level - 3`` tokens wide and loses a column per added level)."""
    n_levels = level - 1
    if n_levels < 1:
        return 0
    # with k levels filled (k = 1..n_levels) the window holds w0 + (k - 1)(w0 + 1) = k(c + 1 - k) - 1 slots,
    # w0 = c - k, c = width + n_levels - 1: a parabola in k, so its largest value over 1..n_levels is at an end
    # or next to its vertex (c + 1) / 2 (closed form: level=10**9 is refused at once instead of looping)
    c = width + n_levels - 1
    ks = {1, n_levels} | {min(max(k, 1), n_levels) for k in ((c + 1) // 2, (c + 2) // 2)}
    return max(k * (c + 1 - k) - 1 for k in ks)


#: the most window slots of the paper's range (level 7, window 15): never refused
PAPER_SLOTS = window_slots(7, 15)


class LookaheadWindow:
    """The 2-D Jacobi window of one row: ``levels[0]`` holds level 0 without the root (column 0),
    ``levels[l]`` (l >= 1) columns 0.. of level l."""

    def __init__(self, n_levels: int, width: int, text: list[int], gen: torch.Generator, vocab_size: int) -> None:
        self.n_levels = n_levels  # N - 1
        self.width = width
        self.levels: list[list[int]] = [pad_tokens(text, width + n_levels - 2, "prompt", gen, vocab_size)]

    @property
    def full(self) -> bool:
        return len(self.levels) == self.n_levels

    def layout(self) -> tuple[list[int], np.ndarray, list[int], list[int]]:
        """Tokens, mask ``[m, m]``, position offsets (from the root) of the window's slots, and
        the slot of each column of the last level (-1: the root itself)."""
        mask, offs, out = window_layout(len(self.levels[0]), len(self.levels))
        return [t for lv in self.levels for t in lv], mask, offs, out

    def advance(self, new: list[int], root: int, pool: NGramPool | None) -> None:
        """Take the next iterate (argmax outputs of the last level); harvest n-grams when full."""
        if not self.full:
            # fill: one more level; every level drops its first column so positions stay aligned
            self.levels = [lv[1:] for lv in self.levels] + [new[1:]]
            return
        if pool is not None:
            for i in range(len(new)):
                first = root if i == 0 else self.levels[0][i - 1]
                pool.add(first, tuple(self.levels[lvl][i] for lvl in range(1, self.n_levels)) + (new[i],))
        if self.n_levels == 1:
            self.levels = [new[1:]]
        else:
            self.levels = [self.levels[1][1:]] + self.levels[2:] + [new]


class PoolAndWindow(Proposer):
    """Per row: the n-gram pool's guesses after the row's last token, merged into a trie (the
    tree), and the Jacobi window (side slots); the side logits advance the window and fill the pool."""

    @classmethod
    def check(cls, sampler, models, config) -> None:
        """A window wider than the model's context window is refused: its forward would cost more
        than a full-context prefill per token (``level=1000`` took minutes, ``10**6`` a raw MemoryError),
        and the slots past the window all sit at its last position, so they guess nothing. Windows
        within the paper's range (level <= 7, window <= 15) always run, on however short a context
        (the slots past it guess nothing, and decoding stays exact)."""
        super().check(sampler, models, config)
        limit = max(models["model"].max_length, PAPER_SLOTS)
        slots = window_slots(sampler.level, sampler.window)
        if slots > limit:
            raise ConfigError(
                f"lookahead with level={sampler.level} and window={sampler.window} puts up to {slots} window tokens in "
                f"one forward, more than the model's context window of {limit}; lower level or window (the "
                "window holds about window * (level - 1) tokens; the paper uses level <= 7, window <= 15)."
            )

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        rows, v = run.rows, self.vocab_size
        self.eos = set(run.config.eos_ids)
        self.pools = {r: NGramPool(sampler.level, sampler.guess_set_size) for r in rows.active}
        self.wins = {r: LookaheadWindow(sampler.level - 1, sampler.window, rows.tokens[r], generator, v)
                     for r in rows.active}
        if sampler.pool_from_prompt:
            for r in rows.active:
                self.pools[r].add_text(rows.tokens[r])

    def propose(self) -> TreeProposal:
        rows, target = self.run.rows, self.run.target
        tokens, parent, side, self.outs = [], [], [], []
        for k, r in enumerate(target.active):
            root = target.pending(k)[-1]
            room = rows.remaining(r) - 1  # drafts past the token budget are never committed
            cands = [c[:room] for c in self.pools[r].get(root)] if room > 0 else []
            tok, par, _ = trie_from_sequences([c for c in cands if c], root)
            wtok, wmask, woff, wout = self.wins[r].layout()
            tokens.append(tok)
            parent.append(par)
            side.append((wtok, wmask, woff))
            self.outs.append((root, wout))
        return TreeProposal(tokens=tokens, parent=parent, side=side, clamp=True)

    def update(self, verdict: Verdict) -> None:
        rows, sm, v = self.run.rows, self.sampler, self.vocab_size
        for k, r in enumerate(self.run.target.active):
            root, wout = self.outs[k]
            before = len(rows.tokens[r]) - verdict.committed[k]
            text = rows.tokens[r][:before]
            # the window's next iterate: argmax at the last level (from raw logits, as lade); row 0 of
            # the side logits is the root's (-1 in ``wout``)
            best = verdict.side_logits[k].argmax(-1).tolist()
            new = [best[s + 1] for s in wout]
            new = [x if x not in self.eos else pad_tokens(text, 1, "prompt", self.generator, v)[0] for x in new]
            self.wins[r].advance(new, root, self.pools[r])
            if sm.pool_from_prompt:
                self.pools[r].add_text(rows.tokens[r], before - sm.level + 1)


@register_sampler(
    "lookahead",
    family="ar-parallel",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Fu et al. 2024 (Lookahead Decoding)",
)
class Lookahead(TreeLoopSampler):
    """Lookahead decoding: Jacobi-window n-gram pool verified in the same forward; exact."""

    defaults = {"level": 5, "window": 7, "guess_set_size": 7, "pool_from_prompt": True}
    proposer = PoolAndWindow

    def validate(self) -> None:
        for name, lo in (("level", 2), ("window", 1), ("guess_set_size", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}.")
        if not isinstance(self.pool_from_prompt, bool):
            raise ConfigError(f"pool_from_prompt must be True or False, got {self.pool_from_prompt!r}.")

