"""LANTERN / LANTERN++: relaxed speculative decoding with latent-proximity acceptance.

Papers: Jang et al., "LANTERN: Accelerating Visual Autoregressive Models with Relaxed
Speculative Decoding", ICLR 2025; Park et al., "LANTERN++: Enhancing Relaxed Speculative Decoding
with Static Tree Drafting for Visual Auto-regressive Models", ICLR 2025 SCOPE workshop
(jadohu/LANTERN, ``models/ea_model_llamagen.py::evaluate_posterior*``,
``entrypoints/generate_codebook.py``).

Image AR models spread probability over many interchangeable tokens, so exact speculative
sampling rejects drafts that are as good as the target's own choice ("token selection
ambiguity"). LANTERN lets a draft token ``x`` borrow the probability of its nearest neighbours in
the tokenizer's latent space. This sampler is ``speculative``'s proposer (a draft model's chain) on the
chain loop (one target forward verifies it, per-row KV rollback) with the acceptance rule swapped
for :class:`Relaxed` (which also runs inside SJD: ``tests/test_image_samplers.py``):

* **Proximity sets.** ``B_k(x)`` = the ``k`` nearest other tokens of ``x`` by Euclidean distance
  between the raw ``CausalLM.token_latents()`` vectors (the VQ codebook of an image model, as
  the reference's ``cdist`` on ``quantize.embedding.weight``; self excluded). The neighbour
  table ``[V, k]`` is computed once per set of latents and memoised on the model adapter, keyed
  by a fingerprint of its latents (:func:`neighbour_table`); the sampler keeps nothing.
* **Relaxed probability.** With ``c_m`` the target mass of the first ``m`` neighbours, take the
  largest ``m`` with ``c_m <= delta`` (LANTERN) or ``c_m <= (lam - 1) p(x)`` (``rule="lantern++"``)
  and ``p~(x) = p(x) + c_m`` (:func:`relax`).
* **Acceptance.** ``u < min(1, p~(x) / q(x))`` with ``q`` the draft model's processed
  distribution (the reference's static-tree / chain mode; the dynamic-tree mode sets q(x) = 1).
* **Residual.** What is implemented: at a rejection the token is drawn from
  ``norm(max(0, p~_x - q))`` where ``p~_x`` is the *relaxed distribution* of the rejected draft:
  ``p`` with the merged neighbours' mass moved onto ``x`` (merged neighbours at 0, ``x`` at
  ``p~(x)``, which is below ``q(x)`` after a rejection). So the merged neighbours are removed from
  the residual, as the reference's dynamic-tree mode does (it zeroes ``p`` on the proximity set);
  the reference's static-tree mode instead zeroes ``q`` on the ``k+1`` nearest neighbours, which
  would keep them in the residual at full target mass - we follow the relaxed-target reading.
  Each verification is therefore an exact speculative step against ``p~_x``.
* **Greedy (temperature 0).** As in the reference: ``x`` is accepted when it is the target's
  argmax or when ``p~(x)`` (computed on ``softmax`` of the raw logits) beats every other token.

Guarantee: ``bounded``: at every verification the relaxed distribution ``p~_x`` is within total
variation ``c_m <= delta`` of the target's processed distribution ``p`` (LANTERN rule), or
satisfies ``p~(x) <= lam * p(x)`` (LANTERN++ rule). This is a per-step bound on the distribution
the draft is tested against, as in the paper; it does not bound the whole sequence's
distribution. ``delta=0`` gives ``speculative`` token for token (same seed).
Defaults: ``k=1000`` (capped at V-1), ``delta=0.1``, ``rule="lantern"``, ``lam=5.0`` (LANTERN++
experiments use k=10, lam=5), ``schedule="constant"`` (image drafts are rarely confident, so
``speculative``'s confidence stop would cut them short), plus ``speculative``'s
``num_draft_tokens=5`` and ``confidence_threshold``.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor

from ..errors import ConfigError
from ..models.base import CausalLM
from .acceptance import ExactChain
from .base import register_sampler
from .guarantees import StepBound, report_verification
from .logits import LogitsProcessor
from .speculative import Speculative
from .verify import greedy_match, rejection_sample

logger = logging.getLogger(__name__)

RULES = ("lantern", "lantern++")
#: attribute of a model adapter holding its memoised neighbour tables ({(fingerprint, k): table})
_MEMO = "_lantern_neighbours"


def latent_neighbours(latents: Tensor, k: int, chunk: int = 1024) -> Tensor:
    """``[V, k]`` int32: every token's ``k`` nearest other tokens by Euclidean distance of the raw
    latent vectors, nearest first (self excluded; ``k <= V - 1``). Computed in row chunks so a
    16384-token codebook never needs a V x V matrix."""
    e = latents.detach().to(torch.float32)
    v = e.shape[0]
    if not 1 <= k <= v - 1:
        raise ConfigError(f"k must be in [1, V-1] = [1, {v - 1}] for {v} tokens, got {k}.")
    out = torch.empty(v, k, dtype=torch.int32, device=e.device)
    for s in range(0, v, chunk):
        d = torch.cdist(e[s : s + chunk], e)
        rows = torch.arange(s, min(s + chunk, v), device=e.device)
        d[rows - s, rows] = float("inf")
        out[s : s + chunk] = torch.topk(d, k, dim=-1, largest=False, sorted=True).indices.to(torch.int32)
    return out


def neighbour_table(lm: CausalLM, k: int) -> Tensor:
    """:func:`latent_neighbours` of ``lm.token_latents()``, memoised on the adapter ``lm`` keyed by
    a fingerprint of the latent values and k (new latents, e.g. after loading other weights,
    give a new table; the sampler itself keeps nothing between calls)."""
    lat = lm.token_latents()
    if lat is None:
        raise ConfigError(
            f"lantern needs latent vectors for its proximity sets, but {type(lm).__name__}.token_latents() "
            "returns None; use a model that exposes its VQ codebook (or input embeddings)."
        )
    if lat.dim() != 2 or lat.shape[0] < lm.vocab_size:
        raise ConfigError(
            f"token_latents() must be [V, d] with one row per output token (V = {lm.vocab_size}), "
            f"got shape {tuple(lat.shape)}."
        )
    lat = lat.detach()[: lm.vocab_size]
    lat64 = lat.to(torch.float64)
    w = torch.arange(1, lat.numel() + 1, dtype=torch.float64, device=lat.device).reshape(lat.shape)
    sums = torch.stack([lat64.sum(), (lat64 * w).sum(), lat64.pow(2).sum()]).tolist()
    key = (tuple(lat.shape), *sums, int(k), str(lat.device))
    memo = lm.__dict__.setdefault(_MEMO, {})
    table = memo.get(key)
    if table is None:
        logger.info("lantern: computing the %d-nearest latent neighbours of %d tokens", k, lat.shape[0])
        memo.clear()  # one table per adapter: the latents it has now
        table = memo[key] = latent_neighbours(lat64, k)
    return table


def relax(
    p: Tensor, x: Tensor, neighbours: Tensor, delta: float, rule: str = "lantern", lam: float = 5.0
) -> tuple[Tensor, Tensor]:
    """LANTERN's relaxation, batched: ``(p~(x) [...], p~_x [..., V])`` for draft tokens
    ``x [...]`` with target distributions ``p [..., V]`` and the neighbour table ``[V, k]``.

    ``p~(x) = p(x) + c_m`` with ``c_m`` the mass of x's first m neighbours, m the largest with
    ``c_m <= delta`` (``rule="lantern"``) or ``c_m <= (lam - 1) p(x)`` (``"lantern++"``);
    ``p~_x`` is ``p`` with those neighbours' mass moved onto x, so ``TV(p~_x, p) = c_m``."""
    nb = neighbours[x].long()  # [..., k]
    c = p.gather(-1, nb).cumsum(-1)
    px = p.gather(-1, x[..., None]).squeeze(-1)
    limit = (lam - 1.0) * px[..., None] if rule == "lantern++" else torch.full_like(px[..., None], float(delta))
    m = (c <= limit).long().cumprod(-1).sum(-1)  # leading neighbours within the bound
    cm = torch.where(m > 0, c.gather(-1, (m - 1).clamp_min(0)[..., None]).squeeze(-1), torch.zeros_like(px))
    merged = torch.arange(nb.shape[-1], device=p.device) < m[..., None]
    relaxed = p.scatter(-1, nb, p.gather(-1, nb).masked_fill(merged, 0.0))
    relaxed = relaxed.scatter(-1, x[..., None], (px + cm)[..., None])
    return px + cm, relaxed


