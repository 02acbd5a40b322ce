"""The passes of the text benchmark besides its main timed loop, and its aggregation.

* :func:`sweep_draft_tokens`: ``speculative``'s draft length chosen on other prompts.
* :func:`aggregate`: one entry's figures over the items of one (prompt set, batch mode).
* :func:`draft_cost_pass`: one untimed pass per drafting sampler under a
  :class:`~leapgen.bench.draft_cost.DraftCostProfiler` (draft cost per accepted token).
* :func:`text_batch_sweep`: wall speedup against ``ar`` vs batch size
  (:func:`leapgen.bench.batch_sweep.run_batch_sweep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..samplers.base import DecodeConfig, get_sampler
from .batch_sweep import run_batch_sweep
from .common import median, rotate
from .draft_cost import DraftCostProfiler, cost_row
from .text_entries import Entry, measure, our_entry

SWEEP_DRAFT_TOKENS = (2, 3, 4, 5, 6, 8)
#: the samplers of the batch-size sweep (those the pipeline serves)
BATCH_SWEEP_SAMPLERS = ("speculative", "prompt_lookup", "spec_tree", "lookahead")


def first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def sweep_draft_tokens(
    pipe: Any,
    prompts_ids: list[list[int]],
    config: DecodeConfig,
    values: Sequence[int] = SWEEP_DRAFT_TOKENS,
    runs: int = 2,
) -> dict[str, Any]:
    """Median wall time of ``speculative`` for each ``num_draft_tokens`` in ``values`` (interleaved)."""
    entries = {k: our_entry(pipe, "speculative", f"k={k}", {"num_draft_tokens": k}, config) for k in values}
    for e in entries.values():  # warm-up
        measure(e, prompts_ids[:1], pipe)
    times: dict[int, list[list[float]]] = {k: [[] for _ in prompts_ids] for k in values}
    stats: dict[int, list[dict[str, Any]]] = {k: [{} for _ in prompts_ids] for k in values}
    for r in range(runs):
        for i, ids in enumerate(prompts_ids):
            for k in rotate(list(values), r):
                _, st, wall = measure(entries[k], [ids], pipe)
                times[k][i].append(wall)
                stats[k][i] = st
    rows = []
    for k in values:
        wall = sum(median(t) for t in times[k])
        tf = sum(s["target_forwards"] for s in stats[k][: len(prompts_ids)])
        base = sum(s["baseline_steps"] for s in stats[k][: len(prompts_ids)])
        toks = sum(s["new_tokens"] for s in stats[k][: len(prompts_ids)])
        rows.append(
            {
                "num_draft_tokens": k,
                "wall_s": wall,
                "tokens_per_s": toks / wall if wall else float("nan"),
                "step_compression": base / tf if tf else float("nan"),
            }
        )
    best = min(rows, key=lambda r: r["wall_s"])["num_draft_tokens"]
    return {"values": list(values), "runs": runs, "n_prompts": len(prompts_ids), "rows": rows, "best": best}


def aggregate(
    entry: Entry,
    items: list[list[int]],
    times: list[list[float]],
    stats: list[dict[str, Any]],
    seqs: list[list[list[int]]],
    ref: list[list[int]],
) -> dict[str, Any]:
    """Aggregate one entry over the items of one (prompt set, batch mode)."""
    walls = [median(t) for t in times]
    wall = sum(walls)
    toks = sum(s["new_tokens"] for s in stats)
    tf = sum(s["target_forwards"] for s in stats)
    base = sum(s["baseline_steps"] for s in stats)
    acc = sum(s["accepted_sum"] for s in stats)
    acc_n = sum(s["accepted_steps"] for s in stats)
    flat = [row for item in seqs for row in item]
    matches = [a == b for a, b in zip(flat, ref)]
    return {
        "name": entry.name,
        "kind": entry.kind,
        "guarantee": entry.guarantee,
        "params": entry.params,
        "counterpart": entry.counterpart,
        "wall_s": wall,
        "new_tokens": toks,
        "tokens_per_s": toks / wall if wall else float("nan"),
        "target_forwards": tf,
        "target_forwards_per_call": tf / len(stats) if stats else float("nan"),
        "draft_forwards": sum(s.get("draft_forwards", 0) for s in stats),
        "step_compression": base / tf if tf else float("nan"),
        "mean_accepted": acc / acc_n if acc_n else float("nan"),
        "exact_match": sum(matches) / len(matches) if matches else float("nan"),
        "mismatched_prompts": [i for i, m in enumerate(matches) if not m],
        "hook_forwards_agree": all(s["hook_target_forwards"] == s["target_forwards"] for s in stats),
        "per_item": [
            {
                "times_s": t,
                "median_s": w,
                **{k: v for k, v in s.items()},
                "first_diff_vs_ar": [first_diff(row, ref[j]) for row, j in zip(sq, row_ids(items, i))],
            }
            for i, (t, w, s, sq) in enumerate(zip(times, walls, stats, seqs))
        ],
    }


def row_ids(items: list[Any], i: int) -> list[int]:
    start = sum(len(x) for x in items[:i])
    return list(range(start, start + len(items[i])))



def draft_cost_pass(entries: Sequence[Entry], items: list[list[list[int]]], pipe: Any) -> dict[str, dict[str, Any]]:
    """Draft cost per accepted token of every drafting entry over ``items`` (one untimed pass each)."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.kind != "leapgen" or not e.sampler:
            continue
        proposer = getattr(type(get_sampler(e.sampler)), "proposer", None)
        if proposer is None or not getattr(proposer, "drafts", True):
            continue
        acc = new = 0
        dec = 0.0
        with DraftCostProfiler(proposer, [pipe._lms.get("draft")], pipe.device) as prof:
            for ids in items:
                _, st, _ = measure(e, ids, pipe)
                acc += st.get("accepted_draft_tokens", 0)
                new += st.get("new_tokens", 0)
                dec += st.get("decode_s", 0.0)
        out[e.name] = cost_row(e.name, prof.totals(), acc, dec, new)
    return out


def text_batch_sweep(
    pipe: Any,
    prompts_ids: list[list[int]],
    config: DecodeConfig,
    batch_sizes: Sequence[int],
    names: Sequence[str],
    runs: int,
) -> dict[str, Any]:
    """Speedup against ``ar`` at every batch size for ``names`` (see :mod:`leapgen.bench.batch_sweep`)."""
    entries = {n: our_entry(pipe, n, n, {}, config) for n in ["ar", *names] if n}

    def call(name: str, idx: list[int]) -> tuple[dict[str, Any], float]:
        _, st, wall = measure(entries[name], [prompts_ids[i] for i in idx], pipe)
        return st, wall

    res = run_batch_sweep(list(entries), batch_sizes, len(prompts_ids), call, runs=runs)
    res["device"] = str(pipe.device)
    return res
