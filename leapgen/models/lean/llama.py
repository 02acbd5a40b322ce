"""A compact Llama decoder for decoding, built from a transformers ``LlamaForCausalLM``'s weights.

transformers' Llama spends most of a small model's forward in framework code (module dispatch,
mask builders, cache objects, hooks). :class:`LeanLlama` computes the same function with
fewer, larger operations:

* one fused QKV matmul and one fused gate/up matmul per layer (weights concatenated once and
  stored transposed, ``[in, out]``: :func:`_linear`);
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

from ...kernels import cpu_gemm
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


def _linear(x: Tensor, w_t: Tensor, bias: Tensor | None, packed: Tensor | None = None) -> Tensor:
    """``x @ w_t (+ bias)`` with the weight stored transposed (``[in, out]``, contiguous).

    Measured on the shipped 17M-parameter target (one CPU thread): for one token per row this
    matrix-vector product runs about 1.6-1.8x faster than ``F.linear``'s (a 1-token forward
    6.3 ms instead of 9.9 ms); for several tokens it is ``F.linear``'s own GEMM, bit for bit.
    With ``packed`` weights (:meth:`LeanLlama.pack_cpu_gemm`) a float32 CPU call of a few rows runs
    :func:`leapgen.kernels.cpu_gemm.linear` instead: the weights are read once for every row."""
    if packed is not None:
        if (x.dim() == 3 and x.shape[0] * x.shape[1] <= cpu_gemm.MAX_ROWS and x.dtype == torch.float32 and x.is_cpu
                and cpu_gemm.loaded()):  # not loaded: packed weights unpickled in a fresh process
            return cpu_gemm.linear_rows(x, w_t.shape[1], bias, packed)
        return cpu_gemm.linear(x, w_t, bias, packed)
    y = x @ w_t
    return y if bias is None else y + bias


class LeanLayer(nn.Module):
    """One decoder layer's weights, transposed to ``[in, out]`` and fused (QKV; gate and up)."""

    def __init__(self, c: LeanConfig) -> None:
        super().__init__()
        q, kv = c.n_heads * c.head_dim, c.kv_heads * c.head_dim
        d, f = c.hidden_size, c.intermediate_size
        # transposed, [in, out] (see _linear)
        self.wqkv = nn.Parameter(torch.empty(d, q + 2 * kv))
        self.wo = nn.Parameter(torch.empty(q, d))
        self.w_gate_up = nn.Parameter(torch.empty(d, 2 * f))
        self.w_down = nn.Parameter(torch.empty(f, d))
        self.b_qkv = nn.Parameter(torch.zeros(q + 2 * kv)) if c.attn_bias else None
        self.b_o = nn.Parameter(torch.zeros(d)) if c.attn_bias else None
        self.b_gate_up = nn.Parameter(torch.zeros(2 * f)) if c.mlp_bias else None
        self.b_down = nn.Parameter(torch.zeros(d)) if c.mlp_bias else None
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.mlp_norm = nn.Parameter(torch.ones(d))
        #: the weights above in the CPU GEMM's panels (:meth:`LeanLlama.pack_cpu_gemm`), or None
        self.packed: dict[str, Tensor] | None = None


