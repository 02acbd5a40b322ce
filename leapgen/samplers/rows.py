"""Per-row bookkeeping shared by the decode loops: the prompts checked (:func:`check_prompts`,
:func:`check_ids`), then every row's tokens, which rows are still active, and the statistics."""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from .base import DecodeConfig, DecodeResult, DecodeStats


def check_prompts(prompts: Any) -> list[list[int]]:
    """The prompts as lists of Python ints; InputError naming the row for anything else (a float or
    a string where a token id belongs, a negative id). Ids past a model's vocabulary are checked by
    the runner that feeds it (:func:`check_ids`)."""
    if hasattr(prompts, "tolist") and not isinstance(prompts, (list, tuple)):  # a [B, L] array or tensor
        prompts = prompts.tolist()
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise InputError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}.")
    out = []
    for r, p in enumerate(prompts):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) and not hasattr(p, "tolist"):
            raise InputError(f"prompt {r} must be a list of token ids, got {type(p).__name__}; tokenize text first.")
        ids = p.tolist() if hasattr(p, "tolist") else list(p)  # a copy: Rows appends to it
        if any(type(t) is not int or t < 0 for t in ids):  # the common case (Python ints) costs one pass
            bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0), None)
            if bad is not None:
                raise InputError(f"prompt {r} holds {bad!r}; token ids are integers >= 0.")
            ids = [int(t) for t in ids]
        out.append(ids)
    return out


def check_ids(prompts: list[list[int]], vocab_size: int, pad_id: int, allow_empty: bool, model: str) -> None:
    """InputError unless every prompt's ids (and the pad id) lie in ``[0, vocab_size)`` and no prompt
    is empty (unless the model's condition slots start each row: ``allow_empty``)."""
    if not 0 <= pad_id < vocab_size:
        raise InputError(f"pad_token_id {pad_id} is outside {model}'s vocabulary [0, {vocab_size}); pass one inside it.")
    for r, p in enumerate(prompts):
        if not p and not allow_empty:
            raise InputError(f"prompt {r} is empty; a decoder-only model needs at least one token to start from "
                             "(e.g. the tokenizer's BOS id).")
        top = max(p, default=0)
        if top >= vocab_size:
            raise InputError(f"prompt {r} holds token id {top}, outside {model}'s vocabulary [0, {vocab_size}).")


class Rows:
    """Tokens of every row (prompt + generated), which rows are still active, and the stats.

    ``commit(row, tokens)`` appends tokens up to the first EOS or the token budget and returns
    how many were kept. Loops then drop finished rows from their batch (``active`` indices).
    """

    def __init__(self, prompts: list[list[int]], config: DecodeConfig, stats: DecodeStats) -> None:
        self.config = config
        self.tokens = check_prompts(prompts)
        self.prompt_len = [len(p) for p in self.tokens]
        self.finished = [False] * len(self.tokens)
        self.stats = stats
        self.token_steps: list[list[int]] = [[] for _ in self.tokens]
        self._eos = set(config.eos_ids)

    def generated(self, row: int) -> list[int]:
        return self.tokens[row][self.prompt_len[row] :]

    def n_generated(self, row: int) -> int:
        return len(self.tokens[row]) - self.prompt_len[row]

    def remaining(self, row: int) -> int:
        return self.config.max_new_tokens - self.n_generated(row)

    def commit(self, row: int, new: Sequence[int]) -> int:
        """Append ``new`` to ``row`` up to the first EOS, the first token that completes a stop string
        (``config.stop_check``) or the token budget; report the kept ones to ``config.on_commit``
        (streaming) and return how many were kept."""
        kept = 0
        stop = self.config.stop_check
        for t in new:
            if self.remaining(row) <= 0:
                break
            self.tokens[row].append(int(t))
            self.token_steps[row].append(len(self.stats.accepted_per_step))
            kept += 1
            if int(t) in self._eos or (stop is not None and stop(self.generated(row))):
                self.finished[row] = True
                break
        if self.remaining(row) <= 0:
            self.finished[row] = True
        if kept and self.config.on_commit is not None:
            self.config.on_commit(row, self.tokens[row][-kept:])
        return kept

    @property
    def active(self) -> list[int]:
        return [i for i, f in enumerate(self.finished) if not f]

    def all_done(self) -> bool:
        return all(self.finished)

    def result(self, t0: float) -> DecodeResult:
        gens = [self.generated(i) for i in range(len(self.tokens))]
        self.stats.new_tokens = sum(len(g) for g in gens)
        self.stats.baseline_steps = max((len(g) for g in gens), default=0)
        self.stats.wall_time = time.perf_counter() - t0
        return DecodeResult(sequences=gens, stats=self.stats, token_steps=self.token_steps)


__all__ = ["Rows", "check_ids", "check_prompts"]
