"""Judge decoding: a small trained judge accepts good draft tokens the exact rule rejects.

Paper: Bachmann et al., "Judge Decoding: Faster Speculative Sampling Requires Going Beyond Model
Alignment", ICLR 2025 (arXiv 2501.19309).

The draft model proposes a chain as in ``speculative``; the target scores it in one forward. A
draft token ``x_i`` is kept if the exact rule keeps it (greedy match at T=0, rejection sampling
above) **or** the judge head says it is good: ``sigmoid(w . [h_{i-1}, e(x_i)] + b) > threshold``,
with ``h_{i-1}`` the target's final hidden state before the token and ``e(x_i)`` the target's
embedding of it (:class:`~leapgen.models.text_heads.JudgeHead`, trained by
``leapgen train text-code-heads`` on drafts labelled by the corpus). The chain stops at the first
position both reject, where the target's token (its argmax, or a draw from the residual) follows.

Guarantee: ``lossy`` (the judge accepts tokens the target would not have produced); the quality
loss is what ``leapgen bench text-lossy`` measures. ``threshold=1`` disables the judge: the
sampler is then ``speculative`` token for token. Defaults: ``threshold=0.5``,
``num_draft_tokens=8``, ``schedule="constant"``. Runs on the ``text-heads`` contract.
"""

from __future__ import annotations

import torch

from .acceptance import ExactChain
from .base import register_sampler
from .controllers import DraftLengthController
from .loops.chain import ChainSampler
from .lossy_common import check_float, first_false, headed
from .speculative import DraftChain
from .verify import rejection_sample


class DraftChainForJudge(DraftChain):
    """The draft model's chain; records where each row's drafts sit in the target forward."""

    @classmethod
    def check(cls, sampler, models, config) -> None:
        super().check(sampler, models, config)
        headed(models, "judge", sampler.name)

    def propose(self):
        tgt = self.run.target
        tgt.lm.judge_offsets = [len(tgt.pending(i)) - 1 for i in range(len(tgt.active))]
        return super().propose()


class JudgeRule(ExactChain):
    """Exact chain acceptance OR the judge head's verdict."""

    def __init__(self, sampler, lm) -> None:
        super().__init__(sampler, lm)
        self.lm = lm
        self.judged = 0

    def judge_ok(self, chain: torch.Tensor) -> torch.Tensor:
        """``[B, g]`` bool: the judge accepts draft i (from the hidden before it and its embedding)."""
        lm, g = self.lm, chain.shape[1]
        thr = self.sampler.threshold
        if thr >= 1.0 or g == 0:
            return torch.zeros_like(chain, dtype=torch.bool)
        hid = lm.last_hidden
        off = torch.tensor(lm.judge_offsets, device=hid.device)
        idx = (off[:, None] + torch.arange(g, device=hid.device)[None]).clamp_max(hid.shape[1] - 1)
        h_prev = hid.gather(1, idx[..., None].expand(-1, -1, hid.shape[-1]))
        e = lm.net.embed.weight[chain]
        with torch.inference_mode():
            score = torch.sigmoid(lm.heads.judge(h_prev, e).float())
        return score > thr

    def greedy(self, proc, chain, p_log, seen, dlen):
        y = proc.argmax(p_log, seen)
        g = chain.shape[1]
        ok = (chain == y[:, :g]) | self.judge_ok(chain)
        n = first_false(ok, dlen)
        return n, y.gather(1, n[:, None]).squeeze(1), y

    def sampled(self, chain, p, q, dlen, generator):
        g = chain.shape[1]
        if g == 0:
            return rejection_sample(chain, p, q, generator, dlen)
        px = p[:, :g].gather(-1, chain[..., None]).squeeze(-1)
        qx = torch.ones_like(px) if q is None else q.gather(-1, chain[..., None]).squeeze(-1)
        num = torch.where(self.judge_ok(chain), qx, px)  # the judge's yes passes u * q < q
        return rejection_sample(chain, p, q, generator, dlen, ratio=(num, qx))


@register_sampler(
    "judge",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model", "draft"),
    paper="Bachmann et al. 2025 (Judge Decoding), arXiv 2501.19309",
    contracts=("text-heads",),
)
class JudgeDecoding(ChainSampler):
    """Draft-model chains accepted by the exact rule or the trained judge head."""

    defaults = {"threshold": 0.5, "num_draft_tokens": 8, "schedule": "constant", "confidence_threshold": 0.4}
    proposer = DraftChainForJudge
    acceptance = JudgeRule

    def check_models(self, models) -> None:
        """The target is a ``text-heads`` model (a HeadedLM with the judge head), the draft any
        ``causal`` model."""
        from ..errors import ConfigError, ModelMismatchError, a_type
        from .base import model_contract, samplers_for

        missing = [n for n in self.needs if models.get(n) is None]
        if missing:
            raise ConfigError(f"sampler {self.name!r} needs model(s) {missing}, but none was given: the target "
                              "as a HeadedLM ('model') and a draft model ('draft').")
        for role, want in (("model", "text-heads"), ("draft", "causal")):
            got = model_contract(models[role])
            if got != want:
                raise ModelMismatchError(
                    f"sampler {self.name!r} runs on a {want} {role!r} (text-heads target + causal draft), but "
                    f"{role!r} is {a_type(models[role])} ({got or 'no contract'} model). Samplers that run "
                    f"on {got} models: {', '.join(samplers_for(got)) if got else 'none'}."
                )

    def validate(self) -> None:
        check_float("threshold", self.threshold, 0.0, 1.0)
        self.controller()

    def controller(self, batch_size: int = 1) -> DraftLengthController:
        return DraftLengthController(self.schedule, self.num_draft_tokens, self.confidence_threshold, batch_size=batch_size)
