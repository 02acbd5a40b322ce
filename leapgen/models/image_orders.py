"""Decoding orders and attention masks of the image families that decode many tokens per step.

An *order* is data: a list of steps, each a ``LongTensor`` of the raster cell indices (``i * W + j``)
decoded together. The decode loops of ``leapgen.samplers.scale`` walk these lists; the models build
their training masks from the same definitions, so what is trained is what is decoded.

* :func:`raster_order`: one cell per step (LlamaGen), ``H * W`` steps.
* :func:`diagonal_order`: NAR's next-neighbour order (He et al. 2025, arXiv 2503.10696): step ``d``
  holds every cell at Manhattan distance ``i + j = d`` from the top-left cell, ``H + W - 1`` steps
  (31 forwards for 16x16, prefill included).
* :func:`proximity_mask`: NAR's proximity-aware attention mask (``setup_proximity_mask``): an image
  token at distance ``c`` attends to every image token at distance ``<= c`` (its own diagonal
  included) and to the whole condition prefix; the prefix stays causal.
* :func:`scale_slices` / :func:`block_causal_mask`: VAR's next-scale order (Tian et al. 2024): scale
  ``k`` is a ``p_k x p_k`` block of tokens; a token of scale ``k`` attends to every token of scales
  ``<= k`` and to the prefix (the block-causal training mask).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError


def _check_grid(h: int, w: int) -> None:
    if not (isinstance(h, int) and isinstance(w, int)) or h < 1 or w < 1:
        raise ConfigError(f"a token grid needs positive integer sides, got {h}x{w}")


def raster_order(h: int, w: int) -> list[Tensor]:
    """One cell per step, row by row."""
    _check_grid(h, w)
    return [torch.tensor([k]) for k in range(h * w)]


def diagonal_order(h: int, w: int) -> list[Tensor]:
    """NAR's next-neighbour order: step ``d`` = the cells with ``i + j == d`` (rows ascending)."""
    _check_grid(h, w)
    return [torch.tensor([i * w + (d - i) for i in range(max(0, d - w + 1), min(h, d + 1))]) for d in range(h + w - 1)]


def cell_distance(h: int, w: int) -> Tensor:
    """Manhattan distance ``i + j`` of every raster cell ``[h * w]``."""
    _check_grid(h, w)
    idx = torch.arange(h * w)
    return idx // w + idx % w


def proximity_mask(h: int, w: int, prefix: int = 1) -> Tensor:
    """Bool ``[prefix + h*w, prefix + h*w]`` (True = attend): the prefix is causal; an image token
    attends to the whole prefix and to every image token whose distance is ``<=`` its own."""
    if prefix < 0:
        raise ConfigError(f"prefix must be >= 0, got {prefix}")
    n = prefix + h * w
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    d = cell_distance(h, w)
    mask[prefix:, prefix:] = d[None, :] <= d[:, None]
    return mask


def scale_slices(scales: tuple[int, ...] | list[int]) -> list[slice]:
    """The token range of every scale in the flattened multi-scale sequence (``p_k**2`` tokens each)."""
    if not scales or any(not isinstance(p, int) or p < 1 for p in scales):
        raise ConfigError(f"scales must be positive integers, got {scales!r}")
    if list(scales) != sorted(scales):
        raise ConfigError(f"scales must grow from coarse to fine, got {scales!r}")
    out, start = [], 0
    for p in scales:
        out.append(slice(start, start + p * p))
        start += p * p
    return out


def scale_of_token(scales: tuple[int, ...] | list[int]) -> Tensor:
    """Index of the scale every token of the flattened multi-scale sequence belongs to."""
    return torch.cat([torch.full((p * p,), k) for k, p in enumerate(scales)])


def block_causal_mask(scales: tuple[int, ...] | list[int], prefix: int = 1) -> Tensor:
    """Bool ``[prefix + L - 1, prefix + L - 1]`` (``L = sum p_k**2``) for VAR's teacher-forced
    input: the prefix (causal) predicts scale 0; the inputs of scale ``k >= 1`` (``p_k**2``
    positions each) predict scale ``k`` and attend to the prefix and to the inputs of scales ``<= k``."""
    lvl = scale_of_token(scales)[1:]  # the inputs start at scale 1 (scale 0 is predicted by the prefix)
    n = prefix + lvl.numel()
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    mask[prefix:, prefix:] = lvl[None, :] <= lvl[:, None]
    return mask


__all__ = ["raster_order", "diagonal_order", "cell_distance", "proximity_mask", "scale_slices", "scale_of_token",
           "block_causal_mask"]
