"""The masked-model cache for transformers' ``BertForMaskedLM`` (GenMol's denoiser, any BERT MLM).

:class:`CachedBertMLM` runs a ``BertForMaskedLM``'s own weights (no copy) in a compact forward
that implements :class:`~leapgen.models.masked_cache.MaskedCache`, so the masked samplers' cache
policies (Fast-dLLM ``prefix`` / ``dual``, dKV-Cache ``dkv_delayed`` / ``dkv_window``) run on a
BERT denoiser as on :class:`~leapgen.models.diffusion_lm.DiffusionLM`:

* a *refresh* (no cache, or ``cache.window is None`` and no ``cache.positions``) computes every
  position, returns the same logits as the transformers forward (to float rounding) and stores
  each layer's keys and values;
* a *windowed* (``cache.window = (lo, hi)``) or *subset* forward (``cache.positions``, shared
  ``[n]`` or per row ``[B, n]``) computes only those positions: their queries attend to the
  stored keys / values elsewhere, and their own keys / values are written back (dKV-Cache's
  delayed caching re-reads them at the next subset forward).

Post-LN BERT (embeddings LayerNorm, attention and FFN sub-layers each ``LayerNorm(x + f(x))``)
with absolute position embeddings and token type 0, as the MDLM/GenMol recipe trains it.
:func:`with_masked_cache` wraps a module when it is such a model and returns anything else
unchanged (RoBERTa-style position ids, relative positions, decoders and cross-attention are not
covered: they keep transformers' forward and run without a cache).

Guarantee of the cache: as for DiffusionLM, exact at a refresh, approximate afterwards (stale
keys / values outside the recomputed positions); ``tests/test_bert_cache.py`` checks both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masked_cache import MaskedCache, take_positions, write_positions


def _is_plain_bert_mlm(module: nn.Module) -> bool:
    cfg = getattr(module, "config", None)
    if type(module).__name__ != "BertForMaskedLM" or cfg is None:
        return False
    if getattr(cfg, "model_type", None) != "bert" or getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
        return False
    return getattr(cfg, "position_embedding_type", "absolute") in (None, "absolute")


def with_masked_cache(module: nn.Module) -> nn.Module:
    """``module`` behind :class:`CachedBertMLM` when it is a plain BERT masked LM, else unchanged."""
    return CachedBertMLM(module) if _is_plain_bert_mlm(module) else module


class CachedBertMLM(nn.Module):
    """A ``BertForMaskedLM`` with the masked-model cache (see the module docstring).

    ``forward(tokens [B, L], attention_mask=None, cache=None) -> logits``: ``[B, L, V]``, or
    ``[B, hi - lo, V]`` / ``[B, n, V]`` for a windowed / subset cached forward.
    ``attention_mask``: ``[B, L]``, False (0) on padding keys.
    """

    supports_cache_positions = True
    supports_row_positions = True

    def __init__(self, mlm: nn.Module) -> None:
        super().__init__()
        if not _is_plain_bert_mlm(mlm):
            raise TypeError(f"CachedBertMLM needs a transformers BertForMaskedLM with absolute positions, got {type(mlm).__name__}.")
        self.mlm = mlm
        self.config = mlm.config
        self.heads = mlm.config.num_attention_heads

    def get_input_embeddings(self) -> nn.Module:
        return self.mlm.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.mlm.get_output_embeddings()

    def _embed(self, tokens: Tensor, compute: Tensor | None) -> Tensor:
        emb = self.mlm.bert.embeddings
        length = tokens.shape[1]
        if compute is None:
            ids, pos = tokens, torch.arange(length, device=tokens.device)
        else:
            ids, pos = take_positions(tokens, compute), compute
        x = emb.word_embeddings(ids) + emb.position_embeddings(pos) + emb.token_type_embeddings.weight[0]
        return emb.LayerNorm(x)

    def forward(self, tokens: Tensor, attention_mask: Tensor | None = None, cache: MaskedCache | None = None) -> Tensor:
        b = tokens.shape[0]
        compute: Tensor | None = None  # positions computed and returned (None: all)
        if cache is not None and getattr(cache, "positions", None) is not None:
            compute = cache.positions.to(tokens.device)
        elif cache is not None and cache.window is not None:
            compute = torch.arange(*cache.window, device=tokens.device)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        x = self._embed(tokens, compute)
        n = x.shape[1]
        for i, layer in enumerate(self.mlm.bert.encoder.layer):
            att = layer.attention
            q, k, v = (proj(x).view(b, n, self.heads, -1).transpose(1, 2) for proj in (att.self.query, att.self.key, att.self.value))
            if compute is not None:
                k = write_positions(cache.get(f"k{i}"), k, compute)
                v = write_positions(cache.get(f"v{i}"), v, compute)
            if cache is not None:
                cache.put(f"k{i}", k)
                cache.put(f"v{i}", v)
            h = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask)
            x = att.output.LayerNorm(att.output.dense(h.transpose(1, 2).reshape(b, n, -1)) + x)
            x = layer.output.LayerNorm(layer.output.dense(layer.intermediate(x)) + x)
        return self.mlm.cls(x)


__all__ = ["CachedBertMLM", "with_masked_cache"]
