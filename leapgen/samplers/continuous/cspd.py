"""``cspd``: continuous speculative decoding for MAR (a small MAR drafts, the target verifies).

Paper: "Continuous Speculative Decoding for Autoregressive Image Generation" (CSpD, arXiv
2411.11925; code ``MarkXCloud/CSpD``, ``spec_decode/spec_decode_runner.py``).

Algorithm (one call; rows advance independently):

1. **Denoising-trajectory alignment**: one noise bank per position (the head's initial noise and
   one vector per denoising step) is drawn once and given to the draft *and* the target.
2. **Token pre-filling**: the first ``round(prefill_ratio * num_iter)`` MAR steps run on the
   target alone (early steps accept poorly).
3. The **draft** runs ``num_draft`` MAR steps (same random order, cosine schedule, linear CFG and
   temperature as the target would use). Every drafted token ``x`` comes with the Gaussian of its
   last denoising step, ``N(mu_q, sigma_q^2 I)``.
4. The **target makes one forward** over all drafted steps: the rows are repeated once per drafted
   step ``j`` with the positions of steps ``< j`` visible (one batched call, counted once), so
   every drafted token is verified in exactly the context in which the target alone would have
   generated it. The target's head then runs its own trajectory from the same noises, giving
   ``N(mu_p, sigma_p^2 I)`` for the last step.
5. **Acceptance** per token: ``U < p(x) / q(x)`` with the ratio of the two Gaussians, sigma
   correction included: ``log r = (|x - mu_q|^2 / 2 sigma_q^2 - |x - mu_p|^2 / 2 sigma_p^2) /
   inner_temperature + D (log sigma_q - log sigma_p)``. Per row, the first step with a rejected
   token ends the round: its accepted tokens stay, its rejected tokens are resampled from the
   residual, the later drafted steps are dropped (they were conditioned on replaced tokens).
6. **Residual** ``norm(max(0, p - q))`` by acceptance-rejection with the target as proposal and
   bound 1 (``max(0, p - q) <= p``): draw ``x' ~ N(mu_p, sigma_p^2)`` (fresh last-step noise),
   keep it with probability ``max(0, 1 - q(x')/p(x'))``; at most ``max_residual_tries`` draws
   (reference: 100). **Fallback** when every try fails: the last target draw ``x'`` (a sample of
   ``p`` instead of the residual; counted in ``stats.extra["residual_fallbacks"]``; the chance is
   ``(1 - TV(p, q))^tries``, about 0 unless ``p`` and ``q`` nearly coincide, and then the
   rejection that led here was itself rare).

Guarantee: **distribution-exact** with ``inner_temperature=1`` (the default) against ``mar`` on
the target at the same ``num_iter``, CFG schedule, temperature and head steps, up to the residual
fallback. Why the last-step Gaussians suffice for a multi-step head: given the shared noises of
the earlier denoising steps, each model's token *is* Gaussian, ``N(mu_q, sigma_q)`` and
``N(mu_p, sigma_p)``; speculative sampling with these conditionals returns a sample of the
target's conditional, and the shared noises have the same law under both models, so the
marginal is the target's. The reference's ``inner_temperature=42`` divides the exponent for a
higher acceptance and is **lossy**. With ``temperature=0`` heads are deterministic: a drafted
token is accepted when it equals the target's (to 1e-5) and replaced by it otherwise.

Defaults: ``num_iter=16``, ``num_draft=4`` (reference 8 of 64 steps), ``prefill_ratio=0.15``,
``inner_temperature=1.0``, ``max_residual_tries=100`` (at most :data:`MAX_RESIDUAL_TRIES`),
``cfg_schedule="linear"``, ``head_steps=None``.
Statistics: ``target_forwards`` (prefill steps + one per verification), ``draft_forwards``,
``drafted_tokens`` / ``accepted_draft_tokens``, ``baseline_steps = N``.
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import DecodeConfig, Sampler, new_stats, register_sampler
from ..refusals import NO_FILTERS
from .common import (
    ContinuousDecodeResult,
    cfg_per_step,
    check_condition,
    check_head_params,
    cosine_counts,
    head_steps_of,
    mar_step,
    noise_bank,
    random_orders,
    step_of_position,
)
from .mar import finish

#: the most residual draws per rejected token (reference: 100); the draws are one ``[M, tries, D]`` batch
MAX_RESIDUAL_TRIES = 10_000


def log_ratio(x: Tensor, mu_p: Tensor, sig_p: Tensor, mu_q: Tensor, sig_q: Tensor, inner_temperature: float = 1.0) -> Tensor:
    """``log p(x)/q(x)`` of isotropic Gaussians per row (``x, mu [M, D]``, ``sigma [M]``), the
    quadratic part divided by ``inner_temperature`` (1 = the exact ratio)."""
    d = x.shape[-1]
    sp, sq = sig_p.clamp_min(1e-12)[:, None], sig_q.clamp_min(1e-12)[:, None]
    quad = (((x - mu_q) / sq) ** 2 - ((x - mu_p) / sp) ** 2).sum(-1) / 2
    return quad / inner_temperature + d * (torch.log(sq[:, 0]) - torch.log(sp[:, 0]))


def sample_residual(mu_p: Tensor, sig_p: Tensor, mu_q: Tensor, sig_q: Tensor, generator: torch.Generator | None,
                    max_tries: int, inner_temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Draws of ``norm(max(0, p - q))`` per row by acceptance-rejection with proposal ``p`` (bound 1).
    Returns ``(x [M, D], fell_back [M])``: rows where all ``max_tries`` failed get the last ``p`` draw."""
    m, d = mu_p.shape
    eps = torch.randn((m, max_tries, d), generator=generator, device=mu_p.device)
    x = mu_p[:, None] + sig_p[:, None, None] * eps
    lr = log_ratio(x.reshape(-1, d), mu_p.repeat_interleave(max_tries, 0), sig_p.repeat_interleave(max_tries, 0),
                   mu_q.repeat_interleave(max_tries, 0), sig_q.repeat_interleave(max_tries, 0),
                   inner_temperature).view(m, max_tries)
    keep_p = (1 - torch.exp(-lr)).clamp(min=0)  # max(0, 1 - q/p)
    u = torch.rand((m, max_tries), generator=generator, device=mu_p.device)
    ok = u < keep_p
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((m,), max_tries - 1, device=mu_p.device))
    return x[torch.arange(m, device=mu_p.device), first], ~ok.any(1)


