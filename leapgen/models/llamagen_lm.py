"""The :class:`CausalLM` adapter of :class:`~leapgen.models.llamagen.LlamaGenGPT`: condition slots
filled from a :class:`~leapgen.models.condition.ClassCondition`, and classifier-free guidance inside
the forward (a doubled batch over a :class:`StaticKVCache` with two copies, one counted forward), so that every
autoregressive sampler decodes an image model unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError, InputError
from ..kernels import cpu_gemm
from .base import CausalLM, KVCache
from .condition import NULL_LABEL, ClassCondition, expect_condition
from .guidance import cfg_logits
from .lean.static_cache import StaticKVCache
from .llamagen import TEXT_NULL, LlamaGenGPT


class GuidedKVCache(KVCache):
    """:class:`KVCache` whose backend holds ``copies`` stacked halves (``[cond, null]`` under
    guidance): every row operation is applied to row b of each half. The adapter itself decodes
    over a :class:`StaticKVCache` (preallocated, ``copies`` built in); this growing variant stays
    for backends of the ``KVBackend`` kind."""

    def __init__(
        self, backend: Any, batch_size: int, device: torch.device | str = "cpu", copies: int = 1, cond: Any = None
    ) -> None:
        super().__init__(backend, batch_size, device, cond)
        self.copies = copies

    def _backend_gather(self, start: int, index: Tensor) -> None:
        super()._backend_gather(start, index.repeat(self.copies, 1))

    def _backend_select_rows(self, rows: Tensor) -> None:
        full = torch.cat([rows + k * self.batch_size for k in range(self.copies)])
        super()._backend_select_rows(full)


class LlamaGenLM(CausalLM):
    """:class:`CausalLM` adapter of a :class:`LlamaGenGPT`; its condition is a
    :class:`~leapgen.models.condition.ClassCondition` (with the call's classifier-free guidance)."""

    def __init__(self, gpt: LlamaGenGPT) -> None:
        self.gpt = gpt.eval()
        cfg = gpt.config
        self.vocab_size = cfg.vocab_size
        self.max_length = cfg.cls_token_num + cfg.block_size
        self.grid = (cfg.grid_size, cfg.grid_size)
        self.prefix_len = cfg.cls_token_num
        self.forwards = 0
        self._latents: Tensor | None = None
        #: how many of its linear layers run the CPU small-M GEMM (0 off a float32 CPU model)
        self.cpu_gemm = cpu_gemm.pack_linears(self.gpt) if self.device.type == "cpu" else 0

    @property
    def device(self) -> torch.device:
        return self.gpt.tok_embeddings.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.gpt.tok_embeddings.weight.dtype

    def describe(self) -> str:
        return f"LlamaGen image GPT ({self.gpt.config.num_classes} classes, text_len={self.gpt.config.text_len})"

    def condition_slots(self, cond: Any) -> int:
        """The class and text positions (``cls_token_num``), filled from the condition."""
        return self.prefix_len

    def check_condition(self, cond: Any, batch_size: int | None = None) -> ClassCondition | None:
        """Raise ``InputError`` unless ``cond`` is a :class:`ClassCondition` this model can read
        (None = the null condition)."""
        cfg = self.gpt.config
        cond = expect_condition(cond, ClassCondition, "the LlamaGen image GPT", batch_size)
        if cond is None:
            return None
        if cond.labels.numel() and int(cond.labels.max()) >= cfg.num_classes:
            raise InputError(
                f"class label {int(cond.labels.max())} is outside [0, {cfg.num_classes}) (the model's classes; "
                f"{NULL_LABEL} = no class)"
            )
        if cond.neg_labels is not None and cond.neg_labels.numel() and int(cond.neg_labels.max()) >= cfg.num_classes:
            raise InputError(
                f"negative class label {int(cond.neg_labels.max())} is outside [0, {cfg.num_classes}) (the model's "
                f"classes; {NULL_LABEL} = no class)"
            )
        for name in ("text_ids", "neg_text_ids"):
            ids = getattr(cond, name)
            if ids is None:
                continue
            if not cfg.text_len:
                raise InputError(f"this model is class-conditional only (text_len=0); the condition must have no {name}")
            if ids.shape[1] != cfg.text_len:
                raise InputError(
                    f"{name} must have the model's text length {cfg.text_len} per row (pad with "
                    f"LlamaGenGPT.text_words), got {ids.shape[1]}"
                )
            if ids.numel() and int(ids.max()) >= cfg.text_vocab_size:
                raise InputError(f"text word ids must lie in [0, {cfg.text_vocab_size})")
        return cond

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        cond = self.check_condition(cond, batch_size)
        if cond is not None:
            cond = cond.to(self.device)
        guided = cond is not None and cond.guidance.active
        cfg = self.gpt.config
        # preallocated, rolled back in place; sized for a whole image plus a verification window
        return StaticKVCache(
            cfg.n_layer, batch_size, cfg.n_kv_head or cfg.n_head, cfg.dim // cfg.n_head, self.dtype, self.device,
            capacity=self.max_length + 32, copies=2 if guided else 1, cond=cond, implicit_causal=True,
        )

    def _condition(self, cond: ClassCondition | None, batch: int) -> tuple[Tensor, Tensor | None]:
        """``(labels [B], words [B, text_len] or None)`` in the network's indices."""
        cfg = self.gpt.config
        dev = self.device
        if cond is None:
            labels = torch.full((batch,), cfg.num_classes, dtype=torch.long, device=dev)
            words = None
        else:
            labels = cond.labels.to(dev, torch.long)
            labels = torch.where(labels == NULL_LABEL, torch.full_like(labels, cfg.num_classes), labels)
            words = None if cond.text_ids is None else cond.text_ids.to(dev, torch.long)
        if cfg.text_len and words is None:
            words = torch.full((batch, cfg.text_len), TEXT_NULL, dtype=torch.long, device=dev)
        return labels, words

    def null_condition(self, cond: ClassCondition | None, batch: int) -> tuple[Tensor, Tensor | None]:
        """``(labels, words)`` of guidance's unconditional half: the negative prompt of ``cond``
        where it has one, else the null class and null text."""
        if cond is None or cond.neg_labels is None:
            return self._condition(None, batch)
        return self._condition(ClassCondition(labels=cond.neg_labels, text_ids=cond.neg_text_ids), batch)

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        tokens = tokens.to(self.device)
        position_ids = position_ids.to(self.device)
        if cond is not cache.cond:
            cond = self.check_condition(cond, tokens.shape[0])
        labels, words = self._condition(cond, tokens.shape[0])
        if isinstance(cache, StaticKVCache):
            cache.reserve(tokens.shape[1])
        copies = getattr(cache, "copies", 1)
        if copies == 1:
            return self.gpt(tokens, position_ids, mask, cache.backend, labels, words)
        null_labels, null_words = self.null_condition(cond, tokens.shape[0])
        labels2 = torch.cat([labels, null_labels])
        words2 = None if words is None else torch.cat([words, null_words])
        both = torch.cat([tokens, tokens])
        pos2 = torch.cat([position_ids, position_ids])
        mask2 = None
        if mask is not None:  # both halves see the same slots (materialised: SDPA's kernels treat broadcasts differently)
            m = mask.expand(tokens.shape[0], *mask.shape[1:])
            mask2 = torch.cat([m, m])
        logits = self.gpt(both, pos2, mask2, cache.backend, labels2, words2)
        c, u = logits.chunk(2)
        n_generated = position_ids - self.prefix_len + 1  # image tokens before the one each position predicts
        g = cond.guidance
        return cfg_logits(c, u, g.scale, n_generated, g.interval)

    def embeddings(self) -> Tensor:
        return self.gpt.tok_embeddings.weight

    def set_token_latents(self, latents: Tensor | None) -> None:
        """The VQ codebook vectors ``[V, d]`` (what each image token means), for LANTERN-style samplers."""
        if latents is not None and latents.shape[0] != self.vocab_size:
            raise ConfigError(f"token latents have {latents.shape[0]} rows, the model has {self.vocab_size} image tokens")
        self._latents = latents

    def token_latents(self) -> Tensor | None:
        return self._latents if self._latents is not None else self.embeddings()


__all__ = ["GuidedKVCache", "LlamaGenLM"]
