"""Which implementation a kernel call runs: Triton or the PyTorch reference.

``LEAPGEN_KERNELS`` (or :func:`set_backend` / :func:`use_backend`, which win over it) selects:

* ``auto`` (default): Triton for CUDA tensors when triton imports, the reference otherwise
  (the reference *is* the CPU path). A fallback on CUDA - triton missing, a kernel that failed to
  compile or launch - is logged with ``logging.warning`` once per kernel and reason, never silent;
  a kernel that failed is not tried again in this process.
* ``reference``: always the PyTorch reference.
* ``triton``: always Triton; on CPU tensors this needs Triton's interpreter (``TRITON_INTERPRET=1``,
  slow, for tests). Nothing falls back: a missing triton or a CPU tensor without the interpreter
  raises :class:`~leapgen.errors.ConfigError`, and launch errors propagate.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from collections.abc import Iterator

import torch

from ..errors import ConfigError

logger = logging.getLogger(__name__)

ENV = "LEAPGEN_KERNELS"
BACKENDS = ("auto", "reference", "triton")

_override: str | None = None
_triton_error: str | None = None
_triton_checked = False
_warned: set[tuple[str, str]] = set()
_broken: set[str] = set()


def _check(name: str, source: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"{source}={name!r} is not a kernel backend; use one of {', '.join(BACKENDS)}")
    return name


def set_backend(name: str | None) -> None:
    """Force a backend for this process (``None``: back to ``LEAPGEN_KERNELS`` / auto)."""
    global _override
    _override = None if name is None else _check(name, "backend")


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """Run a block with another backend, restoring the previous choice afterwards."""
    global _override
    prev = _override
    set_backend(name)
    try:
        yield
    finally:
        _override = prev


def backend_name() -> str:
    """The backend in force: the :func:`set_backend` override, else ``LEAPGEN_KERNELS``, else auto."""
    if _override is not None:
        return _override
    return _check(os.environ.get(ENV, "auto") or "auto", ENV)


#: the widest row (vocabulary) a kernel holds in one block: every kernel keeps a whole row in
#: registers (``BLOCK_V = next_power_of_2(V)``). The sampling kernel's compile time for sm_90
#: (Triton 3.9, this project's CPU) grows faster than the block: 1.3 s at 4096, 17 s at 32768, 81 s
#: at 65536 and over 10 minutes at 131072. The shipped models' vocabularies are 4096 (text) and
#: 1024 (image); wider ones than this run the reference, with a log line.
MAX_VOCAB = 32768
#: the widest row ``auto`` sends to Triton. On an H100 (docs/bench_kernels_gpu.md) the one-block
#: sampling kernel is 1.9x the reference at 4096 and 0.61x at 32768 (its row no longer fits in
#: registers), so wider rows run the reference unless ``triton`` is forced.
AUTO_MAX_VOCAB = 4096


def interpreting() -> bool:
    """Whether Triton's interpreter is on (``TRITON_INTERPRET=1``): kernels then run on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def triton_error() -> str | None:
    """Why the Triton kernels cannot be imported (None when they can); checked once per process."""
    global _triton_checked, _triton_error
    if not _triton_checked:
        _triton_checked = True
        try:
            importlib.import_module("leapgen.kernels.triton_kernels")
        except Exception as err:  # ImportError, or a broken triton install
            _triton_error = f"{type(err).__name__}: {err}"
    return _triton_error


def warn_once(kernel: str, reason: str, level: int = logging.WARNING) -> None:
    """Log (``logging.warning`` by default) that ``kernel`` runs its PyTorch reference, once per
    (kernel, reason)."""
    key = (kernel, reason)
    if key not in _warned:
        _warned.add(key)
        logger.log(level, "leapgen.kernels.%s: falling back to the PyTorch reference (%s)", kernel, reason)


def reset() -> None:
    """Forget logged fallbacks, failed kernels and the triton import check (tests)."""
    global _triton_checked, _triton_error
    _warned.clear()
    _broken.clear()
    _triton_checked = False
    _triton_error = None


def use_triton(kernel: str, device: torch.device, vocab: int | None = None) -> bool:
    """True when ``kernel`` should run its Triton version on tensors on ``device``; ``vocab`` is the
    row length the kernel holds in one block (larger than :data:`MAX_VOCAB`: the reference runs)."""
    name = backend_name()
    if name == "reference":
        return False
    runnable = device.type == "cuda" or interpreting()
    too_wide = vocab is not None and vocab > MAX_VOCAB
    why_wide = (
        f"a vocabulary of {vocab} exceeds {MAX_VOCAB}, the most the one-block kernels hold (compiling a wider "
        "block takes minutes and spills registers)"
    )
    if name == "triton" and too_wide:
        raise ConfigError(f"{ENV}=triton: {why_wide}; use the reference for this model")
    if name == "triton":
        err = triton_error()
        if err is not None:
            raise ConfigError(f"{ENV}=triton but the Triton kernels cannot be imported ({err}); pip install triton")
        if not runnable:
            raise ConfigError(
                f"{ENV}=triton on a {device.type} tensor: Triton needs CUDA tensors, or TRITON_INTERPRET=1 "
                "to run its interpreter on CPU (slow; for tests)"
            )
        return True
    if device.type != "cuda":
        return False  # the reference is the CPU path: nothing falls back
    if kernel in _broken:
        return False
    if too_wide:
        warn_once(kernel, why_wide)
        return False
    if vocab is not None and vocab > AUTO_MAX_VOCAB:
        warn_once(kernel, f"vocabulary {vocab} > {AUTO_MAX_VOCAB}: the reference is faster than the one-block "
                  "kernel there; LEAPGEN_KERNELS=triton forces it", logging.INFO)
        return False
    err = triton_error()
    if err is not None:
        warn_once(kernel, f"triton is not available: {err}")
        return False
    return True


def launch_failed(kernel: str, err: Exception) -> None:
    """A Triton launch raised: re-raise when Triton was forced, else log once and stop trying."""
    if backend_name() == "triton":
        raise err
    _broken.add(kernel)
    warn_once(kernel, f"the Triton kernel failed: {type(err).__name__}: {err}")
