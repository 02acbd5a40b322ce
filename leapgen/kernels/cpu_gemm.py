"""Small-M float32 GEMM for CPU decode and verification steps (C++ AVX2/FMA, built on first use).

Why: a decode step multiplies one row per sequence, and a speculative verification a few rows,
by every weight matrix. On a CPU that costs the weight read, but MKL's ``sgemm`` repacks the
weights on every call once there is more than one row: on the shipped 17M-parameter text target
(one thread, ad hoc) all its matmuls took 4.4 ms for 1 row, 6.4 for 2 and 10.5 for 5, so a chain
verification of 4 drafts cost twice a plain step and ``speculative`` stayed near 1.1x ``ar``.
:func:`pack` lays a weight out once in panels of 8 output columns (``[ceil(N/8), K, 8]``) and
``csrc/small_m_gemm.cpp`` streams each panel once for up to 6 rows, so the weights are read once
per call whatever the row count (an ad hoc microbenchmark of the same weights: 2.4 ms for 1 row,
3.0 for 2, 4.3 for 5; docs/architecture.md). For 2-4, 7 and 8 rows it takes each group of six
panels in turn for all rows, two rows at a time, the group staying in cache (2026-11-29, ad hoc,
the same weights, medians of 15 interleaved rounds: 3 rows 4.19 -> 3.72 ms, 4 rows 4.57 -> 3.96,
8 rows 7.85 -> 6.73; whole decodes of 8 held-out prompts, interleaved A/B, identical tokens:
``ar`` 1.06x, ``speculative`` 1.04x, ``spec_tree`` 1.13x).

**Batch invariance.** Every output element is one fused multiply-add chain over ``k`` in order,
whatever the number of rows, the row's place among them, and the thread count. A token's logits
are therefore bit-identical whether it is decoded alone (``ar``) or verified with others
(``speculative``, trees, Jacobi windows), and at batch 1 or 8, up to :data:`MAX_ROWS` rows per call;
:func:`linear` sends larger calls (prefill) to torch.

**Selection.** :func:`available` builds the extension once per machine with
``torch.utils.cpp_extension`` (g++ and ninja; about 30 s, cached under ``TORCH_EXTENSIONS_DIR``)
on an x86 CPU with AVX2 and FMA. ``LEAPGEN_CPU_GEMM=off`` or ``LEAPGEN_KERNELS=reference`` at load
time keep torch's matmul (the reference: :func:`reference_linear`). A build that fails is logged once with
its reason and the reference runs: never silent.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .backend import backend_name, warn_once

logger = logging.getLogger(__name__)

ENV = "LEAPGEN_CPU_GEMM"
#: rows per call the kernel takes; above it (a prompt's prefill) torch's GEMM is faster
MAX_ROWS = 64
#: output columns per packed panel (one AVX2 vector)
PANEL = 8
SOURCE = Path(__file__).parent / "csrc" / "small_m_gemm.cpp"

_lock = threading.Lock()
_module: Any = None
_error: str | None = None
_tried = False


def enabled() -> bool:
    """Whether the CPU GEMM may run: not switched off by ``LEAPGEN_CPU_GEMM`` or the kernel backend."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise ConfigError(f"{ENV}={value!r}: use auto, on or off")
    return value != "off" and backend_name() != "reference"


def cpu_supported() -> str | None:
    """None when this CPU can run the kernel, else the reason (x86 with AVX2 and FMA)."""
    cap = torch.backends.cpu.get_cpu_capability()
    if cap not in ("AVX2", "AVX512"):
        return f"the CPU reports {cap!r}, and the kernel needs x86 AVX2 + FMA"
    return None


#: a build lock older than this is left over from a killed build (torch's lock would wait forever)
STALE_LOCK_SECONDS = 600.0
NAME = "leapgen_small_m_gemm"


def _clear_stale_lock() -> None:
    from torch.utils import cpp_extension

    lock = Path(cpp_extension._get_build_directory(NAME, verbose=False)) / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
        logger.warning("removing %s, a build lock left %.0f s ago by a build that did not finish", lock,
                       time.time() - lock.stat().st_mtime)
        lock.unlink(missing_ok=True)


def _build() -> Any:
    from torch.utils import cpp_extension

    _clear_stale_lock()
    logger.info("building the CPU small-M GEMM (%s; once per machine, about 30 s)", SOURCE.name)
    return cpp_extension.load(
        name=NAME,
        sources=[str(SOURCE)],
        extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        verbose=False,
    )


def available() -> bool:
    """True when the compiled kernel can run here (built on the first call; a failure is logged
    once and the reference is used from then on)."""
    global _module, _error, _tried
    if not enabled():
        return False
    if _tried:
        return _module is not None
    with _lock:
        if not _tried:
            why = cpu_supported()
            if why is None:
                try:
                    _module = _build()
                except Exception as err:  # no compiler, no ninja, a failed compile
                    why = f"the extension did not build: {type(err).__name__}: {str(err).strip()[:300]}"
            _error, _tried = why, True
            if why is not None:
                warn_once("small_m_gemm", why)
    return _module is not None


