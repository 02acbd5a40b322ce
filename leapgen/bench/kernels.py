"""Native timings of :mod:`leapgen.kernels`: each Triton kernel against its PyTorch reference on the
same random inputs, at decode-time shapes (``leapgen bench kernels``).

For every kernel and shape the two backends run interleaved (reference, triton, reference, ...),
``runs`` times each after a warm-up, synchronising the device around every call; the table gives
the median milliseconds per call, the ratio and whether the outputs agreed (integers exactly,
probabilities within float tolerance). Triton needs a CUDA device (or ``TRITON_INTERPRET=1``,
whose timings mean nothing and are labelled so); without either only the reference column is
filled and the table says why.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import ConfigError
from .common import machine_info, markdown_table, median, timed

logger = logging.getLogger(__name__)

#: (kernel, batch, size, vocab): size is draft length g (chain) or tree nodes N (trees); 4096 is the
#: shipped text model's vocabulary, 32768 the widest the one-block kernels take (kernels.backend.MAX_VOCAB)
DEFAULT_SHAPES: tuple[tuple[str, int, int, int], ...] = (
    ("sample_logits", 1, 0, 4096),
    ("sample_logits", 16, 0, 4096),
    ("sample_logits", 16, 0, 32768),
    ("chain_accept", 1, 5, 4096),
    ("chain_accept", 16, 5, 4096),
    ("tree_verify", 1, 32, 4096),
    ("tree_verify", 16, 32, 4096),
    ("tree_accept", 1, 32, 4096),
    ("tree_accept", 16, 32, 4096),
)
QUICK_SHAPES: tuple[tuple[str, int, int, int], ...] = (
    ("sample_logits", 2, 0, 64),
    ("chain_accept", 2, 3, 64),
    ("tree_verify", 2, 6, 32),
    ("tree_accept", 2, 6, 32),
)


def random_parents(b: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Random parent arrays ``[B, N]`` of full trees: node 0 the root, every node's parent earlier."""
    parent = torch.empty(b, n, dtype=torch.long)
    parent[:, 0] = -1
    for i in range(1, n):
        parent[:, i] = torch.randint(0, i, (b,), generator=gen)
    return parent


def make_case(kernel: str, b: int, size: int, v: int, device: torch.device, dtype: torch.dtype,
              seed: int = 0) -> Callable[[torch.Generator], Any]:
    """A call of ``kernel`` on random inputs of the given shape, taking the generator of its draws."""
    from .. import kernels

    gen = torch.Generator().manual_seed(seed)
    if kernel == "sample_logits":
        logits = (torch.randn(b, v, generator=gen) * 3).to(device, dtype)
        return lambda g: kernels.sample_logits(logits, 0.8, 50, 0.95, generator=g)
    if kernel == "chain_accept":
        q = (torch.randn(b, size, v, generator=gen) * 2).softmax(-1)
        p = (q.log() + 0.7 * torch.randn(b, size, v, generator=gen)).softmax(-1)
        p = torch.cat([p, torch.randn(b, 1, v, generator=gen).softmax(-1)], 1)
        draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, size)
        draft, p, q = draft.to(device), p.to(device, dtype), q.to(device, dtype)
        return lambda g: kernels.chain_accept(draft, p, q, g)
    if kernel in ("tree_verify", "tree_accept"):
        parent = random_parents(b, size, gen)
        tokens = torch.randint(0, v, (b, size), generator=gen)
        p = torch.randn(b, size, v, generator=gen).softmax(-1)
        q = (p.log() + 0.8 * torch.randn(p.shape, generator=gen)).softmax(-1)
        tokens, parent, p, q = tokens.to(device), parent.to(device), p.to(device, dtype), q.to(device, dtype)
        if kernel == "tree_verify":
            return lambda g: kernels.tree_verify(tokens, parent, p)
        return lambda g: kernels.tree_accept(tokens, parent, p, q, "iid", g)
    raise ConfigError(f"unknown kernel {kernel!r}; choose from sample_logits, chain_accept, tree_verify, tree_accept")


def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "_fields") or isinstance(out, (tuple, list)):
        return [t for x in out for t in _flatten(x)]
    if hasattr(out, "__dataclass_fields__"):
        return [t for f in out.__dataclass_fields__ for t in _flatten(getattr(out, f))]
    return []


