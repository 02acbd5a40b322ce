"""Wall speedup against ``ar`` as a function of batch size, and its plot.

:func:`run_batch_sweep` times a few samplers on the same ``n_items`` inputs (prompts or images) at
every batch size (items grouped consecutively, so each batch size does the same total work),
interleaved: for run r, for batch size, for chunk, every sampler in an order rotated by r. Per
sampler and batch size: wall = sum over chunks of the median over runs; speedup = ``ar``'s wall /
the sampler's at the same batch size; step compression = AR steps / target forwards; efficiency =
speedup / step compression.

:func:`plot_batch_sweep` draws one panel per suite (text, image) with one line per sampler
(matplotlib, Agg backend); :func:`main` re-draws the figure from saved bench JSONs
(``python -m leapgen.bench.batch_sweep --text docs/bench_text.json --image docs/bench_image.json
--out docs/speedup_vs_batch.png``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .common import fmt, markdown_table, median, rotate
from .efficiency import efficiency

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
#: call(sampler name, item indices) -> (stats_record dict, wall seconds)
Call = Callable[[str, list[int]], tuple[dict[str, Any], float]]


def parse_batch_sizes(text: str | Sequence[int] | None) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]`` (sorted, unique, each >= 1)."""
    if text is None:
        return []
    vals = text if not isinstance(text, str) else [x.strip() for x in text.split(",") if x.strip()]
    try:
        out = sorted({int(v) for v in vals})
    except ValueError as err:
        raise ConfigError(f"batch sizes must be comma-separated integers, got {text!r}.") from err
    if not out or out[0] < 1:
        raise ConfigError(f"batch sizes must be integers >= 1, got {text!r}.")
    return out


def run_batch_sweep(
    names: Sequence[str],
    batch_sizes: Sequence[int],
    n_items: int,
    call: Call,
    runs: int = 1,
    warmup: bool = True,
) -> dict[str, Any]:
    """Time ``names`` (``"ar"`` first; it is the reference) at every batch size; see the module
    docstring. Returns ``{"batch_sizes", "n_items", "runs", "samplers", "rows": {name: {bs: {...}}}}``."""
    names = ["ar"] + [n for n in names if n != "ar"]
    sizes = parse_batch_sizes(list(batch_sizes))
    if n_items < 1 or runs < 1:
        raise ConfigError(f"the batch sweep needs n_items >= 1 and runs >= 1, got {n_items}, {runs}.")
    chunks = {bs: [list(range(i, min(i + bs, n_items))) for i in range(0, n_items, bs)] for bs in sizes}
    failed: dict[str, str] = {}
    if warmup:
        for bs in sizes:
            for n in names:
                if n in failed:
                    continue
                try:
                    call(n, chunks[bs][0])
                except Exception as err:  # reported in the result, never hidden
                    if n == "ar":
                        raise
                    logger.warning("batch sweep: dropping %s: %s", n, err)
                    failed[n] = f"{type(err).__name__}: {str(err)[:160]}"
    live = [n for n in names if n not in failed]
    times = {(n, bs): [[] for _ in chunks[bs]] for n in live for bs in sizes}
    stats: dict[tuple[str, int], list[dict[str, Any]]] = {(n, bs): [{} for _ in chunks[bs]] for n in live for bs in sizes}
    for r in range(runs):
        for bs in sizes:
            for j, idx in enumerate(chunks[bs]):
                for n in rotate(live, r + j):
                    st, wall = call(n, idx)
                    times[(n, bs)][j].append(wall)
                    stats[(n, bs)][j] = st
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    for n in live:
        for bs in sizes:
            sts = stats[(n, bs)]
            tf = sum(s.get("target_forwards", 0) for s in sts)
            base = sum(s.get("baseline_steps", 0) for s in sts)
            rows.setdefault(n, {})[bs] = {
                "wall_s": sum(median(t) for t in times[(n, bs)]),
                "target_forwards": tf,
                "step_compression": base / tf if tf else float("nan"),
                "new_tokens": sum(s.get("new_tokens", 0) for s in sts),
            }
    for bs in sizes:
        ar_wall = rows["ar"][bs]["wall_s"]
        for n in live:
            row = rows[n][bs]
            row["speedup_vs_ar"] = ar_wall / row["wall_s"] if row["wall_s"] else float("nan")
            row["efficiency"] = efficiency(row["speedup_vs_ar"], row["step_compression"])
    return {
        "batch_sizes": sizes,
        "n_items": n_items,
        "runs": runs,
        "samplers": live,
        "failed": failed,
        "rows": rows,
    }


