"""Acceptance versus draft budget: chain speculative decoding against draft trees.

For every draft budget B (draft tokens / tree nodes proposed per step) and temperature, run
``speculative`` with a chain of B tokens and the tree samplers at B nodes per step on the same
prompts, and report the mean number of tokens committed per target forward (tau: accepted drafts
plus the target's own token, averaged over rows and verification steps; the prefill forward is
left out). Trees spend the same budget on alternatives instead of ever longer chains, so at equal
B they should commit more tokens per target forward.

Entries at budget B:

* ``speculative``: ``num_draft_tokens=B`` (constant schedule);
* ``spec_tree``: EAGLE-2 dynamic tree, ``num_nodes=B``, ``depth=min(B, 10)``, ``top_k=4``;
* ``rsd``: RSD-C, ``num_nodes=B``, ``depth=min(B, 10)``, branching 2 at every node, cut to the B
  best Gumbel values;
* ``rsd_sbs``: RSD-S, ``beam_width=W`` (2 for B <= 8, else 4), ``depth=B // W``;
* ``spectr``: ``num_candidates=k`` (2 for B <= 8, else 4) i.i.d. sequences of ``depth=B // k``.

Run: ``python -m leapgen.bench.acceptance --pipeline leapgen/text-code --out-md acc.md --out-png acc.png``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import fmt, machine_info, machine_line, markdown_table, write_json, write_text

METHODS = ("speculative", "spec_tree", "rsd", "rsd_sbs", "spectr")


def method_params(method: str, budget: int) -> tuple[str, dict[str, Any]]:
    """``(sampler name, parameters)`` of ``method`` at ``budget`` draft tokens / nodes per step."""
    b = int(budget)
    if method == "speculative":
        return "speculative", {"num_draft_tokens": b}
    if method == "spec_tree":
        return "spec_tree", {"expansion": "dynamic", "num_nodes": b, "depth": min(b, 10), "top_k": 4}
    if method == "rsd":
        return "rsd", {"variant": "constant", "num_nodes": b, "depth": min(b, 10), "branches": (2,)}
    if method == "rsd_sbs":
        w = 2 if b <= 8 else 4
        return "rsd", {"variant": "sbs", "num_nodes": b, "beam_width": min(w, b), "depth": max(1, b // w)}
    if method == "spectr":
        k = 2 if b <= 8 else 4
        k = min(k, b)
        return "spectr", {"num_candidates": k, "depth": max(1, b // k), "num_nodes": b}
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


def tokens_per_verify_step(stats: Any) -> float:
    """Mean tokens committed per row per target forward, prefill forward excluded."""
    flat = [n for step in stats.accepted_per_step[1:] for n in step]
    return sum(flat) / len(flat) if flat else float("nan")


def default_prompts(pipe: Any, n: int, seed: int = 0) -> list[str]:
    from ..data.code import heldout_snippets

    return heldout_snippets(n, pipe.tokenizer, prompt_tokens=48, seed=seed)


def acceptance_vs_budget(
    pipe: Any,
    budgets: Sequence[int] = (2, 4, 8, 16, 32),
    temperatures: Sequence[float] = (0.0, 1.0),
    n_prompts: int = 8,
    max_new_tokens: int = 64,
    *,
    methods: Sequence[str] = METHODS,
    prompts: Sequence[str] | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    markdown_path: str | None = None,
    plot_path: str | None = None,
    json_path: str | None = None,
) -> list[dict[str, Any]]:
    """Measure tau (tokens per target forward) for every method, budget and temperature.

    Returns one row per (temperature, budget, method) with ``tau``, ``step_compression``,
    forwards, drafted / accepted tokens, mean tree size and wall time. Prompts default to
    ``n_prompts`` held-out snippets; they run as one batch (or batches of ``batch_size``). Writes a
    markdown table to ``markdown_path`` and a matplotlib plot (Agg) to ``plot_path`` when given.
    """
    prompts = list(prompts) if prompts is not None else default_prompts(pipe, n_prompts, seed)
    bs = batch_size or len(prompts)
    groups = [prompts[i : i + bs] for i in range(0, len(prompts), bs)]
    rows: list[dict[str, Any]] = []
    for temp in temperatures:
        for budget in budgets:
            for method in methods:
                name, params = method_params(method, budget)
                flat: list[int] = []
                agg = {
                    "target_forwards": 0,
                    "draft_forwards": 0,
                    "drafted": 0,
                    "accepted": 0,
                    "new": 0,
                    "base": 0,
                }
                nodes: list[float] = []
                t0 = time.perf_counter()
                for gi, group in enumerate(groups):
                    out = pipe(
                        group,
                        sampler=name,
                        max_new_tokens=max_new_tokens,
                        temperature=float(temp),
                        seed=seed + gi,
                        **params,
                    )
                    st = out.stats
                    flat += [n for step in st.accepted_per_step[1:] for n in step]
                    agg["target_forwards"] += st.target_forwards
                    agg["draft_forwards"] += st.draft_forwards
                    agg["drafted"] += st.drafted_tokens
                    agg["accepted"] += st.accepted_draft_tokens
                    agg["new"] += st.new_tokens
                    agg["base"] += st.baseline_steps
                    steps = max(1, sum(len(s) for s in st.accepted_per_step[1:]))
                    nodes.append(st.extra.get("mean_tree_nodes", st.drafted_tokens / steps))
                rows.append(
                    {
                        "method": method,
                        "sampler": name,
                        "params": params,
                        "budget": int(budget),
                        "temperature": float(temp),
                        "tau": sum(flat) / len(flat) if flat else float("nan"),
                        "step_compression": agg["base"] / agg["target_forwards"]
                        if agg["target_forwards"]
                        else float("nan"),
                        "target_forwards": agg["target_forwards"],
                        "draft_forwards": agg["draft_forwards"],
                        "drafted_tokens": agg["drafted"],
                        "accepted_draft_tokens": agg["accepted"],
                        "mean_nodes_per_step": sum(nodes) / len(nodes) if nodes else float("nan"),
                        "new_tokens": agg["new"],
                        "wall_time": time.perf_counter() - t0,
                    }
                )
    if markdown_path:
        write_text(
            markdown_path, markdown_report(rows, n_prompts=len(prompts), max_new_tokens=max_new_tokens)
        )
    if plot_path:
        plot(rows, plot_path)
    if json_path:
        write_json(json_path, {"machine": machine_info(), "rows": rows})
    return rows


def markdown_report(
    rows: Sequence[dict[str, Any]], n_prompts: int | None = None, max_new_tokens: int | None = None
) -> str:
    """One table per temperature: methods x budgets, cells = tau (mean draft nodes per step)."""
    temps = sorted({r["temperature"] for r in rows})
    budgets = sorted({r["budget"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = [
        "# Tokens per target forward vs draft budget",
        "",
        "tau = tokens committed per row per target forward (accepted drafts + 1), prefill excluded; "
        "budget = draft tokens (chain) or tree nodes proposed per step; in brackets the mean nodes "
        "actually drafted per step (SpecTr's i.i.d. sequences share prefixes; trees near the end "
        "of the context are cut).",
        "",
    ]
    if n_prompts is not None:
        out += [
            f"{n_prompts} prompts, {max_new_tokens} new tokens each. Machine: {machine_line(machine_info())}",
            "",
        ]
    for t in temps:
        out += [f"## temperature {t:g}", ""]
        table = []
        for m in methods:
            cells = [m]
            for b in budgets:
                r = next(
                    (r for r in rows if r["method"] == m and r["budget"] == b and r["temperature"] == t), None
                )
                cells.append("-" if r is None else f"{fmt(r['tau'])} ({fmt(r['mean_nodes_per_step'], 1)})")
            table.append(cells)
        out += [markdown_table(["method"] + [f"B={b}" for b in budgets], table), ""]
    return "\n".join(out)


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """tau against budget (log2 axis), one panel per temperature, one line per method (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = sorted({r["temperature"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(temps), figsize=(5 * len(temps), 4), squeeze=False)
    for ax, t in zip(axes[0], temps):
        for m in methods:
            pts = sorted((r["budget"], r["tau"]) for r in rows if r["method"] == m and r["temperature"] == t)
            pts = [(b, y) for b, y in pts if not math.isnan(y)]
            if pts:
                ax.plot([b for b, _ in pts], [y for _, y in pts], marker="o", label=m)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("draft tokens / tree nodes per step")
        ax.set_ylabel("tokens per target forward")
        ax.set_title(f"temperature {t:g}")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(
        prog="python -m leapgen.bench.acceptance", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--pipeline", default="leapgen/text-code", help="shipped name or local pipeline folder")
    ap.add_argument("--budgets", default="2,4,8,16,32")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-md", default=None)
    ap.add_argument("--out-png", default=None)
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args(argv)

    import torch

    from ..pipelines.base import Pipeline

    pipe = Pipeline.from_pretrained(args.pipeline).to(dtype=torch.float32)
    rows = acceptance_vs_budget(
        pipe,
        budgets=[int(x) for x in args.budgets.split(",")],
        temperatures=[float(x) for x in args.temperatures.split(",")],
        n_prompts=args.n_prompts,
        max_new_tokens=args.max_new_tokens,
        methods=[m.strip() for m in args.methods.split(",")],
        seed=args.seed,
        batch_size=args.batch_size,
        markdown_path=args.out_md,
        plot_path=args.out_png,
        json_path=args.out_json,
    )
    print(markdown_report(rows))
    return rows


if __name__ == "__main__":  # pragma: no cover
    main()
