"""Text-conditioned audio token models: the text encoder, the shared transformer block, and the
MAGNeT-style masked model over K codebook streams.

* :class:`AudioTextEncoder`: a small transformers ``T5EncoderModel`` (T5-shaped config, trained with
  the masked model) over :class:`~leapgen.tokenizers.word_vocab.WordVocab` ids; ``embed(texts)``
  gives a :class:`~leapgen.models.condition.TextEmbeddings` condition that every audio model reads by
  cross-attention (MusicGen / MAGNeT condition on T5 the same way).
* :class:`AudioBlock`: pre-norm transformer block: self-attention (bidirectional with an optional
  boolean mask, or causal over a KV-cache layer), cross-attention to the text memory (a learned
  *null* slot always visible, so a row whose text mask is all False is the unconditional model used
  by classifier-free guidance), GELU MLP.
* :class:`MagnetTransformer` (+ :class:`MagnetConfig`): MAGNeT's non-causal transformer (Ziv et al.
  2024): the K codebook embeddings of a frame are summed (mask id = ``codebook_size`` in every
  codebook), sinusoidal frame positions, K output heads -> logits ``[B, K, T, V]``. For stages > 0
  self-attention is restricted to ``|dt| <= subcodes_context`` frames (MAGNeT's
  ``restricted_context_attn_mask``; 0 disables it).
* :class:`MagnetMaskedLM`: its :class:`~leapgen.models.masked_base.MaskedTokenModel` adapter (the
  contract of the masked samplers), condition = ``TextEmbeddings``, ``null_cond`` = no text.
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
from .condition import TextEmbeddings, expect_condition
from .masked_base import MaskedTokenModel
from .speech_encoder import sinusoid


# ---------------------------------------------------------------------------------------- text encoder
@dataclass
class TextEncoderConfig(ComponentConfig):
    vocab_size: int = 256
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    d_ff: int = 256
    max_len: int = 24
    dropout: float = 0.1


class AudioTextEncoder(PretrainedMixin, nn.Module):
    """A small T5 encoder over word ids (see the module docstring)."""

    config_class = TextEncoderConfig

    def __init__(self, config: TextEncoderConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config if config is not None else TextEncoderConfig(**kwargs)
        self.config = config
        from transformers import T5Config, T5EncoderModel

        t5 = T5Config(vocab_size=config.vocab_size, d_model=config.d_model, d_kv=config.d_model // config.num_heads,
                      d_ff=config.d_ff, num_layers=config.num_layers, num_heads=config.num_heads,
                      dropout_rate=config.dropout, feed_forward_proj="gated-gelu", pad_token_id=0)
        self.t5 = T5EncoderModel(t5)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    _TIED = "t5.encoder.embed_tokens.weight"  # tied to t5.shared.weight: saved once

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        sd = super().state_dict(*args, **kwargs)
        for key in [k for k in sd if k.endswith(self._TIED)]:
            del sd[key]
        return sd

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        state = dict(state_dict)
        if self._TIED not in state and "t5.shared.weight" in state:
            state[self._TIED] = state["t5.shared.weight"]
        return super().load_state_dict(state, strict=strict, assign=assign)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        return self.t5(input_ids=ids, attention_mask=mask.long()).last_hidden_state

    def ids(self, vocab: Any, texts: list[str]) -> tuple[Tensor, Tensor]:
        """Word ids ``[B, S]`` and mask of ``texts`` (``vocab``: a WordVocab)."""
        rows = [vocab.encode(t)[: self.config.max_len] for t in texts]
        s = max(1, max(len(r) for r in rows))
        ids = torch.zeros(len(rows), s, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return ids.to(self.device), (ids != 0).to(self.device)

    @torch.no_grad()
    def embed(self, vocab: Any, texts: list[str]) -> TextEmbeddings:
        """The :class:`TextEmbeddings` condition of ``texts`` (one row each)."""
        ids, mask = self.ids(vocab, texts)
        return TextEmbeddings(embeddings=self(ids, mask).float(), mask=mask)


# ---------------------------------------------------------------------------------------- blocks
class AudioBlock(nn.Module):
    """Pre-norm self-attention + cross-attention (text) + MLP block."""

    def __init__(self, dim: int, heads: int, text_dim: int, ff_mult: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.xq = nn.Linear(dim, dim, bias=False)
        self.xkv = nn.Linear(text_dim, 2 * dim, bias=False)
        self.xproj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, ff_mult * dim), nn.GELU(), nn.Linear(ff_mult * dim, dim))
        self.drop = nn.Dropout(dropout)

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def _merge(self, x: Tensor) -> Tensor:
        b, h, n, d = x.shape
        return x.transpose(1, 2).reshape(b, n, h * d)

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor, mask: Tensor | None = None,
                cache_layer: Any = None, causal: bool = False) -> Tensor:
        q, k, v = [self._split(t) for t in self.qkv(self.ln1(x)).chunk(3, -1)]
        if cache_layer is not None:
            k, v = cache_layer.append(k, v)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None and cache_layer is None)
        x = x + self.drop(self.proj(self._merge(a)))
        h = self.ln2(x)
        xk, xv = [self._split(t) for t in self.xkv(memory).chunk(2, -1)]
        a = F.scaled_dot_product_attention(self._split(self.xq(h)), xk, xv, attn_mask=memory_mask[:, None, None, :])
        x = x + self.drop(self.xproj(self._merge(a)))
        return x + self.drop(self.mlp(self.ln3(x)))


def text_memory(null: Tensor, cond: TextEmbeddings | None, batch: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(memory [B, 1 + S, D], mask [B, 1 + S])``: the learned null slot, then the text (None = no text)."""
    nul = null.to(device)[None, None].expand(batch, 1, null.shape[0])
    if cond is None:
        return nul, torch.ones(batch, 1, dtype=torch.bool, device=device)
    emb = cond.embeddings.to(device=device, dtype=nul.dtype)
    m = cond.mask.to(device) if cond.mask is not None else torch.ones(emb.shape[:2], dtype=torch.bool, device=device)
    if emb.shape[0] != batch:
        raise InputError(f"the condition has {emb.shape[0]} rows for a batch of {batch}")
    return torch.cat([nul, emb], 1), torch.cat([torch.ones(batch, 1, dtype=torch.bool, device=device), m.bool()], 1)


