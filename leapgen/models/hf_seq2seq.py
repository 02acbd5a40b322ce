"""transformers seq2seq models (Bart, T5, Whisper and relatives) behind :class:`EncoderDecoderLM`.

The encoder runs once per call (``encode``); the decoder runs with transformers'
``EncoderDecoderCache``: its self-attention ``DynamicCache`` is the layer store of our
:class:`~leapgen.models.encdec.EncDecKVCache` view (rollback, holes, tree paths), its
cross-attention cache is filled by the first decoder forward and then only follows row selection.

Positions. The samplers give every row its own position ids (rows at different lengths, holes
left by rejected drafts, tree nodes sharing a depth), but transformers' seq2seq decoders count
positions by cache slot. The adapter therefore supplies real positions, with the network's own
arithmetic so that contiguous rows give bit-identical logits:

* Whisper: ``decoder_position_ids`` (the decoder accepts them);
* Bart / mBART (learned positions with offset 2): the decoder's ``embed_positions`` returns the
  embedding of the real positions during our forwards (a hook; anywhere else, e.g. the user's own
  ``generate``, the original runs);
* T5 / mT5 (relative bias): the decoder's bias is computed from the real query and key positions
  (recorded per cache slot), through the same bucket function and table.

Other architectures run with slot-counted positions, which are right only for rows that advance
together without holes: the adapter declares ``ragged_rows`` and ``tree_mask`` unsupported, so
samplers that need them refuse the model when the call starts.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from ..errors import ModelMismatchError, a_type
from .condition import EncoderInputs, EncoderState
from .encdec import EncDecKVCache, EncoderDecoderLM
from .hf import _SlotPositions, cache_kwarg

logger = logging.getLogger(__name__)

# (query positions [B, n], key positions [B, slots + n]) of the forward in progress, or None
_POSITIONS: contextvars.ContextVar[tuple[Tensor, Tensor] | None] = contextvars.ContextVar("leapgen_s2s_pos", default=None)

_LEARNED_OFFSET = ("bart", "mbart")
_RELATIVE = ("t5", "mt5")  # one bias table in the first decoder layer (UMT5 has one per layer: slot-counted)
_POSITION_IDS = ("whisper",)


@dataclass
class _AnyEncoderOutput(BaseModelOutput):
    """The encoder output handed back to the model's forward: a ``BaseModelOutput`` (what most
    decoders check for) with the extra fields some read, unset (SwitchTransformers reads
    ``router_logits``). One class for every model, so an :class:`EncoderState` made anywhere (not
    only by :meth:`HFSeq2SeqLM.encode`) decodes."""

    router_probs: tuple | None = None
    router_logits: tuple | None = None


class HFSeq2SeqLM(EncoderDecoderLM):
    """Wrap a transformers encoder-decoder LM (``BartForConditionalGeneration``,
    ``T5ForConditionalGeneration``, ``WhisperForConditionalGeneration``, ...)."""

    def __init__(self, model: PreTrainedModel) -> None:
        cfg = model.config
        if not getattr(cfg, "is_encoder_decoder", False):
            raise ModelMismatchError(
                f"{type(model).__name__} is not an encoder-decoder model; use HFCausalLM (as_causal_lm) for a decoder-only LM"
            )
        self.model = model.eval()
        self._cache_kwarg = cache_kwarg(model)
        self.config = cfg
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_length = int(
            getattr(cfg, "max_target_positions", None) or getattr(cfg, "max_position_embeddings", None) or 4096
        )
        self.forwards = 0
        self.kind = str(getattr(cfg, "model_type", ""))
        self.unsupported = {}
        if self.kind in _LEARNED_OFFSET:
            self._install_learned_hook()
        elif self.kind in _RELATIVE:
            self._install_relative_hook()
        elif self.kind not in _POSITION_IDS:
            why = (
                f"transformers' {type(model).__name__} counts decoder positions by cache slot and leapgen has no "
                "position hook for it, so rows at different positions or tree nodes would get wrong positions."
            )
            self.unsupported = {"ragged_rows": why, "tree_mask": why}
        if self.kind == "prophetnet":  # its decoder asserts one new token per cached forward
            self.unsupported["multi_token"] = ("transformers' ProphetNet decoder takes one new token per forward "
                                               "once its cache is filled, so drafts cannot be verified in one pass.")

    # ------------------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def hidden_size(self) -> int | None:
        return int(getattr(self.config, "d_model", 0) or getattr(self.config, "hidden_size", 0)) or None

    def describe(self) -> str:
        return type(self.model).__name__

    def source_name(self) -> str:
        """The wrapped model's identity: two wrappers of one transformers model share its encoder."""
        return f"{self.describe()}@{id(self.model):x}"

    def start_ids(self) -> list[int]:
        gen = getattr(self.model, "generation_config", None)
        start = getattr(gen, "decoder_start_token_id", None)
        if start is None:
            start = getattr(self.config, "decoder_start_token_id", None)
        if start is None:
            raise ModelMismatchError(f"{self.describe()} has no decoder_start_token_id; give the decoder prompt yourself")
        return [int(start)] if isinstance(start, int) else [int(x) for x in start]

    def embeddings(self) -> Tensor | None:
        return self.model.get_decoder().get_input_embeddings().weight

    # ------------------------------------------------------------------------------ encoder
    @torch.inference_mode()
    def encode(self, inputs: EncoderInputs, cond: Any = None) -> EncoderState:
        enc = self.model.get_encoder()
        if inputs.input_features is not None:
            out = enc(input_features=inputs.input_features.to(self.device, self.dtype))
            mask = None
        else:
            mask = inputs.attention_mask
            out = enc(
                input_ids=inputs.input_ids.to(self.device),
                attention_mask=None if mask is None else mask.to(self.device).long(),
            )
            mask = None if mask is None else mask.to(self.device).bool()
        return EncoderState(memory=out.last_hidden_state, mask=mask, source=self.source_name())

    # ------------------------------------------------------------------------------ decoder
    def _new_cache(self, batch_size: int, state: EncoderState) -> EncDecKVCache:
        backend = EncoderDecoderCache(DynamicCache(), DynamicCache())
        slots = _SlotPositions(batch_size, self.device)
        cache = EncDecKVCache(
            backend,
            batch_size,
            self.device,
            state,
            self_layers=lambda: backend.self_attention_cache.layers,
            cross_layers=lambda: backend.cross_attention_cache.layers,
            extra_layers=[slots],
        )
        cache.slot_positions = slots
        return cache

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        state: EncoderState = cond
        position_ids = position_ids.to(self.device)
        slots: _SlotPositions = cache.slot_positions
        key_pos = torch.cat([slots.positions.to(self.device), position_ids], 1)
        kwargs: dict[str, Any] = {}
        if self.kind in _POSITION_IDS:
            kwargs["decoder_position_ids"] = position_ids
        enc_mask = None if state.mask is None else state.mask.long()
        token = _POSITIONS.set((position_ids, key_pos))
        try:
            out = self.model(
                encoder_outputs=_AnyEncoderOutput(last_hidden_state=state.memory),
                attention_mask=enc_mask,
                decoder_input_ids=tokens.to(self.device),
                decoder_attention_mask=mask,
                use_cache=True,
                **{self._cache_kwarg: cache.backend},
                **kwargs,
            )
        finally:
            _POSITIONS.reset(token)
        slots.append(position_ids)
        return out.logits

    # ------------------------------------------------------------------------------ position hooks
    def _install_learned_hook(self) -> None:
        emb = self.model.get_decoder().embed_positions
        if getattr(emb, "_leapgen_hooked", False):
            return
        original = emb.forward
        offset = int(getattr(emb, "offset", 0))

        def forward(input_ids: Tensor, past_key_values_length: int = 0, position_ids: Tensor | None = None) -> Tensor:
            pos = _POSITIONS.get()
            if pos is None:
                return original(input_ids, past_key_values_length, position_ids=position_ids)
            return torch.nn.functional.embedding(pos[0].to(emb.weight.device) + offset, emb.weight)

        emb.forward = forward
        emb._leapgen_hooked = True

    def _install_relative_hook(self) -> None:
        attn = self.model.get_decoder().block[0].layer[0].SelfAttention
        if getattr(attn, "_leapgen_hooked", False):
            return
        original = attn.compute_bias

        def compute_bias(query_length: int, key_length: int, device: Any = None, past_seen_tokens: Any = 0) -> Tensor:
            pos = _POSITIONS.get()
            if pos is None:
                return original(query_length, key_length, device=device, past_seen_tokens=past_seen_tokens)
            q_pos, k_pos = pos
            rel = k_pos[:, None, :] - q_pos[:, :, None]  # [B, n, keys]
            bucket = attn._relative_position_bucket(
                rel,
                bidirectional=not attn.is_decoder,
                num_buckets=attn.relative_attention_num_buckets,
                max_distance=attn.relative_attention_max_distance,
            )
            return attn.relative_attention_bias(bucket).permute(0, 3, 1, 2)  # [B, heads, n, keys]

        attn.compute_bias = compute_bias
        attn._leapgen_hooked = True


def as_seq2seq_lm(model: Any) -> EncoderDecoderLM:
    """Return ``model`` behind the :class:`EncoderDecoderLM` contract (wrapping transformers models)."""
    if model is None or isinstance(model, EncoderDecoderLM):
        return model
    if isinstance(model, PreTrainedModel):
        return HFSeq2SeqLM(model)
    raise TypeError(
        f"cannot use {a_type(model)} as an encoder-decoder LM; pass a transformers seq2seq model "
        "or an object implementing leapgen.models.encdec.EncoderDecoderLM."
    )


__all__ = ["HFSeq2SeqLM", "as_seq2seq_lm"]
