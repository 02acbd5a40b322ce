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

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults (apoorvumang's reference): ``num_draft_tokens=10``, ``max_ngram=3``, ``min_ngram=1``,
``match="last"`` (most recent occurrence with a full-length continuation, else the earliest;
``"first"`` is transformers' choice).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import register_sampler
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer


def ngram_draft(tokens: list[int] | np.ndarray, max_ngram: int, min_ngram: int, k: int, match: str = "last") -> list[int]:
    """Continuation of the longest earlier occurrence of the text's final n-gram (n from
    ``max_ngram`` down to ``min_ngram``); empty when nothing matches or ``k <= 0``."""
    arr = np.asarray(tokens, dtype=np.int64)
    length = len(arr)
    if k <= 0:
        return []
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
            return arr[s + n : s + n + k].tolist()
    return []


class NGramCopy(Proposer):
    """The continuation of the text's final n-gram at an earlier occurrence (:func:`ngram_draft`);
    nothing while whole prompts are still pending (the prefill step)."""

    def propose(self) -> ChainProposal:
        sm, rows, target = self.sampler, self.run.rows, self.run.target
        act = target.active
        if any(len(target.pending(k)) > 1 for k in range(len(act))):  # whole prompts pending
            return ChainProposal(tokens=[[] for _ in act])
        k_max = sm.num_draft_tokens
        return ChainProposal(
            tokens=[
                ngram_draft(rows.tokens[r], sm.max_ngram, sm.min_ngram, min(k_max, rows.remaining(r) - 1), sm.match)
                for r in act
            ]
        )


@register_sampler(
    "prompt_lookup",
    family="ar-speculative",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Ge et al. 2022 (IAD); Saxena 2023",
)
class PromptLookup(ChainSampler):
    """Prompt-lookup / input-guided drafts from n-gram matches, verified by the target."""

    defaults = {"num_draft_tokens": 10, "max_ngram": 3, "min_ngram": 1, "match": "last"}
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
