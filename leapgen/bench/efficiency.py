"""What turns step compression into wall-clock speed, as the text and image benches report it.

* :func:`efficiency`: wall speedup against ``ar`` divided by step compression. 1.0 means every
  target step saved is a full ``ar`` step of wall time saved; below 1.0, drafting, verification of
  wider blocks and the loop's own overhead eat part of the saving; above 1.0 the sampler's steps
  are cheaper than ``ar``'s (rare).
* :func:`identity_lines`: the check that transformers' ``generate()`` peers and our samplers give
  the same tokens at T=0, one line per peer, naming the prompts that differ.
* :func:`resolve_device`: the ``--device`` / ``--dtype`` options (CUDA refused clearly when absent).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from ..errors import ConfigError

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
}


def efficiency(speedup: float, step_compression: float) -> float:
    """``speedup / step_compression`` (NaN when either is missing, zero or not finite)."""
    try:
        s, c = float(speedup), float(step_compression)
    except (TypeError, ValueError):
        return float("nan")
    if not (math.isfinite(s) and math.isfinite(c)) or c <= 0:
        return float("nan")
    return s / c


def add_efficiency(rows: Iterable[dict[str, Any]], speedup_key: str = "speedup_vs_ar") -> None:
    """Set ``row["efficiency"]`` from ``row[speedup_key]`` and ``row["step_compression"]``."""
    for row in rows:
        row["efficiency"] = efficiency(row.get(speedup_key, float("nan")), row.get("step_compression", float("nan")))


def identity_lines(block: dict[str, dict[str, Any]]) -> list[str]:
    """One line per transformers peer of a batch-1 block: identical to its leapgen counterpart
    (and to ``ar``) at T=0, or which prompts differ. Reads ``kind``, ``counterpart`` /
    ``peer_identical`` of our rows, ``exact_match`` / ``mismatched_prompts`` of every row."""
    lines = []
    ours_of = {row["counterpart"]: row for row in block.values() if row.get("kind") == "leapgen" and row.get("counterpart")}
    for row in block.values():
        if row.get("kind") != "transformers":
            continue
        name = row["name"]
        mine = ours_of.get(name)
        parts = []
        if mine is not None and "peer_identical" in mine:
            if mine["peer_identical"]:
                parts.append(f"identical to `{mine['name']}`")
            else:
                which = mine.get("peer_mismatched_prompts")
                parts.append(f"DIFFERS from `{mine['name']}`" + (f" on prompts {which}" if which else ""))
        if row.get("mismatched_prompts"):
            parts.append(f"differs from `ar` on prompts {row['mismatched_prompts']}")
        elif row.get("exact_match") == 1.0 and (mine is None or mine["name"] != "ar"):
            parts.append("identical to `ar`")
        lines.append(f"`{name}`: " + ", ".join(parts) if parts else f"`{name}`: not compared")
    return lines


def parse_dtype(name: str | None) -> torch.dtype | None:
    """``--dtype`` as a torch dtype (None: keep the pipeline's)."""
    if name is None:
        return None
    key = str(name).lower().replace("torch.", "")
    if key not in DTYPES:
        raise ConfigError(f"--dtype must be one of {sorted(set(DTYPES))}, got {name!r}.")
    return DTYPES[key]


def check_device(device: str | None) -> torch.device | None:
    """``--device`` as a torch device (None: keep the pipeline's). A CUDA device on a machine without
    CUDA is refused with a :class:`ConfigError` that says so, before any model is loaded."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"--device {device!r} is not a torch device ({err}); use cpu or cuda.") from err
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: the bench runs on cpu or cuda.")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device} asked for CUDA, but CUDA is not available on this machine "
            f"(torch {torch.__version__}); run with --device cpu or on a machine with an NVIDIA GPU."
        )
    return dev


def resolve_device(pipe: Any, device: str | None = None, dtype: str | None = None) -> Any:
    """Move ``pipe`` to ``device`` / ``dtype`` for a bench run (see :func:`check_device`)."""
    dev, dt = check_device(device), parse_dtype(dtype)
    if dev is not None or dt is not None:
        pipe.to(device=dev, dtype=dt)
    return pipe


__all__ = [
    "DTYPES",
    "add_efficiency",
    "check_device",
    "efficiency",
    "identity_lines",
    "parse_dtype",
    "resolve_device",
]
