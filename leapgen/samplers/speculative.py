"""Speculative decoding with a draft model (a chain of drafts per step).

Paper: Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023; Chen et al., "Accelerating LLM Decoding with Speculative Sampling", 2023.

Each step the draft model proposes up to ``num_draft_tokens`` tokens autoregressively, the target
scores ``[last token, drafts]`` in one forward, and :mod:`leapgen.samplers.verify` accepts a
prefix: :func:`greedy_match` at temperature 0 (output identical to greedy ``ar``),
:func:`rejection_sample` above it (output distributed exactly as the target's processed
distribution). Both models see identical logits processing. A draft whose logits depend only on
the position (``CausalLM.position_indexed``: a NAR hypothesis as a draft) is read for the whole
chain in one call instead of one call per drafted token, with no prefill step; the drafts and
their distributions are the same. When such a draft also gives its hypothesis
(``position_tokens``), :class:`~leapgen.samplers.proposers.hypothesis.HypothesisReader`
re-aligns each row after the verifier inserted or dropped a token (``anchor_window``
positions either way; 0 turns it off) and, at temperature 0, reads greedy chains from host lists
computed once per decode.

Guarantee: ``distribution-exact`` (and greedy-exact at temperature 0).
Defaults: ``num_draft_tokens=5``, ``schedule="auto"``: ``"confidence"`` (stop a row's draft below
``confidence_threshold=0.4``, DISCO) for one sequence, ``"heuristic"`` (transformers' +2/-1 rule)
for a batch, the fastest of each in the text bench's schedule comparison; ``"constant"`` drafts
``num_draft_tokens`` every step; ``anchor_window=2`` (as ``gad``). Schedules and re-alignment
change speed only, never the output distribution.
"""

from __future__ import annotations

import torch

from .base import check_int, register_sampler
from .controllers import DraftLengthController
from .logits import chain_seen, context, sample
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer, Rollback, Verdict, check_same_vocab
from .proposers.hypothesis import HypothesisReader

__all__ = ["DraftChain", "Speculative", "check_same_vocab"]


