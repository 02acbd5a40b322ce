"""Confidence scorers: how each proposal is ranked (higher = more certain, committed first).

``scorer(log_probs [A,K,L,V], proposal [A,K,L], state) -> [A,K,L]``. ``log_probs`` are the
log-probabilities of the distribution proposals were drawn from (temperature-scaled; raw when
greedy). Gumbel noise is drawn in float64 from the decode's ``torch.Generator``.

| name | confidence | source |
|---|---|---|
| ``prob`` | ``p(x)`` | LLaDA ``low_confidence``; Mask-Predict ``token_probs`` |
| ``logprob`` | ``log p(x)`` | |
| ``logprob_gumbel`` | ``log p(x) + choice_temperature * a(i) * Gumbel`` | MaskGIT (``a = 1 - (i+1)/T``); GenMol (``a = 1 - i/(T-1)``) |
| ``prob_gumbel`` | ``p(x) + choice_temperature * a(i) * Gumbel`` | MaskGCT (``a = t_i = 1 - i/T``) |
| ``margin`` | ``p(top1) - p(top2)`` | |
| ``neg_entropy`` | ``sum_v p log p`` | |
| ``random`` | ``U(0, 1)`` | LLaDA ``remasking="random"`` |

``noise_anneal`` picks ``a(i)`` for step i of T: ``maskgit`` ``1 - (i+1)/T`` (0 on the last
step), ``genmol`` ``1 - i/max(T-1, 1)`` (1 on the first, 0 on the last), ``maskgct``
``1 - i/T``, ``none`` 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...errors import ConfigError
from .parts import SCORERS, ConfidenceScorer, _finite
from .state import MaskedDecodeState

NOISE_ANNEALS = ("maskgit", "genmol", "maskgct", "none")


def noise_factor(state: MaskedDecodeState, mode: str) -> Tensor:
    """``a(i)`` per active row, float64 ``[A]``."""
    total = state.total.double()
    i = torch.full_like(total, float(state.step))
    if mode == "maskgit":
        a = 1.0 - (i + 1.0) / total
    elif mode == "genmol":
        a = 1.0 - i / (total - 1.0).clamp(min=1.0)
    elif mode == "maskgct":
        a = 1.0 - i / total
    else:
        a = torch.ones_like(total)
    return a.clamp(min=0.0)


def gumbel(shape: torch.Size, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """Standard Gumbel noise in float64."""
    u = torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
    tiny = torch.finfo(torch.float64).tiny
    return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-16)))


def _picked(log_probs: Tensor, proposal: Tensor) -> Tensor:
    return log_probs.gather(-1, proposal[..., None]).squeeze(-1).double()


@SCORERS.register("prob")
class Prob(ConfidenceScorer):
    """Probability of the proposed token."""

    def __call__(self, log_probs, proposal, state):
        return _picked(log_probs, proposal).exp()


@SCORERS.register("logprob")
class LogProb(ConfidenceScorer):
    """Log-probability of the proposed token."""

    def __call__(self, log_probs, proposal, state):
        return _picked(log_probs, proposal)


class _Noisy(ConfidenceScorer):
    default_anneal = "maskgit"

    def __init__(self, choice_temperature: float = 4.5, noise_anneal: str | None = None) -> None:
        self.choice_temperature = _finite(choice_temperature, "choice_temperature", low=0.0)
        mode = noise_anneal if noise_anneal is not None else self.default_anneal
        if mode not in NOISE_ANNEALS:
            raise ConfigError(f"noise_anneal must be one of {NOISE_ANNEALS}, got {noise_anneal!r}.")
        self.noise_anneal = mode

    def noise(self, base: Tensor, state: MaskedDecodeState) -> Tensor:
        if self.choice_temperature == 0.0:
            return base
        a = noise_factor(state, self.noise_anneal).to(base.device)
        g = gumbel(base.shape, state.generator, base.device)
        return base + self.choice_temperature * a.reshape(-1, *([1] * (base.dim() - 1))) * g


@SCORERS.register("logprob_gumbel")
class LogProbGumbel(_Noisy):
    """``log p(x) + choice_temperature * a(i) * Gumbel`` (MaskGIT, GenMol's ``randomness``)."""

    def __call__(self, log_probs, proposal, state):
        return self.noise(_picked(log_probs, proposal), state)


@SCORERS.register("prob_gumbel")
class ProbGumbel(_Noisy):
    """``p(x) + choice_temperature * a(i) * Gumbel`` (MaskGCT: noise on the probability)."""

    default_anneal = "maskgct"

    def __call__(self, log_probs, proposal, state):
        return self.noise(_picked(log_probs, proposal).exp(), state)


@SCORERS.register("margin")
class Margin(ConfidenceScorer):
    """``p(top1) - p(top2)`` of the distribution (independent of the sampled token)."""

    def __call__(self, log_probs, proposal, state):
        top = log_probs.topk(2, dim=-1).values.double().exp()
        return top[..., 0] - top[..., 1]


@SCORERS.register("neg_entropy")
class NegEntropy(ConfidenceScorer):
    """Negative entropy ``sum p log p`` (0 for a one-hot distribution)."""

    def __call__(self, log_probs, proposal, state):
        lp = log_probs.double()
        return torch.special.xlogy(lp.exp(), lp.exp()).sum(-1)


@SCORERS.register("random")
class Random(ConfidenceScorer):
    """Uniform random confidence (random unmasking order; MAR's order for continuous tokens)."""

    needs_log_probs = False

    def __call__(self, log_probs, proposal, state):
        out = state.logits  # [A, K, L, V or C]: one score per position of the grid
        return torch.rand(out.shape[:-1], dtype=torch.float64, generator=state.generator, device=out.device)
