"""The lean decode runtime: a compact Llama forward over a preallocated, in-place KV cache.

* :mod:`.static_cache` -- :class:`StaticKVCache` (the :class:`~leapgen.models.base.KVCache` API over
  preallocated buffers; rollback moves pointers and validity bits);
* :mod:`.llama` -- :class:`LeanLlama`, built from a transformers ``LlamaForCausalLM``'s weights;
* :mod:`.lm` -- :class:`LeanCausalLM`, its :class:`~leapgen.models.base.CausalLM` adapter, and
  :func:`lean_or_hf`, which picks the lean runtime for Llama models and the transformers adapter
  for any other causal LM;
* :mod:`.compiled` -- the optional ``torch.compile`` / CUDA-graph step (GPU only).
"""

from .llama import LeanConfig, LeanLlama, lean_supported
from .lm import LeanCausalLM, lean_or_hf
from .static_cache import StaticBackend, StaticKVCache, StaticLayer

__all__ = [
    "LeanCausalLM",
    "LeanConfig",
    "LeanLlama",
    "StaticBackend",
    "StaticKVCache",
    "StaticLayer",
    "lean_or_hf",
    "lean_supported",
]
