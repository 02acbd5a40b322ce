"""Helpers every benchmark suite shares: machine description, interleaved timing, forward
counting and table formatting.

The timing protocol (see :func:`interleaved`) is the one the project's principles ask for: one
process, every entry measured in the same loop, the order of entries rotated from run to run so
that no entry systematically runs after another, and medians over runs.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..configuration import json_safe  # the one JSON converter; it lives low so distributed/ shares it

# ------------------------------------------------------------------------------------------ machine


def stats_record(st: Any) -> dict[str, Any]:
    """The counters of a :class:`DecodeStats` every bench records per call (forwards, AR steps,
    accepted tokens summed over rows and steps, the loop's own wall time)."""
    flat = [n for step in st.accepted_per_step for n in step]
    return {
        "new_tokens": st.new_tokens,
        "target_forwards": st.target_forwards,
        "draft_forwards": st.draft_forwards,
        "other_forwards": st.other_forwards,
        "baseline_steps": st.baseline_steps,
        "drafted_tokens": st.drafted_tokens,
        "accepted_draft_tokens": st.accepted_draft_tokens,
        "accepted_sum": sum(flat),
        "accepted_steps": len(flat),
        "decode_s": st.wall_time,
    }


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def physical_cores() -> int | None:
    """Physical CPU cores (distinct ``(physical id, core id)`` pairs of /proc/cpuinfo); None when unknown."""
    try:
        pairs, phys = set(), "0"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip().lower()
            if key == "physical id":
                phys = val.strip()
            elif key == "core id":
                pairs.add((phys, val.strip()))
        return len(pairs) or None
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """What a benchmark number depends on: platform, CPU, library versions, threads, date."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "physical_cores": physical_cores(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for lib in ("transformers", "tokenizers"):
        try:
            info[lib] = __import__(lib).__version__
        except ImportError:  # pragma: no cover
            info[lib] = None
    try:
        from .. import __version__

        info["leapgen"] = __version__
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        info["load_average"] = os.getloadavg()
    except OSError:  # pragma: no cover
        pass
    return info


def machine_line(info: dict[str, Any]) -> str:
    """One-line description of :func:`machine_info`'s result for table headers."""
    line = (
        f"{info.get('cpu', '?')} ({info.get('cpu_count', '?')} cores), {info.get('torch_threads', '?')} torch thread(s); "
        f"{info.get('platform', '?')}; Python {info.get('python', '?')}, torch {info.get('torch', '?')}, "
        f"transformers {info.get('transformers', '?')}; {info.get('date', '?')}"
    )
    if info.get("load_average"):
        line += f"; load average at start {info['load_average'][0]:.2f}"
    return line


def device_line(info: dict[str, Any], settings: dict[str, Any]) -> str:
    """The header of every table: CPU model, cores, hardware threads and torch threads, the device
    (``cpu`` or the CUDA device's name), dtype and torch version."""
    cores = info.get("physical_cores") or "?"
    device = str(settings.get("device", "cpu"))
    if device.startswith("cuda"):
        device = f"CUDA {info.get('gpu', '?')} ({device})"
    dtype = str(settings.get("dtype", "?")).replace("torch.", "")
    return (
        f"Machine: {info.get('cpu', '?')}, {cores} cores / {info.get('cpu_count', '?')} threads, "
        f"{settings.get('threads', info.get('torch_threads', '?'))} torch thread(s); device {device}; {dtype}; "
        f"torch {info.get('torch', '?')}"
    )


# ------------------------------------------------------------------------------------------ timing


def split_entries(text: str | Sequence[str], sep: str = ",") -> list[str]:
    """``text`` split at every ``sep`` outside brackets, braces, parentheses and JSON strings,
    stripped, empties dropped (a sequence is taken as already split):
    ``'ar,maskgct[s2a_params={"a":1,"b":2}]'`` -> ``["ar", 'maskgct[s2a_params={"a":1,"b":2}]']``.
    Unbalanced closing brackets or an unterminated string raise ValueError."""
    if not isinstance(text, str):
        return [str(t).strip() for t in text if str(t).strip()]
    parts: list[str] = []
    depth, quote, escaped, start = 0, False, False, 0
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
        elif ch == '"':
            quote = True
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{text!r}: {ch!r} at position {i} closes nothing")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if quote or depth:
        raise ValueError(f"{text!r}: unterminated {'string' if quote else 'bracket'}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_entry(entry: str) -> tuple[str, dict[str, Any]]:
    """A bench entry: a sampler name, optionally with JSON parameters separated by ``;`` (a ``;``
    inside a JSON value is kept): ``"maskgct[steps=8;cfg_scale=0]"`` -> ``("maskgct", {"steps": 8,
    "cfg_scale": 0})``."""
    if "[" not in entry:
        return entry.strip(), {}
    name, rest = entry.split("[", 1)
    rest = rest.rstrip()
    if not rest.endswith("]"):
        raise ValueError(f"bench entry {entry!r}: the parameters need a closing ']'")
    params: dict[str, Any] = {}
    for kv in split_entries(rest[:-1], sep=";"):
        if kv.strip():
            if "=" not in kv:
                raise ValueError(f"bench entry {entry!r}: parameter {kv!r} is not key=value")
            k, v = kv.split("=", 1)
            params[k.strip()] = json.loads(v)
    return name.strip(), params


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def synchronize(device: Any = None) -> None:
    """Wait for queued CUDA work on ``device`` (no-op on CPU), so a clock reading covers it."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: Any = None) -> tuple[Any, float]:
    """``(fn(), seconds)`` measured with ``time.perf_counter`` (synchronising a CUDA ``device``
    before and after, so the time covers the kernels ``fn`` queued)."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def rotate(xs: Sequence[Any], k: int) -> list[Any]:
    """``xs`` rotated left by ``k`` (mod len)."""
    if not xs:
        return []
    k %= len(xs)
    return list(xs[k:]) + list(xs[:k])


def interleaved(
    entries: Sequence[str],
    items: Sequence[Any],
    runs: int,
    measure: Callable[[str, Any, int], None],
    progress: bool | None = None,
    desc: str = "bench",
) -> None:
    """Call ``measure(entry, item, run)`` for every run, item and entry.

    Loop order: runs (outer), then items, then entries with their order rotated by the run index,
    so every entry meets the same machine state on average and none always follows another.
    ``progress=None`` shows a tqdm bar over runs only when stderr is a terminal.
    """
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if progress is None else not progress
    for r in tqdm(range(runs), desc=desc, unit="run", disable=disable):
        order = rotate(entries, r)
        for item in items:
            for e in order:
                measure(e, item, r)


class ForwardCounter:
    """Count calls of a ``torch.nn.Module`` (through ``__call__``, i.e. ``forward`` invocations).

    >>> with ForwardCounter(model) as c:
    ...     model.generate(ids)
    >>> c.count
    """

    def __init__(self, module: torch.nn.Module | None) -> None:
        self.module = module
        self.count = 0
        self._handle = None

    def _hook(self, *_: Any) -> None:
        self.count += 1

    def __enter__(self) -> ForwardCounter:
        if self.module is not None:
            self._handle = self.module.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Temporarily set ``torch.set_num_threads(n)`` (no-op for None)."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------------------------------ tables


def fmt(x: Any, digits: int = 2) -> str:
    """Numbers with ``digits`` decimals, NaN/None as ``-``, everything else via ``str``."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:.{digits}f}"
    return str(x)


def _is_numeric(s: str) -> bool:
    s = s.rstrip("x%").replace(",", "")
    try:
        float(s)
        return True
    except ValueError:
        return False


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """GitHub markdown table; numeric columns are right-aligned."""
    cells = [[fmt(c) for c in row] for row in rows]
    numeric = [
        bool(cells) and all(_is_numeric(r[i]) or r[i] == "-" for r in cells) for i in range(len(headers))
    ]
    esc = [[c.replace("|", "\\|") for c in row] for row in cells]
    widths = [max([len(h)] + [len(r[i]) for r in esc]) for i, h in enumerate(headers)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"]
    out.append(
        "|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2)) for w, n in zip(widths, numeric)) + "|"
    )
    for row in esc:
        out.append(
            "| " + " | ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)) + " |"
        )
    return "\n".join(out)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], sep: str = "  ") -> str:
    """Plain aligned table for terminals."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = [sep.join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append(sep.join("-" * w for w in widths))
    lines += [sep.join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (NaN/inf as null), creating parent folders."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n")
    return p


def write_text(path: str | os.PathLike, text: str) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text if text.endswith("\n") else text + "\n")
    return p


__all__ = [
    "ForwardCounter",
    "cpu_model",
    "device_line",
    "fmt",
    "interleaved",
    "json_safe",
    "machine_info",
    "machine_line",
    "markdown_table",
    "median",
    "parse_entry",
    "physical_cores",
    "rotate",
    "split_entries",
    "stats_record",
    "synchronize",
    "text_table",
    "timed",
    "torch_threads",
    "write_json",
    "write_text",
]
