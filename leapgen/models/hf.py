"""Adapter that puts any transformers causal LM behind the :class:`CausalLM` contract.

The network is transformers' own (``PreTrainedModel``); the adapter adds per-row lengths, holes
and tree masks through :class:`KVCache`, passing an explicit 4-D mask and position ids, which
transformers' attention uses as they are. Three kinds of network need more than that:

* **Sliding-window / chunked attention** (Mistral, Qwen2 with ``use_sliding_window``, Gemma2/3,
  Phi3, Cohere2 ...). transformers' sliding cache layers drop keys older than the window and
  count positions by slot, which breaks rollback, holes and trees. The adapter keeps every key in
  plain ``DynamicLayer``\\ s and applies the window inside the explicit mask, from the *position*
  of every cache slot (recorded at the forward that wrote it): a query at position p sees a key at
  position k only if ``p - k < window`` -- holes do not count, tree siblings sharing a depth do not
  count twice. Models that mix layer kinds (Gemma2: sliding and full layers alternate) get one
  mask per kind, as the dict that their forward accepts.
* **ALiBi** (BLOOM, Falcon with ``alibi=True``, MPT). The bias is ``slope * key_position``
  (the query term cancels in the softmax); the network's own builder derives key positions from a
  2-D padding mask or from slot indices, which is wrong for holes and trees and crashes on a 4-D
  mask. The adapter substitutes the bias computed from the recorded slot positions, with the same
  arithmetic as transformers so that contiguous rows give bit-identical logits. MPT's bias has no
  batch dimension: rows at different positions cannot share it, so MPT lacks ``ragged_rows``.
* **Recurrent or compressed layers** (Mamba-style hybrids, linear attention): their state cannot
  be cropped back to an accepted prefix, so the adapter refuses them when it is built.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from ..errors import InputError, ModelMismatchError, a_type
from .base import CausalLM, KVCache

logger = logging.getLogger(__name__)

#: layer kinds whose keys a plain DynamicLayer holds and the explicit mask can restrict
_ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")
#: layer kinds that keep no cache of their own (KV sharing, MLP/MoE-only layers)
_CACHELESS_KINDS = ("dummy",)

# the ALiBi bias of the forward in progress (None: the network's own builder runs)
_ALIBI: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar("leapgen_alibi", default=None)


class _SlotPositions:
    """The position id of every cache slot, stored like a KV layer (``[B, 1, slots, 1]``) so that
    :class:`KVCache`'s crop, gather (tree paths) and row selection move it with the keys."""

    is_initialized = True

    def __init__(self, batch_size: int, device: torch.device) -> None:
        self.keys = torch.zeros(batch_size, 1, 0, 1, dtype=torch.long, device=device)
        self.values = self.keys.clone()  # KVCache gathers keys and values separately: two tensors

    def append(self, position_ids: Tensor) -> None:
        new = position_ids.to(self.keys.device, torch.long)[:, None, :, None]
        self.keys = torch.cat([self.keys, new], 2)
        self.values = torch.cat([self.values, new.clone()], 2)

    @property
    def positions(self) -> Tensor:
        """``[B, slots]`` position of every slot (meaningless for holes, which the mask hides)."""
        return self.keys[:, 0, :, 0]


class HFKVCache(KVCache):
    """:class:`KVCache` over a transformers ``DynamicCache`` that also records each slot's position."""

    def __init__(self, backend: Any, batch_size: int, device: torch.device | str = "cpu") -> None:
        super().__init__(backend, batch_size, device)
        self.slot_positions = _SlotPositions(batch_size, self.device)

    def _layers(self) -> list[Any]:
        return [*super()._layers(), self.slot_positions]


