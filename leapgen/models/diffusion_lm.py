"""A small masked diffusion language model (LLaDA / Dream style) with the masked-model cache.

:class:`DiffusionLM` is a Llama-shaped transformer (RMSNorm, rotary positions, SwiGLU MLP,
untied output head) whose attention is **bidirectional**: every position sees every real
position, so one forward predicts every ``[MASK]`` of a partly known sequence. Its parameter
names follow transformers' ``LlamaForCausalLM`` (``model.layers.{i}.self_attn.q_proj`` ...), so
:meth:`DiffusionLM.from_causal_lm` starts it from a trained autoregressive Llama (the
AR-to-diffusion adaptation of DiffuLLaMA, Gong et al. 2025, and Dream, Ye et al. 2025): the
vocabulary grows by one ``[MASK]`` row (initialised to the mean embedding) and the weights are
copied.

* ``shift=True`` (Dream / DiffuLLaMA "shift"): the logits of position ``i`` come from the hidden
  state of position ``i - 1``, as in the AR model the weights came from, so the adapted model
  keeps its next-token head. Position 0 must then be known (a prompt or ``<|endoftext|>``).
* ``attn_mask`` (training only): a boolean ``[B, 1, L, L]`` visibility mask; the adaptation
  recipe anneals it from causal to full (attention-mask annealing).
* the masked cache (:class:`~leapgen.models.masked_cache.MaskedCache`): a *refresh* forward
  (``cache.window is None`` and no ``cache.positions``) stores every layer's rotated keys and
  values; a *windowed* forward (``cache.window = (lo, hi)``, Fast-dLLM prefix / dual cache) or a
  *subset* forward (``cache.positions``: sorted positions shared by the rows, dKV-Cache)
  recomputes only those positions, attends to the stored keys / values elsewhere and writes the
  recomputed ones back (Fast-dLLM's ``replace_position``; dKV-Cache's delayed caching).

Guarantee of the cache: a refresh forward returns exactly the uncached logits; a windowed or
subset forward right after a refresh with unchanged tokens matches them to float rounding; after
the tokens change it is approximate (stale keys / values outside the window), which
``tests/test_dllm_samplers.py`` bounds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError, InputError
from .masked_cache import MaskedCache, row_subsets, take_positions, write_positions


@dataclass
class DiffusionLMConfig(ComponentConfig):
    """Architecture of :class:`DiffusionLM`; ``mask_id`` defaults to ``vocab_size - 1``."""

    vocab_size: int = 4097
    hidden_size: int = 384
    num_hidden_layers: int = 8
    num_attention_heads: int = 6
    intermediate_size: int = 1024
    max_position_embeddings: int = 1024
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    mask_id: int = -1
    eot_id: int = 0
    shift: bool = True

    def __post_init__(self) -> None:
        if self.mask_id < 0:
            self.mask_id = self.vocab_size - 1
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}.")
        if not 0 <= self.mask_id < self.vocab_size:
            raise ConfigError(f"mask_id {self.mask_id} must lie in [0, vocab_size={self.vocab_size}).")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Llama's rotary embedding (rotate_half convention) of ``x [B, H, n, D]``; cos/sin ``[B|1, 1, n, D]``."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, cfg: DiffusionLMConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.heads = cfg.num_attention_heads
        self.head_dim = d // self.heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, kv: tuple[Tensor, Tensor] | None,
                idx: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """``x [B, n, d]`` at positions ``idx`` (None: all; ``[n]`` shared or ``[B, n]`` per row).
        ``kv``: stored keys/values ``[B, H, L, D]`` that the new ones overwrite at ``idx``. Returns (output, keys, values) over the full length."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if kv is not None:
            k, v = write_positions(kv[0], k, idx), write_positions(kv[1], v, idx)
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1)), k, v


