"""MAR's per-token diffusion head: a small MLP denoiser (DDPM) that samples one continuous token
from a conditioning vector.

Paper: Li et al. 2024, "Autoregressive Image Generation without Vector Quantization" (MAR,
``LTH14/mar``, ``models/diffloss.py``: ``SimpleMLPAdaLN``). Here at emoji scale:

* **network** :class:`DiffusionHead`: ``x_t`` (``[N, D]``) -> Linear(D, w); the timestep
  embedding (sinusoidal -> MLP) plus the projected condition ``z`` (``[N, C]``) modulate
  ``depth`` residual MLP blocks through adaLN (shift, scale, gate); a final adaLN + Linear(w, D)
  predicts the noise ``eps``.
* **training** :meth:`DiffusionHead.loss`: eps-prediction MSE at uniform timesteps of a cosine
  schedule (Nichol & Dhariwal 2021) with ``T = 1000`` steps, every token repeated
  ``batch_mul`` times with fresh timesteps (MAR's ``diffusion_batch_mul = 4``).
* **sampling** :meth:`DiffusionHead.sample`: ``K`` DDPM ancestral steps (default
  ``sampling_steps``), respaced evenly over the 1000 (trailing spacing: ``tau_k = k*T/K - 1``, so
  even the last step starts from a noisy ``x``), fixed-large variances ``sigma_k^2 = tau^2 *
  beta'_k`` with ``beta'_k = 1 - abar(tau_k) / abar(tau_{k-1})`` and temperature ``tau`` (MAR's
  ``temperature`` scales the per-step noise). **Every step is stochastic, the last one included**,
  so the token ``x_0 ~ N(mu_0, sigma_0^2 I)`` given the rest of the trajectory; the sampler
  returns that final Gaussian (``mu_0, sigma_0``) beside the token: CSpD's acceptance ratio is the
  ratio of these Gaussians. All noise is passed in (``noise [N, K + 1, D]``: the initial ``x_T``
  then one vector per step), so two heads can share it (CSpD's denoising-trajectory alignment).
* **clipping**: the predicted ``x_0`` is clamped to ``[-clip_denoised, clip_denoised]`` (default 5,
  tokens are normalised to unit variance): at the first step ``abar(999) = 2.4e-9`` and the
  eps-to-``x_0`` conversion multiplies the eps error by ``1/sqrt(abar)``.
* **guidance** (MAR): ``eps = eps(z_null) + s * (eps(z) - eps(z_null))`` per token scale ``s``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, InputError

#: sampling starts at the last timestep with abar >= this (t = 979 of 1000): at t = 999 abar is 2.4e-9 and
#: the eps -> x_0 conversion multiplies the eps error by 2e4 (measured: 99 % of the predicted x_0 beyond +-5)
MIN_ALPHA_BAR = 1e-3


def cosine_alpha_bar(steps: int, s: float = 0.008) -> Tensor:
    """``abar(t)`` for ``t = 0 .. steps-1`` of the cosine schedule (float64)."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0)


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], -1)


class _ResBlock(nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(w, w), nn.SiLU(), nn.Linear(w, w))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(w, 3 * w))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale, gate = self.ada(c).chunk(3, -1)
        return x + gate * self.mlp(self.norm(x) * (1 + scale) + shift)


