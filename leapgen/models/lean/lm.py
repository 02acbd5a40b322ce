"""The :class:`CausalLM` adapter of :class:`~leapgen.models.lean.llama.LeanLlama`: the decode
runtime the shipped Llama models use by default (``TextPipeline(runtime="lean")``).

It implements the contract of :class:`~leapgen.models.base.CausalLM` exactly (position ids,
``attn_mask`` blocks for trees and windows, holes, every capability) over a
:class:`~leapgen.models.lean.static_cache.StaticKVCache`, and gives the transformers adapter's
greedy tokens. ``compile=True`` (CUDA only; ignored with a log line elsewhere) wraps the network in
``torch.compile``: see :mod:`leapgen.models.lean.compiled`. On a float32 CPU network the weights are
also packed for the small-M GEMM (:mod:`leapgen.kernels.cpu_gemm`; ``LEAPGEN_CPU_GEMM=off`` keeps
torch's), which makes a verification of a few tokens cost little more than a one-token step.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from ...errors import InputError, a_type
from ..base import CausalLM, KVCache
from .llama import LeanLlama, lean_supported
from .static_cache import DEFAULT_CAPACITY, StaticKVCache

logger = logging.getLogger(__name__)


class LeanCausalLM(CausalLM):
    """:class:`CausalLM` over a :class:`LeanLlama` and a :class:`StaticKVCache`."""

    def __init__(self, net: LeanLlama, compile: bool = False, source: Any = None) -> None:
        self.net = net.eval()
        c = net.c
        self.vocab_size = c.vocab_size
        self.max_length = c.max_length
        self.forwards = 0
        self.unsupported = {}
        #: the transformers model it was built from (for describe() and equality checks)
        self.source = source
        self._step = net.forward
        self.compiled = False
        #: whether the network runs the CPU small-M GEMM (packed weights)
        self.cpu_gemm = net.pack_cpu_gemm()
        if self.cpu_gemm:
            logger.debug("lean runtime: the CPU small-M GEMM is on (weights packed)")
        if compile:
            from .compiled import compile_forward

            step = compile_forward(net)
            if step is not None:
                self._step, self.compiled = step, True

    @classmethod
    def from_hf(cls, model: Any, compile: bool = False) -> LeanCausalLM:
        """Build from a transformers ``LlamaForCausalLM`` (see :func:`lean_supported`)."""
        return cls(LeanLlama.from_hf(model), compile=compile, source=model)

    @staticmethod
    def supported(model: Any) -> str | None:
        """None if ``model`` can run on the lean runtime, else the reason it cannot."""
        return lean_supported(model)

    @property
    def device(self) -> torch.device:
        return self.net.lm_head.device

    @property
    def dtype(self) -> torch.dtype:
        return self.net.lm_head.dtype

    def describe(self) -> str:
        return f"lean {type(self.source).__name__ if self.source is not None else 'Llama'}"

    def new_cache(self, batch_size: int, cond: Any = None, capacity: int | None = None) -> KVCache:
        if cond is not None:
            raise InputError(
                f"this decoder-only Llama takes no condition, got {a_type(cond)}; condition it "
                "through the prompt, or use an encoder-decoder pipeline."
            )
        c = self.net.c
        cap = capacity or min(DEFAULT_CAPACITY, c.max_length + 64)
        return StaticKVCache(c.n_layers, batch_size, c.kv_heads, c.head_dim, self.dtype, self.device, cap)

    def embeddings(self) -> Tensor:
        return self.net.embed.weight

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        if not isinstance(cache, StaticKVCache):
            raise TypeError("LeanCausalLM needs the StaticKVCache from its own new_cache()")
        cache.reserve(tokens.shape[1])
        dev = self.device
        return self._step(tokens.to(dev), position_ids.to(dev), mask, cache.backend)


def lean_or_hf(model: Any, runtime: str = "lean", compile: bool = False) -> CausalLM | None:
    """The :class:`CausalLM` for a model: the lean runtime for Llama-architecture transformers
    models when ``runtime == "lean"``, the transformers adapter otherwise (or for anything the
    lean runtime cannot run, with a debug log of why)."""
    from ..hf import as_causal_lm

    if model is None or isinstance(model, CausalLM):
        return model
    if runtime == "lean":
        why = lean_supported(model)
        if why is None:
            return LeanCausalLM.from_hf(model, compile=compile)
        logger.debug("lean runtime not used for %s: %s; using transformers", type(model).__name__, why)
    return as_causal_lm(model)


__all__ = ["LeanCausalLM", "lean_or_hf"]