class LeanLlama(nn.Module):
    """The Llama decoder function (see the module docstring); ``forward`` returns logits of
    every new token and writes their keys/values into the cache backend's layers."""

    def __init__(self, c: LeanConfig, inv_freq: Tensor, attention_scaling: float = 1.0) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([LeanLayer(c) for _ in range(c.n_layers)])
        self.norm = nn.Parameter(torch.ones(c.hidden_size))
        self.lm_head = nn.Parameter(torch.empty(c.hidden_size, c.vocab_size))  # transposed
        self.inv_freq, self.attention_scaling = inv_freq.float().cpu(), float(attention_scaling)
        self.cos, self.sin_signed = self.rope_tables(torch.device("cpu"))
        self.scale = c.head_dim**-0.5
        self.gqa = c.kv_heads != c.n_heads
        self.lm_head_packed: Tensor | None = None

    @torch.no_grad()
    def pack_cpu_gemm(self) -> bool:
        """Lay the float32 CPU weights out for :mod:`leapgen.kernels.cpu_gemm` (a second copy of
        every matrix, in panels) so that decode and verification steps of up to
        :data:`~leapgen.kernels.cpu_gemm.MAX_ROWS` rows run the small-M kernel. Returns whether it
        did; it does not on another device or dtype, or where the kernel is off or cannot build
        (logged by the kernel). Repack after changing the weights; :meth:`unpack_cpu_gemm` undoes it."""
        if self.lm_head.device.type != "cpu" or self.lm_head.dtype != torch.float32 or not cpu_gemm.available():
            return False
        for layer in self.layers:
            layer.packed = {name: cpu_gemm.pack(getattr(layer, name)) for name in ("wqkv", "wo", "w_gate_up", "w_down")}
        self.lm_head_packed = cpu_gemm.pack(self.lm_head)
        return True

    def unpack_cpu_gemm(self) -> None:
        """Drop the packed copies: every matmul runs torch's GEMM again."""
        for layer in self.layers:
            layer.packed = None
        self.lm_head_packed = None

    def rope_tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """float32 ``(cos, sin_signed) [max_length, head_dim]`` for every position, with transformers'
        arithmetic (``position * inv_freq`` in float32, duplicated halves, times the scaling).
        ``sin_signed`` carries rotate_half's sign (first half negated), so that
        ``x * cos + rotate_half(x) * sin == x * cos + x.roll(D/2) * sin_signed`` (the same products:
        only signs move) and no forward has to build it."""
        pos = torch.arange(self.c.max_length, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin() * self.attention_scaling
        half = self.c.head_dim // 2
        sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        return (emb.cos() * self.attention_scaling).to(device), sin_signed.to(device)

    def rope(self, position_ids: Tensor, dt: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(cos, sin_signed)`` ``[B, n, 1, head_dim]`` for ``position_ids [B, n]``, in ``dt``."""
        return self.cos[position_ids].to(dt)[:, :, None], self.sin_signed[position_ids].to(dt)[:, :, None]

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
        lean.cos, lean.sin_signed = lean.rope_tables(w.device)
        lean.embed.weight.copy_(base.embed_tokens.weight)
        lean.norm.copy_(base.norm.weight)
        lean.lm_head.copy_(w.t())
        for dst, src in zip(lean.layers, base.layers):
            a, m = src.self_attn, src.mlp
            dst.wqkv.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).t())
            dst.wo.copy_(a.o_proj.weight.t())
            dst.w_gate_up.copy_(torch.cat([m.gate_proj.weight, m.up_proj.weight]).t())
            dst.w_down.copy_(m.down_proj.weight.t())
            if c.attn_bias:
                dst.b_qkv.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
                dst.b_o.copy_(a.o_proj.bias)
            if c.mlp_bias:
                dst.b_gate_up.copy_(torch.cat([m.gate_proj.bias, m.up_proj.bias]))
                dst.b_down.copy_(m.down_proj.bias)
            dst.attn_norm.copy_(src.input_layernorm.weight)
            dst.mlp_norm.copy_(src.post_attention_layernorm.weight)
        return lean.eval()

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        if x.dtype == torch.float32:  # transformers' arithmetic, without the no-op casts
            return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps))
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.c.eps)
        return weight * xf.to(x.dtype)

    def forward(self, tokens: Tensor, position_ids: Tensor, mask: Tensor | None, backend: StaticBackend) -> Tensor:
        """Logits ``[B, n, V]`` of ``tokens [B, n]`` at ``position_ids [B, n]``; ``mask``: boolean
        ``[B or 1, 1, n, slots + n]`` (True = attend) or None (attend to every slot)."""
        c = self.c
        b, n = tokens.shape
        hq, hk, d = c.n_heads, c.kv_heads, c.head_dim
        h = F.embedding(tokens, self.embed.weight)
        dt = h.dtype
        # RoPE of queries and keys at once: x * cos + roll(x, D/2) * sin_signed (see rope_tables)
        cos, sin = self.rope(position_ids, dt)  # [B, n, 1, D]
        half = d // 2
        q_sz = hq * d
        if mask is not None and mask.dtype == torch.bool:
            # additive once per forward (SDPA would convert a boolean mask again in every layer)
            add = torch.zeros(mask.shape, dtype=dt, device=mask.device)
            mask = add.masked_fill_(~mask, torch.finfo(dt).min)
        for layer, cache in zip(self.layers, backend.layers):
            x = self._rms(h, layer.attn_norm)
            pk = layer.packed or {}
            qkv = _linear(x, layer.wqkv, layer.b_qkv, pk.get("wqkv")).view(b, n, hq + 2 * hk, d)
            qk = qkv[:, :, : hq + hk]
            qk = qk * cos + qk.roll(half, -1) * sin
            q = qk[:, :, :hq].transpose(1, 2)
            k = qk[:, :, hq:].transpose(1, 2)
            v = qkv[:, :, hq + hk :].transpose(1, 2)
            keys, values = cache.append(k, v)
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=self.gqa
            )
            h = h + _linear(out.transpose(1, 2).reshape(b, n, q_sz), layer.wo, layer.b_o, pk.get("wo"))
            x = self._rms(h, layer.mlp_norm)
            gate, up = _linear(x, layer.w_gate_up, layer.b_gate_up, pk.get("w_gate_up")).chunk(2, dim=-1)
            h = h + _linear(F.silu(gate) * up, layer.w_down, layer.b_down, pk.get("w_down"))
        return _linear(self._rms(h, self.norm), self.lm_head, None, self.lm_head_packed)


__all__ = ["LeanConfig", "LeanLlama", "STATIC_ROPE", "lean_supported"]
