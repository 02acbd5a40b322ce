"""Optional ``torch.compile`` of the lean forward (CUDA only, off by default).

On a GPU a small model's decode step is dominated by kernel launches; compiling the forward fuses
RMSNorm, RoPE and the SwiGLU gate into few kernels. The step's shapes change every call (the
cache grows by the accepted tokens, verification windows differ in width), so the forward is
compiled with ``dynamic=True``: one graph for every cache length and window width, no recompiles
per step. Full CUDA-graph capture (``mode="reduce-overhead"``) needs fixed buffer addresses and
shapes -- attention over the whole preallocated capacity under a validity mask -- and is left to
a later change; ``compile=True`` uses the default mode.

Not used on CPU: there the compiled graph would trade a few microseconds of dispatch for
compile time and a C++ toolchain dependency, and the CPU path stays the eager reference. This
module has not been run on a GPU in this repository's test suite (there is none in CI); the
guard below keeps CPU runs on the eager forward and logs why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger(__name__)


def compile_forward(net: Any) -> Callable[..., torch.Tensor] | None:
    """``torch.compile(net.forward, dynamic=True)`` when the network is on CUDA, else None
    (with an info log: the caller keeps the eager forward)."""
    device = net.lm_head.device
    if device.type != "cuda":
        logger.info("lean runtime: compile=True ignored on %s (torch.compile is used on CUDA only)", device)
        return None
    if not hasattr(torch, "compile"):  # pragma: no cover - torch < 2.0
        logger.warning("lean runtime: this torch has no torch.compile; running eagerly")
        return None
    return torch.compile(net.forward, dynamic=True, fullgraph=False)


__all__ = ["compile_forward"]
