"""LlamaGen's class/text-conditional image GPT and its :class:`CausalLM` adapter.

Paper: Sun et al., "Autoregressive Model Beats Diffusion: Llama for Scalable Image Generation"
(LlamaGen), 2024; code ``FoundationVision/LlamaGen``, ``autoregressive/models/gpt.py`` and
``generate.py``.

Network (:class:`LlamaGenGPT`, module names as in the reference so real checkpoints load with
:meth:`LlamaGenGPT.from_llamagen`): ``tok_embeddings`` (image codes), ``cls_embedding
.embedding_table`` (a ``LabelEmbedder`` with ``num_classes + 1`` rows: the last is the **null
class** used for classifier-free guidance), ``layers.{i}`` Llama blocks (``attention_norm`` /
``ffn_norm`` RMSNorm, ``attention.wqkv`` + ``attention.wo`` without biases, SwiGLU
``feed_forward.w1/w2/w3`` with hidden = ``find_multiple(int(2 * 4d / 3), multiple_of)``), ``norm``
and the ``output`` head ``Linear(dim, V)``. Positions use **2D RoPE**: the first half of each head's
rotary pairs turns with the token's row, the second with its column (``precompute_freqs_cis_2d``);
the condition prefix gets a zero entry of the table, which in the reference code zeroes the queries
and keys of condition tokens (``cond_qk_zero=True``, needed for real checkpoints; ``False`` gives
them the identity rotation instead, which the shipped emoji model uses).

Conditioning fills the first ``cls_token_num = 1 + text_len`` sequence positions (LlamaGen's
class-to-image models have ``text_len = 0``): position 0 holds the class embedding (``num_classes``
= the null class), positions ``1 .. text_len`` the output of a small bidirectional ``text_encoder``
(word embeddings + learned positions + ``text_layers`` blocks) over the prompt's word ids (``0``
pad, ``1`` null, ``2`` unknown; see :class:`leapgen.tokenizers.word_vocab.WordVocab`); an all-null
text is replaced by a learned ``text_encoder.null_embedding`` (LlamaGen's ``uncond_embedding``).
The condition is **not** a token id: ``forward`` takes the class indices and word ids beside the
image tokens (whatever id sits at a condition position is ignored), and the token ids are image
codes only (``0 <= id < V``). Training drops the condition with ``class_dropout_prob = 0.1`` (done by
the recipe on the condition ids ``[class] + words``, :meth:`LlamaGenGPT.condition_ids`). Logits
cover only the image vocabulary.

Adapter (:class:`~leapgen.models.llamagen_lm.LlamaGenLM`, in ``llamagen_lm.py``): the :class:`CausalLM` contract with a KV cache whose backend has
per-layer ``keys`` / ``values``; multi-token forwards take the 4-D mask and position ids from
:class:`KVCache`, and the 2D RoPE row/column come from ``position id - cls_token_num``. Its
condition is a :class:`~leapgen.models.condition.ClassCondition` given to ``new_cache`` (labels,
optional text word ids, guidance); it declares ``condition_slots = cls_token_num`` so the samplers
feed that many placeholder positions, which the model fills from the condition. With guidance
(``cond.guidance.scale != 1``) every forward runs the batch doubled (``[cond, null]`` conditions;
one forward, counted once) and returns :func:`leapgen.models.guidance.cfg_logits` of the two
halves, so a draft and a target given the same condition present identically processed
distributions to the unchanged samplers; the cache hooks map every row operation (rollback,
tree-path selection, dropping rows) to both halves. The adapter keeps no per-call state.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError, InputError
from ..tokenizers.reference_checkpoints import load_reference_state, unwrap_checkpoint
from .condition import ClassCondition

logger = logging.getLogger(__name__)

TEXT_PAD, TEXT_NULL, TEXT_UNK = 0, 1, 2


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass
class GPTConfig(ComponentConfig):
    vocab_size: int = 1024  # image codebook size V
    dim: int = 256
    n_layer: int = 6
    n_head: int = 8
    n_kv_head: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    token_dropout_p: float = 0.1
    resid_dropout_p: float = 0.1
    ffn_dropout_p: float = 0.1
    num_classes: int = 8
    class_dropout_prob: float = 0.1
    grid_size: int = 16  # tokens per side; block_size = grid_size ** 2
    text_vocab_size: int = 0  # 0: class conditioning only (LlamaGen c2i)
    text_len: int = 0
    text_layers: int = 2
    cond_qk_zero: bool = True  # LlamaGen's zero RoPE entries at the condition prefix
    class_names: tuple[str, ...] | None = None  # names of the classes (for pipelines), like HF id2label

    def __post_init__(self) -> None:
        if self.dim % self.n_head or (self.dim // self.n_head) % 4:
            raise ConfigError(f"dim={self.dim} must split into n_head={self.n_head} heads of a size divisible by 4 (2D RoPE)")
        kv = self.n_kv_head or self.n_head
        if self.n_head % kv:
            raise ConfigError(f"n_head={self.n_head} must be a multiple of n_kv_head={kv}")
        if (self.text_vocab_size > 0) != (self.text_len > 0):
            raise ConfigError("text_vocab_size and text_len must both be 0 (class only) or both positive")
        if self.class_names is not None:
            self.class_names = tuple(str(c) for c in self.class_names)
            if len(self.class_names) != self.num_classes:
                raise ConfigError(f"{len(self.class_names)} class_names for num_classes={self.num_classes}")
        if self.text_vocab_size and self.text_vocab_size <= TEXT_UNK:
            raise ConfigError("text_vocab_size must exceed the 3 special words (pad, null, unk)")

    @property
    def cls_token_num(self) -> int:
        return 1 + self.text_len

    @property
    def block_size(self) -> int:
        return self.grid_size**2

    @property
    def ffn_hidden(self) -> int:
        hidden = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return find_multiple(hidden, self.multiple_of)


GPT_PRESETS: dict[str, dict[str, int]] = {
    "GPT-B": dict(n_layer=12, n_head=12, dim=768),
    "GPT-L": dict(n_layer=24, n_head=16, dim=1024),
    "GPT-XL": dict(n_layer=36, n_head=20, dim=1280),
    "GPT-XXL": dict(n_layer=48, n_head=24, dim=1536),
    "GPT-XXXL": dict(n_layer=48, n_head=40, dim=2560),
    "GPT-1B": dict(n_layer=22, n_head=32, dim=2048),
    "GPT-3B": dict(n_layer=24, n_head=32, dim=3200),
    "GPT-7B": dict(n_layer=32, n_head=32, dim=4096),
}


def precompute_freqs_cis_2d(grid_size: int, head_dim: int, base: float, cls_token_num: int, cond_zero: bool) -> Tensor:
    """``[cls_token_num + grid_size**2, head_dim // 2, 2]`` (cos, sin) table of LlamaGen's 2D RoPE."""
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    t = torch.arange(grid_size, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    grid = torch.cat([freqs[:, None, :].expand(-1, grid_size, -1), freqs[None, :, :].expand(grid_size, -1, -1)], dim=-1)
    cache = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    cond = torch.zeros(cls_token_num, half, 2)
    if not cond_zero:
        cond[..., 0] = 1.0  # identity rotation
    return torch.cat([cond, cache])


def apply_rotary_emb(x: Tensor, freqs: Tensor) -> Tensor:
    """``x [B, n, H, D]`` rotated by ``freqs [B, n, D/2, 2]`` (interleaved pairs, as the reference)."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs[:, :, None]
    out = torch.stack([xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1], xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], -1)
    return out.flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        h = cfg.ffn_hidden
        self.w1 = nn.Linear(cfg.dim, h, bias=False)
        self.w3 = nn.Linear(cfg.dim, h, bias=False)
        self.w2 = nn.Linear(h, cfg.dim, bias=False)
        self.ffn_dropout = nn.Dropout(cfg.ffn_dropout_p)

    def forward(self, x: Tensor) -> Tensor:
        return self.ffn_dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class _Layer:
    """One layer of the growing KV backend: ``keys`` / ``values`` ``[B, kv_heads, slots, head_dim]``.
    The adapter decodes over :class:`~leapgen.models.lean.static_cache.StaticKVCache` layers
    instead (preallocated, same ``append`` interface)."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    @property
    def is_initialized(self) -> bool:
        return self.keys is not None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k, v`` after the stored slots; return every slot (what new queries attend over)."""
        if self.keys is not None:
            k = torch.cat([self.keys, k.to(self.keys.dtype)], 2)
            v = torch.cat([self.values, v.to(self.values.dtype)], 2)
        self.keys, self.values = k, v
        return k, v


class KVBackend:
    def __init__(self, n_layer: int) -> None:
        self.layers = [_Layer() for _ in range(n_layer)]


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.dim, self.n_head = cfg.dim, cfg.n_head
        self.n_kv_head = cfg.n_kv_head or cfg.n_head
        self.head_dim = cfg.dim // cfg.n_head
        self.wqkv = nn.Linear(cfg.dim, (self.n_head + 2 * self.n_kv_head) * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.resid_dropout = nn.Dropout(cfg.resid_dropout_p)

    def forward(self, x: Tensor, freqs: Tensor | None, mask: Tensor | None, layer: _Layer | None,
                causal: bool = True, key_padding: Tensor | None = None) -> Tensor:
        b, n, _ = x.shape
        kv = self.n_kv_head * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv, kv], dim=-1)
        q = q.view(b, n, self.n_head, self.head_dim)
        k = k.view(b, n, self.n_kv_head, self.head_dim)
        v = v.view(b, n, self.n_kv_head, self.head_dim)
        if freqs is not None:
            q, k = apply_rotary_emb(q, freqs), apply_rotary_emb(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        past = 0
        if layer is not None:
            k, v = layer.append(k, v)
            past = k.shape[2] - n
        if self.n_kv_head != self.n_head:
            rep = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        is_causal = False
        if key_padding is not None:  # bidirectional text encoder
            mask = key_padding[:, None, None, :]
        elif mask is None and causal:
            if past == 0:
                is_causal = n > 1
            elif n > 1:
                mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device).tril(past)
        elif mask is not None and mask.dtype != torch.bool:  # boolean masks (True = attend) go as they are
            mask = mask.to(q.dtype)
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, is_causal=is_causal)
        out = out.transpose(1, 2).reshape(b, n, self.dim)
        return self.resid_dropout(self.wo(out))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x: Tensor, freqs: Tensor | None, mask: Tensor | None, layer: _Layer | None = None,
                key_padding: Tensor | None = None) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs, mask, layer, key_padding=key_padding)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    """Class embedding table with a null class (index ``num_classes``) for guidance."""

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, dim)
        self.num_classes = num_classes

    def forward(self, labels: Tensor) -> Tensor:
        return self.embedding_table(labels)


class TextEncoder(nn.Module):
    """Word embeddings + learned positions + bidirectional blocks over the fixed-length text prefix."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.text_vocab_size, cfg.dim)
        self.pos_embeddings = nn.Parameter(torch.randn(cfg.text_len, cfg.dim) * 0.02)
        sub = dataclasses.replace(cfg, n_kv_head=None)
        self.layers = nn.ModuleList([TransformerBlock(sub) for _ in range(cfg.text_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.null_embedding = nn.Parameter(torch.randn(cfg.text_len, cfg.dim) * 0.02)

    def forward(self, words: Tensor) -> Tensor:
        """``words [B, T]`` (word ids) -> ``[B, T, dim]``; all-null (or all-pad) rows get the null embedding."""
        is_null = ((words == TEXT_NULL) | (words == TEXT_PAD)).all(1)
        pad = words == TEXT_PAD
        keep = ~pad
        keep[is_null] = True  # avoid fully masked rows (their output is replaced anyway)
        h = self.word_embeddings(words) + self.pos_embeddings[None, : words.shape[1]]
        for blk in self.layers:
            h = blk(h, None, None, None, key_padding=keep)
        h = self.norm(h)
        return torch.where(is_null[:, None, None], self.null_embedding[None].to(h.dtype), h)


class LlamaGenGPT(PretrainedMixin, nn.Module):
    """LlamaGen GPT (see the module docstring)."""

    config_class = GPTConfig

    def __init__(self, config: GPTConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = GPTConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = cfg = config
        self.cls_embedding = LabelEmbedder(cfg.num_classes, cfg.dim)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.tok_dropout = nn.Dropout(cfg.token_dropout_p)
        self.layers = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.text_vocab_size:
            self.text_encoder = TextEncoder(cfg)
        self.register_buffer(
            "freqs_cis",
            precompute_freqs_cis_2d(cfg.grid_size, cfg.dim // cfg.n_head, cfg.rope_base, cfg.cls_token_num, cfg.cond_qk_zero),
            persistent=False,
        )
        self.apply(self._init_weights)
        nn.init.zeros_(self.output.weight)  # as the reference

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, 0.02)

    # ------------------------------------------------------------------ condition
    @property
    def cls_token_num(self) -> int:
        return self.config.cls_token_num

    @property
    def null_class(self) -> int:
        return self.config.num_classes

    def text_words(self, words: list[int] | None = None) -> list[int]:
        """Word ids padded/truncated to ``text_len`` (None = the null text)."""
        cfg = self.config
        if not cfg.text_len:
            if words is not None:
                raise InputError("this model is class-conditional only (text_len=0); pass a class, not a text")
            return []
        w = [TEXT_NULL] * cfg.text_len if words is None else (list(words)[: cfg.text_len] + [TEXT_PAD] * cfg.text_len)[: cfg.text_len]
        if any(not 0 <= x < cfg.text_vocab_size for x in w):
            raise InputError(f"text word ids must lie in [0, {cfg.text_vocab_size})")
        return w

    def condition_ids(self, class_id: int | None = None, words: list[int] | None = None) -> list[int]:
        """``[class index] + text_len word ids`` of a condition (class None = the null class
        ``num_classes``; words None = the null text): the compact form training recipes store.
        Not token ids: pass them to :meth:`training_logits`, or split them into ``labels`` /
        ``words`` for :meth:`forward`."""
        cfg = self.config
        c = cfg.num_classes if class_id is None else int(class_id)
        if not 0 <= c <= cfg.num_classes:
            raise InputError(f"class id {class_id} is outside [0, {cfg.num_classes}) (the model's classes)")
        return [c] + self.text_words(words)

    def null_condition_ids(self) -> list[int]:
        return self.condition_ids(None, None)

    # ------------------------------------------------------------------ forward
    def embed(
        self, tokens: Tensor, position_ids: Tensor, labels: Tensor | None = None, words: Tensor | None = None
    ) -> Tensor:
        """Input embeddings of image ``tokens [B, n]`` at ``position_ids [B, n]``: positions below
        ``cls_token_num`` take the condition instead (position 0 the class embedding of ``labels
        [B]``, 1.. the text encoder's output for ``words [B, text_len]``)."""
        cfg = self.config
        v = cfg.vocab_size
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= v):
            raise InputError(
                f"token ids must be image codes [0, {v}); got ids in [{int(tokens.min())}, {int(tokens.max())}]. "
                "The class and text reach the model as a condition (leapgen.models.condition.ClassCondition), "
                "not as token ids."
            )
        h = self.tok_embeddings(tokens)
        is_cond = position_ids < cfg.cls_token_num
        if not bool(is_cond.any()):
            return h
        if labels is None:
            raise InputError(
                f"positions below {cfg.cls_token_num} hold the condition; pass labels (and words) to the forward"
            )
        dtype = h.dtype
        is_cls = position_ids == 0
        if bool(is_cls.any()):
            h = torch.where(is_cls[..., None], self.cls_embedding(labels)[:, None].to(dtype), h)
        is_txt = is_cond & ~is_cls
        if cfg.text_len and bool(is_txt.any()):
            if words is None or tuple(words.shape) != (tokens.shape[0], cfg.text_len):
                raise InputError(f"words must be word ids of shape [B, {cfg.text_len}] for the text positions")
            rows = is_txt.any(1).nonzero().squeeze(1)  # the text encoder runs on the rows that need it
            enc = self.text_encoder(words.index_select(0, rows)).to(dtype)
            idx = (position_ids.index_select(0, rows) - 1).clamp(0, cfg.text_len - 1)
            got = enc.gather(1, idx[..., None].expand(-1, -1, cfg.dim))
            sub = torch.where(is_txt.index_select(0, rows)[..., None], got, h.index_select(0, rows))
            h = h.index_copy(0, rows, sub)
        return h

    def forward(
        self,
        tokens: Tensor,
        position_ids: Tensor | None = None,
        mask: Tensor | None = None,
        cache: KVBackend | None = None,
        labels: Tensor | None = None,
        words: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[B, n, V]`` (float32) of ``tokens [B, n]`` at ``position_ids [B, n]`` (default
        ``arange(n)``); ``mask``: additive or bool ``[B, 1, n, past + n]`` (default causal);
        ``cache``: a :class:`KVBackend` the new keys/values are appended to; ``labels [B]`` (class
        indices, ``num_classes`` = null) and ``words [B, text_len]``: the condition read at
        positions below ``cls_token_num``."""
        b, n = tokens.shape
        if position_ids is None:
            past = 0
            if cache is not None and cache.layers[0].keys is not None:
                past = cache.layers[0].keys.shape[2]
            position_ids = torch.arange(past, past + n, device=tokens.device)[None].expand(b, n)
        h = self.tok_dropout(self.embed(tokens, position_ids, labels, words))
        freqs = self.freqs_cis[position_ids.clamp(0, self.freqs_cis.shape[0] - 1)].to(h.dtype)
        for i, blk in enumerate(self.layers):
            h = blk(h, freqs, mask, cache.layers[i] if cache is not None else None)
        return self.output(self.norm(h)).float()

    def training_logits(self, cond_ids: Tensor, codes: Tensor) -> Tensor:
        """Teacher-forced logits ``[B, L, V]`` predicting ``codes [B, L]`` under the condition ids
        ``cond_ids [B, cls_token_num]`` (rows of :meth:`condition_ids`)."""
        p = self.cls_token_num
        if cond_ids.dim() != 2 or cond_ids.shape[1] != p:
            raise InputError(f"cond_ids must be [B, {p}] (class index + {p - 1} word ids), got {tuple(cond_ids.shape)}")
        tokens = torch.cat([torch.zeros_like(cond_ids), codes[:, :-1]], 1)
        words = cond_ids[:, 1:] if self.config.text_len else None
        return self.forward(tokens, labels=cond_ids[:, 0], words=words)[:, p - 1 :]

    # ------------------------------------------------------------------ LlamaGen checkpoints
    @classmethod
    def from_llamagen(cls, state_dict_or_path: Any, preset: str = "GPT-B", **config: Any) -> LlamaGenGPT:
        """Load a real LlamaGen class-to-image GPT checkpoint (``c2i_B_256.pt`` ...; key names as in
        ``autoregressive/models/gpt.py``). ``preset``: one of ``GPT_PRESETS``; defaults
        ``vocab_size=16384``, ``num_classes=1000``, ``grid_size=16`` (use 24 for the 384 px models);
        keyword arguments override config fields. Text-to-image checkpoints (flan-T5 captions) are
        not supported."""
        if preset not in GPT_PRESETS:
            raise ConfigError(f"unknown GPT preset {preset!r}; choose one of {sorted(GPT_PRESETS)}")
        base = dict(vocab_size=16384, num_classes=1000, grid_size=16, cond_qk_zero=True,
                    token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0)
        model = cls(GPTConfig(**{**base, **GPT_PRESETS[preset], **config}))
        state = unwrap_checkpoint(state_dict_or_path)
        load_reference_state(model, state, ignore=("freqs_cis", "causal_mask", "kv_cache"))
        return model.eval()


__all__ = ["GPTConfig", "GPT_PRESETS", "LlamaGenGPT", "KVBackend", "find_multiple",
           "precompute_freqs_cis_2d", "TEXT_PAD", "TEXT_NULL", "TEXT_UNK", "ClassCondition"]
