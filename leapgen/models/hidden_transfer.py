"""Hidden Transfer: pseudo hidden states of future tokens, made at an intermediate layer of the
target's own forward (Wu et al. 2024, "Parallel Decoding via Hidden Transfer for Lossless Large
Language Model Acceleration", arXiv 2404.12022).

At layer ``l`` of a forward, :class:`HiddenTransfer` maps the hidden state ``h_j`` of a chosen
position ``j`` (token ``x_t``) to ``k`` pseudo hidden states ``p_i = h_j + A_i h_j`` standing for
the unknown tokens at positions ``t+1 .. t+k``. They join the sequence for layers ``l .. L-1``,
attending to what position ``j`` attends to (the context, or its tree ancestors) and to the
earlier pseudo states of the same ``j``; their outputs are draft distributions for
``x_{t+2} .. x_{t+k+1}`` (the real output at ``j`` gives ``x_{t+1}``). Nothing attends to them, so
the real positions' outputs are the plain forward's: verification stays exact.

:func:`transfer_forward` is that forward on the lean runtime (:mod:`~leapgen.models.lean`): one
pass over the real tokens and ``len(cols) * k`` pseudo positions, whose keys/values are written past
the cache's new slots and never kept (the caller's ``cache.appended(n)`` counts only the real
ones). The same function trains the transforms (``leapgen train text-code-heads``, the target
frozen, gradients through the upper layers into ``A_i``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import Tensor, nn

from .lean.llama import LeanLlama, _linear
from .text_variants import decoder_layer, float_mask, rope


class HiddenTransfer(nn.Module):
    """``k`` linear transforms (zero-initialised residuals: a fresh one copies ``h``) applied at
    decoder layer ``layer`` (``0 < layer < n_layers``)."""

    def __init__(self, dim: int, k: int, layer: int) -> None:
        super().__init__()
        self.k, self.layer = k, layer
        self.maps = nn.Parameter(torch.zeros(k, dim, dim))
        self.bias = nn.Parameter(torch.zeros(k, dim))

    def forward(self, h: Tensor, n: int | None = None) -> Tensor:
        """Pseudo states ``[..., n, D]`` (the first ``n`` of the ``k``; all by default) from hidden
        states ``h [..., D]``."""
        n = self.k if n is None else n
        delta = torch.einsum("...d,ked->...ke", h, self.maps[:n].to(h.dtype)) + self.bias[:n].to(h.dtype)
        return h[..., None, :] + delta


def full_mask(mask: Tensor | None, b: int, n: int, s: int, device: torch.device) -> Tensor:
    """The boolean mask ``[B, 1, n, s+n]`` of ``n`` new tokens over ``s`` cache slots (``None``: causal)."""
    if mask is None:
        return torch.ones(n, s + n, dtype=torch.bool, device=device).tril(s)[None, None].expand(b, 1, n, s + n)
    return mask.to(device).expand(b, 1, n, s + n)


def transfer_forward(
    net: LeanLlama,
    tokens: Tensor,
    position_ids: Tensor,
    mask: Tensor | None,
    backend: Any,
    n_slots: int,
    transfer: HiddenTransfer,
    cols: Tensor,
    n_states: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One forward of ``tokens [B, n]`` with pseudo states for the positions ``cols [B, w]``.

    ``mask``: the cache's boolean mask for the new tokens (None: causal); ``n_slots``: the slots
    before them; ``n_states``: pseudo states per column (the first ``n_states`` maps; default all
    ``k``). Returns ``(logits [B, n, V], final hidden [B, n, D], pseudo logits [B, w, n_states, V])``;
    pseudo ``[b, j, i]`` predicts the token ``i + 2`` places after position ``cols[b, j]``."""
    b, n = tokens.shape
    h = F.embedding(tokens, net.embed.weight)
    cos, sin = rope(net, position_ids, h.dtype)
    low = float_mask(mask, h.dtype)  # None only for one new token over a cache without holes
    for layer, cache in zip(net.layers[: transfer.layer], backend.layers[: transfer.layer]):
        h = decoder_layer(net, layer, cache, h, cos, sin, low)
    real = full_mask(mask, b, n, n_slots, h.device)
    hn, pseudo = transfer_upper(net, h, position_ids, real, backend, transfer, cols, n_states)
    return _linear(hn, net.lm_head, None), hn, pseudo


def transfer_upper(
    net: LeanLlama, h: Tensor, position_ids: Tensor, real: Tensor, backend: Any, transfer: HiddenTransfer, cols: Tensor,
    n_states: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Layers ``transfer.layer ..`` over the real hidden states ``h [B, n, D]`` (boolean mask
    ``real [B, 1, n, S]``) joined by the pseudo states of ``cols [B, w]``. Returns the real
    positions' final hidden states ``[B, n, D]`` and the pseudo logits ``[B, w, k, V]``."""
    b, n, _ = h.shape
    k, w = transfer.k if n_states is None else n_states, cols.shape[1]
    dt, dev = h.dtype, h.device
    sel = h.gather(1, cols[..., None].expand(b, w, h.shape[-1]))
    pseudo = rearrange(transfer(sel, k), "b w k d -> b (w k) d")
    steps = torch.arange(1, k + 1, device=dev)
    p_pos = rearrange(position_ids.gather(1, cols)[..., None] + steps, "b w k -> b (w k)")
    p_pos = p_pos.clamp_max(net.cos.shape[0] - 1)
    # real rows never see pseudo slots; pseudo (j, i) sees what position cols[j] sees and pseudo (j, <= i)
    m = w * k
    seen = real.expand(b, 1, n, real.shape[-1]).gather(2, repeat(cols, "b w -> b 1 (w k) s", k=k, s=real.shape[-1]))
    own = torch.ones(k, k, dtype=torch.bool, device=dev).tril()
    own = torch.block_diag(*([own] * w)) if w else own[:0, :0]
    top = torch.cat([real.expand(b, 1, n, real.shape[-1]), torch.zeros(b, 1, n, m, dtype=torch.bool, device=dev)], -1)
    bottom = torch.cat([seen, own[None, None].expand(b, 1, m, m)], -1)
    mask = float_mask(torch.cat([top, bottom], 2), dt)
    cos, sin = rope(net, torch.cat([position_ids, p_pos], 1), dt)
    h = torch.cat([h, pseudo.to(dt)], 1)
    for layer, cache in zip(net.layers[transfer.layer :], backend.layers[transfer.layer :]):
        h = decoder_layer(net, layer, cache, h, cos, sin, mask)
    hn = net._rms(h, net.norm)
    return hn[:, :n], rearrange(_linear(hn[:, n:], net.lm_head, None), "b (w k) v -> b w k v", k=k)


__all__ = ["HiddenTransfer", "full_mask", "transfer_forward", "transfer_upper"]