def sweep_markdown(sweep: dict[str, Any], unit: str = "prompts") -> str:
    """A table: one row per sampler, per batch size ``speedup (step compression)``."""
    sizes = sweep["batch_sizes"]
    headers = ["sampler"] + [f"batch {bs}: speedup (compression, efficiency)" for bs in sizes]
    body = []
    for n, per in sweep["rows"].items():
        cells = [n]
        for bs in sizes:
            r = per.get(bs) or per.get(str(bs))  # type: ignore[call-overload]
            cells.append(
                f"{r['speedup_vs_ar']:.2f}x ({fmt(r['step_compression'])}, {fmt(r['efficiency'])})" if r else "-"
            )
        body.append(cells)
    head = (
        f"Wall speedup against `ar` at the same batch size, {sweep['n_items']} {unit} grouped consecutively, "
        f"median of {sweep['runs']} interleaved run(s) per batch."
    )
    if sweep.get("failed"):
        head += " Dropped: " + "; ".join(f"`{k}` ({v})" for k, v in sweep["failed"].items()) + "."
    return head + "\n\n" + markdown_table(headers, body)


def plot_batch_sweep(sweeps: dict[str, dict[str, Any]], path: str | os.PathLike, title: str | None = None) -> Path:
    """Write a PNG: one panel per suite in ``sweeps`` (``{"text": sweep, "image": sweep}``), wall
    speedup against ``ar`` (y) vs batch size (x, log2), one line per sampler, ``ar`` = 1 dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not sweeps:
        raise ConfigError("nothing to plot: no batch sweep in the results.")
    fig, axes = plt.subplots(1, len(sweeps), figsize=(5.2 * len(sweeps), 3.8), squeeze=False)
    for ax, (suite, sw) in zip(axes[0], sweeps.items()):
        sizes = [int(b) for b in sw["batch_sizes"]]
        for n, per in sw["rows"].items():
            if n == "ar":
                continue
            ys = [_get(per, bs)["speedup_vs_ar"] if _get(per, bs) else float("nan") for bs in sizes]
            ys = [float("nan") if y is None else y for y in ys]
            ax.plot(sizes, ys, marker="o", label=n)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ar")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(b) for b in sizes])
        ax.set_xlabel("batch size")
        ax.set_ylabel("wall speedup vs ar")
        ax.set_title(f"{suite}" + (f" ({sw['device']})" if sw.get("device") else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        import textwrap

        fig.suptitle(textwrap.fill(title, 75 * len(sweeps)), fontsize=8)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def _get(per: dict[Any, Any], bs: int) -> dict[str, Any] | None:
    return per.get(bs) or per.get(str(bs))


def main(argv: Sequence[str] | None = None) -> int:
    """Redraw the speedup-vs-batch figure from saved ``leapgen bench`` JSON files."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--text", help="JSON written by `leapgen bench text --json`")
    ap.add_argument("--image", help="JSON written by `leapgen bench image --json`")
    ap.add_argument("--out", required=True, help="PNG to write")
    args = ap.parse_args(argv)
    from .common import device_line

    sweeps: dict[str, dict[str, Any]] = {}
    title = None
    for suite, path in (("text", args.text), ("image", args.image)):
        if path:
            res = json.loads(Path(path).read_text())
            if res.get("batch_sweep"):
                sweeps[suite] = res["batch_sweep"]
                title = title or device_line(res.get("machine", {}), res.get("settings", {}))
            else:
                logger.warning("%s has no batch_sweep (run the bench with --sweep-batch-sizes)", path)
    try:
        out = plot_batch_sweep(sweeps, args.out, title)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    return 0


__all__ = [
    "DEFAULT_BATCH_SIZES",
    "parse_batch_sizes",
    "plot_batch_sweep",
    "run_batch_sweep",
    "sweep_markdown",
]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