class Relaxed(ExactChain):
    """LANTERN's rule: a draft is tested against its latent neighbourhood's target mass
    (:func:`relax`); the neighbour table is fetched once per call from the model adapter. Any
    chain proposer can use it (a sampler class providing ``k``, ``delta``, ``rule``, ``lam``)."""

    def __init__(self, sampler, lm: CausalLM) -> None:
        super().__init__(sampler, lm)
        k = min(sampler.k, lm.vocab_size - 1)
        if k < 1:
            raise ConfigError("lantern needs a vocabulary of at least 2 tokens.")
        self.nb = neighbour_table(lm, k)
        self.args = (float(sampler.delta), sampler.rule, float(sampler.lam))

    def greedy(self, proc: LogitsProcessor, chain, p_log, seen, dlen):
        g = chain.shape[1]
        y = proc.argmax(p_log, seen)  # [B, g+1]
        if g == 0:
            return (*greedy_match(chain, y, dlen), y)
        p = proc.process(p_log[:, :g], None if seen is None else seen[:, :g]).softmax(-1)
        pt, relaxed = relax(p, chain, self.nb.to(p.device), *self.args)
        report_verification(p, relaxed, chain)
        wins = (relaxed.argmax(-1) == chain) & (pt > p.gather(-1, chain[..., None]).squeeze(-1))
        wins &= torch.arange(g, device=p.device)[None] < dlen[:, None]
        y = torch.cat([torch.where(wins, chain, y[:, :g]), y[:, g:]], 1)
        return (*greedy_match(chain, y, dlen), y)

    def sampled(self, chain, p, q, dlen, generator):
        g = chain.shape[1]
        if g == 0:
            return rejection_sample(chain, p, q, generator, dlen)
        pt, relaxed = relax(p[:, :g], chain, self.nb.to(p.device), *self.args)
        report_verification(p[:, :g], relaxed, chain)
        qx = torch.ones_like(pt) if q is None else q.gather(-1, chain[..., None]).squeeze(-1)
        return rejection_sample(chain, p, q, generator, dlen, ratio=(pt, qx), residual_base=relaxed)


