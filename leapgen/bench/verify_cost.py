"""How much a block of ``n`` new tokens costs the target against one token: the curve that decides
whether step compression becomes wall-clock speed.

A chain sampler that drafts ``k`` tokens pays per step one target forward over ``k + 1`` tokens
plus ``k`` draft forwards, and commits ``E`` tokens on average. Against ``ar`` (one 1-token forward
per token) its wall speedup is at most

    E / (t(k + 1) / t(1) + k * d(1) / t(1))

where ``t(n)`` is the target's forward time for ``n`` new tokens over a warm cache and ``d(1)`` the
draft's 1-token forward. On a GPU ``t(n)`` is nearly flat for small ``n`` (the weights are read
once whatever ``n`` is); on a CPU thread it grows with ``n`` because the small-``M`` matrix
products are compute-bound, and that ratio caps every draft-and-verify sampler, however well it
drafts. :func:`verify_cost_curve` measures ``t(n)`` (and ``d(1)``) interleaved, medians; the text
bench prints it beside its tables. (The cost-aware draft schedules measure the same curve, more
briefly, with :mod:`leapgen.samplers.cost_model`.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import ConfigError
from ..samplers.cost_model import block_timer
from .common import fmt, markdown_table

#: block sizes measured (1 = ``ar``'s step; 6 = ``speculative``'s default 5 drafts + 1)
BLOCK_SIZES = (1, 2, 3, 4, 6, 8)


@torch.inference_mode()
def verify_cost_curve(
    lms: dict[str, Any],
    context: int = 128,
    sizes: Sequence[int] = BLOCK_SIZES,
    runs: int = 30,
    seed: int = 0,
    batch: int = 1,
) -> dict[str, Any]:
    """Median forward time of the target (``lms["model"]``) for each block size in ``sizes`` over
    a warm cache of ``context`` tokens (fewer when the context window needs it), and of the draft
    (``lms["draft"]``, when present) for one token, for ``batch`` rows at once; all interleaved
    over ``runs`` rounds (one warm-up round first)."""
    gen = torch.Generator().manual_seed(seed)
    target = lms["model"]
    # a small model's context window may not hold the default context plus the largest block
    models = [target] + ([lms["draft"]] if lms.get("draft") is not None else [])
    room = min(int(m.max_length) for m in models) - max(sizes)
    if room < 1:
        raise ConfigError(f"a {max(sizes)}-token block does not fit the model's context window")
    context = min(context, room)
    timers = {"model": block_timer(target, context, batch, gen)}
    if lms.get("draft") is not None:
        timers["draft"] = block_timer(lms["draft"], context, batch, gen)
    jobs = [("model", n) for n in sizes] + ([("draft", 1)] if "draft" in timers else [])
    times: dict[tuple[str, int], list[float]] = {j: [] for j in jobs}
    for r in range(runs + 1):
        order = jobs[r % len(jobs) :] + jobs[: r % len(jobs)]
        for job in order:
            dt = timers[job[0]](job[1])
            if r:
                times[job].append(dt)
    t1 = statistics.median(times[("model", 1)])
    rows = [
        {"n": n, "ms": 1e3 * statistics.median(times[("model", n)]),
         "vs_one": statistics.median(times[("model", n)]) / t1}
        for n in sizes
    ]
    draft_ms = 1e3 * statistics.median(times[("draft", 1)]) if "draft" in timers else None
    return {
        "context": context,
        "batch": batch,
        "runs": runs,
        "rows": rows,
        "draft_ms": draft_ms,
        "draft_vs_target": None if draft_ms is None else draft_ms / rows[0]["ms"],
    }


def speedup_ceiling(curve: dict[str, Any], k: int, accepted_per_step: float) -> float:
    """The wall speedup bound of a chain sampler drafting ``k`` tokens that commits
    ``accepted_per_step`` tokens per step (see the module docstring); NaN without that block size."""
    by_n = {r["n"]: r["vs_one"] for r in curve["rows"]}
    if k + 1 not in by_n:
        return float("nan")
    draft = curve["draft_vs_target"] or 0.0
    return accepted_per_step / (by_n[k + 1] + k * draft)


def curve_markdown(curve: dict[str, Any]) -> str:
    """The curve as a markdown table, with the draft's 1-token cost in a last line."""
    b = curve.get("batch", 1)
    table = markdown_table(
        ("new tokens n per row", f"target forward ms ({b} row{'s' if b > 1 else ''})", "t(n) / t(1)"),
        [(r["n"], fmt(r["ms"], 2), fmt(r["vs_one"], 2)) for r in curve["rows"]],
    )
    if curve.get("draft_ms") is not None:
        table += (
            f"\n\nDraft, 1 token: {fmt(curve['draft_ms'], 2)} ms "
            f"({fmt(curve['draft_vs_target'], 2)} of the target's 1-token forward)."
        )
    return table


__all__ = ["BLOCK_SIZES", "curve_markdown", "speedup_ceiling", "verify_cost_curve"]
