"""Adapter that puts a plain torch module behind the :class:`MaskedTokenModel` contract.

The module is called as ``module(tokens, [cond], [stage=...], [attention_mask=...])``: each
keyword is passed only when the module's ``forward`` accepts it (and ``cond`` only when it is not
None), so a bare ``nn.Module`` taking ``tokens`` alone works, and so does a transformers masked LM
(``BertForMaskedLM(input_ids, attention_mask=...)``: outputs with a ``.logits`` field are unpacked).
Logits wider than ``vocab_size`` (e.g. including a mask entry) are cut to the first ``vocab_size``.

A transformers ``BertForMaskedLM`` runs on its cached forward (:mod:`~leapgen.models.bert_cache`).
A module whose ``forward`` takes a ``cache`` keyword supports the masked cache
(:class:`~leapgen.models.masked_base.MaskedCache`): it is called with ``cache=`` and must follow
that contract (refresh when ``cache.window is None``, else return logits for the window only).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .bert_cache import with_masked_cache
from .masked_base import MaskedCache, MaskedTokenModel


def _position_limit(module: nn.Module) -> int | None:
    """How many positions a transformers model embeds: ``config.max_position_embeddings``, less the
    ``padding_idx + 1`` rows a RoBERTa-style position table reserves (its ids start after the pad)."""
    positions = getattr(getattr(module, "config", None), "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    for name, sub in module.named_modules():
        if name.endswith("position_embeddings") and isinstance(sub, nn.Embedding) and sub.padding_idx is not None:
            return min(positions, sub.num_embeddings) - sub.padding_idx - 1
    return positions


class TorchMaskedLM(MaskedTokenModel):
    """Wrap an ``nn.Module`` mapping tokens ``[B, L]`` / ``[B, K, L]`` to logits ``[..., >= V]``.

    ``null_cond``: the unconditional input for classifier-free guidance: a value (same for every
    batch), a callable ``cond -> null cond``, or None (call the module without a condition).
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        mask_id: int,
        vocab_size: int,
        num_codebooks: int = 1,
        max_length: int | None = None,
        null_cond: Any = None,
    ) -> None:
        if vocab_size <= 0 or num_codebooks <= 0:
            raise ConfigError(f"vocab_size and num_codebooks must be positive, got {vocab_size}, {num_codebooks}.")
        if mask_id < 0:
            raise ConfigError(f"mask_id must be a non-negative token id, got {mask_id}.")
        self.module = module.eval()
        # a transformers masked LM says how many ids it embeds and how many positions it has
        embed = getattr(module, "get_input_embeddings", lambda: None)()
        rows = getattr(getattr(embed, "weight", None), "shape", (None,))[0]
        if rows is not None and mask_id >= rows:
            raise ConfigError(f"mask_id {mask_id} is outside the module's input embedding table of {rows} ids; pass "
                              "the id of its mask token (e.g. tokenizer.mask_token_id).")
        if max_length is None:
            max_length = _position_limit(module)
        self.mask_id = int(mask_id)
        self.vocab_size = int(vocab_size)
        self.num_codebooks = int(num_codebooks)
        self.max_length = max_length
        self._null = null_cond
        self.forwards = 0
        #: what is called: the module itself, or a transformers BERT masked LM behind its cached
        #: forward (``bert_cache.CachedBertMLM``, the same weights)
        self._net = with_masked_cache(self.module)
        try:
            params = inspect.signature(self._net.forward).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            params = {}
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self._takes = {k: var_kw or k in params for k in ("cond", "stage", "attention_mask")}
        self.supports_cache = "cache" in params
        #: the module also takes ``cache.positions`` (subset forwards, dKV-Cache); it says so with
        #: a ``supports_cache_positions = True`` attribute
        self.supports_cache_positions = self.supports_cache and bool(getattr(self._net, "supports_cache_positions", False))
        #: ... and per-row subsets ``[A, n]`` (``supports_row_positions = True``)
        self.supports_row_positions = self.supports_cache_positions and bool(getattr(self._net, "supports_row_positions", False))

    @property
    def device(self) -> torch.device:
        p = next(self.module.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def null_cond(self, cond: Any) -> Any:
        if callable(self._null) and not isinstance(self._null, Tensor):
            return self._null(cond)
        return self._null

    def _forward(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None) -> Tensor:
        return self._run(tokens, cond, stage, attention_mask, {})

    def _forward_cached(
        self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None, cache: MaskedCache
    ) -> Tensor:
        return self._run(tokens, cond, stage, attention_mask, {"cache": cache})

    def _run(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None, kwargs: dict) -> Tensor:
        if cond is not None:
            if not self._takes["cond"]:
                raise ConfigError(
                    "a condition was given but the wrapped module's forward() has no `cond` argument."
                )
            kwargs["cond"] = cond
        if stage is not None and self._takes["stage"]:
            kwargs["stage"] = stage
        if attention_mask is not None and self._takes["attention_mask"]:
            kwargs["attention_mask"] = attention_mask
        out = self._net(tokens, **kwargs)
        logits = out.logits if hasattr(out, "logits") else out
        if logits.shape[-1] > self.vocab_size:
            logits = logits[..., : self.vocab_size]
        return logits