@register_sampler(
    "lantern",
    family="ar-speculative",
    guarantee="bounded",
    needs=("model", "draft"),
    paper="Jang et al. 2025 (LANTERN, ICLR); LANTERN++",
)
class Lantern(Speculative):
    """Relaxed speculative decoding: a draft is tested against its latent neighbourhood's mass (TV <= delta)."""

    # image drafts are rarely confident (flat token distributions), so no confidence stop by default
    defaults = {**Speculative.defaults, "schedule": "constant", "k": 1000, "delta": 0.1, "rule": "lantern", "lam": 5.0}
    acceptance = Relaxed
    reduces_to = ("speculative", {"delta": 0.0, "schedule": "auto"})  # speculative with its default schedule
    feature_hints = {"token_latents": "its proximity sets need a model with a VQ codebook or an input embedding table"}

    def model_features(self) -> tuple[str, ...]:
        return ("token_latents",)

    def step_bound(self) -> StepBound:
        """``TV(p~_x, p) <= delta`` (LANTERN) or ``p~(x) <= lam p(x)`` (LANTERN++) at every verification."""
        return StepBound(ratio=float(self.lam)) if self.rule == "lantern++" else StepBound(tv=float(self.delta))

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ConfigError(f"k (proximity-set size) must be an integer >= 1, got {self.k!r}.")
        d = self.delta
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not (0.0 <= d <= 1.0):
            raise ConfigError(f"delta (total-variation bound) must be a number in [0, 1], got {d!r}.")
        if self.rule not in RULES:
            raise ConfigError(f"rule must be one of {RULES}, got {self.rule!r}.")
        lam = self.lam
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not (math.isfinite(lam) and lam >= 1.0):
            raise ConfigError(f"lam (LANTERN++ bound p~(x) <= lam p(x)) must be a finite number >= 1, got {lam!r}.")
