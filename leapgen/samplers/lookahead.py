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

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults (the lade README example ``config_lade(LEVEL=5, WINDOW_SIZE=7, GUESS_SET_SIZE=7)``):
``level=5``, ``window=7``, ``guess_set_size=7``, ``pool_from_prompt=True``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np
import torch

from ..errors import ConfigError
from .base import DecodeConfig, DecodeResult, Sampler, register_sampler
from .jacobi import pad_tokens
from .runtime import DecodeRun, verify_deterministic_trees
from .trees import tree_layout, trie_from_sequences


class NGramPool:
    """n-grams keyed by their first token; at most ``size`` continuations per key, LRU order."""

    def __init__(self, n: int, size: int, vocab_size: int | None = None) -> None:
        self.n = n
        self.size = size
        self.vocab_size = vocab_size  # continuations with ids >= it (condition prefixes) are never stored
        self.map: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, key: int, cont: tuple[int, ...]) -> None:
        if self.size <= 0 or (self.vocab_size is not None and any(t >= self.vocab_size for t in cont)):
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


class LookaheadWindow:
    """The 2-D Jacobi window of one row: ``levels[0]`` holds level 0 without the root (column 0),
    ``levels[l]`` (l >= 1) columns 0.. of level l."""

    def __init__(
        self, n_levels: int, width: int, text: list[int], gen: torch.Generator, vocab_size: int | None = None
    ) -> None:
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


@register_sampler(
    "lookahead",
    family="ar-parallel",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Fu et al. 2024 (Lookahead Decoding)",
)
class Lookahead(Sampler):
    """Lookahead decoding: Jacobi-window n-gram pool verified in the same forward; exact."""

    defaults = {"level": 5, "window": 7, "guess_set_size": 7, "pool_from_prompt": True}

    def validate(self) -> None:
        for name, lo in (("level", 2), ("window", 1), ("guess_set_size", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}.")
        if not isinstance(self.pool_from_prompt, bool):
            raise ConfigError(f"pool_from_prompt must be True or False, got {self.pool_from_prompt!r}.")

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        run = DecodeRun(self, models, prompts, config, cond=cond)
        rows, proc, target, stats, bar = run.rows, run.proc, run.target, run.stats, run.bar
        eos = set(config.eos_ids)
        gen = torch.Generator().manual_seed(0 if config.seed is None else int(config.seed))
        n_levels = self.level - 1
        v = target.lm.vocab_size
        pools = {r: NGramPool(self.level, self.guess_set_size, v) for r in rows.active}
        wins = {r: LookaheadWindow(n_levels, self.window, rows.tokens[r], gen, v) for r in rows.active}
        if self.pool_from_prompt:
            for r in rows.active:
                pools[r].add_text(rows.tokens[r])

        while target.active:
            act = target.active
            b = len(act)
            pend = [target.pending(k) for k in range(b)]
            trees, extras, blocks, offsets, win_info = [], [], [], [], []
            for k, r in enumerate(act):
                root = pend[k][-1]
                room = rows.remaining(r) - 1  # drafts past the token budget are never committed
                cands = [c[:room] for c in pools[r].get(root)] if room > 0 else []
                tok, par, _ = trie_from_sequences([c for c in cands if c], root)
                trees.append((tok, par))
                anc, dep = tree_layout(tuple(par))
                wtok, wmask, woff, wout = wins[r].layout()
                t = len(tok) - 1
                block = np.zeros((t + len(wtok), t + len(wtok)), dtype=bool)
                block[:t, :t] = anc[1:, 1:]
                block[t:, t:] = wmask
                extras.append(tok[1:] + wtok)
                blocks.append(block)
                offsets.append(list(dep[1:]) + woff)
                win_info.append((t, wout))
                stats.drafted_tokens += t

            logits, start, n_pend = target.forward_block(extras, blocks, offsets, clamp_positions=True)

            node_logits, keep, committed = [], [], []
            for k in range(b):
                p_k = int(n_pend[k])
                t = win_info[k][0]
                node_logits.append(logits[k, p_k - 1 : p_k + t])  # root, then trie nodes
            results = verify_deterministic_trees(
                proc, trees, node_logits, [rows.tokens[r] for r in act], generator
            )
            for k, r in enumerate(act):
                p_k = int(n_pend[k])
                t, wout = win_info[k]
                path, nxt = results[k]
                tok = trees[k][0]
                root = pend[k][-1]
                # the window's next iterate: argmax at the last level (from raw logits, as lade)
                cols = [p_k - 1 if s < 0 else p_k + t + s for s in wout]
                new = logits[k, cols].argmax(-1).tolist()
                new = [x if x not in eos else pad_tokens(rows.tokens[r], 1, "prompt", gen, v)[0] for x in new]
                wins[r].advance(new, root, pools[r])
                before = len(rows.tokens[r])
                committed.append(rows.commit(r, [tok[i] for i in path] + [nxt]))
                if self.pool_from_prompt:
                    pools[r].add_text(rows.tokens[r], before - self.level + 1)
                keep.append(list(range(p_k)) + [p_k - 1 + i for i in path])
                stats.accepted_draft_tokens += len(path)
            stats.accepted_per_step.append(committed)
            target.keep_path(start, keep)
            run.step_done(max(committed))
            target.drop_finished()
        return run.finish()
