"""Big Little Decoder (BiLD): the small model writes, the large model steps in and rolls back.

Paper: Kim, Mangalam, Moon, Malik, Mahoney, Gholami, Keutzer, "Speculative Decoding with Big
Little Decoder", NeurIPS 2023 (arXiv 2302.07863); code ``kssteven418/BigLittleDecoder``.

* **Fallback.** The draft ("little") model decodes autoregressively while its confidence
  ``max_y p_S(y)`` stays at or above ``fallback_threshold`` (at most ``max_draft`` tokens); the
  first uncertain token is not kept: the target ("big") model writes that position.
* **Rollback.** The target scores all the little model's tokens in one forward. The first token
  ``x_i`` with ``-log p_L(x_i) > rollback_threshold`` that is also not the target's choice is
  rolled back (with everything after it), and the target's token is emitted there; otherwise the
  target's token follows the accepted run (the fallback token).

Guarantee: ``lossy`` (tokens within the rollback threshold stay even when the target would not
have chosen them). ``fallback_threshold=1`` is plain ``ar`` token for token (the little model
never writes); ``rollback_threshold=0`` keeps only tokens equal to the target's argmax (greedy-
identical to ``ar`` at T=0). At T > 0 a draft is kept if it passes the rollback test, else the
next token is drawn from the target's residual (draft token removed).
Defaults: ``fallback_threshold=0.5``, ``rollback_threshold=3.0`` (README: "normally 2-5"),
``max_draft=10``.
"""

from __future__ import annotations

import torch

from .acceptance import ExactChain
from .base import check_int, register_sampler
from .logits import chain_seen, context, sample
from .loops.chain import ChainSampler
from .lossy_common import check_float, first_false
from .proposers.base import ChainProposal, Proposer, Rollback
from .verify import rejection_sample


class LittleUntilUnsure(Proposer):
    """The little model's tokens while its confidence stays >= ``fallback_threshold``."""

    uses_draft = True

    def propose(self) -> ChainProposal:
        run, smp = self.run, self.sampler
        rows, proc, draft = run.rows, run.proc, run.draft
        act = run.target.active
        budget = [min(smp.max_draft, rows.remaining(r) - 1) for r in act]
        g = max(budget, default=0)
        if smp.fallback_threshold >= 1.0 or g <= 0:  # the big model writes every token
            return ChainProposal(tokens=[[] for _ in act])
        dev = draft.lm.device
        drafts = torch.zeros(len(act), g, dtype=torch.long, device=dev)
        live = torch.tensor(budget, dtype=torch.long, device=dev) > 0
        dlen = torch.zeros(len(act), dtype=torch.long, device=dev)
        qs = [] if not proc.greedy else None
        base_seen = context(proc, rows, act, self.vocab_size, dev)
        limit = torch.tensor(budget, dtype=torch.long, device=dev)
        start_x, used = None, 0
        for i in range(g):
            if i == 0:
                dlog = draft.feed_pending()
            else:
                if i == 1:
                    start_x = len(draft.cache)
                dlog, _, _ = draft.forward([[] for _ in act], clamp_positions=True, tail=drafts[:, i - 1 : i])
                dlog = dlog[:, 0]
            seen_i = None if base_seen is None else chain_seen(base_seen, drafts[:, :i])[:, -1]
            q = proc.probs(dlog, seen_i) if not proc.greedy else dlog.softmax(-1)
            conf = q.max(-1).values if proc.greedy else dlog.softmax(-1).max(-1).values
            x = q.argmax(-1) if proc.greedy else sample(q, self.generator)
            if qs is not None:
                qs.append(q)
            drafts[:, i] = x
            live = live & (conf >= smp.fallback_threshold) & (limit > i)
            dlen = dlen + live.long()
            used = i + 1
            if not bool(live.any()):  # every row fell back: the big model takes over (one sync per token)
                break
        g = used
        drafts = drafts[:, :g]
        q = torch.stack(qs, 1)[:, :g] if qs else None
        rollback = [Rollback(draft, start_x, g - 1)] if start_x is not None else []
        return ChainProposal(chain=drafts, lens=dlen.tolist(), q=q, rollback=rollback)


class RollbackRule(ExactChain):
    """Keep little-model tokens unless ``-log p_L(x) > rollback_threshold`` (and, at T=0, the
    target's argmax differs); the target's token follows the kept run."""

    def greedy(self, proc, chain, p_log, seen, dlen):
        y = proc.argmax(p_log, seen)
        g = chain.shape[1]
        if g == 0:
            return torch.zeros_like(dlen), y[:, 0], y
        logp = p_log[:, :g].float().log_softmax(-1).gather(-1, chain[..., None]).squeeze(-1)
        ok = (chain == y[:, :g]) | (-logp <= self.sampler.rollback_threshold)
        n = first_false(ok, dlen)
        return n, y.gather(1, n[:, None]).squeeze(1), y

    def sampled(self, chain, p, q, dlen, generator):
        g = chain.shape[1]
        if g == 0:
            return rejection_sample(chain, p, q, generator, dlen)
        px = p[:, :g].gather(-1, chain[..., None]).squeeze(-1)
        keep = (-px.clamp_min(1e-30).log() <= self.sampler.rollback_threshold).to(p.dtype)
        return rejection_sample(chain, p, q, generator, dlen, ratio=(keep, torch.ones_like(keep)))


@register_sampler(
    "bild",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model", "draft"),
    paper="Kim et al. 2023 (Big Little Decoder), arXiv 2302.07863",
)
class BigLittleDecoder(ChainSampler):
    """BiLD: the little model writes while confident; the big model verifies with a rollback threshold."""

    defaults = {"fallback_threshold": 0.5, "rollback_threshold": 3.0, "max_draft": 10}
    proposer = LittleUntilUnsure
    acceptance = RollbackRule
    reduces_to = ("ar", {"fallback_threshold": 1.0})

    def validate(self) -> None:
        check_float("fallback_threshold", self.fallback_threshold, 0.0, 1.0)
        check_float("rollback_threshold", self.rollback_threshold, 0.0)
        check_int("max_draft", self.max_draft)