class MLP(nn.Module):
    def __init__(self, cfg: DiffusionLMConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DiffusionLMConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Backbone(nn.Module):
    def __init__(self, cfg: DiffusionLMConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DiffusionLM(PretrainedMixin, nn.Module):
    """Bidirectional Llama-shaped masked LM (see the module docstring).

    ``forward(tokens [B, L], attention_mask=None, cache=None, attn_mask=None) -> logits``:
    ``[B, L, V]``, or ``[B, hi - lo, V]`` / ``[B, len(cache.positions), V]`` for a cached
    windowed / subset forward. ``attention_mask``: ``[B, L]`` bool, False on padding.
    """

    config_class = DiffusionLMConfig
    #: windowed and subset (``cache.positions``, shared ``[n]`` or per row ``[B, n]``) cached
    #: forwards are all implemented
    supports_cache_positions = True
    supports_row_positions = True

    def __init__(self, config: DiffusionLMConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = DiffusionLMConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = cfg = config
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        ang = torch.arange(cfg.max_position_embeddings, dtype=torch.float64)[:, None] * inv[None]
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("rope_cos", ang.cos().float(), persistent=False)
        self.register_buffer("rope_sin", ang.sin().float(), persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def mask_id(self) -> int:
        return self.config.mask_id

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    # ------------------------------------------------------------------------------ adaptation
    @classmethod
    def from_causal_lm(cls, causal: nn.Module, *, shift: bool = True, max_position_embeddings: int | None = None) -> DiffusionLM:
        """A DiffusionLM with the weights of a transformers ``LlamaForCausalLM`` (MHA, no biases,
        untied head) plus one ``[MASK]`` token (id = the old vocabulary size, embedding = mean row)."""
        c = causal.config
        if getattr(c, "num_key_value_heads", c.num_attention_heads) != c.num_attention_heads:
            raise ConfigError("from_causal_lm needs multi-head attention (num_key_value_heads == num_attention_heads).")
        if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
            raise ConfigError("from_causal_lm needs a Llama without attention / MLP biases.")
        rope = getattr(c, "rope_parameters", None) or {}
        cfg = DiffusionLMConfig(
            vocab_size=c.vocab_size + 1,
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            intermediate_size=c.intermediate_size,
            max_position_embeddings=max_position_embeddings or c.max_position_embeddings,
            rms_norm_eps=c.rms_norm_eps,
            rope_theta=float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))),
            mask_id=c.vocab_size,
            eot_id=int(c.eos_token_id if isinstance(c.eos_token_id, int) else 0),
            shift=shift,
        )
        model = cls(cfg)
        src = {k: v.detach().float() for k, v in causal.state_dict().items()}
        own = model.state_dict()
        for k in own:
            if k not in src:
                raise ConfigError(f"the causal LM has no weight {k!r}; is it a LlamaForCausalLM?")
            if k in ("model.embed_tokens.weight", "lm_head.weight"):
                w = src[k]
                extra = w.mean(0, keepdim=True) if k.startswith("model.") else torch.zeros_like(w[:1])
                own[k] = torch.cat([w, extra], 0)
            else:
                own[k] = src[k]
        model.load_state_dict(own)
        return model

    # ------------------------------------------------------------------------------ forward
    def _rope(self, idx: Tensor | None, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        if length > self.config.max_position_embeddings:
            raise InputError(f"{length} positions exceed max_position_embeddings={self.config.max_position_embeddings}.")
        cos, sin = self.rope_cos[:length], self.rope_sin[:length]
        if idx is not None:
            cos, sin = cos[idx], sin[idx]
        if cos.dim() == 3:  # per-row positions: [B, n, D] -> [B, 1, n, D]
            return cos[:, None].to(dtype), sin[:, None].to(dtype)
        return cos[None, None].to(dtype), sin[None, None].to(dtype)

    def forward(
        self,
        tokens: Tensor,
        attention_mask: Tensor | None = None,
        cache: MaskedCache | None = None,
        attn_mask: Tensor | None = None,
    ) -> Tensor:
        b, length = tokens.shape
        shift = self.config.shift
        compute: Tensor | None = None  # positions whose hidden states are computed (None: all)
        out_pos: Tensor | None = None  # positions whose logits are returned
        if cache is not None and (cache.window is not None or getattr(cache, "positions", None) is not None):
            if getattr(cache, "positions", None) is not None:
                out_pos = cache.positions.to(tokens.device)
            else:
                lo, hi = cache.window
                out_pos = torch.arange(lo, hi, device=tokens.device)
            compute = out_pos
            if shift and out_pos.dim() == 1:
                compute = torch.unique(torch.cat([out_pos, (out_pos - 1).clamp(min=0)]))
            elif shift:  # per row: each row's outputs and their left neighbours (padded, sorted)
                need = torch.zeros(b, length, dtype=torch.bool, device=tokens.device)
                compute = row_subsets(need.scatter_(1, out_pos, True).scatter_(1, (out_pos - 1).clamp(min=0), True))
        mask = None
        if attn_mask is not None:
            mask = attn_mask
        if attention_mask is not None:
            keys = attention_mask.bool()[:, None, None, :]
            mask = keys if mask is None else mask & keys
        if mask is not None and compute is not None and mask.shape[-2] != 1:
            if compute.dim() == 1:
                mask = mask[..., compute, :]
            else:
                mask = mask.expand(b, 1, length, length).gather(2, compute[:, None, :, None].expand(-1, 1, -1, length))
        if compute is None:
            x = self.model.embed_tokens(tokens)
        else:
            x = self.model.embed_tokens(take_positions(tokens, compute))
        cos, sin = self._rope(compute, length, x.dtype)
        for i, layer in enumerate(self.model.layers):
            kv = None
            if compute is not None:
                kv = (cache.get(f"k{i}"), cache.get(f"v{i}"))
            h, k, v = layer.self_attn(layer.input_layernorm(x), cos, sin, mask, kv, compute)
            if cache is not None:
                cache.put(f"k{i}", k)
                cache.put(f"v{i}", v)
            x = x + h
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        x = self.model.norm(x)
        if shift:
            if compute is None:
                x = torch.cat([x[:, :1], x[:, :-1]], dim=1)
            else:  # logits of p come from the hidden state of p - 1 (position 0 from itself)
                x = take_positions(x, torch.searchsorted(compute, (out_pos - 1).clamp(min=0)))
        elif compute is not None and out_pos is not compute:
            x = take_positions(x, torch.searchsorted(compute, out_pos))
        return self.lm_head(x)


def training_attention(length: int, ratio: float, generator: torch.Generator | None, batch: int, device: torch.device) -> Tensor:
    """Attention-mask annealing (DiffuLLaMA): causal visibility plus each future key with
    probability ``ratio`` (0 = causal, 1 = full bidirectional); bool ``[B, 1, L, L]``."""
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    if ratio >= 1.0:
        return torch.ones(batch, 1, length, length, dtype=torch.bool, device=device)
    if ratio <= 0.0:
        return causal[None, None].expand(batch, 1, length, length)
    u = torch.rand(batch, 1, length, length, generator=generator, device=device)
    return causal[None, None] | (u < ratio)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["DiffusionLM", "DiffusionLMConfig", "count_params", "training_attention"]
