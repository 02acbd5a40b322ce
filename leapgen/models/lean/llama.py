"""A compact Llama decoder for decoding, built from a transformers ``LlamaForCausalLM``'s weights.

transformers' Llama spends most of a small model's forward in framework code (module dispatch,
mask builders, cache objects, hooks). :class:`LeanLlama` computes the same function with
fewer, larger operations:

* one fused QKV matmul and one fused gate/up matmul per layer (weights concatenated once);
* RoPE cos/sin tables precomputed once for every position (the network's own ``inv_freq`` and
  ``attention_scaling``, same float32 arithmetic as transformers), gathered by position id;
* ``F.scaled_dot_product_attention`` over a :class:`~leapgen.models.lean.static_cache.StaticKVCache`
  (keys written in place, boolean masks for holes and trees, no mask at all for one token).

No retraining: :meth:`LeanLlama.from_hf` copies the weights. :func:`lean_supported` says whether
a transformers model can be converted (Llama architecture with a static RoPE); anything else
keeps the transformers adapter (:class:`~leapgen.models.hf.HFCausalLM`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .static_cache import StaticBackend

#: RoPE kinds whose frequencies do not depend on the sequence length (tables can be precomputed)
STATIC_ROPE = ("default", "linear", "llama3")


@dataclass(frozen=True)
class LeanConfig:
    vocab_size: int
    hidden_size: int
    n_layers: int
    n_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    max_length: int
    eps: float
    attn_bias: bool = False
    mlp_bias: bool = False


def lean_supported(model: Any) -> str | None:
    """None when ``model`` (a transformers model) can run as :class:`LeanLlama`, else the reason."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return f"{type(model).__name__} is not a Llama-architecture model"
    if type(model).__name__ != "LlamaForCausalLM":
        return f"{type(model).__name__} is not LlamaForCausalLM"
    rope = getattr(cfg, "rope_parameters", None) or {}
    kind = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    if kind not in STATIC_ROPE:
        return f"its RoPE type {kind!r} changes with the sequence length"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"its activation {cfg.hidden_act!r} is not SiLU"
    if int(getattr(cfg, "pretraining_tp", 1) or 1) != 1:
        return "pretraining_tp > 1"
    return None


def _rotate_half(x: Tensor) -> Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LeanLayer(nn.Module):
    def __init__(self, c: LeanConfig) -> None:
        super().__init__()
        q, kv = c.n_heads * c.head_dim, c.kv_heads * c.head_dim
        self.split = (q, kv, kv)
        self.wqkv = nn.Linear(c.hidden_size, q + 2 * kv, bias=c.attn_bias)
        self.wo = nn.Linear(q, c.hidden_size, bias=c.attn_bias)
        self.w_gate_up = nn.Linear(c.hidden_size, 2 * c.intermediate_size, bias=c.mlp_bias)
        self.w_down = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)
        self.attn_norm = nn.Parameter(torch.ones(c.hidden_size))
        self.mlp_norm = nn.Parameter(torch.ones(c.hidden_size))
        self.c = c


