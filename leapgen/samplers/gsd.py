"""Grouped Speculative Decoding (GSD): SJD with the acceptance test on a dynamic token group.

Paper: So et al., "Grouped Speculative Decoding for Autoregressive Image Generation", ICCV 2025
(junhyukso/GSD, ``scheduler/jacobi_iteration_lumina_mgpt.py``). Image tokens are redundant: many
different tokens at a position give nearly the same image, so testing a draft ``x`` alone
(``min(1, p(x)/q(x))``, SJD) rejects drafts the target finds as good as its own choices.

The proposer is :class:`~leapgen.samplers.sjd.SJD`'s, unchanged (window, ``init`` schemes, Jacobi
refresh of the drafts with their q), and so is the chain loop (residual ``norm(max(0, p - q))`` at
a rejection, per-row KV rollback). Only the acceptance rule differs (:class:`Grouped`). For a draft ``x`` at a window position with processed
target probabilities ``p`` and draft distribution ``q``:

1. rank the vocabulary by ``p`` (descending; the processed logits give the same order) and take
   the tokens at ranks ``[rank(x) - rank_window, rank(x) + rank_window)``;
2. keep ``v`` if ``|p(v) - p(x)| < prob_threshold`` and ``||e_v - e_x||^2 < dist_threshold``,
   with ``e`` the model's **input embeddings** (``CausalLM.embeddings()``, not the VQ codebook);
3. ``G(x)`` = the survivors plus ``x``; accept if ``u < min(1, p(G) / q(G))``.

All of it is batched over rows and window positions (one sort per position, gathers for the
``2 * rank_window`` candidates; no Python loop over the vocabulary).

Differences from the reference code, on purpose: the rank window is clipped at rank 0 (the
reference's slice is empty for ``rank(x) < 7`` and it falls back to the SJD ratio there); the
embedding filter applies to every token (the reference skips it above id 10000, a Chameleon
detail); and a draft the logits processor ruled out (``p(x) = 0``, e.g. outside top-k) is never
accepted, so GSD never emits a token top-k/top-p removed. At temperature 0 the loop is SJD's
deterministic Jacobi acceptance (greedy output; the group rule is a sampling-time rule).

Guarantee: ``lossy`` (the residual is SJD's, without a group correction, as in the reference).
``rank_window=0`` switches the relaxation off: ``G(x) = {x}`` and the output equals ``sjd`` token
for token under the same seed.
Defaults: ``rank_window=7``, ``prob_threshold=0.15``, ``dist_threshold=0.5`` (None: no embedding
filter), ``window=16``, ``init="random"`` (the reference runs GSD with random init).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import ConfigError
from ..models.base import CausalLM
from .acceptance import ExactChain
from .base import register_sampler
from .sjd import SJD
from .verify import rejection_sample


def group_acceptance(
    p: Tensor,
    q: Tensor,
    x: Tensor,
    rank_window: int,
    prob_threshold: float,
    embeddings: Tensor | None = None,
    dist_threshold: float | None = None,
) -> tuple[Tensor, Tensor]:
    """GSD's test, batched: ``(p(G), q(G))`` ``[B, g]`` for drafts ``x [B, g]`` with target
    ``p [B, >=g, V]`` and draft ``q [B, g, V]`` distributions. ``G(x)`` always contains ``x``;
    with ``rank_window=0`` the result is exactly ``(p(x), q(x))``. Drafts with ``p(x) = 0`` get
    ``p(G) = 0`` (never accepted)."""
    b, g = x.shape
    pp = p[:, :g]
    vocab = pp.shape[-1]
    px = pp.gather(-1, x[..., None]).squeeze(-1)
    qx = q.gather(-1, x[..., None]).squeeze(-1)
    if rank_window <= 0 or g == 0:
        return px + 0.0, qx + 0.0
    rank_window = min(rank_window, vocab)  # ranks further away than the vocabulary are all outside it
    order = torch.sort(pp, dim=-1, descending=True, stable=True).indices  # [B, g, V]
    rank = (order == x[..., None]).to(torch.uint8).argmax(-1)  # [B, g]
    pos = rank[..., None] + torch.arange(-rank_window, rank_window, device=p.device)  # [B, g, 2w]
    inside = (pos >= 0) & (pos < vocab)
    cand = order.gather(-1, pos.clamp(0, vocab - 1))
    pc, qc = pp.gather(-1, cand), q.gather(-1, cand)
    keep = inside & (cand != x[..., None]) & ((pc - px[..., None]).abs() < prob_threshold)
    if embeddings is not None and dist_threshold is not None and math.isfinite(dist_threshold):
        e = embeddings.to(p.device, torch.float32)
        d2 = (e[cand] - e[x][..., None, :]).pow(2).sum(-1)
        keep &= d2 < dist_threshold
    num = px + (pc * keep).sum(-1)
    den = qx + (qc * keep).sum(-1)
    return torch.where(px > 0, num, torch.zeros_like(num)), den


class Grouped(ExactChain):
    """GSD's rule: accept a draft on the target / draft mass of its dynamic token group; the
    input embeddings it groups by are fetched once per call (never kept on the sampler)."""

    def __init__(self, sampler, lm: CausalLM) -> None:
        super().__init__(sampler, lm)
        self.emb = None
        if "embeddings" in sampler.model_features():  # the distance filter is on
            sampler.check_features({"model": lm})  # a table with one row per output token, or a ConfigError
            self.emb = lm.embeddings().detach()

    def sampled(self, chain, p, q, dlen, generator):
        sm = self.sampler
        ratio = None
        if q is not None and chain.shape[1] > 0:
            dt = None if sm.dist_threshold is None else float(sm.dist_threshold)
            ratio = group_acceptance(p, q, chain, sm.rank_window, float(sm.prob_threshold), self.emb, dt)
        return rejection_sample(chain, p, q, generator, dlen, ratio=ratio)


@register_sampler(
    "gsd",
    family="ar-parallel",
    guarantee="lossy",
    needs=("model",),
    paper="So et al. 2025 (GSD, ICCV)",
)
class GSD(SJD):
    """Grouped Speculative Decoding: SJD accepting a draft on the mass of its dynamic token group."""

    defaults = {**SJD.defaults, "rank_window": 7, "prob_threshold": 0.15, "dist_threshold": 0.5}
    acceptance = Grouped
    reduces_to = ("sjd", {"rank_window": 0})
    feature_hints = {"embeddings": "pass dist_threshold=None to group by logit rank and probability only"}

    def model_features(self) -> tuple[str, ...]:
        """The input embeddings, while the embedding-distance filter is on."""
        dt = self.dist_threshold
        return ("embeddings",) if self.rank_window and dt is not None and math.isfinite(dt) else ()

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.rank_window, int) or isinstance(self.rank_window, bool) or self.rank_window < 0:
            raise ConfigError(
                f"rank_window must be an integer >= 0 (0 switches the grouping off), got {self.rank_window!r}."
            )
        pt = self.prob_threshold
        if isinstance(pt, bool) or not isinstance(pt, (int, float)) or not (0.0 <= pt <= 1.0):
            raise ConfigError(f"prob_threshold must be a number in [0, 1], got {pt!r}.")
        dt = self.dist_threshold
        if dt is not None and (isinstance(dt, bool) or not isinstance(dt, (int, float)) or math.isnan(dt) or dt <= 0):
            raise ConfigError(
                f"dist_threshold must be a number > 0 (squared embedding distance; inf or None disables the "
                f"embedding filter), got {dt!r}."
            )