def _layer_kinds(config: Any) -> tuple[list[str], dict[str, int | None]]:
    """Per-layer attention kinds of a transformers config, and the window of each kind (tokens
    a query may look back, itself included: ``sliding_window`` or ``attention_chunk_size``)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True)
    try:
        kinds, kwargs = get_layer_types_and_kwargs(text)
    except Exception:  # noqa: BLE001 - configs without per-layer information: one full-attention kind
        logger.debug("no per-layer attention kinds for %s; assuming full attention", type(config).__name__)
        return [], {"full_attention": None}
    windows: dict[str, int | None] = {}
    for kind, kw in zip(kinds, kwargs):
        if kind in _CACHELESS_KINDS:
            continue
        if kind not in _ATTENTION_KINDS:
            raise ModelMismatchError(
                f"{type(config).__name__} has layers of kind {kind!r}, whose state (recurrent, convolutional "
                "or compressed) cannot be rolled back to an accepted prefix; leapgen's samplers need a KV "
                "cache that can. Use a transformer with attention layers only."
            )
        w = kw.get("sliding_window") if kind != "full_attention" else None
        if kind in windows and windows[kind] != w:
            raise ModelMismatchError(
                f"{type(config).__name__} uses several window sizes for {kind!r} layers ({windows[kind]} and "
                f"{w}); the adapter passes one mask per layer kind and cannot express that."
            )
        windows[kind] = None if w is None else int(w)
    return list(kinds), windows or {"full_attention": None}


#: decoder-only transformers models whose forward is no causal LM over a KV cache, with the reason
_NOT_CAUSAL = {
    "xlnet": "XLNet predicts under permutation masks with its own memory (mems), not a causal KV cache",
    "transfo-xl": "Transformer-XL carries segment memory, not a KV cache",
}


def _check_causal(model: Any) -> None:
    """Refuse, when wrapped, a transformers model that is no causal LM over a croppable KV cache:
    one with recurrent state (``_is_stateful``: RWKV, xLSTM, Mamba), a masked LM (``BertForMaskedLM``:
    transformers cannot generate with it; a causal model of your own without ``GenerationMixin`` is
    still taken), and the architectures in :data:`_NOT_CAUSAL`."""
    name = type(model).__name__
    if getattr(model, "_is_stateful", False):
        raise ModelMismatchError(
            f"{name} keeps a recurrent state, which cannot be rolled back to an accepted prefix; leapgen's "
            "samplers need a KV cache that can. Use a transformer with attention layers only.")
    can_generate = getattr(model, "can_generate", None)
    if name.endswith("ForMaskedLM") and callable(can_generate) and not can_generate():
        raise ModelMismatchError(
            f"{name} is not a causal LM (transformers cannot generate with it); a masked LM goes behind "
            "leapgen.models.TorchMaskedLM and runs with the masked samplers (maskgit, llada, ...).")
    reason = _NOT_CAUSAL.get(getattr(model.config, "model_type", ""))
    if reason is not None:
        raise ModelMismatchError(f"{name}: {reason}; leapgen's causal samplers cannot run it.")


def cache_kwarg(model: Any) -> str:
    """The name ``model.forward`` takes its KV cache by: ``cache`` (transformers >= 5.2x, where
    ``past_key_values`` is deprecated and warns on every call) or ``past_key_values``."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


