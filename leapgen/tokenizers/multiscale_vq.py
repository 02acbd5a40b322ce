"""Multi-scale residual VQ tokenizers: VAR's next-scale and NFIG's next-frequency, one class.

* VAR (Tian et al. 2024, "Visual Autoregressive Modeling", code ``FoundationVision/VAR``,
  ``models/quant.py``): the latent ``f [d, N, N]`` is approximated by a sum over scales ``p_1 < ... <
  p_K = N`` of upsampled code maps: ``r_k = Q(down(f - f_hat, p_k))``, ``f_hat += up(e[r_k], N)``,
  one **shared codebook** ``e`` for every scale; ``down`` is area pooling, ``up`` bicubic
  (``band="spatial"``). VAR's ``Phi`` convolutions after ``up`` are left out (``f_hat`` is the plain
  residual sum, so the last, full-resolution scale makes the round trip exact without quantisation).
* NFIG (Huang et al. 2025, "Next-Frequency Image Generation", arXiv 2503.07076): each level is a
  **frequency band** of the residual: ``down`` keeps the ``p_k x p_k`` lowest DCT-II frequencies
  (an ideal low-pass, represented on a ``p_k x p_k`` grid, mean preserved) and ``up`` zero-pads the
  spectrum back to ``N x N`` (``band="frequency"``). Level 1 is the DC band, later levels add
  higher bands. Everything else (codebook, residual loop, encoder/decoder, the transformer and its
  loop) is shared with VAR; only this band split differs. ``down(up(x)) == x`` exactly.

The encoder/decoder are the single-scale :class:`~leapgen.tokenizers.vq_image.VQModel`'s (the recipe
copies the shipped emoji VQ's and fits only the residual codebook); latents are l2-normalised per
cell as that VQ's decoder expects (``latent_l2_norm``). Codes of one image are a flat ``[L]`` sequence,
scale after scale, ``L = sum p_k**2`` (655 for the default scales 1,2,3,4,6,8,10,13,16).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError, InputError
from .vq_image import VQConfig, VQModel

BANDS = ("spatial", "frequency")


@dataclass
class MultiScaleVQConfig(VQConfig):
    scales: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 10, 13, 16)
    band: str = "spatial"  # "spatial" (VAR) or "frequency" (NFIG)
    latent_l2_norm: bool = True

    def __post_init__(self) -> None:
        self.codebook_l2_norm = False  # residuals have every norm: plain L2 nearest neighbour
        super().__post_init__()
        self.scales = tuple(int(p) for p in self.scales)
        if self.band not in BANDS:
            raise ConfigError(f"band must be one of {BANDS}, got {self.band!r}")
        if not self.scales or list(self.scales) != sorted(set(self.scales)) or self.scales[0] < 1:
            raise ConfigError(f"scales must be strictly increasing positive sizes, got {self.scales}")


def dct_matrix(n: int) -> Tensor:
    """Orthonormal DCT-II matrix ``[n, n]`` (rows = frequencies)."""
    k = torch.arange(n, dtype=torch.float64)[:, None]
    x = torch.arange(n, dtype=torch.float64)[None, :]
    c = math.sqrt(2.0 / n) * torch.cos(math.pi * (x + 0.5) * k / n)
    c[0] /= math.sqrt(2.0)
    return c


def band_matrices(p: int, n: int) -> tuple[Tensor, Tensor]:
    """``(D [p, n], U [n, p])``: keep the ``p`` lowest DCT frequencies on a ``p``-grid (mean kept),
    and put them back on the ``n``-grid; ``D @ U == I``."""
    cn, cp = dct_matrix(n), dct_matrix(p)
    down = math.sqrt(p / n) * cp.t() @ cn[:p]
    up = math.sqrt(n / p) * cn[:p].t() @ cp
    return down.float(), up.float()


class MultiScaleVQ(VQModel):
    """VQ encoder/decoder with a multi-scale residual quantiser (see the module docstring)."""

    config_class = MultiScaleVQConfig

    def __init__(self, config: MultiScaleVQConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = MultiScaleVQConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        super().__init__(config)
        n = config.image_size // self.downsample
        if config.scales[-1] != n:
            raise ConfigError(f"the last scale must be the latent grid {n} (image_size / downsample), got {config.scales}")
        for p in config.scales:
            d, u = band_matrices(p, n)
            self.register_buffer(f"band_down_{p}", d, persistent=False)
            self.register_buffer(f"band_up_{p}", u, persistent=False)

    # ------------------------------------------------------------------ layout
    @property
    def scales(self) -> tuple[int, ...]:
        return self.config.scales

    @property
    def band(self) -> str:
        return self.config.band

    @property
    def latent_grid(self) -> int:
        return self.config.scales[-1]

    @property
    def num_tokens(self) -> int:
        return sum(p * p for p in self.scales)

    def split(self, flat: Tensor) -> list[Tensor]:
        """Flat codes ``[B, L]`` -> one ``[B, p, p]`` map per scale."""
        if flat.dim() != 2 or flat.shape[1] != self.num_tokens:
            raise InputError(f"multi-scale codes must be [B, {self.num_tokens}] (scales {self.scales}), got {tuple(flat.shape)}")
        out, start = [], 0
        for p in self.scales:
            out.append(flat[:, start : start + p * p].reshape(-1, p, p))
            start += p * p
        return out

    # ------------------------------------------------------------------ band split
    def down(self, f: Tensor, p: int) -> Tensor:
        """``[B, d, N, N]`` -> ``[B, d, p, p]``: area pooling (VAR) or the lowest DCT band (NFIG)."""
        if p == f.shape[-1]:
            return f
        if self.band == "spatial":
            return F.interpolate(f, size=(p, p), mode="area")
        d = getattr(self, f"band_down_{p}").to(f.dtype)
        return torch.einsum("pn,bcnm,qm->bcpq", d, f, d)

    def up(self, h: Tensor) -> Tensor:
        """``[B, d, p, p]`` -> ``[B, d, N, N]``: bicubic (VAR) or spectrum zero-padding (NFIG)."""
        p, n = h.shape[-1], self.latent_grid
        if p == n:
            return h
        if self.band == "spatial":
            return F.interpolate(h, size=(n, n), mode="bicubic")
        u = getattr(self, f"band_up_{p}").to(h.dtype)
        return torch.einsum("np,bcpq,mq->bcnm", u, h, u)

    # ------------------------------------------------------------------ residual quantisation
    def latents(self, x: Tensor) -> Tensor:
        """Encoder latents ``[B, d, N, N]`` of images in [-1, 1] (unit norm per cell by default)."""
        z = self.encode_latents(x).float()
        return F.normalize(z, dim=1) if self.config.latent_l2_norm else z

    def lookup(self, codes: Tensor) -> Tensor:
        """Code map ``[B, p, p]`` -> code vectors ``[B, d, p, p]``."""
        return self.quantize.embedding.weight[codes].permute(0, 3, 1, 2).float()

    def nearest(self, r: Tensor) -> Tensor:
        """Nearest shared-codebook entry of every cell of ``r [B, d, p, p]`` -> ``[B, p, p]``."""
        b, d, p, _ = r.shape
        idx, _ = self.quantize.nearest(r.permute(0, 2, 3, 1).reshape(-1, d).float())
        return idx.view(b, p, p)

    def encode_scales(self, f: Tensor, quantize: bool = True) -> tuple[list[Tensor], Tensor, list[Tensor]]:
        """``(codes per scale, f_hat, residual targets per scale)`` of latents ``f``; with
        ``quantize=False`` every scale keeps its exact residual (the round trip is then exact)."""
        f_hat = torch.zeros_like(f)
        codes, targets = [], []
        for p in self.scales:
            r = self.down(f - f_hat, p)
            targets.append(r)
            if quantize:
                c = self.nearest(r)
                codes.append(c)
                r = self.lookup(c).to(f.dtype)
            f_hat = f_hat + self.up(r)
        return codes, f_hat, targets

    def codes_to_latents(self, codes: list[Tensor] | Tensor) -> Tensor:
        """The residual sum ``f_hat [B, d, N, N]`` of per-scale (or flat) codes."""
        maps = self.split(codes) if isinstance(codes, Tensor) else codes
        f_hat = None
        for c in maps:
            part = self.up(self.lookup(c.to(self.quantize.embedding.weight.device)))
            f_hat = part if f_hat is None else f_hat + part
        return f_hat

    def next_input(self, f_hat: Tensor, k: int) -> Tensor:
        """The transformer input of scale ``k`` (>= 1): ``down(f_hat, p_k)`` as ``[B, p_k**2, d]``."""
        return self.down(f_hat, self.scales[k]).flatten(2).transpose(1, 2)

    def teacher_inputs(self, codes: list[Tensor]) -> Tensor:
        """Inputs of scales 1..K-1 for teacher forcing, ``[B, L - 1, d]``."""
        f_hat = torch.zeros(codes[0].shape[0], self.config.codebook_embed_dim, self.latent_grid, self.latent_grid,
                            device=codes[0].device)
        ins = []
        for k, c in enumerate(codes[:-1]):
            f_hat = f_hat + self.up(self.lookup(c))
            ins.append(self.next_input(f_hat, k + 1))
        return torch.cat(ins, 1)

    # ------------------------------------------------------------------ user API
    @torch.inference_mode()
    def encode(self, images: Any) -> Tensor:
        """Flat multi-scale codes ``[B, L]`` of images (PIL list or uint8 ``[B, H, W, 3]``)."""
        codes, _, _ = self.encode_scales(self.latents(self.to_tensor(images).float()))
        return torch.cat([c.flatten(1) for c in codes], 1).cpu()

    @torch.inference_mode()
    def decode(self, codes: Tensor) -> list:
        """PIL images from flat multi-scale codes ``[B, L]``."""
        from PIL import Image

        codes = torch.as_tensor(codes, dtype=torch.long)
        if codes.dim() == 1:
            codes = codes[None]
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise InputError(f"codes must lie in [0, {self.codebook_size})")
        f_hat = self.codes_to_latents(codes.to(self.device))
        x = self.decode_latents(f_hat.to(self.dtype)).float()
        arr = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        return [Image.fromarray(a) for a in arr]


__all__ = ["MultiScaleVQ", "MultiScaleVQConfig", "BANDS", "band_matrices", "dct_matrix"]
