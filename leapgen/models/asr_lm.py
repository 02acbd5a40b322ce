"""Contract views of :class:`~leapgen.models.asr.ASRModel` that the samplers decode with.

* :class:`ASRDecoderLM` — the **encoder-decoder** contract
  (:class:`~leapgen.models.encdec.EncoderDecoderLM`): the AR attention decoder with its KV cache
  (self-attention rolled back by the cache, cross-attention keys/values computed once per
  utterance). Every chain / tree sampler (``ar``, ``speculative``, ``ar_beam`` ...) runs on it.
* :class:`ParaformerLM` — contract ``"paraformer"``: CIF predictor + one non-causal decoder pass.
* :class:`CTCLM` — contract ``"ctc"``: frame log-probabilities of the CTC head.
* :class:`NARDraftLM` — a :class:`~leapgen.models.base.CausalLM` view of a NAR hypothesis (from
  a ParaformerLM or CTCLM) for the ``speculative`` sampler: at position ``p`` it predicts the
  hypothesis' token ``p`` (Paraformer: its per-position distribution; CTC: the greedy token),
  then ``</s>``, then a uniform distribution (so a confidence schedule stops drafting there).
  Drafting costs no network forward: the NAR pass runs once when the draft cache is created.

All views of one network share its encoder (``source_name``), so a pipeline encodes an
utterance once and hands the same :class:`~leapgen.models.condition.EncoderState` to the draft and
the verifier. Inputs are ``EncoderInputs(input_features=[B, 560, T], attention_mask=[B, T])``.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .asr import EOS, ASRModel
from .base import CausalLM, KVCache
from .condition import EncoderState
from .encdec import EncoderDecoderLM
from .net_views import AttentionDecoderView, SpeechFeaturesView


class _SpeechView(SpeechFeaturesView):
    """What the views share (:class:`~leapgen.models.net_views.SpeechFeaturesView`): the network and
    its encoder over LFR fbank ``input_features [B, 560, T]`` (+ ``attention_mask``)."""

    network_class = ASRModel
    net: ASRModel


class ASRDecoderLM(_SpeechView, AttentionDecoderView, EncoderDecoderLM):
    """The AR attention decoder behind the encoder-decoder contract (see the module docstring)."""

    start_id = EOS

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        state: EncoderState = cond
        mem_mask = self.memory_mask(state)
        cross = [(la.keys, la.values) for la in cache.cross_layers()]
        self_kv = cache._self_layers()
        return self.net.ar_logits(tokens.to(self.device), position_ids.to(self.device), cross, mem_mask, self_kv, mask)


class ParaformerLM(_SpeechView):
    """Contract ``"paraformer"``: ``propose(state)`` runs CIF and one non-causal decoder pass."""

    _last: tuple[Tensor, Tensor | None, dict[str, Tensor]] | None = None

    @torch.inference_mode()
    def fired(self, state: EncoderState) -> dict[str, Tensor]:
        """CIF over ``state`` (``ASRModel.fire`` at inference). The last state's result is kept, so
        the word timestamps of a call reuse its decode's CIF instead of running it again."""
        last = self._last
        if last is not None and last[0] is state.memory and last[1] is state.mask:
            return last[2]
        fired = self.net.fire(state.memory, self.memory_mask(state))
        self._last = (state.memory, state.mask, fired)
        return fired

    @torch.inference_mode()
    def propose(self, state: EncoderState) -> dict[str, Tensor]:
        """``logits [B, N, V]``, ``token_num [B]``, ``fire_frames [B, N]``, ``alphas`` of the batch."""
        mask = self.memory_mask(state)
        fired = self.fired(state)
        logits = self.net.nar_logits(state.memory, mask, fired["embeds"], fired["token_mask"])
        self.forwards += 1
        return {"logits": logits, **fired}


class CTCLM(_SpeechView):
    """Contract ``"ctc"``: ``frame_logprobs(state) -> ([B, T, V] log-probs, frame lengths [B])``."""

    @torch.inference_mode()
    def frame_logprobs(self, state: EncoderState) -> tuple[Tensor, Tensor]:
        self.forwards += 1
        lengths = state.mask.long().sum(-1) if state.mask is not None else torch.full(
            (state.memory.shape[0],), state.memory.shape[1], device=self.device)
        return self.net.ctc(state.memory), lengths


def ctc_collapse(ids: list[int], blank: int = 0) -> list[int]:
    """Merge repeats, then drop blanks."""
    out, prev = [], None
    for t in ids:
        if t != prev and t != blank:
            out.append(t)
        prev = t
    return out