def drop_text(cond: TextEmbeddings, p: float, generator: torch.Generator | None = None) -> TextEmbeddings:
    """Training-time condition dropout: each row's text is hidden with probability ``p``."""
    keep = torch.rand(cond.embeddings.shape[0], generator=generator) >= p
    mask = cond.mask if cond.mask is not None else torch.ones(cond.embeddings.shape[:2], dtype=torch.bool)
    return TextEmbeddings(embeddings=cond.embeddings, mask=mask & keep.to(mask.device)[:, None])


# ---------------------------------------------------------------------------------------- MAGNeT
@dataclass
class MagnetConfig(ComponentConfig):
    num_codebooks: int = 4
    codebook_size: int = 256
    dim: int = 128
    num_layers: int = 4
    num_heads: int = 4
    text_dim: int = 128
    max_frames: int = 500
    subcodes_context: int = 5
    span_len: int = 3
    dropout: float = 0.0
    frame_rate: int = 50

    def __post_init__(self) -> None:
        if self.dim % self.num_heads:
            raise ConfigError(f"dim {self.dim} must be a multiple of num_heads {self.num_heads}")

    @property
    def mask_id(self) -> int:
        return self.codebook_size


class MagnetTransformer(PretrainedMixin, nn.Module):
    """MAGNeT's non-causal transformer over K codebook streams (see the module docstring)."""

    config_class = MagnetConfig

    def __init__(self, config: MagnetConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config if config is not None else MagnetConfig(**kwargs)
        self.config = config
        c = config
        self.emb = nn.ModuleList([nn.Embedding(c.codebook_size + 1, c.dim) for _ in range(c.num_codebooks)])
        self.null_text = nn.Parameter(torch.randn(c.text_dim) * 0.02)
        self.blocks = nn.ModuleList([AudioBlock(c.dim, c.num_heads, c.text_dim, dropout=c.dropout) for _ in range(c.num_layers)])
        self.ln_out = nn.LayerNorm(c.dim)
        self.heads = nn.ModuleList([nn.Linear(c.dim, c.codebook_size) for _ in range(c.num_codebooks)])

    def restricted_mask(self, frames: int, stage: int | None, device: torch.device) -> Tensor | None:
        w = self.config.subcodes_context
        if not stage or w <= 0:
            return None
        t = torch.arange(frames, device=device)
        return ((t[:, None] - t[None]).abs() <= w)[None, None]

    def forward(self, codes: Tensor, cond: TextEmbeddings | None, stage: int | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Logits ``[B, K, T, V]`` for codes ``[B, K, T]`` (``mask_id`` where unknown)."""
        b, k, t = codes.shape
        x = sum(self.emb[i](codes[:, i]) for i in range(k))
        x = x + sinusoid(torch.arange(t, device=codes.device), self.config.dim)[None].to(x.dtype)
        memory, mmask = text_memory(self.null_text, cond, b, codes.device)
        mask = self.restricted_mask(t, stage, codes.device)
        if attention_mask is not None:
            pad = attention_mask.bool()[:, None, None, :]
            mask = pad if mask is None else (mask & pad)
        for blk in self.blocks:
            x = blk(x, memory, mmask, mask)
        x = self.ln_out(x)
        return torch.stack([head(x) for head in self.heads], 1).float()


class MagnetMaskedLM(MaskedTokenModel):
    """:class:`MaskedTokenModel` adapter of a :class:`MagnetTransformer` (condition: TextEmbeddings)."""

    #: the ``audio-masked`` contract (samplers/masked/magnet.py): K codebooks read with a text condition
    text_conditioned = True

    def __init__(self, net: MagnetTransformer) -> None:
        self.net = net.eval()
        c = net.config
        self.mask_id = c.mask_id
        self.vocab_size = c.codebook_size
        self.num_codebooks = c.num_codebooks
        self.max_length = c.max_frames
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.net.null_text.device

    def null_cond(self, cond: Any) -> Any:
        """No text: every row sees only the null slot."""
        if cond is None:
            return None
        return TextEmbeddings(embeddings=cond.embeddings, mask=torch.zeros_like(cond.mask if cond.mask is not None else cond.embeddings[..., 0], dtype=torch.bool))

    def _forward(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None) -> Tensor:
        cond = expect_condition(cond, TextEmbeddings, "the MAGNeT audio model", tokens.shape[0])
        with torch.inference_mode():
            return self.net(tokens.to(self.device), cond, stage, attention_mask)


def replace_config(config: Any, **changes: Any) -> Any:
    return dataclasses.replace(config, **changes)