class DiffusionHead(nn.Module):
    """Small MLP DDPM head (see the module docstring)."""

    def __init__(self, token_dim: int, cond_dim: int, width: int = 256, depth: int = 3,
                 train_steps: int = 1000, sampling_steps: int = 16, clip_denoised: float = 5.0) -> None:
        super().__init__()
        self.clip_denoised = clip_denoised
        self.token_dim, self.cond_dim, self.train_steps = token_dim, cond_dim, train_steps
        self.sampling_steps = sampling_steps
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.cond_proj = nn.Linear(cond_dim, width)
        self.inp = nn.Linear(token_dim, width)
        self.blocks = nn.ModuleList([_ResBlock(width) for _ in range(depth)])
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.out = nn.Linear(width, token_dim)
        nn.init.zeros_(self.final_ada[1].weight)
        nn.init.zeros_(self.final_ada[1].bias)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.width = width
        self.register_buffer("alpha_bar", cosine_alpha_bar(train_steps).float(), persistent=False)

    # ------------------------------------------------------------------ network
    def eps(self, x: Tensor, t: Tensor, z: Tensor) -> Tensor:
        """Predicted noise ``[N, D]`` of ``x_t [N, D]`` at integer timesteps ``t [N]`` given ``z [N, C]``."""
        out_dtype, w = x.dtype, self.inp.weight.dtype  # the sampling maths stays in x's dtype; the net may be cast
        x, z = x.to(w), z.to(w)
        c = self.time_mlp(timestep_embedding(t, self.width).to(w)) + self.cond_proj(z)
        h = self.inp(x)
        for blk in self.blocks:
            h = blk(h, c)
        shift, scale = self.final_ada(c).chunk(2, -1)
        return self.out(self.final_norm(h) * (1 + scale) + shift).to(out_dtype)

    def loss(self, x0: Tensor, z: Tensor, generator: torch.Generator | None = None, batch_mul: int = 4) -> Tensor:
        """Mean eps-prediction MSE of tokens ``x0 [N, D]`` given ``z [N, C]``."""
        x0 = x0.repeat(batch_mul, 1)
        z = z.repeat(batch_mul, 1)
        t = torch.randint(0, self.train_steps, (x0.shape[0],), generator=generator, device=x0.device)
        noise = torch.randn(x0.shape, generator=generator, device=x0.device, dtype=x0.dtype)
        ab = self.alpha_bar[t][:, None].to(x0.dtype)
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        return F.mse_loss(self.eps(xt, t, z).float(), noise.float())

    # ------------------------------------------------------------------ sampling
    def schedule(self, steps: int) -> tuple[list[int], Tensor, Tensor]:
        """Timesteps ``tau_K > .. > tau_1`` and per step the posterior-mean coefficients ``[K, 2]``
        and the fixed-large std ``[K]`` (before temperature)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= self.train_steps:
            raise ConfigError(f"diffusion sampling steps must be an int in [1, {self.train_steps}], got {steps!r}")
        top = int((self.alpha_bar >= MIN_ALPHA_BAR).nonzero().max()) + 1  # 980 of 1000 for the cosine schedule
        taus = [round((k + 1) * top / steps) - 1 for k in range(steps)][::-1]
        ab = self.alpha_bar.double()
        coefs, sig = [], []
        for i, tau in enumerate(taus):
            a_t = ab[tau]
            a_prev = ab[taus[i + 1]] if i + 1 < len(taus) else torch.tensor(1.0, dtype=torch.float64)
            beta = 1 - a_t / a_prev
            c0 = a_prev.sqrt() * beta / (1 - a_t)
            ct = (1 - beta).sqrt() * (1 - a_prev) / (1 - a_t)
            coefs.append(torch.stack([c0, ct]))
            sig.append(beta.sqrt())
        return taus, torch.stack(coefs).float(), torch.stack(sig).float()

    def sample(
        self,
        z: Tensor,
        noise: Tensor,
        temperature: Tensor,
        cfg: Tensor | None = None,
        z_null: Tensor | None = None,
        steps: int | None = None,
        stop_before_last: bool = False,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Run the ``K`` ancestral steps for every row; returns ``(x0, mu_0, sigma_0)`` (``[N, D]``,
        ``[N, D]``, ``[N]``): the token and the Gaussian of the last step.

        ``noise [N, K+1, D]``: ``noise[:, 0]`` is ``x_T``, ``noise[:, k]`` the noise of step ``k``.
        ``temperature [N]`` scales every step's std (0: deterministic); ``cfg [N]`` with ``z_null``:
        guidance scale per row (1 = none)."""
        k = self.sampling_steps if steps is None else steps
        taus, coefs, sig = self.schedule(k)
        n, d = z.shape[0], self.token_dim
        if tuple(noise.shape) != (n, k + 1, d):
            raise InputError(f"noise must be [N, K + 1, D] = {(n, k + 1, d)}, got {tuple(noise.shape)}")
        coefs, sig = coefs.to(z.device), sig.to(z.device)
        x = noise[:, 0].to(z.dtype)
        guided = cfg is not None and z_null is not None
        mu = x
        for i, tau in enumerate(taus):
            t = torch.full((n,), tau, device=z.device, dtype=torch.long)
            if guided:
                e = self.eps(torch.cat([x, x]), torch.cat([t, t]), torch.cat([z, z_null]))
                ec, eu = e.chunk(2)
                e = eu + cfg[:, None].to(e.dtype) * (ec - eu)
            else:
                e = self.eps(x, t, z)
            ab = self.alpha_bar[tau]
            x0 = (x - (1 - ab).sqrt() * e) / ab.sqrt()
            if self.clip_denoised:
                x0 = x0.clamp(-self.clip_denoised, self.clip_denoised)
            mu = coefs[i, 0] * x0 + coefs[i, 1] * x
            std = sig[i] * temperature.to(x.dtype)
            if i == len(taus) - 1:
                if stop_before_last:
                    return mu, mu, std
                return mu + std[:, None] * noise[:, i + 1].to(x.dtype), mu, std
            x = mu + std[:, None] * noise[:, i + 1].to(x.dtype)
        raise AssertionError("unreachable")


def gaussian_log_density(x: Tensor, mu: Tensor, sigma: Tensor) -> Tensor:
    """Log density of ``x [N, D]`` under ``N(mu, sigma^2 I)`` (``sigma [N]``), summed over D."""
    d = x.shape[-1]
    s = sigma.clamp_min(1e-12)[:, None]
    return (-0.5 * ((x - mu) / s) ** 2).sum(-1) - d * torch.log(s[:, 0]) - 0.5 * d * math.log(2 * math.pi)


__all__ = ["DiffusionHead", "cosine_alpha_bar", "gaussian_log_density", "timestep_embedding"]
