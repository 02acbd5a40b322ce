"""The encoder-decoder contract: encode once, then decode with a causal decoder over a cross-attention cache.

An :class:`EncoderDecoderLM` is a :class:`~leapgen.models.base.CausalLM` (its decoder) with an
``encode(inputs) -> EncoderState`` step. Every chain and tree sampler runs on it unchanged:

* the pipeline passes the source as the call's condition (``generate(..., cond=)``): either raw
  :class:`~leapgen.models.condition.EncoderInputs`, which **each model encodes itself, once**, when
  its cache is created (so a draft with its own, different encoder works with no extra code), or
  an :class:`~leapgen.models.condition.EncoderState` already computed by *this* model's
  ``encode`` (a pipeline that encodes once and reuses the state for several calls);
* the cache (:class:`EncDecKVCache`) carries the encoder state as ``cache.cond`` and keeps two
  parts: the decoder's **self-attention** KV, which the :class:`~leapgen.models.base.KVCache`
  view rolls back (crop, holes, tree paths), and the **cross-attention** KV over the encoder
  memory, which never changes while decoding, so rollback leaves it alone and only row selection
  (rows that finished) touches it, in step with the encoder state;
* prompts are the decoder's start ids (``start_ids()``, e.g. ``[decoder_start_token_id]``,
  Whisper's task prefix), so drafters that read the context see ordinary tokens.

A concrete adapter implements ``encode``, ``_new_backend`` and ``_forward``; see
:mod:`leapgen.models.hf_seq2seq` for transformers' Bart / T5 / Whisper.
"""

from __future__ import annotations

import abc
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .base import CausalLM, KVCache
from .condition import EncoderInputs, EncoderState, expect_condition


class EncDecKVCache(KVCache):
    """:class:`KVCache` whose backend holds self-attention layers (``self_layers``: rolled back)
    and cross-attention layers (``cross_layers``: only follow row selection).

    ``extra_layers`` are KV-shaped bookkeeping tensors moved with the self-attention slots (e.g.
    the position of every slot)."""

    def __init__(
        self,
        backend: Any,
        batch_size: int,
        device: torch.device | str = "cpu",
        cond: EncoderState | None = None,
        self_layers: Any = None,
        cross_layers: Any = None,
        extra_layers: list[Any] | None = None,
    ) -> None:
        super().__init__(backend, batch_size, device, cond)
        self._self_layers = self_layers  # callable -> list of layers with keys/values
        self._cross_layers = cross_layers
        self.extra_layers = list(extra_layers or [])

    def _layers(self) -> list[Any]:
        layers = self._self_layers() if self._self_layers is not None else super()._layers()
        return [la for la in layers if getattr(la, "is_initialized", True)] + self.extra_layers

    def cross_layers(self) -> list[Any]:
        if self._cross_layers is None:
            return []
        return [la for la in self._cross_layers() if getattr(la, "is_initialized", True) and la.keys is not None]

    def _backend_select_rows(self, rows: Tensor) -> None:
        super()._backend_select_rows(rows)
        for layer in self.cross_layers():
            layer.keys = layer.keys.index_select(0, rows.to(layer.keys.device))
            layer.values = layer.values.index_select(0, rows.to(layer.values.device))


class EncoderDecoderLM(CausalLM):
    """Contract of an encoder-decoder model as the samplers see it (see the module docstring).

    Subclasses implement :meth:`encode`, :meth:`_new_cache` (an empty :class:`EncDecKVCache`
    carrying the state) and ``_forward`` (the decoder step, reading ``cache.cond``)."""

    is_encoder_decoder = True

    @abc.abstractmethod
    def encode(self, inputs: EncoderInputs, cond: Any = None) -> EncoderState:
        """Run the encoder once over ``inputs``; ``cond`` is any further condition (unused by
        default)."""

    @abc.abstractmethod
    def _new_cache(self, batch_size: int, state: EncoderState) -> EncDecKVCache: ...

    @abc.abstractmethod
    def start_ids(self) -> list[int]:
        """The decoder prompt every row starts from (e.g. ``[decoder_start_token_id]``)."""

    @property
    def hidden_size(self) -> int | None:
        """Width of the encoder memory the decoder attends to (checked against a given state)."""
        return None

    def source_name(self) -> str:
        """Identifies this model's encoder in :attr:`EncoderState.source`."""
        return f"{self.describe()}@{id(self):x}"

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        cond = expect_condition(
            cond, (EncoderInputs, EncoderState), f"the encoder-decoder model {self.describe()}", batch_size, required=True
        )
        if isinstance(cond, EncoderInputs):
            state = self.encode(cond.to(self.device))
        else:
            state = cond.to(self.device)
            if state.source is not None and state.source != self.source_name():
                raise InputError(
                    f"this encoder state was computed by {state.source}, not by {self.source_name()}; "
                    "each model attends to its own encoder's memory: pass EncoderInputs (every model "
                    "encodes them itself) or the state from this model's encode()."
                )
            width = self.hidden_size
            if width is not None and state.memory.shape[-1] != width:
                raise InputError(
                    f"the encoder state has width {state.memory.shape[-1]}, {self.describe()} expects {width}"
                )
        return self._new_cache(batch_size, state)


__all__ = ["EncoderDecoderLM", "EncDecKVCache"]
