"""The chain loop: every sampler that verifies one chain of drafts per row and step.

Per step: the proposer proposes a chain per active row; ONE target forward runs over each row's
pending tokens followed by its chain (right-padded); the acceptance rule decides, batched on the
logits' device, how many drafts each row keeps and the token after them; the verdict (accepted
counts, next tokens, model-drawn drafts, the proposer's requested iterate) comes to the host in
ONE transfer; rows commit; the target cache and any proposer model cache keep exactly what was
accepted (``Runner.keep``: rows roll back independently); finished rows leave the batch.

``ar`` (no drafts), ``speculative`` / ``lantern`` (draft-model chains), ``prompt_lookup``
(n-gram copies), ``jacobi``, ``sjd`` and ``gsd`` (Jacobi iterates) all run here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..acceptance import ExactChain
from ..logits import chain_seen, context
from ..proposers.base import ChainProposal, Proposer, Verdict, valid_prefix
from ..runtime import DecodeRun, gather_positions
from .common import CHAIN_NEEDS, LoopSampler


class ChainSampler(LoopSampler):
    """A sampler run by the chain loop: a ``proposer`` class and an ``acceptance`` rule class."""

    acceptance: ClassVar[type[ExactChain]] = ExactChain
    loop_needs = CHAIN_NEEDS

    def make_rule(self, lm: Any) -> ExactChain:
        return self.acceptance(self, lm)

    @staticmethod
    def step(run: DecodeRun, proposer: Proposer, rule: ExactChain, gen: torch.Generator) -> None:
        chain_step(run, proposer, rule, gen)


def _materialise(prop: ChainProposal, vocab: int, device: torch.device) -> tuple[torch.Tensor, list[int], list[list[int]] | None]:
    """``(chain [B, g] on device, lens, host tokens or None)``; host drafts pass the valid-id rule."""
    if prop.tokens is None:
        return prop.chain, list(prop.lens), None
    drafts = [valid_prefix(d, vocab) for d in prop.tokens]
    lens = [len(d) for d in drafts]
    g = max(lens, default=0)
    chain = torch.tensor([d + [0] * (g - len(d)) for d in drafts], dtype=torch.long, device=device)
    return chain.reshape(len(drafts), g), lens, drafts


def chain_step(run: DecodeRun, proposer: Proposer, rule: ExactChain, gen: torch.Generator) -> None:
    rows, proc, target, stats = run.rows, run.proc, run.target, run.stats
    act = list(target.active)
    lm = target.lm
    prop = proposer.propose()
    chain, lens, host = _materialise(prop, lm.vocab_size, lm.device)
    g = chain.shape[1]
    pend = [target.pending(k) for k in range(len(act))]
    stats.drafted_tokens += sum(lens)
    logits, start, _ = target.forward(pend, tail=chain, tail_lens=lens)
    p_log = run.ban_eos(gather_positions(logits, [len(p) - 1 for p in pend], g + 1))  # min_new_tokens
    base = context(proc, rows, act, lm.vocab_size, p_log.device)  # bool mask, coded counts (penalties) or None
    seen = chain_seen(base, chain) if base is not None else None
    dlen = torch.tensor(lens, dtype=torch.long, device=p_log.device)
    n, nxt, y = rule(proc, chain, p_log, seen, prop.q, dlen, gen)
    it = proposer.iterate(y, n)
    # the one host transfer of the step: counts, next tokens, model drafts, requested iterate
    parts = [n[:, None], nxt[:, None]] + ([chain] if host is None else []) + ([it] if it is not None else [])
    flat = torch.cat([t.long() for t in parts], 1).tolist()
    n_l = [r[0] for r in flat]
    nxt_l = [r[1] for r in flat]
    if host is None:
        host = [r[2 : 2 + lens[k]] for k, r in enumerate(flat)]
    iterate = [r[len(r) - it.shape[1] :] for r in flat] if it is not None else None
    committed = [rows.commit(r, host[k][: n_l[k]] + [nxt_l[k]]) for k, r in enumerate(act)]
    stats.accepted_per_step.append(committed)
    stats.accepted_draft_tokens += sum(n_l)
    target.keep(start, [len(p) + c for p, c in zip(pend, n_l)])
    for rb in prop.rollback:
        rb.runner.keep(rb.start, [min(c, rb.cap) for c in n_l])
    proposer.update(Verdict(n=n_l, next=nxt_l, committed=committed, iterate=iterate, extra={"lens": lens}))
    run.step_done(max(committed))
