"""Contract views of :class:`~leapgen.models.s2st.S2STModel` that the samplers decode with.

* :class:`DAGLM` — contract ``"dag"``: ``graph(state)`` runs the DAG decoder once (vertex
  inputs copied from the encoder, one non-causal pass) and returns the token log-probabilities
  ``emit [B, L, V]``, the transitions ``links [B, L, L]``, the vertex counts and vertex states.
* :class:`S2STDecoderLM` — the **encoder-decoder** contract
  (:class:`~leapgen.models.encdec.EncoderDecoderLM`): the AR baseline translator with its KV
  cache; every chain sampler (``ar``, ``ar_beam`` ...) runs on it.

Both views of one network share its encoder (``source_name``), so a pipeline encodes an utterance
once. Inputs are ``EncoderInputs(input_features=[B, input_dim, T], attention_mask=[B, T])``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .condition import EncoderState
from .encdec import EncoderDecoderLM
from .net_views import AttentionDecoderView, SpeechFeaturesView
from .s2st import EOS, S2STModel


class _S2STView(SpeechFeaturesView):
    network_class = S2STModel
    net: S2STModel


class DAGLM(_S2STView):
    """Contract ``"dag"`` (see the module docstring)."""

    @torch.inference_mode()
    def graph(self, state: EncoderState) -> dict[str, Tensor]:
        """``emit [B, L, V]``, ``links [B, L, L]``, ``lengths [B]``, ``hidden [B, L, d]`` (one decoder pass)."""
        mask = self.memory_mask(state)
        inputs, vmask = self.net.vertex_inputs(state.memory, mask)
        self.forwards += 1
        return self.net.dag_forward(state.memory, mask, inputs, vmask)


class S2STDecoderLM(_S2STView, AttentionDecoderView, EncoderDecoderLM):
    """The AR baseline translator behind the encoder-decoder contract."""

    start_id = EOS

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        state: EncoderState = cond
        cross = [(la.keys, la.values) for la in cache.cross_layers()]
        return self.net.ar_logits(tokens.to(self.device), position_ids.to(self.device), cross, self.memory_mask(state),
                                  cache._self_layers(), mask)


def s2st_views(net: S2STModel) -> dict[str, Any]:
    """Every contract view of ``net``: ``ar`` (S2STDecoderLM) and ``dag`` (DAGLM)."""
    return {"ar": S2STDecoderLM(net), "dag": DAGLM(net)}


__all__ = ["DAGLM", "S2STDecoderLM", "s2st_views"]
