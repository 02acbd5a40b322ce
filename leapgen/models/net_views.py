"""What every contract view of an encoder + decoders network shares (ASR, OCR, peptides ...).

A family network (one encoder, several decoding heads) is decoded through small *views*, one per
model contract: an attention AR decoder behind the **encoder-decoder** contract, a NAR head behind
the family's own contract (``paraformer``, ``ctc``, ``cppd`` ...). The views of one network share
its encoder: :meth:`NetworkView.source_name` names the network, so a pipeline encodes a batch once
and hands the same :class:`~leapgen.models.condition.EncoderState` to the draft and the verifier,
and :meth:`NetworkView.state_of` refuses a state that another network computed.

A family's view subclasses :class:`NetworkView`, sets ``network_class`` and writes ``_encode``;
its AR decoder view subclasses :class:`AttentionDecoderView` (or builds its cache with
:func:`attention_decoder_cache` when the layers differ).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import InputError
from .condition import EncoderInputs, EncoderState, expect_condition
from .encdec import EncDecKVCache
from .per_thread import PerThread
from .speech_encoder import LayerKV


class NetworkView:
    """The network, its device / dtype, a forward counter and the timed, checked encoder pass."""

    #: per thread (:class:`PerThread`): each call of a shared view counts and times its own passes
    forwards = PerThread(0)
    encoder_time = PerThread(0.0)

    network_class: ClassVar[type]

    #: the longest output a decoder view produces, unless the network's config says (``max_tokens``)
    max_output_tokens: ClassVar[int] = 64

    def __init__(self, net: Any) -> None:
        if not isinstance(net, self.network_class):
            raise InputError(f"expected a {self.network_class.__name__}, got {type(net).__name__}")
        self.net = net
        self.vocab_size = int(net.config.vocab_size)
        self.max_length = int(getattr(net.config, "max_tokens", self.max_output_tokens))
        self.forwards = 0
        self.encoder_time = 0.0

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.net.parameters()).dtype

    @property
    def hidden_size(self) -> int:
        return int(self.net.config.d_model)

    def source_name(self) -> str:
        return f"{type(self.net).__name__}@{id(self.net):x}"

    def describe(self) -> str:
        return type(self.net).__name__

    def _encode(self, inputs: EncoderInputs) -> EncoderState:
        """The family's encoder pass (inputs checked there, with a message saying what it expects)."""
        raise NotImplementedError

    @torch.inference_mode()
    def encode(self, inputs: EncoderInputs, cond: Any = None) -> EncoderState:
        """Run the shared encoder once; the time goes to ``encoder_time``."""
        t0 = time.perf_counter()
        state = self._encode(inputs)
        self.encoder_time += time.perf_counter() - t0
        return state

    def state_of(self, cond: Any, batch_size: int | None = None) -> EncoderState:
        """An EncoderState of this network from EncoderInputs (encoded here) or a state (checked)."""
        cond = expect_condition(cond, (EncoderInputs, EncoderState), f"the {type(self).__name__}", batch_size, required=True)
        if isinstance(cond, EncoderInputs):
            return self.encode(cond.to(self.device))
        if cond.source is not None and cond.source != self.source_name():
            raise InputError(f"this encoder state was computed by {cond.source}, not by {self.source_name()}")
        return cond.to(self.device)

    def memory_mask(self, state: EncoderState) -> Tensor:
        """The state's ``[B, S]`` encoder mask (all True when it has none)."""
        if state.mask is not None:
            return state.mask
        return torch.ones(state.memory.shape[:2], dtype=torch.bool, device=self.device)

    def teacher_forced_inputs(self, seqs: Sequence[Sequence[int]], start: int) -> tuple[Tensor, Tensor]:
        """``tokens [B, W]`` (``start`` then each row, zero-padded) and ``positions [B, W]``, with
        ``W = longest row + 1``: the decoder input that scores every row and its end in one forward."""
        b = len(seqs)
        width = max((len(s) for s in seqs), default=0) + 1
        tokens = torch.zeros(b, width, dtype=torch.long, device=self.device)
        tokens[:, 0] = start
        for r, s in enumerate(seqs):
            if len(s):
                tokens[r, 1 : len(s) + 1] = torch.tensor(list(s), device=self.device)
        return tokens, torch.arange(width, device=self.device)[None].expand(b, -1)


class SpeechFeaturesView(NetworkView):
    """A network whose encoder reads LFR fbank ``input_features [B, input_dim, T]`` (+ an
    ``attention_mask [B, T]``) through ``net.encode(x [B, T, D], lengths) -> (memory, mask)``."""

    def _encode(self, inputs: EncoderInputs) -> EncoderState:
        feats, dim = inputs.input_features, self.net.config.input_dim
        if feats is None or feats.dim() != 3 or feats.shape[1] != dim:
            raise InputError(f"{type(self.net).__name__} encodes input_features [B, {dim}, T] (LFR fbank)")
        x = feats.transpose(1, 2).to(self.device, self.dtype)
        if inputs.attention_mask is not None:
            lengths = inputs.attention_mask.to(self.device).long().sum(-1)
        else:
            lengths = torch.full((x.shape[0],), x.shape[1], device=self.device)
        memory, mask = self.net.encode(x, lengths)
        return EncoderState(memory=memory, mask=mask, source=self.source_name())


class AttentionDecoderView(NetworkView):
    """The AR attention decoder of a network behind the **encoder-decoder** contract: it starts from
    ``start_id``; the network gives ``cross_kv(memory)`` (keys / values per layer, computed once per
    input) and ``empty_self_kv(batch, device, dtype)``. Mix in
    :class:`~leapgen.models.encdec.EncoderDecoderLM` after this class and write ``_forward``."""

    start_id: ClassVar[int]
    unsupported: ClassVar[dict[str, str]] = {}

    def start_ids(self) -> list[int]:
        return [self.start_id]

    def _new_cache(self, batch_size: int, state: EncoderState) -> EncDecKVCache:
        with torch.inference_mode():
            cross = [LayerKV(k, v) for k, v in self.net.cross_kv(state.memory)]
            self_kv = self.net.empty_self_kv(batch_size, self.device, state.memory.dtype)
        return attention_decoder_cache(batch_size, state, self.device, cross, self_kv)


def attention_decoder_cache(batch_size: int, state: EncoderState, device: torch.device, cross: list[Any],
                            self_kv: list[Any], extra: list[Any] | None = None) -> EncDecKVCache:
    """The encoder-decoder cache of an attention decoder: ``self_kv`` (one ``_KV`` per layer, grown
    and rolled back by the cache), ``cross`` (keys / values of the encoder output, computed once)
    and ``extra`` (KV-shaped bookkeeping moved with the self-attention slots)."""
    return EncDecKVCache(SimpleNamespace(layers=self_kv), batch_size, device, state,
                         self_layers=lambda: self_kv, cross_layers=lambda: cross, extra_layers=extra)


__all__ = ["AttentionDecoderView", "NetworkView", "SpeechFeaturesView", "attention_decoder_cache"]
