"""Contract views of :class:`~leapgen.models.peptide.PeptideModel` that the samplers decode with.

* :class:`PeptideARLM` — the **encoder-decoder** contract: the plain AR decoder (``ar``,
  ``ar_beam`` ... run on it unchanged).
* :class:`PeptideBiARLM` — contract ``"peptide-bidirectional"`` (and encoder-decoder): the
  bidirectional-augmented AR decoder; creating its cache runs the NAR decoder once and keeps the
  keys / values of its hidden states beside the spectrum's.
* :class:`PeptideCTCLM` — contract ``"peptide-ctc"``: ``frame_logprobs(state)`` of the NAR CTC head
  and ``precursor_mass(state)`` (the neutral peptide mass the spectrum's precursor implies).

Inputs: ``EncoderInputs(input_features=[B, 2, P]`` (row 0: m/z, row 1: intensity),
``attention_mask=[B, P]``, ``extra={"precursor_mass": [B], "charge": [B]})``; the encoder state
keeps ``precursor_mass`` in ``extra``. All views share the encoder (``source_name``).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .asr import _KV
from .condition import EncoderInputs, EncoderState, expect_condition
from .encdec import EncDecKVCache, EncoderDecoderLM
from .peptide import EOS, PeptideModel


class _PeptideView:
    net: PeptideModel

    def __init__(self, net: PeptideModel) -> None:
        if not isinstance(net, PeptideModel):
            raise InputError(f"expected a PeptideModel, got {type(net).__name__}")
        self.net = net
        self.vocab_size = int(net.config.vocab_size)
        self.max_length = 64
        self.forwards = 0
        self.nar_forwards = 0
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
        return f"PeptideModel@{id(self.net):x}"

    def describe(self) -> str:
        return "PeptideModel"

    @torch.inference_mode()
    def encode(self, inputs: EncoderInputs, cond: Any = None) -> EncoderState:
        """Encode peaks ``input_features [B, 2, P]`` (+ mask) and ``extra`` precursor mass / charge."""
        x = inputs.input_features
        if x is None or x.dim() != 3 or x.shape[1] != 2:
            raise InputError("PeptideModel encodes input_features [B, 2, P] (m/z row, intensity row)")
        if "precursor_mass" not in inputs.extra or "charge" not in inputs.extra:
            raise InputError("PeptideModel needs extra={'precursor_mass': [B], 'charge': [B]} in its EncoderInputs")
        t0 = time.perf_counter()
        dev = self.device
        mask = (inputs.attention_mask.to(dev).bool() if inputs.attention_mask is not None
                else torch.ones(x.shape[0], x.shape[2], dtype=torch.bool, device=dev))
        prec = inputs.extra["precursor_mass"].to(dev).double()
        memory, full = self.net.encode(x[:, 0].to(dev), x[:, 1].to(dev), mask, prec,
                                       inputs.extra["charge"].to(dev).long())
        self.encoder_time += time.perf_counter() - t0
        return EncoderState(memory=memory.to(self.dtype), mask=full, source=self.source_name(),
                            extra={"precursor_mass": prec})

    def state_of(self, cond: Any, batch_size: int | None = None) -> EncoderState:
        cond = expect_condition(cond, (EncoderInputs, EncoderState), f"the {type(self).__name__}", batch_size, required=True)
        if isinstance(cond, EncoderInputs):
            return self.encode(cond.to(self.device))
        if cond.source is not None and cond.source != self.source_name():
            raise InputError(f"this encoder state was computed by {cond.source}, not by {self.source_name()}")
        return cond.to(self.device)


class PeptideARLM(_PeptideView, EncoderDecoderLM):
    """The plain AR decoder behind the encoder-decoder contract."""

    unsupported: dict[str, str] = {}
    stack_name = "ar"

    def __init__(self, net: PeptideModel) -> None:
        _PeptideView.__init__(self, net)

    @property
    def stack(self) -> Any:
        return getattr(self.net, self.stack_name)

    def start_ids(self) -> list[int]:
        return [EOS]

    def _extra_layers(self, state: EncoderState) -> list[_KV]:
        return []

    def _new_cache(self, batch_size: int, state: EncoderState) -> EncDecKVCache:
        stack = self.stack
        with torch.inference_mode():
            cross = [_KV(k, v) for k, v in stack.cross_kv(state.memory)] + self._extra_layers(state)
            shape = (batch_size, stack.layers[0].self_attn.h, 0, stack.layers[0].self_attn.dh)
            self_kv = [_KV(torch.zeros(shape, device=self.device, dtype=state.memory.dtype),
                           torch.zeros(shape, device=self.device, dtype=state.memory.dtype)) for _ in stack.layers]
        return EncDecKVCache(SimpleNamespace(layers=self_kv), batch_size, self.device, state,
                             self_layers=lambda: self_kv, cross_layers=lambda: cross)

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        state: EncoderState = cond
        layers = cache.cross_layers()
        n = len(self.stack.layers)
        cross = [(la.keys, la.values) for la in layers[:n]]
        nar = [(la.keys, la.values) for la in layers[n:]] or None
        return self.stack(tokens.to(self.device), position_ids.to(self.device), cross, state.mask, cache._self_layers(),
                          mask, nar=nar)

    @torch.inference_mode()
    def teacher_forced_logprobs(self, state: EncoderState, seqs: list[list[int]]) -> list[Tensor]:
        """Per row, the log-probability of each residue and of the final ``</s>`` (one batched forward)."""
        b = len(seqs)
        width = max((len(s) for s in seqs), default=0) + 1
        inp = torch.zeros(b, width, dtype=torch.long, device=self.device)
        inp[:, 0] = EOS
        for r, s in enumerate(seqs):
            if s:
                inp[r, 1 : len(s) + 1] = torch.tensor(s, device=self.device)
        pos = torch.arange(width, device=self.device)[None].expand(b, -1)
        cache = self._new_cache(b, state)
        n = len(self.stack.layers)
        layers = cache.cross_layers()
        nar = [(la.keys, la.values) for la in layers[n:]] or None
        logp = self.stack(inp, pos, [(la.keys, la.values) for la in layers[:n]], state.mask, nar=nar).log_softmax(-1)
        out = []
        for r, s in enumerate(seqs):
            gold = torch.tensor(list(s) + [EOS], device=self.device)
            out.append(logp[r, : len(s) + 1].gather(-1, gold[:, None]).squeeze(-1))
        return out


class PeptideBiARLM(PeptideARLM):
    """The bidirectional-augmented AR decoder (contract ``"peptide-bidirectional"``): its cache holds
    the keys / values of the NAR decoder's hidden states (one NAR pass per spectrum)."""

    stack_name = "bi"

    def _extra_layers(self, state: EncoderState) -> list[_KV]:
        hidden = self.net.nar_hidden(state.memory, state.mask)
        self.nar_forwards += 1
        return [_KV(k, v) for k, v in self.net.bi.nar_kv(hidden)]


class PeptideCTCLM(_PeptideView):
    """Contract ``"peptide-ctc"``: NAR CTC log-probabilities and the precursor's peptide mass."""

    @torch.inference_mode()
    def frame_logprobs(self, state: EncoderState) -> tuple[Tensor, Tensor]:
        self.forwards += 1
        logp = self.net.ctc_logprobs(self.net.nar_hidden(state.memory, state.mask))
        return logp, torch.full((logp.shape[0],), logp.shape[1], device=logp.device)

    def precursor_mass(self, state: EncoderState) -> Tensor:
        if "precursor_mass" not in state.extra:
            raise InputError("this encoder state carries no precursor_mass (encode EncoderInputs with extra=...)")
        return state.extra["precursor_mass"]


def peptide_views(net: PeptideModel) -> dict[str, Any]:
    """``ar`` (PeptideARLM), ``bidirectional`` (PeptideBiARLM), ``ctc`` (PeptideCTCLM)."""
    return {"ar": PeptideARLM(net), "bidirectional": PeptideBiARLM(net), "ctc": PeptideCTCLM(net)}


__all__ = ["PeptideARLM", "PeptideBiARLM", "PeptideCTCLM", "peptide_views"]
