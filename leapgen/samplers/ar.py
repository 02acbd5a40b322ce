"""Plain autoregressive decoding: the baseline every other sampler is measured against.

Paper: none (the standard KV-cached decode loop). Guarantee: it *is* the reference, so it is
trivially ``distribution-exact`` (sampling) and defines greedy decoding at temperature 0.
Defaults: no parameters. One target forward per new token; batch rows finish independently.
It is the chain loop with a proposer that never guesses.
"""

from __future__ import annotations

from .base import register_sampler
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer


class NoDraft(Proposer):
    """Proposes nothing: every step is one target token per row."""

    drafts = False

    def propose(self) -> ChainProposal:
        return ChainProposal(tokens=[[] for _ in self.run.target.active])


@register_sampler("ar", family="baseline", guarantee="distribution-exact", needs=("model",), paper="-")
class AutoRegressive(ChainSampler):
    """KV-cached autoregressive decoding, greedy or sampled: one target forward per token."""

    defaults: dict = {}
    proposer = NoDraft
