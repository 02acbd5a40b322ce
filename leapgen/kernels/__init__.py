"""Kernels of the decoding hot path: Triton on CUDA, a PyTorch reference everywhere else.

* :func:`sample_logits` - fused repetition penalty / frequency and presence penalties (the int32
  coded context's counts) / temperature / top-k / top-p / min-p and one draw per row (per-row
  parameters; greedy rows at temperature 0).
* :func:`chain_accept` - batched chain rejection sampling (speculative sampling's acceptance and
  residual draw), deterministic or sampled drafts.
* :func:`tree_verify` - ancestor masks, token gather and the greedy accepted-path walk for a batch
  of draft trees.
* :func:`tree_accept` - the sampled walk of a batch of draft trees (multi-candidate rejection
  sampling with the shrinking residual; deterministic, i.i.d. or without-replacement children).

:mod:`.cpu_gemm` is the CPU side: a small-M float32 GEMM (C++ AVX2/FMA, built on first use) that
reads the weights once for every row of a decode or verification step, bit-identical whatever the
row count; the lean runtime and the image GPT pack their weights for it on a float32 CPU model.

Each entry point validates its inputs before launch, draws its random numbers with torch from the
caller's generator (so Triton and the reference see the same draws) and picks the implementation
with :mod:`.backend` (``LEAPGEN_KERNELS=auto|reference|triton``). The references in
:mod:`.reference` are the definition of correct. This package imports nothing from leapgen except
:mod:`leapgen.errors`; triton is imported only when a Triton kernel is about to run.
"""

from .backend import BACKENDS, ENV, backend_name, set_backend, use_backend
from .ops import chain_accept, sample_logits, tree_accept, tree_verify
from .reference import TreeVerify, process_logits

__all__ = [
    "BACKENDS",
    "ENV",
    "TreeVerify",
    "backend_name",
    "chain_accept",
    "process_logits",
    "sample_logits",
    "set_backend",
    "tree_accept",
    "tree_verify",
    "use_backend",
]
