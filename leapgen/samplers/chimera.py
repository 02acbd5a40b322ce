"""Chimera: a light draft built on the target's own hidden states, verified exactly.

Paper: Zeng et al., "Chimera: A Lossless Decoding Method for Accelerating Large Language Models
Inference by Fusing all Tokens", arXiv 2402.15758.

The draft is not a separate model: after each target forward, the hidden state ``h_t`` that
produced the committed token ``x_{t+1}`` (the full-context encoder, for free), joined with a
trigram encoding of ``e(x_t), e(x_{t+1})``, goes through ``k`` small residual heads
(:class:`~leapgen.models.text_heads.ChimeraHeads`, trained by distillation with
``leapgen train text-code-heads``) whose states the target's own norm and lm head turn into the next
``k`` draft tokens (argmax). The target verifies them in its next forward with the exact chain rule
(greedy match at T=0, rejection sampling with one-hot q above), so the output is the target's.

Guarantee: ``distribution-exact`` (greedy-identical at T=0). Runs on the ``text-heads`` contract
(a :class:`~leapgen.models.text_heads.HeadedLM`). Defaults: ``num_draft_tokens=4`` (at most the
heads' ``k``). Draft cost: one call of the heads per step, a network other than the target, so
counted in ``stats.other_forwards`` (as every sampler's other networks are) and in
``stats.extra["head_calls"]``.
"""

from __future__ import annotations

import torch

from .base import check_int, register_sampler
from .loops.chain import ChainSampler
from .lossy_common import headed
from .proposers.base import ChainProposal, Proposer, Verdict


class HiddenStateHeads(Proposer):
    """Drafts from the Chimera heads on the hidden state of the last verification."""

    @classmethod
    def check(cls, sampler, models, config) -> None:
        headed(models, "chimera", sampler.name)

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.lm = run.target.lm
        self.k = min(sampler.num_draft_tokens, self.lm.heads.k)
        self.state: dict[int, torch.Tensor] = {}  # row -> h_t (the hidden that produced its last token)
        self.offsets: list[int] = []
        self.calls = 0

    def propose(self) -> ChainProposal:
        run = self.run
        act = run.target.active
        self.offsets = [len(run.target.pending(i)) - 1 for i in range(len(act))]
        lens = [min(self.k, run.rows.remaining(r) - 1) if r in self.state else 0 for r in act]
        g = max(lens, default=0)
        dev = self.lm.device
        if g <= 0:
            return ChainProposal(chain=torch.zeros(len(act), 0, dtype=torch.long, device=dev), lens=[0] * len(act))
        emb = self.lm.net.embed.weight
        zero = torch.zeros(self.lm.heads.dim, dtype=emb.dtype, device=dev)
        h = torch.stack([self.state.get(r, zero) for r in act])
        last = torch.tensor([run.rows.tokens[r][-1] for r in act], device=dev)
        prev = torch.tensor([run.rows.tokens[r][-2] if len(run.rows.tokens[r]) > 1 else 0 for r in act], device=dev)
        with torch.inference_mode():
            z = self.lm.heads.chimera(h, emb[prev], emb[last])[:, :g]  # [B, g, D]
            chain = self.lm.head_logits(z).argmax(-1)
        self.calls += 1
        return ChainProposal(chain=chain, lens=lens)

    def update(self, verdict: Verdict) -> None:
        hid = self.lm.last_hidden  # [B, L, D] of this step's forward
        idx = torch.tensor([o + n for o, n in zip(self.offsets, verdict.n)], device=hid.device)
        rows = hid[torch.arange(hid.shape[0], device=hid.device), idx.clamp_max(hid.shape[1] - 1)]
        for i, r in enumerate(self.run.target.active):
            self.state[r] = rows[i]

    def finish(self) -> None:
        self.run.stats.extra["head_calls"] = self.calls
        self.run.stats.other_forwards += self.calls


@register_sampler(
    "chimera",
    family="ar-speculative",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Zeng et al. 2024 (Chimera), arXiv 2402.15758",
    contracts=("text-heads",),
)
class Chimera(ChainSampler):
    """Chimera heads on the target's hidden states draft ``num_draft_tokens``; exact chain verification."""

    defaults = {"num_draft_tokens": 4}
    proposer = HiddenStateHeads

    def validate(self) -> None:
        check_int("num_draft_tokens", self.num_draft_tokens)
