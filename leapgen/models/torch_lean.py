"""Lean inference forwards of ``torch.nn`` Transformer stacks: the same weights and maths, fewer
framework detours.

``nn.TransformerEncoder`` in eval mode takes PyTorch's fused "fast path"
(``torch._transformer_encoder_layer_fwd``). With a key-padding mask that path masks and
normalises the attention scores itself instead of calling ``scaled_dot_product_attention``, and on
one CPU thread it costs about twice as much as the unfused maths (measured 2026-11-28 on the TTS
S2A encoder, 4 pre-norm layers of width 160 over 400 positions: 64.9 -> 29.5 ms at batch 1, 224 ->
112 ms at batch 4; without a mask the two are within 15 %; the ASR encoder over 96 frames: 5.7 ->
4.7 ms with a mask; the OCR encoder's local-window blocks with their ``[T, T]`` mask at batch 32:
98 -> 70 ms). :func:`encoder_forward` (a stack) and :func:`encoder_layer_forward` (one layer, with
an attention mask too) run pre-norm layers as ``layer_norm -> fused q/k/v
projection -> scaled_dot_product_attention`` with an additive key bias, then the feed-forward
block; outputs match the module to float rounding (tested). :func:`decoder_forward` does the same
for a stack of pre-norm ``nn.TransformerDecoderLayer`` without a causal mask (the non-causal NAR
decoders: Paraformer's, the DAG translator's, the peptide CTC decoder's), whose module forward has
no fast path at all: each ``nn.MultiheadAttention`` call re-checks and converts its masks, and the
cross-attention runs the Python ``multi_head_attention_forward``. Training mode, post-norm layers and
attention modules without a fused ``in_proj_weight`` use the module's own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def padding_bias(mask: Tensor, like: Tensor) -> Tensor | None:
    """Additive ``[B, 1, 1, T]`` key bias for a ``[B, T]`` mask (True = attend); None when nothing is
    masked (checked only on a CPU, where it costs no device sync). A finite minimum, not -inf: a row
    with no key left stays finite instead of NaN (its output is meaningless; callers drop it)."""
    if mask.device.type == "cpu" and bool(mask.all()):
        return None
    return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(
        ~mask, torch.finfo(like.dtype).min)[:, None, None]


def split_heads(x: Tensor, h: int) -> Tensor:
    """``[B, N, D] -> [B, h, N, D / h]``."""
    b, n, d = x.shape
    return x.view(b, n, h, d // h).transpose(1, 2)


def _fused(attn: object) -> bool:
    return (isinstance(attn, nn.MultiheadAttention) and attn.batch_first and attn.in_proj_weight is not None
            and attn.bias_k is None and attn.bias_v is None and not attn.add_zero_attn)


def _lean_ok(layer: nn.Module) -> bool:
    return isinstance(layer, nn.TransformerEncoderLayer) and layer.norm_first and _fused(getattr(layer, "self_attn", None))


def _lean_decoder_ok(layer: nn.Module) -> bool:
    return (isinstance(layer, nn.TransformerDecoderLayer) and layer.norm_first and _fused(layer.self_attn)
            and _fused(layer.multihead_attn))


def attention_bias(x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor | None:
    """The additive bias for ``scaled_dot_product_attention`` of an ``nn.TransformerEncoderLayer``'s
    masks, in the module's conventions: ``attn_mask`` ``[T, T]`` float (added to the scores) or bool
    (True = not allowed); ``key_padding_mask [B, T]`` True = padding. None when nothing is masked."""
    bias = None
    if attn_mask is not None:
        if attn_mask.is_floating_point():
            bias = attn_mask.to(x.dtype)
        else:
            bias = torch.zeros(attn_mask.shape, dtype=x.dtype, device=x.device).masked_fill(attn_mask, torch.finfo(x.dtype).min)
    if key_padding_mask is not None:
        keys = padding_bias(~key_padding_mask, x)
        if keys is not None:
            bias = keys if bias is None else (bias + keys).clamp(min=torch.finfo(x.dtype).min)
    return bias


def _layer(layer: nn.TransformerEncoderLayer, x: Tensor, bias: Tensor | None) -> Tensor:
    attn = layer.self_attn
    q, k, v = F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
    h = attn.num_heads
    a = F.scaled_dot_product_attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), attn_mask=bias)
    x = x + attn.out_proj(a.transpose(1, 2).reshape(x.shape))
    return x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))


def _module_runs(mod: nn.Module, x: Tensor) -> bool:
    return mod.training or (torch.is_grad_enabled() and x.requires_grad)


def encoder_layer_forward(layer: nn.TransformerEncoderLayer, x: Tensor, attn_mask: Tensor | None = None,
                          key_padding_mask: Tensor | None = None) -> Tensor:
    """``layer(x, src_mask=attn_mask, src_key_padding_mask=key_padding_mask)`` for one batch-first
    pre-norm layer (masks in the module's conventions, see :func:`attention_bias`)."""
    if _module_runs(layer, x) or not _lean_ok(layer):
        return layer(x, src_mask=attn_mask, src_key_padding_mask=key_padding_mask)
    return _layer(layer, x, attention_bias(x, attn_mask, key_padding_mask))


def encoder_forward(enc: nn.TransformerEncoder, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
    """``enc(x, src_key_padding_mask=key_padding_mask)`` for a batch-first stack of pre-norm
    ``nn.TransformerEncoderLayer``: ``x [B, T, D]``, ``key_padding_mask [B, T]`` True = padding
    (PyTorch's convention). In training mode, or for layers it does not cover, the module runs."""
    if _module_runs(enc, x) or not all(_lean_ok(la) for la in enc.layers):
        return enc(x, src_key_padding_mask=key_padding_mask)
    bias = attention_bias(x, None, key_padding_mask)
    for layer in enc.layers:
        x = _layer(layer, x, bias)
    return x if enc.norm is None else enc.norm(x)


def decoder_forward(dec: nn.TransformerDecoder, x: Tensor, memory: Tensor, tgt_key_padding_mask: Tensor | None = None,
                    memory_key_padding_mask: Tensor | None = None) -> Tensor:
    """``dec(x, memory, tgt_key_padding_mask=..., memory_key_padding_mask=...)`` (no causal mask) for a
    batch-first stack of pre-norm ``nn.TransformerDecoderLayer``: ``x [B, N, D]`` queries, ``memory
    [B, T, D]``; masks True = padding (PyTorch's convention). Per layer: fused q/k/v self-attention,
    cross-attention whose k/v come from ``memory`` in one projection, the feed-forward block. A row
    with no real query or key stays finite (the module gives NaN there). In training mode, or for
    layers it does not cover, the module runs."""
    if _module_runs(dec, x) or not all(_lean_decoder_ok(la) for la in dec.layers):
        return dec(x, memory, tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask)
    self_bias = attention_bias(x, None, tgt_key_padding_mask)
    mem_bias = attention_bias(x, None, memory_key_padding_mask)
    d = x.shape[-1]
    for layer in dec.layers:
        sa, ca = layer.self_attn, layer.multihead_attn
        h = sa.num_heads
        q, k, v = F.linear(layer.norm1(x), sa.in_proj_weight, sa.in_proj_bias).chunk(3, -1)
        a = F.scaled_dot_product_attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), attn_mask=self_bias)
        x = x + sa.out_proj(a.transpose(1, 2).reshape(x.shape))
        h = ca.num_heads
        q = F.linear(layer.norm2(x), ca.in_proj_weight[:d], None if ca.in_proj_bias is None else ca.in_proj_bias[:d])
        k, v = F.linear(memory, ca.in_proj_weight[d:], None if ca.in_proj_bias is None else ca.in_proj_bias[d:]).chunk(2, -1)
        a = F.scaled_dot_product_attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), attn_mask=mem_bias)
        x = x + ca.out_proj(a.transpose(1, 2).reshape(x.shape))
        x = x + layer.linear2(layer.activation(layer.linear1(layer.norm3(x))))
    return x if dec.norm is None else dec.norm(x)


__all__ = ["attention_bias", "decoder_forward", "encoder_forward", "encoder_layer_forward", "padding_bias", "split_heads"]