@register_sampler("cspd", family="continuous", guarantee="distribution-exact", needs=("model", "draft"),
                  paper="CSpD, arXiv 2411.11925 (continuous speculative decoding)", contracts=("mar",))
class CSpD(Sampler):
    """Continuous speculative decoding: aligned noises, target pre-filling, one verification pass, Gaussian ratio acceptance."""

    ignores: ClassVar[dict[str, str]] = dict.fromkeys(
        ("top_k", "top_p", "min_p"), NO_FILTERS + ": the diffusion heads sample continuous tokens (temperature scales their noise)")
    defaults: ClassVar[dict[str, Any]] = {
        "num_iter": 16, "num_draft": 4, "prefill_ratio": 0.15, "inner_temperature": 1.0,
        "max_residual_tries": 100, "cfg_schedule": "linear", "head_steps": None,
    }
    limits: ClassVar[dict[str, tuple[float, str]]] = {
        "max_residual_tries": (MAX_RESIDUAL_TRIES, "the residual draws are one [tokens, tries, dim] batch; 10**9 asked "
                                                   "for tens of GB"),
    }

    def validate(self) -> None:
        check_head_params(self.num_iter, self.head_steps, self.cfg_schedule)
        for name in ("num_draft", "max_residual_tries"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}.")
        p = self.prefill_ratio
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ConfigError(f"prefill_ratio must be a number in [0, 1] (reference 0.15), got {p!r}.")
        t = self.inner_temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (t >= 1 and math.isfinite(t)):
            raise ConfigError(f"inner_temperature must be a finite number >= 1 (1 = exact, reference 42), got {t!r}.")

    @torch.no_grad()
    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> ContinuousDecodeResult:
        self.check_models(models)
        target, draft = models["model"], models["draft"]
        target.check_compatible(draft)
        t0 = time.perf_counter()
        b, n, d = len(prompts), target.seq_len, target.token_dim
        cond, cfg = check_condition(cond, b)
        dev, temp = target.device, float(config.temperature)
        counts = cosine_counts(n, self.num_iter)
        k = head_steps_of(target, self.head_steps)
        order = random_orders(b, n, generator, dev)
        bank = noise_bank(b, n, k, d, generator, dev)
        step_of = step_of_position(order, counts)
        cfgs = torch.tensor(cfg_per_step(counts, cfg, self.cfg_schedule), device=dev)
        stats = new_stats(self, b)
        stats.extra.update(residual_fallbacks=0, residual_draws=0, num_iter=self.num_iter)
        values = torch.zeros((b, n, d), device=dev)
        known = torch.zeros((b, n), dtype=torch.bool, device=dev)
        token_steps = torch.zeros((b, n), dtype=torch.long, device=dev)
        t_start, d_start = target.forwards, draft.forwards
        forward_idx = 0

        def callback() -> None:
            if config.step_callback is not None:
                config.step_callback(forward_idx, stats)

        # 2. pre-filling: the first steps on the target alone
        prefill = min(self.num_iter, round(self.prefill_ratio * self.num_iter))
        for s in range(prefill):
            commit = step_of == s
            tok, _, _ = mar_step(target, values, known, commit, cond, bank, cfgs[s].expand(b, n), temp, k)
            values[commit] = tok
            known |= commit
            token_steps[commit] = forward_idx
            stats.accepted_per_step.append([counts[s]] * b)
            forward_idx += 1
            callback()
        nxt = torch.full((b,), prefill, dtype=torch.long, device=dev)
        while bool((nxt < self.num_iter).any()):
            act = (nxt < self.num_iter).nonzero().squeeze(1)
            a = act.numel()
            sa, so, bk = nxt[act], step_of[act], bank[act]
            vals, kn = values[act].clone(), known[act].clone()
            cnd = cond.select_rows(act) if cond is not None else None
            mu_q, sig_q = torch.zeros_like(vals), torch.zeros((a, n), device=dev)
            # 3. the draft proposes up to num_draft steps
            jd = 0
            for j in range(self.num_draft):
                commit = so == (sa + j)[:, None]
                if not bool(commit.any()):
                    break
                cfg_tok = cfgs[(sa + j).clamp(max=self.num_iter - 1)][:, None].expand(a, n)
                tok, mu, sig = mar_step(draft, vals, kn, commit, cnd, bk, cfg_tok, temp, k)
                vals[commit], mu_q[commit], sig_q[commit] = tok, mu, sig
                kn |= commit
                jd += 1
            drafted = (so >= sa[:, None]) & (so < (sa + jd)[:, None])
            # 4. one target forward over the jd contexts (steps < j visible in copy j)
            ctx_known = torch.stack([so < (sa + j)[:, None] for j in range(jd)]).view(jd * a, n)
            rep = torch.arange(a, device=dev).repeat(jd)
            guided = bool((cfgs != 1).any())
            z, zn = target.conditioning(vals[rep], ctx_known, cnd.select_rows(rep) if cnd is not None else None, guided)
            rows, pos = drafted.nonzero(as_tuple=True)
            copy = (so - sa[:, None])[rows, pos]
            flat = copy * a + rows
            tok_cfg = cfgs[so[rows, pos]]
            x_p, mu_p, sig_p = target.head_sample(
                z[flat, pos], bk[rows, pos], torch.full((rows.numel(),), temp, device=dev),
                tok_cfg if guided else None, zn[flat, pos] if guided else None, k)
            x_q = vals[rows, pos]
            # 5. acceptance
            if temp == 0.0:
                accept = ((x_q - x_p).abs() <= 1e-5 * (1 + x_p.abs())).all(-1)
            else:
                lr = log_ratio(x_q, mu_p, sig_p, mu_q[rows, pos], sig_q[rows, pos], self.inner_temperature)
                u = torch.rand(rows.numel(), generator=generator, device=dev)
                accept = torch.log(u) < lr
            big = torch.full((a,), self.num_iter + 1, dtype=torch.long, device=dev)
            stop = big.scatter_reduce(0, rows[~accept], so[rows, pos][~accept], reduce="amin")  # first rejected step
            in_stop = so[rows, pos] == stop[rows]
            keep = (so[rows, pos] < stop[rows]) | (in_stop & accept)
            redo = in_stop & ~accept
            # 6. residual draws for the rejected tokens of the stopping step
            new_vals = x_q.clone()
            if bool(redo.any()):
                if temp == 0.0:
                    new_vals[redo] = x_p[redo]
                else:
                    r, fell = sample_residual(mu_p[redo], sig_p[redo], mu_q[rows, pos][redo], sig_q[rows, pos][redo],
                                              generator, self.max_residual_tries, self.inner_temperature)
                    new_vals[redo] = r
                    stats.extra["residual_fallbacks"] += int(fell.sum())
                    stats.extra["residual_draws"] += int(redo.sum())
            final = keep | redo
            gr, gp = act[rows[final]], pos[final]
            values[gr, gp] = new_vals[final]
            known[gr, gp] = True
            token_steps[gr, gp] = forward_idx
            stats.drafted_tokens += rows.numel()
            stats.accepted_draft_tokens += int(keep.sum())
            stats.accepted_per_step.append(torch.bincount(rows[final], minlength=a).tolist())
            nxt[act] = torch.where(stop <= self.num_iter, stop + 1, sa + jd)
            forward_idx += 1
            callback()
        stats.target_forwards = target.forwards - t_start
        stats.draft_forwards = draft.forwards - d_start
        return finish(stats, values, token_steps, t0, self.num_iter)


__all__ = ["CSpD", "log_ratio", "sample_residual"]