def loaded() -> bool:
    """Whether the kernel is loaded in this process (what :func:`linear_rows` needs; weights packed in
    another process and unpickled here come without it)."""
    return _module is not None


def unavailable_reason() -> str | None:
    """Why :func:`available` is False (None when it is True or was not asked yet)."""
    return _error


def pack(w_t: Tensor) -> Tensor:
    """A ``[K, N]`` float32 weight (``x @ w_t``) as ``[ceil(N/8), K, 8]`` panels, zero-padded."""
    if w_t.dim() != 2 or w_t.dtype != torch.float32:
        raise ConfigError(f"pack: a [K, N] float32 weight is needed, got {tuple(w_t.shape)} {w_t.dtype}")
    k, n = w_t.shape
    panels = -(-n // PANEL)
    w = w_t.detach()
    if panels * PANEL != n:
        w = torch.cat([w, w.new_zeros(k, panels * PANEL - n)], dim=1)
    return w.reshape(k, panels, PANEL).permute(1, 0, 2).contiguous()


def reference_linear(x: Tensor, w_t: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ w_t (+ bias)``: the definition the kernel is tested against."""
    y = x @ w_t
    return y if bias is None else y + bias


def usable(x: Tensor, packed: Tensor | None) -> bool:
    """Whether :func:`linear` would run the kernel on ``x`` with these packed weights."""
    return (
        packed is not None
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.numel() // max(1, x.shape[-1]) <= MAX_ROWS
        and _module is not None
    )


def linear(x: Tensor, w_t: Tensor, bias: Tensor | None, packed: Tensor | None) -> Tensor:
    """``x [..., K] @ w_t [K, N] (+ bias)``: the kernel on float32 CPU calls of at most
    :data:`MAX_ROWS` rows whose weights were packed (:func:`pack`), else :func:`reference_linear`."""
    if not usable(x, packed):
        return reference_linear(x, w_t, bias)
    assert packed is not None
    n = w_t.shape[1]
    if packed.shape[1] != x.shape[-1] or packed.shape[0] * PANEL < n:
        raise ConfigError(
            f"packed weights {tuple(packed.shape)} do not match x {tuple(x.shape)} @ w {tuple(w_t.shape)}; "
            "repack after changing the weights"
        )
    y = _module.small_m_gemm(x.reshape(-1, x.shape[-1]).contiguous(), packed)
    if y.shape[1] != n:
        y = y[:, :n]
    y = y.reshape(*x.shape[:-1], n)
    return y if bias is None else y + bias


def linear_rows(x: Tensor, n: int, bias: Tensor | None, packed: Tensor) -> Tensor:
    """:func:`linear` for a caller that already knows the kernel runs: ``x [B, T, K]`` float32 on the
    CPU with ``B * T <= MAX_ROWS``, ``packed`` from :func:`pack` of an ``[K, n]`` weight, the kernel
    :func:`loaded` (the lean runtime's decode and verification steps). No checks: about a tenth of a
    small call's time, a quarter of a 1.4M-parameter draft's forward. A strided ``x`` (a slice) is
    copied, as :func:`linear` does (the kernel reads rows ``K`` floats apart)."""
    b, t, k = x.shape
    y = _module.small_m_gemm(x.reshape(b * t, k).contiguous(), packed)
    if y.shape[1] != n:
        y = y[:, :n]
    y = y.view(b, t, n)
    return y if bias is None else y + bias


def _packed_forward(self: nn.Linear, x: Tensor) -> Tensor:
    packed = self.cpu_gemm_packed
    if usable(x, packed):
        return linear(x, self.weight.t(), self.bias, packed)
    return F.linear(x, self.weight, self.bias)


def pack_linears(module: nn.Module) -> int:
    """Pack every float32 CPU ``nn.Linear`` of ``module`` for the kernel (a packed copy beside its
    weight; its forward then runs :func:`linear` for calls of at most :data:`MAX_ROWS` rows and
    ``F.linear`` otherwise). Returns how many were packed (0 where the kernel is off or cannot
    build). :func:`unpack_linears` undoes it; repack after changing the weights."""
    if not available():
        return 0
    count = 0
    with torch.no_grad():
        for m in module.modules():
            if type(m) is nn.Linear and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32:
                m.cpu_gemm_packed = pack(m.weight.t())
                m.forward = _packed_forward.__get__(m)
                count += 1
    return count


def unpack_linears(module: nn.Module) -> None:
    """Undo :func:`pack_linears`: every ``nn.Linear`` runs ``F.linear`` again."""
    for m in module.modules():
        if isinstance(m, nn.Linear) and "forward" in m.__dict__:
            del m.forward
            del m.cpu_gemm_packed


__all__ = [
    "ENV",
    "MAX_ROWS",
    "available",
    "cpu_supported",
    "enabled",
    "linear",
    "linear_rows",
    "loaded",
    "pack",
    "pack_linears",
    "reference_linear",
    "unavailable_reason",
    "unpack_linears",
    "usable",
]