class HFCausalLM(CausalLM):
    """Wrap a ``transformers`` causal LM (``LlamaForCausalLM``, ``GPT2LMHeadModel``, ...)."""

    def __init__(self, model: PreTrainedModel) -> None:
        _check_causal(model)
        self.model = model.eval()
        self._cache_kwarg = cache_kwarg(model)
        cfg = model.config
        self.config = cfg
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_length = int(
            getattr(cfg, "max_position_embeddings", None)
            or getattr(cfg, "n_positions", None)
            or getattr(cfg, "max_seq_len", None)
            or 2048
        )
        self.forwards = 0
        self.layer_kinds, self.windows = _layer_kinds(cfg)
        # windows that can matter within the context (a 4096-token window on a 2048-token model cannot)
        self._restricted = {
            k: w for k, w in self.windows.items() if w is not None and (k == "chunked_attention" or w < self.max_length)
        }
        self.alibi = self._alibi_kind(cfg)
        self.unsupported = {}
        impl = getattr(cfg, "_attn_implementation", None)
        if impl not in (None, "eager", "sdpa"):
            reason = (
                f"its attention implementation {impl!r} takes no explicit 4-D mask; load the model with "
                "attn_implementation='sdpa' (or 'eager')."
            )
            if self._restricted or self.alibi is not None:
                raise ModelMismatchError(
                    f"{type(model).__name__}: sliding-window and ALiBi models need an explicit mask, but {reason}"
                )
            self.unsupported["tree_mask"] = self.unsupported["ragged_rows"] = reason
        if (
            getattr(cfg, "model_type", "") == "gpt_neo"
            and "local" in getattr(cfg, "attention_layers", ())
            and int(cfg.window_size) < self.max_length
        ):
            self.unsupported["tree_mask"] = self.unsupported["ragged_rows"] = (
                "GPT-Neo's local attention layers count their window in cache slots (a fixed causal buffer), "
                "not in positions, so tree branches and holes would shift the window."
            )
        if self.alibi == "mpt":
            self.unsupported["ragged_rows"] = (
                "MPT adds one ALiBi bias to every row of a batch (it has no batch dimension), so rows at "
                "different positions would get the wrong bias."
            )
        if self.alibi is not None:
            self._install_alibi_hook()

    # ------------------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def describe(self) -> str:
        return type(self.model).__name__

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        if cond is not None:
            raise InputError(
                f"this decoder-only transformers model takes no condition, got {a_type(cond)}; "
                "condition it through the prompt, or use an encoder-decoder pipeline."
            )
        # plain full layers only: windows are applied by the mask (see the module docstring)
        return HFKVCache(DynamicCache(), batch_size, self.device)

    def embeddings(self) -> Tensor | None:
        return self.model.get_input_embeddings().weight

    # ------------------------------------------------------------------------------ forward
    @torch.inference_mode()
    def _forward(
        self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any
    ) -> Tensor:
        position_ids = position_ids.to(self.device)
        slots = cache.slot_positions if isinstance(cache, HFKVCache) else None
        alibi = None
        if slots is not None and (self._restricted or self.alibi is not None):
            key_pos = torch.cat([slots.positions.to(self.device), position_ids], 1)
            mask = self._masks(mask, position_ids, key_pos)
            if self.alibi is not None:
                alibi = self._alibi_bias(key_pos)
        token = _ALIBI.set(alibi)
        try:
            out = self.model(
                input_ids=tokens.to(self.device),
                position_ids=position_ids,
                attention_mask=mask,
                use_cache=True,
                **{self._cache_kwarg: cache.backend},
            )
        finally:
            _ALIBI.reset(token)
        if slots is not None:
            slots.append(position_ids)
        return out.logits

    def _masks(self, mask: Tensor | None, q_pos: Tensor, key_pos: Tensor) -> Any:
        """The explicit mask(s) for one forward: the cache's mask (holes, tree) restricted by each
        layer kind's window over positions; one tensor, or a dict by layer kind when kinds differ."""
        b, n = q_pos.shape
        total = key_pos.shape[1]
        if mask is None:  # contiguous rows, causal new tokens
            allowed = torch.ones(b, n, total, dtype=torch.bool, device=self.device)
            allowed[:, :, total - n :] = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        else:
            allowed = (mask[:, 0] == 0).to(self.device).expand(b, n, total)
        dist = q_pos[:, :, None] - key_pos[:, None, :]
        out: dict[str, Tensor] = {}
        for kind, window in self.windows.items():
            keep = allowed
            if kind == "chunked_attention" and window is not None:
                keep = allowed & (torch.div(q_pos, window, rounding_mode="floor")[:, :, None]
                                  == torch.div(key_pos, window, rounding_mode="floor")[:, None, :])
            elif window is not None and kind in self._restricted:
                keep = allowed & (dist < window)
            out[kind] = self._encode_mask(keep)
        if len(out) == 1:
            return next(iter(out.values()))
        return out

    def _encode_mask(self, allowed: Tensor) -> Tensor:
        if self.alibi == "mpt":  # MPT masks with masked_fill(mask, min): True = hidden
            return ~allowed[:, None]
        add = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        add.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return add[:, None]

    # ------------------------------------------------------------------------------ ALiBi
    @staticmethod
    def _alibi_kind(cfg: Any) -> str | None:
        kind = getattr(cfg, "model_type", "")
        if kind == "bloom":
            return "bloom"
        if kind == "falcon" and getattr(cfg, "alibi", False):
            return "falcon"
        if kind == "mpt":
            return "mpt"
        return None

    def _install_alibi_hook(self) -> None:
        """Route the network's ALiBi builder through :data:`_ALIBI`: inside :meth:`_forward` it
        returns the bias from real slot positions; anywhere else (the user's own ``generate``)
        the original builder runs unchanged."""
        base = self.model.base_model
        if self.alibi == "falcon":
            from transformers.models.falcon import modeling_falcon as mod

            original = getattr(mod.build_alibi_tensor, "_leapgen_original", mod.build_alibi_tensor)
            self._slopes = original(torch.ones(1, 2, dtype=torch.long), base.num_heads, torch.float32).view(-1, 2)[:, 1]

            def falcon_alibi(mask: Tensor, num_heads: int, dtype: torch.dtype) -> Tensor:
                bias = _ALIBI.get()
                return original(mask, num_heads, dtype) if bias is None else bias.to(dtype)

            falcon_alibi._leapgen_original = original  # type: ignore[attr-defined]
            mod.build_alibi_tensor = falcon_alibi
        elif self.alibi == "bloom":
            original = type(base).build_alibi_tensor
            self._slopes = original(base, torch.ones(1, 2, dtype=torch.long), base.num_heads, torch.float32).view(-1, 2)[:, 1]

            def bloom_alibi(mask: Tensor, num_heads: int, dtype: torch.dtype) -> Tensor:
                bias = _ALIBI.get()
                return original(base, mask, num_heads, dtype) if bias is None else bias.to(dtype)

            base.build_alibi_tensor = bloom_alibi
        else:  # mpt
            original = type(base).build_mpt_alibi_tensor
            # MPT's forward calls its builder with the default alibi_bias_max (8); so do we
            self._slopes = -original(base, base.num_heads, 2)[:, 0, 0]

            def mpt_alibi(num_heads: int, sequence_length: int, alibi_bias_max: int = 8, device: Any = None) -> Tensor:
                bias = _ALIBI.get()
                if bias is None:
                    return original(base, num_heads, sequence_length, alibi_bias_max, device)
                return bias

            base.build_mpt_alibi_tensor = mpt_alibi

    def _alibi_bias(self, key_pos: Tensor) -> Tensor:
        """``slope * key_position`` in the layout and arithmetic of the network's own builder."""
        slopes = self._slopes.to(self.device)
        b, total = key_pos.shape
        if self.alibi == "bloom":  # [B*H, 1, K], float32 slopes times integer positions
            return (slopes[None, :, None] * key_pos[:, None, :]).reshape(-1, 1, total)
        if self.alibi == "falcon":  # Falcon multiplies in bfloat16
            return (slopes.bfloat16()[None, :, None] * key_pos[:, None, :]).reshape(-1, 1, total)
        # MPT: [H, 1, K], positions relative to the last slot, one bias for the whole batch
        if b > 1 and not bool((key_pos == key_pos[:1]).all()):
            raise ModelMismatchError(
                f"{self.describe()}: rows of this batch sit at different positions, and MPT's ALiBi bias is "
                "shared by all rows; decode with batch size 1 (the sampler should have refused: ragged_rows)."
            )
        rel = (key_pos[0] - (total - 1)).to(torch.int32)
        return rel[None, None, :] * slopes[:, None, None]


def as_causal_lm(model: Any) -> CausalLM:
    """Return ``model`` behind the :class:`CausalLM` contract (wrapping transformers models).
    Encoder-decoder models are refused: they need their source encoded first."""
    if model is not None and (
        getattr(model, "is_encoder_decoder", False) or getattr(getattr(model, "config", None), "is_encoder_decoder", False)
    ):
        raise ModelMismatchError(
            f"{type(model).__name__} is an encoder-decoder model, and this needs a decoder-only causal LM. Wrap "
            "it with leapgen.models.hf_seq2seq.HFSeq2SeqLM and pass its source to the sampler as "
            "cond=EncoderInputs(...) (leapgen.models.condition), or use an encoder-decoder pipeline."
        )
    if model is None or isinstance(model, CausalLM):
        return model
    if isinstance(model, PreTrainedModel):
        return HFCausalLM(model)
    raise TypeError(
        f"cannot use {a_type(model)} as a causal LM; pass a transformers causal LM "
        "or an object implementing leapgen.models.CausalLM."
    )