class DraftChain(Proposer):
    """Up to ``num_draft_tokens`` tokens drawn autoregressively from the draft model (its argmax
    at temperature 0), on the draft's own cache, with the draft-length controller."""

    prefill = True
    uses_draft = True

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.ctrl = sampler.controller(len(run.target.active))
        # a position-indexed draft needs no root token: its first chain is verified with the prompt
        self.prefill = not run.draft.lm.position_indexed
        self.reader = None
        if run.draft.lm.position_indexed and not run.proc.uses_context:
            reader = HypothesisReader(run.draft, getattr(sampler, "anchor_window", 0),
                                      run.proc if run.proc.greedy else None)
            self.reader = reader if reader.available else None

    def propose(self) -> ChainProposal:
        run, ctrl, gen = self.run, self.ctrl, self.generator
        rows, proc, draft = run.rows, run.proc, run.draft
        act = run.target.active
        dev = draft.lm.device
        budget = [min(ctrl.budget(), rows.remaining(r) - 1) for r in act]
        if draft.lm.position_indexed and not proc.uses_context:
            return self._propose_block(budget)
        g = max(budget)
        drafts = torch.zeros(len(act), g, dtype=torch.long, device=dev)
        qs = [] if not proc.greedy else None
        dlen = torch.tensor(budget, dtype=torch.long, device=dev)
        base_seen = context(proc, rows, act, self.vocab_size, dev)
        start_x = None
        for i in range(g):
            if i == 0:
                dlog = draft.feed_pending()
            else:
                if i == 1:
                    start_x = len(draft.cache)
                # rows whose budget is spent draft junk past it; keep its positions in the window
                dlog, _, _ = draft.forward([[] for _ in act], clamp_positions=True, tail=drafts[:, i - 1 : i])
                dlog = dlog[:, 0]
            seen_i = None if base_seen is None else chain_seen(base_seen, drafts[:, :i])[:, -1]
            if proc.greedy:
                x = proc.argmax(dlog, seen_i)
                conf = dlog.softmax(-1).gather(-1, x[:, None]).squeeze(-1) if ctrl.threshold else None
            else:
                q = proc.probs(dlog, seen_i)
                x = sample(q, gen)
                qs.append(q)
                conf = q.gather(-1, x[:, None]).squeeze(-1) if ctrl.threshold else None
            drafts[:, i] = x
            if conf is not None:
                stop = (conf < ctrl.threshold) & (dlen > i + 1)
                dlen = torch.where(stop, torch.full_like(dlen, i + 1), dlen)
                # the confidence schedule decides on the host whether to draft on (its one sync per token)
                if bool((dlen <= i + 1).all()):
                    g = i + 1
                    drafts = drafts[:, :g]
                    break
        lens = dlen.tolist() if ctrl.threshold else budget
        q = torch.stack(qs, 1)[:, :g] if qs else None
        rollback = [Rollback(draft, start_x, g - 1)] if start_x is not None else []  # x_1..x_{g-1} were fed
        return ChainProposal(chain=drafts, lens=lens, q=q, rollback=rollback)

    def _propose_block(self, budget: list[int]) -> ChainProposal:
        """The chain of a position-indexed draft (``CausalLM.position_indexed``) in one call of
        :meth:`~leapgen.models.base.CausalLM.position_logits`: its logits at the next ``g``
        positions do not depend on the tokens, so nothing is fed and nothing rolls back. Same
        drafts, distributions and lengths as the token-by-token loop (the confidence schedule cuts
        each row after its first token below the threshold); at T > 0 the g draws come from one
        call of the generator instead of g."""
        run, ctrl, draft, proc = self.run, self.ctrl, self.run.draft, self.run.proc
        dev = draft.lm.device
        # the logits after a row's last token (position len - 1) predict its next token; with a
        # hypothesis on the host, rows are re-aligned and greedy chains are host slices
        first = [len(run.rows.tokens[r]) - 1 for r in draft.active]
        if self.reader is not None:
            first, budget = self.reader.positions(run.rows, draft.active, first, budget)
            if self.reader.table is not None:
                threshold = ctrl.threshold if ctrl.threshold else -1.0
                tokens = [self.reader.greedy_chain(r, f, b, threshold) for r, f, b in zip(draft.active, first, budget)]
                return ChainProposal(tokens=tokens, lens=[len(t) for t in tokens])
        g = max(budget)
        if g == 0:  # no room left for a draft: the target's own token only
            return ChainProposal(chain=torch.zeros(len(budget), 0, dtype=torch.long, device=dev), lens=budget)
        last = torch.tensor(first, dtype=torch.long, device=dev)
        pos = (last[:, None] + torch.arange(g, device=dev)[None]).clamp(0, draft.lm.max_length - 1)
        dlog = draft.lm.position_logits(draft.cache, pos)
        if proc.greedy:
            drafts, q = proc.argmax(dlog), None
            conf = dlog.softmax(-1).gather(-1, drafts[..., None]).squeeze(-1) if ctrl.threshold else None
        else:
            q = proc.probs(dlog)
            drafts = sample(q, self.generator)
            conf = q.gather(-1, drafts[..., None]).squeeze(-1) if ctrl.threshold else None
        lens = budget
        if conf is not None:
            low = conf < ctrl.threshold
            cut = torch.where(low.any(-1), low.int().argmax(-1) + 1, g)
            lens = torch.minimum(cut, torch.tensor(budget, device=dev)).tolist()  # the one sync
            g = max(lens)
            drafts = drafts[:, :g]
            q = q[:, :g] if q is not None else None
        return ChainProposal(chain=drafts, lens=lens, q=q)

    def update(self, verdict: Verdict) -> None:
        self.ctrl.observe(all(n >= d for n, d in zip(verdict.n, verdict.extra["lens"])))


@register_sampler(
    "speculative",
    family="ar-speculative",
    guarantee="distribution-exact",
    needs=("model", "draft"),
    paper="Leviathan et al. 2023; Chen et al. 2023",
)
class Speculative(ChainSampler):
    """Draft-model speculative decoding (chain), greedy-exact at T=0, distribution-exact above."""

    defaults = {"num_draft_tokens": 5, "schedule": "auto", "confidence_threshold": 0.4, "anchor_window": 2}
    proposer = DraftChain

    def validate(self) -> None:
        self.controller()  # raises on bad values
        check_int("anchor_window", self.anchor_window, low=0, hint=" (0 turns re-alignment off)")

    def controller(self, batch_size: int = 1) -> DraftLengthController:
        return DraftLengthController(
            self.schedule, self.num_draft_tokens, self.confidence_threshold, batch_size=batch_size
        )