def agree(a: Any, b: Any) -> bool:
    """Integer outputs identical, float outputs within float tolerance."""
    xs, ys = _flatten(a), _flatten(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            if not torch.allclose(x.float(), y.float(), rtol=1e-4, atol=1e-6):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def run_kernel_bench(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, runs: int = 20,
                     shapes: Sequence[tuple[str, int, int, int]] = DEFAULT_SHAPES, seed: int = 0) -> dict[str, Any]:
    """Time every ``(kernel, batch, size, vocab)`` of ``shapes`` under both backends; see the module doc."""
    from .. import kernels
    from ..kernels.backend import interpreting

    if runs < 1:
        raise ConfigError(f"runs must be >= 1, got {runs}")
    dev = torch.device(device)
    triton_ok = dev.type == "cuda" or interpreting()
    why = None
    if triton_ok:
        try:
            import triton  # noqa: F401
        except ImportError:
            triton_ok, why = False, "triton is not installed"
    else:
        why = "no CUDA device (and TRITON_INTERPRET is not set)"
    rows = []
    for kernel, b, size, v in shapes:
        call = make_case(kernel, b, size, v, dev, dtype, seed)
        backends = ["reference"] + (["triton"] if triton_ok else [])
        outs: dict[str, Any] = {}
        times: dict[str, list[float]] = {k: [] for k in backends}
        for name in backends:  # warm-up: compiles the kernel, fills caches
            with kernels.use_backend(name):
                outs[name] = call(torch.Generator(device=dev).manual_seed(seed))
        for r in range(runs):
            for name in backends if r % 2 == 0 else backends[::-1]:
                gen = torch.Generator(device=dev).manual_seed(seed + r)
                with kernels.use_backend(name):
                    _, t = timed(functools.partial(call, gen), dev)
                times[name].append(t * 1e3)
        row = {"kernel": kernel, "batch": b, "size": size, "vocab": v,
               "reference_ms": median(times["reference"]), "triton_ms": None, "speedup": None, "agree": None}
        if triton_ok:
            row["triton_ms"] = median(times["triton"])
            row["speedup"] = row["reference_ms"] / row["triton_ms"] if row["triton_ms"] else None
            row["agree"] = agree(outs["reference"], outs["triton"])
        rows.append(row)
        logger.info("%s b=%d size=%d V=%d: %s", kernel, b, size, v, row)
    return {"machine": machine_info(), "rows": rows, "triton": triton_ok, "why_no_triton": why,
            "settings": {"device": str(dev), "dtype": str(dtype), "runs": runs, "seed": seed,
                         "interpreted": interpreting()}}


def format_markdown(result: dict[str, Any], header: bool = True) -> str:
    """The timing table, with the machine and device line above it."""
    from .common import device_line

    lines = ["## Kernels: Triton against the PyTorch reference", ""] if header else []
    lines.append(device_line(result["machine"], result["settings"]) + ".")
    lines.append("")
    s = result["settings"]
    note = f"Median of {s['runs']} interleaved calls per backend after a warm-up, device synchronised around each call"
    if s.get("interpreted"):
        note += "; TRITON_INTERPRET=1, so the triton column times the interpreter, not a GPU"
    lines += [note + ".", ""]
    if not result["triton"]:
        lines += [f"Triton column empty: {result['why_no_triton']}.", ""]
    size_name = {"sample_logits": "-", "chain_accept": "g={}", "tree_verify": "N={}", "tree_accept": "N={}"}
    rows = [
        [r["kernel"], r["batch"], size_name[r["kernel"]].format(r["size"]), r["vocab"], f"{r['reference_ms']:.3f}",
         "-" if r["triton_ms"] is None else f"{r['triton_ms']:.3f}",
         "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
         "-" if r["agree"] is None else ("yes" if r["agree"] else "NO")]
        for r in result["rows"]
    ]
    lines.append(markdown_table(
        ["kernel", "batch", "draft", "vocab", "reference ms", "triton ms", "triton speedup", "outputs agree"], rows))
    return "\n".join(lines) + "\n"
