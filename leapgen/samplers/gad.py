"""GAD: verify a whole drafted hypothesis with the target in one forward per step (NAR draft + AR verify).

Paper: Xia et al., "Speculative Decoding: Exploiting Speculative Execution for Accelerating
Seq2seq Generation" (Findings of EMNLP 2023; arXiv 2203.16487, first "Generalized Aggressive
Decoding"); Ge et al., "Lossless Acceleration for Seq2seq Generation with Aggressive Decoding"
(IAD, 2022) for re-anchoring after a mismatch.

The draft produces its **whole hypothesis once**, before verification: a NAR model (a
:class:`~leapgen.models.asr_lm.NARDraftLM` over Paraformer or CTC: one network pass, no forward per
drafted token) or, for any other draft model, its own greedy decode (the generic fallback).
Each step drafts the next ``num_draft_tokens`` (default 32) tokens of the hypothesis, aligned to
the row's generated length; after a mismatch the alignment is re-anchored (IAD) to the nearest
hypothesis position within ``anchor_window`` (default 2) whose previous token equals the token
the target just committed. The target scores ``[pending, draft]`` in one forward and the chain
loop accepts with :class:`~leapgen.samplers.acceptance.ExactChain`.

Guarantee: ``greedy-exact`` (at temperature 0 the output is greedy ``ar``'s, token for token;
above it drafts are deterministic proposals checked by rejection sampling with one-hot q).
``specdec`` is the same proposer with SpecDec's relaxed (top-beta / tau) acceptance.
"""

from __future__ import annotations

from typing import Any

from .base import DecodeConfig, check_int, register_sampler
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer, check_same_vocab
from .proposers.hypothesis import nearest_anchor


def hypotheses(draft: Any, target_cond: Any, cond: Any, prompts: list[list[int]], config: DecodeConfig) -> list[list[int]]:
    """The draft's full hypothesis per row: a NAR draft's table argmax (``draft.hypothesis``), else
    the draft model's greedy decode (the ``ar`` sampler) from the same prompts and condition."""
    if hasattr(draft, "hypothesis") and hasattr(draft, "source"):
        state = draft.source.state_of(target_cond if target_cond is not None else cond, len(prompts))
        table = draft.hypothesis(state)
        draft.forwards += 1
        ids = table.argmax(-1).tolist()
        out = []
        for row in ids:  # the table ends with </s> then uniform rows: keep up to the first </s>
            eos = set(config.eos_ids)
            cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            out.append(row[:cut])
        return out
    from .base import get_sampler

    greedy = DecodeConfig(max_new_tokens=config.max_new_tokens, eos_token_id=config.eos_token_id,
                          pad_token_id=config.pad_token_id)
    return get_sampler("ar").generate({"model": draft}, prompts, greedy, cond=cond).sequences


class HypothesisDraft(Proposer):
    """Drafts the next tokens of a precomputed hypothesis (see the module docstring)."""

    @classmethod
    def check(cls, sampler, models, config) -> None:
        """Its hypotheses are target ids: a draft scoring another vocabulary is refused up front."""
        super().check(sampler, models, config)
        if getattr(models.get("draft"), "vocab_size", None) is not None:
            check_same_vocab(models["model"], models["draft"])

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        call = sampler._call
        before = call["draft"].forwards
        self.hyp = hypotheses(call["draft"], run.target.cache.cond, call["cond"], [list(p) for p in run.rows.tokens],
                              run.config)
        self.offset = [0] * len(self.hyp)  # hypothesis index - generated length, per row
        run.stats.extra["draft_pass_forwards"] = call["draft"].forwards - before
        run.stats.draft_forwards += call["draft"].forwards - before  # the draft's passes count as draft forwards
        run.stats.extra["draft_tokens"] = sum(len(h) for h in self.hyp)

    def _start(self, r: int) -> int:
        rows = self.run.rows
        g = rows.n_generated(r)
        hyp = self.hyp[r]
        pos = g + self.offset[r]
        if g == 0:
            return 0
        # hyp[pos - 1] should be the token the target just committed; else re-anchor (IAD)
        j = nearest_anchor(hyp, pos - 1, rows.tokens[r][-1], int(self.sampler.anchor_window))
        if j is None:
            return pos
        self.offset[r] = j + 1 - g
        return j + 1

    def propose(self) -> ChainProposal:
        rows = self.run.rows
        k = int(self.sampler.num_draft_tokens)
        out = []
        for r in self.run.target.active:
            s = self._start(r)
            out.append(self.hyp[r][s : s + min(k, rows.remaining(r) - 1)] if s >= 0 else [])
        return ChainProposal(tokens=out)


@register_sampler("gad", family="ar-speculative", guarantee="greedy-exact", needs=("model", "draft"),
                  paper="Xia et al. 2023 (GAD / SpecDec); Ge et al. 2022 (IAD)")
class GAD(ChainSampler):
    """The draft's whole hypothesis (NAR: one pass) verified by the target, re-anchored after mismatches."""

    defaults = {"num_draft_tokens": 32, "anchor_window": 2}
    proposer = HypothesisDraft

    def validate(self) -> None:
        check_int("num_draft_tokens", self.num_draft_tokens)
        check_int("anchor_window", self.anchor_window, low=0)

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None):
        self._call = {"draft": models.get("draft"), "cond": cond}  # read by the proposer of this call
        try:
            return super().generate(models, prompts, config, generator, cond)
        finally:
            self._call = {}
