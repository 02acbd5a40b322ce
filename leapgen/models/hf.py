"""Adapter that puts any transformers causal LM behind the :class:`CausalLM` contract.

The network and its cache are transformers' own (``PreTrainedModel``, ``DynamicCache``); the
adapter only adds per-row lengths, holes and tree masks through :class:`KVCache`, passing an
explicit 4-D mask and position ids, which transformers' attention accepts as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from ..errors import InputError
from .base import CausalLM, KVCache


class HFCausalLM(CausalLM):
    """Wrap a ``transformers`` causal LM (``LlamaForCausalLM``, ``GPT2LMHeadModel``, ...)."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model.eval()
        cfg = model.config
        self.config = cfg
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_length = int(
            getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048
        )
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        if cond is not None:
            raise InputError(
                f"this decoder-only transformers model takes no condition, got a {type(cond).__name__}; "
                "condition it through the prompt, or use an encoder-decoder pipeline."
            )
        return KVCache(DynamicCache(config=self.config), batch_size, self.device)

    @torch.inference_mode()
    def _forward(
        self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any
    ) -> Tensor:
        out = self.model(
            input_ids=tokens.to(self.device),
            past_key_values=cache.backend,
            position_ids=position_ids,
            attention_mask=mask,
            use_cache=True,
        )
        return out.logits

    def embeddings(self) -> Tensor | None:
        return self.model.get_input_embeddings().weight


def as_causal_lm(model: Any) -> CausalLM:
    """Return ``model`` behind the :class:`CausalLM` contract (wrapping transformers models)."""
    if model is None or isinstance(model, CausalLM):
        return model
    if isinstance(model, PreTrainedModel):
        return HFCausalLM(model)
    raise TypeError(
        f"cannot use a {type(model).__name__} as a causal LM; pass a transformers causal LM "
        "or an object implementing leapgen.models.CausalLM."
    )
