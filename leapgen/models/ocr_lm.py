"""Contract views of :class:`~leapgen.models.ocr.OCRModel` that the samplers decode with.

* :class:`OCRDecoderLM` — the **encoder-decoder** contract
  (:class:`~leapgen.models.encdec.EncoderDecoderLM`): the attention AR decoder with its KV cache
  (cross-attention keys / values computed once per image). ``ar``, ``speculative``, ``ar_beam`` and
  every other chain sampler run on it unchanged.
* :class:`CPPDLM` — contract ``"cppd"``: ``propose(state)`` runs the CPPD decoder once (position
  nodes + edge decoder) and returns the slot logits and the end-token cut of every row.
* :class:`CPPDDraftLM` — the ASR family's :class:`~leapgen.models.asr_lm.NARDraftLM` (a NAR
  hypothesis seen as a causal draft model) fed by :class:`CPPDLM`: position ``p`` predicts CPPD's
  slot ``p`` distribution, then ``</s>``, then a uniform row, so ``speculative`` checks the whole
  CPPD reading in one verifier forward and stays greedy-exact to ``ar``.

All views share the network's encoder (``source_name``): a pipeline encodes an image batch once
and gives the same :class:`~leapgen.models.condition.EncoderState` to draft and verifier.
Inputs: ``EncoderInputs(input_features=[B, 32, 100])``, pixels scaled to [-1, 1] (rows are the
"features", columns the "time" axis).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .asr_lm import NARDraftLM
from .condition import EncoderInputs, EncoderState
from .encdec import EncoderDecoderLM
from .net_views import AttentionDecoderView, NetworkView
from .ocr import EOS, OCRModel
from .per_thread import PerThread


class _OCRView(NetworkView):
    """What the views share (:class:`~leapgen.models.net_views.NetworkView`): the network and its
    SVTR encoder over ``input_features [B, 32, 100]`` (pixels in [-1, 1])."""

    network_class = OCRModel
    net: OCRModel

    @property
    def hidden_size(self) -> int:
        return self.net.d_model

    def _encode(self, inputs: EncoderInputs) -> EncoderState:
        x = inputs.input_features
        c = self.net.config
        if x is None or x.dim() != 3 or tuple(x.shape[1:]) != (c.height, c.width):
            raise InputError(f"OCRModel encodes input_features [B, {c.height}, {c.width}] (grayscale pixels in [-1, 1])")
        memory = self.net.encode(x.to(self.device, self.dtype))
        mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=self.device)
        return EncoderState(memory=memory, mask=mask, source=self.source_name())


class OCRDecoderLM(_OCRView, AttentionDecoderView, EncoderDecoderLM):
    """The AR attention decoder behind the encoder-decoder contract (see the module docstring)."""

    start_id = EOS

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        cross = [(la.keys, la.values) for la in cache.cross_layers()]
        return self.net.ar_logits(tokens.to(self.device), position_ids.to(self.device), cross, cache._self_layers(), mask)

    @torch.inference_mode()
    def teacher_forced_logprobs(self, state: EncoderState, seqs: list[list[int]]) -> list[Tensor]:
        """Log-probabilities ``[len + 1, V]`` the AR decoder gives each row of ``seqs`` (characters,
        then ``</s>``): one batched forward (the pipeline's per-character confidences)."""
        inp, pos = self.teacher_forced_inputs(seqs, EOS)
        logp = self.net.ar_logits(inp, pos, self.net.cross_kv(state.memory)).log_softmax(-1)
        return [logp[r, : len(s) + 1] for r, s in enumerate(seqs)]


class CPPDLM(_OCRView):
    """Contract ``"cppd"``: ``propose(state)`` -> ``logits [B, max_len + 1, V]`` and ``token_num [B]``
    (slots before the first argmax ``</s>``; ``max_len`` when there is none)."""

    #: the logits of this thread's latest ``propose`` (the pipeline's per-character confidences)
    last_logits = PerThread(None)

    @torch.inference_mode()
    def propose(self, state: EncoderState) -> dict[str, Tensor]:
        logits = self.net.cppd_logits(state.memory)
        self.forwards += 1
        self.last_logits = logits  # the pipeline's per-character confidences (no second pass)
        best = logits.argmax(-1)
        is_eos = best == EOS
        first = torch.where(is_eos.any(-1), is_eos.float().argmax(-1), torch.full_like(best[:, 0], best.shape[1]))
        return {"logits": logits, "token_num": first}


class CPPDDraftLM(NARDraftLM):
    """:class:`~leapgen.models.asr_lm.NARDraftLM` drafting CPPD's reading (see the module docstring)."""

    def __init__(self, source: CPPDLM) -> None:  # noqa: D107 (NARDraftLM's check names the ASR views)
        if not isinstance(source, CPPDLM):
            raise InputError(f"CPPDDraftLM drafts from a CPPDLM, got {type(source).__name__}")
        self.source = source
        self.vocab_size = source.vocab_size
        self.max_length = source.max_length
        self.forwards = 0

    def describe(self) -> str:
        return "CPPDDraftLM"

    def hypothesis(self, state: EncoderState) -> Tensor:
        """``[B, L, V]``: CPPD's slot log-probabilities up to the cut, ``</s>``, then uniform rows."""
        out = self.source.propose(state)
        logp, num = out["logits"].log_softmax(-1), out["token_num"]
        b, v = num.shape[0], self.vocab_size
        width = int(num.max()) + 2 if b else 2
        table = torch.full((b, width, v), -float(torch.log(torch.tensor(float(v)))), device=self.device)
        for r in range(b):
            n = int(num[r])
            table[r, :n] = logp[r, :n]
            table[r, n] = -1e4
            table[r, n, EOS] = 0.0
        return table


def ocr_views(net: OCRModel) -> dict[str, Any]:
    """Every contract view of ``net``: ``ar`` (OCRDecoderLM) and ``cppd`` (CPPDLM)."""
    return {"ar": OCRDecoderLM(net), "cppd": CPPDLM(net)}


__all__ = ["CPPDDraftLM", "CPPDLM", "OCRDecoderLM", "ocr_views"]