class NARDraftLM(CausalLM):
    """A NAR hypothesis as a causal draft model (see the module docstring). ``source`` is a
    :class:`ParaformerLM` or :class:`CTCLM` of the same network as the verifier."""

    unsupported: dict[str, str] = {}
    position_indexed = True  # drafters read a block of positions in one call

    def __init__(self, source: ParaformerLM | CTCLM) -> None:
        if not isinstance(source, (ParaformerLM, CTCLM)):
            raise InputError(f"NARDraftLM drafts from a ParaformerLM or CTCLM, got {type(source).__name__}")
        self.source = source
        self.vocab_size = source.vocab_size
        self.max_length = source.max_length
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.source.device

    def describe(self) -> str:
        return f"NARDraftLM({type(self.source).__name__})"

    def hypothesis(self, state: EncoderState) -> Tensor:
        """Per-position log-probabilities ``[B, L, V]`` of the hypothesis followed by ``</s>`` and
        uniform rows (L = longest hypothesis + 2)."""
        v = self.vocab_size
        if isinstance(self.source, ParaformerLM):
            out = self.source.propose(state)
            logp, num = out["logits"].log_softmax(-1), out["token_num"]
            hyps = None
        else:
            frame_lp, lengths = self.source.frame_logprobs(state)
            best = frame_lp.argmax(-1)
            hyps = [ctc_collapse(best[b, : int(lengths[b])].tolist()) for b in range(best.shape[0])]
            num = torch.tensor([len(h) for h in hyps], device=self.device)
            logp = None
        b = num.shape[0]
        width = int(num.max()) + 2 if b else 2
        table = torch.full((b, width, v), -torch.log(torch.tensor(float(v))).item(), device=self.device)
        eos = torch.full((v,), -1e4, device=self.device)
        eos[EOS] = 0.0
        for r in range(b):
            n = int(num[r])
            if logp is not None:
                table[r, :n] = logp[r, :n]
            else:
                hot = torch.full((n, v), -1e4, device=self.device)
                hot[torch.arange(n), torch.tensor(hyps[r], dtype=torch.long)] = 0.0
                table[r, :n] = hot
            table[r, n] = eos
        return table

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        """The cache carries the batch's hypothesis table: the one network pass of this draft, so
        the one ``forwards`` counts (reading the table later is no forward)."""
        state = self.source.state_of(cond, batch_size)
        state = dataclasses.replace(state, extra={**state.extra, "nar_draft": self.hypothesis(state)})
        self.forwards += 1
        return KVCache(SimpleNamespace(layers=[]), batch_size, self.device, state)

    def __call__(self, tokens: Tensor, cache: KVCache, position_ids: Tensor | None = None,
                 attn_mask: Tensor | None = None, cond: Any = None) -> Tensor:
        """Rows of the hypothesis table (the base class's checks and cache bookkeeping); a lookup,
        not a network pass, so ``forwards`` is left as it was (``draft_forwards`` then reports the
        network passes a decode really made, not one per drafted token)."""
        before = self.forwards
        try:
            return super().__call__(tokens, cache, position_ids, attn_mask, cond)
        finally:
            self.forwards = before

    def _forward(self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        table = cond.extra["nar_draft"]  # [B, L, V]; the token at position p predicts hypothesis token p
        idx = position_ids.to(self.device).clamp(max=table.shape[1] - 1)
        return torch.gather(table, 1, idx[..., None].expand(-1, -1, table.shape[2]))

    def position_logits(self, cache: KVCache, position_ids: Tensor) -> Tensor:
        """A block of the hypothesis table (a lookup: no forward counted)."""
        return self._forward(position_ids, cache, position_ids, None, cache.cond)

    def position_tokens(self, cache: KVCache) -> Tensor:
        """The hypothesis and its ``</s>`` (argmax of each row of the table), -1 on the uniform rows."""
        table = cache.cond.extra["nar_draft"]
        uniform = table.amax(-1) <= table.amin(-1)
        return table.argmax(-1).masked_fill(uniform, -1)


def asr_views(net: ASRModel) -> dict[str, Any]:
    """Every contract view of ``net``: ``ar`` (ASRDecoderLM), ``paraformer``, ``ctc``."""
    return {"ar": ASRDecoderLM(net), "paraformer": ParaformerLM(net), "ctc": CTCLM(net)}


__all__ = ["ASRDecoderLM", "CTCLM", "NARDraftLM", "ParaformerLM", "asr_views", "ctc_collapse"]
