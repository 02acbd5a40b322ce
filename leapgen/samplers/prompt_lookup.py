"""Prompt lookup decoding: drafts copied from the prompt and the text generated so far.

Papers: Ge, Xia et al., "Lossless Acceleration for Seq2seq Generation with Aggressive Decoding"
(input-guided aggressive decoding, IAD), 2022; Saxena, "Prompt Lookup Decoding", 2023
(apoorvumang/prompt-lookup-decoding; transformers' ``prompt_lookup_num_tokens``).

Each step, the longest n-gram (``max_ngram`` down to ``min_ngram`` tokens) ending the current text
is looked up earlier in prompt + generated text; the tokens that followed its most recent
occurrence are the draft (up to ``num_draft_tokens``). The target verifies them in one forward:
greedy prefix match at temperature 0 (identical to greedy ``ar``), rejection sampling with a
one-hot q above it (exactly the target's distribution). No draft model.

Proposer: :class:`NGramCopy`; acceptance: :class:`~leapgen.samplers.acceptance.ExactChain`
(one-hot q); loop: the chain loop.

Draft length: ``schedule="cost"`` (the default) drafts, each step, the width that maximises the
expected committed tokens per unit of target forward cost
(:func:`~leapgen.samplers.controllers.best_width`): acceptance rates per matched n-gram length are
learnt from the call's own verdicts (a 1-token match is mostly a wrong guess, a 3-token one mostly
right), and the cost of verifying ``n`` tokens is the target's curve (``verify_cost="auto"``:
measured once per model and batch size at temperature 0, a fixed per-device curve when sampling so
that seeds reproduce; :mod:`leapgen.samplers.cost_model`; ``"flat"`` makes every match draft in full). A width of 0 is a plain step. ``schedule="constant"`` drafts
the whole continuation (up to ``num_draft_tokens``) every step, as the reference and transformers do.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0); the schedule changes speed only.
Defaults (apoorvumang's reference): ``num_draft_tokens=10``, ``max_ngram=3``, ``min_ngram=1``,
``match="last"`` (most recent occurrence with a full-length continuation, else the earliest;
``"first"`` is transformers' choice); leapgen's ``schedule="cost"``, ``verify_cost="auto"``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import register_sampler
from .controllers import AcceptanceModel, best_width
from .cost_model import verify_cost
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer, Verdict


def ngram_draft(tokens: list[int] | np.ndarray, max_ngram: int, min_ngram: int, k: int, match: str = "last") -> list[int]:
    """Continuation of the longest earlier occurrence of the text's final n-gram (n from
    ``max_ngram`` down to ``min_ngram``); empty when nothing matches or ``k <= 0``."""
    return ngram_match(tokens, max_ngram, min_ngram, k, match)[1]


def ngram_match(tokens: list[int] | np.ndarray, max_ngram: int, min_ngram: int, k: int, match: str = "last") -> tuple[int, list[int]]:
    """``(n, draft)``: the matched n-gram's length (0: no match) and :func:`ngram_draft`'s draft."""
    arr = np.asarray(tokens, dtype=np.int64)
    length = len(arr)
    if k <= 0:
        return 0, []
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        if n <= 0:
            break
        # candidate starts s < length - n: windows arr[s:s+n] inside arr[:length-1]
        win = np.lib.stride_tricks.sliding_window_view(arr[: length - 1], n)
        hits = np.flatnonzero((win == arr[length - n :]).all(1))
        if hits.size:
            if match == "first":
                s = int(hits[0])
            else:
                # most recent occurrence that still has k tokens after it; in a repetitive run the
                # very last occurrence sits right before the end and could draft only 1-2 tokens
                full = hits[hits + n + k <= length]
                s = int(full[-1] if full.size else hits[0])
            return n, arr[s + n : s + n + k].tolist()
    return 0, []


class NGramCopy(Proposer):
    """The continuation of the text's final n-gram at an earlier occurrence (:func:`ngram_match`),
    cut to the cost-aware width (``schedule="cost"``); nothing while whole prompts are still
    pending (the prefill step)."""

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        # one class per matched n-gram length; a match is shorter than the longest text can get
        longest = max((len(run.rows.tokens[r]) for r in run.rows.active), default=0) + run.rows.config.max_new_tokens
        classes = min(sampler.max_ngram, longest) + 1
        self.acceptance = AcceptanceModel(classes) if sampler.schedule == "cost" else None
        self.cost = None
        self._classes: list[int] = []
        self._lens: list[int] = []
        self.widths: list[int] = []

    def propose(self) -> ChainProposal:
        sm, rows, target = self.sampler, self.run.rows, self.run.target
        act = target.active
        self._classes, self._lens = [], []
        if any(len(target.pending(k)) > 1 for k in range(len(act))):  # whole prompts pending
            return ChainProposal(tokens=[[] for _ in act])
        k_max = sm.num_draft_tokens
        found = [ngram_match(rows.tokens[r], sm.max_ngram, sm.min_ngram, min(k_max, rows.remaining(r) - 1), sm.match)
                 for r in act]
        drafts = [d for _, d in found]
        if self.acceptance is not None and any(drafts):
            if self.cost is None:  # measured once per model and batch size (cached), on first use
                self.cost = verify_cost(target.lm, len(act), sm.verify_cost, target.cond, greedy=self.run.proc.greedy)
            width = best_width([self.acceptance.survival(n, len(d)) for n, d in found], self.cost)
            drafts = [d[:width] for d in drafts]
            self.widths.append(width)
        self._classes = [n for n, _ in found]
        self._lens = [len(d) for d in drafts]
        return ChainProposal(tokens=drafts)

    def update(self, verdict: Verdict) -> None:
        if self.acceptance is not None:
            for c, d, n in zip(self._classes, self._lens, verdict.n):
                self.acceptance.observe(c, d, n)

    def finish(self) -> None:
        if self.widths:
            self.run.stats.extra["mean_draft_width"] = sum(self.widths) / len(self.widths)


@register_sampler(
    "prompt_lookup",
    family="ar-speculative",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Ge et al. 2022 (IAD); Saxena 2023",
)
class PromptLookup(ChainSampler):
    """Prompt-lookup / input-guided drafts from n-gram matches, verified by the target."""

    defaults = {"num_draft_tokens": 10, "max_ngram": 3, "min_ngram": 1, "match": "last", "schedule": "cost",
                "verify_cost": "auto"}
    proposer = NGramCopy

    def validate(self) -> None:
        if not isinstance(self.num_draft_tokens, int) or self.num_draft_tokens < 1:
            raise ConfigError(f"num_draft_tokens must be an integer >= 1, got {self.num_draft_tokens!r}.")
        if not (isinstance(self.min_ngram, int) and isinstance(self.max_ngram, int) and 1 <= self.min_ngram <= self.max_ngram):
            raise ConfigError(
                f"need integers 1 <= min_ngram <= max_ngram, got min_ngram={self.min_ngram!r}, max_ngram={self.max_ngram!r}."
            )
        if self.match not in ("last", "first"):
            raise ConfigError(f"match must be 'last' or 'first', got {self.match!r}.")
        if self.schedule not in ("cost", "constant"):
            raise ConfigError(f"prompt_lookup's schedule must be 'cost' or 'constant', got {self.schedule!r}.")
        if self.verify_cost not in ("auto", "measured", "device"):
            verify_cost(None, 1, self.verify_cost)  # raises on a bad curve before anything runs
