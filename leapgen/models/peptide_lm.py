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

from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .condition import EncoderInputs, EncoderState
from .encdec import EncDecKVCache, EncoderDecoderLM
from .net_views import NetworkView, attention_decoder_cache
from .peptide import EOS, PeptideModel
from .per_thread import PerThread
from .speech_encoder import LayerKV


def _peaks(state: EncoderState) -> tuple[Tensor, Tensor, Tensor] | None:
    """The peaks an ion-lookup decoder reads (kept in the encoder state), or None."""
    ex = state.extra
    return (ex["peak_mz"], ex["peak_intensity"], ex["peak_mask"]) if "peak_mz" in ex else None


class _PeptideView(NetworkView):
    """What the views share (:class:`~leapgen.models.net_views.NetworkView`), plus a counter of
    NAR passes (the bidirectional decoder's)."""

    nar_forwards = PerThread(0)  # per thread, like ``forwards``

    network_class = PeptideModel
    net: PeptideModel

    def __init__(self, net: PeptideModel) -> None:
        super().__init__(net)
        self.nar_forwards = 0

    def _encode(self, inputs: EncoderInputs) -> EncoderState:
        """Encode peaks ``input_features [B, 2, P]`` (+ mask) and ``extra`` precursor mass / charge."""
        x = inputs.input_features
        if x is None or x.dim() != 3 or x.shape[1] != 2:
            raise InputError("PeptideModel encodes input_features [B, 2, P] (m/z row, intensity row)")
        if "precursor_mass" not in inputs.extra or "charge" not in inputs.extra:
            raise InputError("PeptideModel needs extra={'precursor_mass': [B], 'charge': [B]} in its EncoderInputs")
        dev = self.device
        mask = (inputs.attention_mask.to(dev).bool() if inputs.attention_mask is not None
                else torch.ones(x.shape[0], x.shape[2], dtype=torch.bool, device=dev))
        prec = inputs.extra["precursor_mass"].to(dev).double()
        memory, full = self.net.encode(x[:, 0].to(dev), x[:, 1].to(dev), mask, prec,
                                       inputs.extra["charge"].to(dev).long())
        extra = {"precursor_mass": prec}
        if self.net.config.ion_inputs:  # the AR decoders' ion lookup reads the peaks
            extra.update(peak_mz=x[:, 0].to(dev).float(), peak_intensity=x[:, 1].to(dev).float(), peak_mask=mask)
        return EncoderState(memory=memory.to(self.dtype), mask=full, source=self.source_name(), extra=extra)


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

    def _extra_layers(self, state: EncoderState) -> list[LayerKV]:
        return []

    def _new_cache(self, batch_size: int, state: EncoderState) -> EncDecKVCache:
        stack = self.stack
        with torch.inference_mode():
            cross = [LayerKV(k, v) for k, v in stack.cross_kv(state.memory)] + self._extra_layers(state)
            shape = (batch_size, stack.layers[0].self_attn.h, 0, stack.layers[0].self_attn.dh)
            self_kv = [LayerKV(torch.zeros(shape, device=self.device, dtype=state.memory.dtype),
                           torch.zeros(shape, device=self.device, dtype=state.memory.dtype)) for _ in stack.layers]
            extra = None
            if stack.mass_in is not None:  # the residue mass of every slot (float64), rolled back with it
                zero = torch.zeros(batch_size, 1, 0, 1, device=self.device, dtype=torch.float64)
                extra = [LayerKV(zero, zero)]
        return attention_decoder_cache(batch_size, state, self.device, cross, self_kv, extra)

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        state: EncoderState = cond
        layers = cache.cross_layers()
        n = len(self.stack.layers)
        cross = [(la.keys, la.values) for la in layers[:n]]
        nar = [(la.keys, la.values) for la in layers[n:]] or None
        return self.stack(tokens.to(self.device), position_ids.to(self.device), cross, state.mask, cache._self_layers(),
                          mask, nar=nar, precursor_mass=state.extra.get("precursor_mass"),
                          mass_kv=cache.extra_layers[0] if cache.extra_layers else None, peaks=_peaks(state))

    @torch.inference_mode()
    def teacher_forced_logprobs(self, state: EncoderState, seqs: list[list[int]]) -> list[Tensor]:
        """Per row, the log-probability of each residue and of the final ``</s>`` (one batched forward)."""
        inp, pos = self.teacher_forced_inputs(seqs, EOS)
        cache = self._new_cache(len(seqs), state)
        n = len(self.stack.layers)
        layers = cache.cross_layers()
        nar = [(la.keys, la.values) for la in layers[n:]] or None
        logp = self.stack(inp, pos, [(la.keys, la.values) for la in layers[:n]], state.mask, nar=nar,
                          precursor_mass=state.extra.get("precursor_mass"), peaks=_peaks(state)).log_softmax(-1)
        out = []
        for r, s in enumerate(seqs):
            gold = torch.tensor(list(s) + [EOS], device=self.device)
            out.append(logp[r, : len(s) + 1].gather(-1, gold[:, None]).squeeze(-1))
        return out


class PeptideBiARLM(PeptideARLM):
    """The bidirectional-augmented AR decoder (contract ``"peptide-bidirectional"``): its cache holds
    the keys / values of the NAR decoder's hidden states (one NAR pass per spectrum)."""

    stack_name = "bi"

    def _extra_layers(self, state: EncoderState) -> list[LayerKV]:
        hidden = self.net.nar_hidden(state.memory, state.mask)
        self.nar_forwards += 1
        return [LayerKV(k, v) for k, v in self.net.bi.nar_kv(hidden)]


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
