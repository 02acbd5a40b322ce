"""A small KL-VAE image tokenizer: continuous latent tokens for MAR-style generators.

MAR (Li et al. 2024, "Autoregressive Image Generation without Vector Quantization",
``LTH14/mar``) generates **continuous** tokens of a KL-regularised VAE (their ``kl16``: a 16x16
grid of 16-d tokens). This is the same idea at emoji scale: diffusers' :class:`AutoencoderKL`
with a small config (``emoji`` preset: 64x64 RGB -> an **8x8 grid of 8-d tokens**, three
down-sampling stages of 16/32/64/64 channels, one ResNet block per stage).

Tokens are the posterior **means**, normalised per channel (``(mu - shift) / scale`` with the
statistics measured on the training set by the recipe and stored in the config), so that the
generator sees roughly zero-mean unit-variance tokens; :meth:`KLImageTokenizer.decode_tokens`
undoes it.

Layout: ``tokens [B, h*w, D]`` in raster order (row-major), the layout of
:class:`leapgen.models.masked_base.MaskedState` continuous values. Images: float ``[B, 3, H, W]``
in ``[-1, 1]`` (``encode_tokens``) and PIL images from :meth:`to_pil`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import InputError

KL_PRESETS: dict[str, dict[str, Any]] = {
    # 64x64 -> 8x8x8; ~0.9 M parameters
    "emoji": dict(block_out_channels=(16, 32, 64, 64), layers_per_block=1, latent_channels=8, norm_num_groups=8),
    # tiny, for tests: 16x16 -> 4x4x4
    "tiny": dict(block_out_channels=(8, 8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4),
}


@dataclass
class KLConfig(ComponentConfig):
    block_out_channels: tuple[int, ...] = (16, 32, 64, 64)
    layers_per_block: int = 1
    latent_channels: int = 8
    norm_num_groups: int = 8
    image_size: int = 64
    #: per-channel statistics of the posterior means (set by the recipe): token = (mu - shift) / scale
    shift: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.block_out_channels = tuple(int(c) for c in self.block_out_channels)
        if not self.shift:
            self.shift = [0.0] * self.latent_channels
        if not self.scale:
            self.scale = [1.0] * self.latent_channels
        if len(self.shift) != self.latent_channels or len(self.scale) != self.latent_channels:
            raise InputError("shift and scale need one value per latent channel")

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def grid_size(self) -> int:
        return self.image_size // self.downsample


class KLImageTokenizer(PretrainedMixin, nn.Module):
    """diffusers ``AutoencoderKL`` (small config) + token normalisation; see the module docstring."""

    config_class = KLConfig

    def __init__(self, config: KLConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        from diffusers import AutoencoderKL

        if config is None:
            config = KLConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = cfg = config
        n = len(cfg.block_out_channels)
        self.vae = AutoencoderKL(
            in_channels=3, out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * n, up_block_types=("UpDecoderBlock2D",) * n,
            block_out_channels=cfg.block_out_channels, layers_per_block=cfg.layers_per_block,
            latent_channels=cfg.latent_channels, norm_num_groups=cfg.norm_num_groups,
            sample_size=cfg.image_size, mid_block_add_attention=False,
        )
        self.register_buffer("shift", torch.tensor(cfg.shift, dtype=torch.float32), persistent=False)
        self.register_buffer("scale", torch.tensor(cfg.scale, dtype=torch.float32), persistent=False)

    # ------------------------------------------------------------------ shapes
    @property
    def token_dim(self) -> int:
        return self.config.latent_channels

    @property
    def grid(self) -> tuple[int, int]:
        g = self.config.grid_size
        return (g, g)

    @property
    def num_tokens(self) -> int:
        return self.config.grid_size**2

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def set_statistics(self, shift: Tensor, scale: Tensor) -> None:
        """Store the per-channel normalisation (``shift``/``scale`` of the posterior means)."""
        self.config.shift = [float(x) for x in shift]
        self.config.scale = [float(x) for x in scale]
        self.shift.copy_(shift.to(self.shift))
        self.scale.copy_(scale.to(self.scale))

    # ------------------------------------------------------------------ checks
    def _check_images(self, x: Tensor) -> None:
        s = self.config.image_size
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[1] != 3 or not x.dtype.is_floating_point:
            got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise InputError(f"images must be float [B, 3, {s}, {s}] in [-1, 1], got {got}.")
        if x.shape[-1] % self.config.downsample or x.shape[-2] % self.config.downsample:
            raise InputError(f"image height and width must be multiples of {self.config.downsample}, got {tuple(x.shape[-2:])}.")

    def check_tokens(self, tokens: Tensor) -> None:
        """Raise InputError unless ``tokens`` is float ``[B, h*w, D]`` for this tokenizer."""
        want = (self.num_tokens, self.token_dim)
        if not isinstance(tokens, Tensor) or not tokens.dtype.is_floating_point or tokens.dim() != 3 or tuple(tokens.shape[1:]) != want:
            got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, Tensor) else type(tokens).__name__
            raise InputError(
                f"latent tokens must be a float tensor [B, {want[0]}, {want[1]}] (a {self.grid[0]}x{self.grid[1]} grid of "
                f"{want[1]}-d tokens, raster order), got {got}."
            )
        if not bool(torch.isfinite(tokens).all()):
            raise InputError("latent tokens contain NaN or infinite values.")

    # ------------------------------------------------------------------ encode / decode
    def posterior(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and std ``[B, C, h, w]`` of the (un-normalised) Gaussian posterior of images ``x``."""
        self._check_images(x)
        dist = self.vae.encode(x.to(self.dtype)).latent_dist
        return dist.mean, dist.std

    def latents_to_tokens(self, mu: Tensor) -> Tensor:
        b, c, h, w = mu.shape
        t = (mu.float() - self.shift[:, None, None]) / self.scale[:, None, None]
        return t.permute(0, 2, 3, 1).reshape(b, h * w, c)

    def tokens_to_latents(self, tokens: Tensor) -> Tensor:
        b, n, c = tokens.shape
        h, w = self.grid
        z = tokens.float().reshape(b, h, w, c).permute(0, 3, 1, 2)
        return z * self.scale[:, None, None] + self.shift[:, None, None]

    @torch.no_grad()
    def encode_tokens(self, x: Tensor) -> Tensor:
        """Normalised tokens ``[B, h*w, D]`` (posterior means) of images ``x [B, 3, H, W]`` in [-1, 1]."""
        mu, _ = self.posterior(x)
        return self.latents_to_tokens(mu)

    def decode_latents(self, z: Tensor) -> Tensor:
        return self.vae.decode(z.to(self.dtype)).sample.float()

    @torch.no_grad()
    def decode_tokens(self, tokens: Tensor) -> Tensor:
        """Images ``[B, 3, H, W]`` in [-1, 1] (clamped) from normalised tokens ``[B, h*w, D]``."""
        self.check_tokens(tokens)
        return self.decode_latents(self.tokens_to_latents(tokens)).clamp(-1, 1)

    @staticmethod
    def to_pil(x: Tensor) -> list:
        from PIL import Image

        arr = ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        return [Image.fromarray(np.ascontiguousarray(a)) for a in arr]

    def decode(self, tokens: Tensor) -> list:
        """PIL images of normalised tokens ``[B, h*w, D]``."""
        return self.to_pil(self.decode_tokens(tokens))


@torch.no_grad()
def kl_reconstruction_metrics(tok: KLImageTokenizer, images01: Tensor, batch_size: int = 128) -> dict[str, float]:
    """MSE (on [0, 1] pixels) and PSNR of ``decode(encode(x))`` for float images ``[N, 3, H, W]`` in [0, 1]."""
    se, n = 0.0, 0
    for i in range(0, len(images01), batch_size):
        x = images01[i : i + batch_size]
        rec = (tok.decode_tokens(tok.encode_tokens(x * 2 - 1)) + 1) / 2
        se += float(((rec - x) ** 2).sum())
        n += x.numel()
    mse = se / max(n, 1)
    return {"mse": mse, "psnr": float(10 * np.log10(1.0 / max(mse, 1e-12)))}


__all__ = ["KL_PRESETS", "KLConfig", "KLImageTokenizer", "kl_reconstruction_metrics"]
