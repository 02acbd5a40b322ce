"""SpecDec / GAD++ relaxed verification: accept a draft token that is in the target's top-beta and
within tau (log-probability) of the target's best token.

Paper: Xia, Ge, Wang, Chen, Wei, Sui, "Speculative Decoding: Exploiting Speculative Execution for
Accelerating Seq2seq Generation" (Findings of EMNLP 2023; arXiv 2203.16487, first as Generalized
Aggressive Decoding, GAD). Drafts are the draft's whole hypothesis, as in ``gad``
(for ASR: a Paraformer / CTC hypothesis through :class:`~leapgen.models.asr_lm.NARDraftLM`).

At temperature 0 a drafted token at slot i is kept while it is among the target's ``top_beta``
tokens **and** ``log p(draft) >= log p(top1) - tau``; the first refused slot takes the target's
argmax. ``top_beta=1, tau=0`` is ``gad`` (greedy verification, identical to ``ar``; the
``reduces_to`` setting); larger values accept more drafts and may change the output, so the sampler declares
itself ``lossy``. Above temperature 0 verification is exact speculative sampling (no relaxation).
Defaults: ``top_beta=3``, ``tau=1.0`` (the paper's GAD++ regime), plus ``gad``'s
``num_draft_tokens=32`` and ``anchor_window=2``.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .acceptance import ExactChain
from .base import check_int, register_sampler
from .gad import GAD


class TopBetaTau(ExactChain):
    """Greedy verification relaxed to the target's top-beta within tau (SpecDec)."""

    def greedy(self, proc, chain, p_log, seen, dlen):
        beta, tau = int(self.sampler.top_beta), float(self.sampler.tau)
        logits = proc.penalize(p_log, seen)
        y = logits.argmax(-1)
        g = chain.shape[1]
        logp = logits[:, :g].float().log_softmax(-1)
        d_lp = logp.gather(-1, chain[..., None]).squeeze(-1)
        top_lp, top_i = logp.topk(min(beta, logp.shape[-1]), -1)
        in_top = (top_i == chain[..., None]).any(-1)
        ok = in_top & (d_lp >= top_lp[..., 0] - tau) & (torch.arange(g, device=chain.device)[None] < dlen[:, None])
        bad = torch.cat([~ok, torch.ones(ok.shape[0], 1, dtype=torch.bool, device=ok.device)], 1)  # sentinel
        n = bad.long().argmax(-1)
        nxt = y.gather(1, n[:, None]).squeeze(1)
        return n, nxt, y


@register_sampler("specdec", family="ar-speculative", guarantee="lossy", needs=("model", "draft"),
                  paper="Xia et al. 2023 (SpecDec / GAD)")
class SpecDec(GAD):
    """GAD's hypothesis draft with SpecDec's top-beta / tau relaxed acceptance (lossy)."""

    defaults = {**GAD.defaults, "top_beta": 3, "tau": 1.0}
    acceptance = TopBetaTau
    reduces_to = ("gad", {"top_beta": 1, "tau": 0.0})

    def validate(self) -> None:
        super().validate()
        check_int("top_beta", self.top_beta)
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or self.tau < 0:
            raise ConfigError(f"tau must be a number >= 0 (log-probability margin), got {self.tau!r}.")
