"""A small speech encoder shared by the speech families (ASR heads: CTC, CIF/Paraformer, attention AR).

``SpeechEncoder``: LFR features ``[B, T, input_dim]`` -> Linear -> LayerNorm -> + sinusoidal
positions -> ``layers`` pre-norm Transformer encoder layers -> LayerNorm, with a padding mask
(True = real frame). Padded frames of the output are zeroed, so a head that convolves over time
(the CIF predictor) never sees them, and a row's result does not depend on the batch's padding.

``CTCHead``: a linear layer to ``vocab_size`` (blank = id 0) with :func:`ctc_loss`.

Paper context: the Paraformer encoder is SAN-M (FunASR) or Conformer; this is the plain
Transformer variant of the reference notes' tiny experiment (section 8), sized for CPU training.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .torch_lean import encoder_forward


class LayerKV:
    """One layer's cached keys / values ``[B, heads, slots, head_dim]`` (a KVCache backend layer)."""

    def __init__(self, keys: Tensor, values: Tensor) -> None:
        self.keys, self.values = keys, values


def sinusoid(positions: Tensor, dim: int) -> Tensor:
    """Sinusoidal position encodings of ``positions`` (any shape) -> ``[..., dim]`` (float32)."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    ang = positions.float()[..., None] * freq
    return torch.cat([ang.sin(), ang.cos()], -1)


def decoder_self_mask(self_mask: Tensor | None, n: int, past: int, like: Tensor) -> Tensor | None:
    """The additive self-attention mask of ``n`` new decoder tokens after ``past`` cached ones:
    ``self_mask`` cast to ``like``'s dtype when given (``[B, 1, n, past + n]``), else causal among the
    new tokens with every past slot visible (``[1, 1, n, past + n]``; None for one token)."""
    if self_mask is not None:
        return self_mask.to(like.dtype)
    if n <= 1:
        return None
    allowed = torch.arange(past + n, device=like.device)[None] <= past + torch.arange(n, device=like.device)[:, None]
    return torch.zeros(allowed.shape, dtype=like.dtype, device=like.device).masked_fill(~allowed, float("-inf"))[None, None]


def key_padding_bias(mask: Tensor, like: Tensor) -> Tensor:
    """``[B, T]`` bool mask (True = attend) -> additive ``[B, 1, 1, T]`` bias in ``like``'s dtype."""
    return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(~mask, float("-inf"))[:, None, None]


def lengths_to_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """``[B]`` lengths -> ``[B, T]`` bool mask, True on real positions."""
    t = int(lengths.max()) if max_len is None and lengths.numel() else (max_len or 0)
    return torch.arange(t, device=lengths.device)[None] < lengths[:, None]


class SpeechEncoder(nn.Module):
    """Transformer encoder over speech features (see the module docstring)."""

    def __init__(self, input_dim: int, d_model: int, heads: int, ff: int, layers: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.d_model = d_model
        self.proj = nn.Linear(input_dim, d_model)
        self.norm_in = nn.LayerNorm(d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm_out = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, feats: Tensor, mask: Tensor, padded: bool = True) -> Tensor:
        """``feats [B, T, input_dim]``, ``mask [B, T]`` (True = real) -> ``[B, T, d_model]``.
        ``padded=False`` promises that every frame is real, so attention runs without the mask."""
        x = self.norm_in(self.proj(feats))
        x = self.drop(x + sinusoid(torch.arange(x.shape[1], device=x.device), self.d_model)[None].to(x.dtype))
        x = encoder_forward(self.layers, x, ~mask if padded else None)
        return self.norm_out(x) * mask[..., None].to(x.dtype)


class CTCHead(nn.Module):
    """Linear projection of encoder frames to token log-probabilities (blank = 0)."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, memory: Tensor) -> Tensor:
        return self.proj(memory).float().log_softmax(-1)


def ctc_loss(logp: Tensor, frame_lengths: Tensor, targets: Tensor, target_lengths: Tensor) -> Tensor:
    """Mean CTC loss per target token (``logp [B, T, V]``, ``targets [B, S]`` padded)."""
    loss = F.ctc_loss(logp.transpose(0, 1), targets, frame_lengths, target_lengths, blank=0,
                      reduction="sum", zero_infinity=True)
    return loss / target_lengths.sum().clamp_min(1)


__all__ = ["CTCHead", "SpeechEncoder", "ctc_loss", "lengths_to_mask", "sinusoid"]