class LeanLlama(nn.Module):
    """The Llama decoder function (see the module docstring); ``forward`` returns logits of
    every new token and writes their keys/values into the cache backend's layers."""

    def __init__(self, c: LeanConfig, inv_freq: Tensor, attention_scaling: float = 1.0) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([LeanLayer(c) for _ in range(c.n_layers)])
        self.norm = nn.Parameter(torch.ones(c.hidden_size))
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.inv_freq, self.attention_scaling = inv_freq.float().cpu(), float(attention_scaling)
        self.cos, self.sin = self.rope_tables(torch.device("cpu"))
        self.scale = c.head_dim**-0.5
        self.gqa = c.kv_heads != c.n_heads

    def rope_tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """float32 ``(cos, sin) [max_length, head_dim]`` for every position, with transformers'
        arithmetic (``position * inv_freq`` in float32, duplicated halves, times the scaling)."""
        pos = torch.arange(self.c.max_length, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(device), (emb.sin() * self.attention_scaling).to(device)

    @classmethod
    @torch.no_grad()
    def from_hf(cls, model: Any) -> LeanLlama:
        """Build from a transformers ``LlamaForCausalLM`` (weights copied, same device and dtype)."""
        why = lean_supported(model)
        if why is not None:
            raise ValueError(f"cannot build a lean Llama: {why}")
        cfg = model.config
        base = model.model
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        c = LeanConfig(
            vocab_size=int(model.lm_head.weight.shape[0]),
            hidden_size=cfg.hidden_size,
            n_layers=cfg.num_hidden_layers,
            n_heads=cfg.num_attention_heads,
            kv_heads=cfg.num_key_value_heads or cfg.num_attention_heads,
            head_dim=head_dim,
            intermediate_size=cfg.intermediate_size,
            max_length=int(cfg.max_position_embeddings),
            eps=float(cfg.rms_norm_eps),
            attn_bias=bool(getattr(cfg, "attention_bias", False)),
            mlp_bias=bool(getattr(cfg, "mlp_bias", False)),
        )
        rot = base.rotary_emb
        lean = cls(c, rot.original_inv_freq.detach().cpu(), float(rot.attention_scaling))
        w = model.lm_head.weight
        lean.to(device=w.device, dtype=w.dtype)
        # the tables stay float32 until indexed (transformers casts cos/sin to the activations' dtype)
        lean.cos, lean.sin = lean.rope_tables(w.device)
        lean.embed.weight.copy_(base.embed_tokens.weight)
        lean.norm.copy_(base.norm.weight)
        lean.lm_head.weight.copy_(model.lm_head.weight)
        for dst, src in zip(lean.layers, base.layers):
            a, m = src.self_attn, src.mlp
            dst.wqkv.weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
            dst.wo.weight.copy_(a.o_proj.weight)
            if c.attn_bias:
                dst.wqkv.bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
                dst.wo.bias.copy_(a.o_proj.bias)
            dst.w_gate_up.weight.copy_(torch.cat([m.gate_proj.weight, m.up_proj.weight]))
            dst.w_down.weight.copy_(m.down_proj.weight)
            if c.mlp_bias:
                dst.w_gate_up.bias.copy_(torch.cat([m.gate_proj.bias, m.up_proj.bias]))
                dst.w_down.bias.copy_(m.down_proj.bias)
            dst.attn_norm.copy_(src.input_layernorm.weight)
            dst.mlp_norm.copy_(src.post_attention_layernorm.weight)
        return lean.eval()

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.c.eps)
        return weight * xf.to(x.dtype)

    def forward(self, tokens: Tensor, position_ids: Tensor, mask: Tensor | None, backend: StaticBackend) -> Tensor:
        """Logits ``[B, n, V]`` of ``tokens [B, n]`` at ``position_ids [B, n]``; ``mask``: boolean
        ``[B or 1, 1, n, slots + n]`` (True = attend) or None (attend to every slot)."""
        c = self.c
        b, n = tokens.shape
        h = self.embed(tokens)
        dt = h.dtype
        cos = self.cos[position_ids].to(dt)[:, None]  # [B, 1, n, D]
        sin = self.sin[position_ids].to(dt)[:, None]
        q_sz = c.n_heads * c.head_dim
        for layer, cache in zip(self.layers, backend.layers):
            x = self._rms(h, layer.attn_norm)
            q, k, v = layer.wqkv(x).split(layer.split, dim=-1)
            q = q.view(b, n, c.n_heads, c.head_dim).transpose(1, 2)
            k = k.view(b, n, c.kv_heads, c.head_dim).transpose(1, 2)
            v = v.view(b, n, c.kv_heads, c.head_dim).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            keys, values = cache.append(k, v)
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=self.gqa
            )
            h = h + layer.wo(out.transpose(1, 2).reshape(b, n, q_sz))
            x = self._rms(h, layer.mlp_norm)
            gate, up = layer.w_gate_up(x).chunk(2, dim=-1)
            h = h + layer.w_down(F.silu(gate) * up)
        return self.lm_head(self._rms(h, self.norm))


__all__ = ["LeanConfig", "LeanLlama", "STATIC_ROPE", "lean_supported"]
