"""Draft-length schedules compared in the bench (``--compare-schedules``).

The draft-length controllers of :mod:`leapgen.samplers.controllers` (``constant``, ``heuristic``,
``confidence``; trees: ``constant`` / ``heuristic`` depth; ``prompt_lookup``: ``cost`` /
``constant`` width) change speed only, never the output. The
bench adds one entry per other schedule a sampler accepts (``speculative[schedule=heuristic]``,
...), times them interleaved with every other entry, and :func:`schedule_summary` says, per
sampler and table, which schedule had the lowest wall time. Whether a schedule becomes a default is
decided from the final run, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..samplers.base import get_sampler, list_samplers
from .common import fmt, markdown_table

#: samplers whose schedules the bench compares by default
SCHEDULE_SAMPLERS = ("speculative", "spec_tree", "prompt_lookup")
CANDIDATES = ("constant", "heuristic", "confidence", "auto", "cost")


def label(name: str, schedule: str) -> str:
    return f"{name}[schedule={schedule}]"


def schedule_variants(names: Sequence[str], samplers: Sequence[str] = SCHEDULE_SAMPLERS) -> list[tuple[str, str, dict[str, Any]]]:
    """``(sampler, entry label, params)`` for every schedule other than the sampler's default that
    it accepts, for each of ``samplers`` present in ``names``."""
    infos = {i.name: i for i in list_samplers()}
    out = []
    for name in samplers:
        info = infos.get(name)
        if name not in names or info is None or "schedule" not in info.defaults:
            continue
        default = info.defaults["schedule"]
        for sch in CANDIDATES:
            if sch == default:
                continue
            try:
                get_sampler(name, schedule=sch)
            except ConfigError:
                continue  # e.g. confidence is chain-only
            out.append((name, label(name, sch), {"schedule": sch}))
    return out


def schedule_summary(
    block: dict[str, dict[str, Any]], samplers: Sequence[str] = SCHEDULE_SAMPLERS, wall_key: str = "wall_s"
) -> list[dict[str, Any]]:
    """Per sampler of ``samplers`` with variants in ``block`` (rows keyed by entry name, with
    ``wall_key`` (the time the bench's speedup uses), ``speedup_vs_ar``, ``step_compression``): every
    schedule's figures and the winner (lowest time)."""
    infos = {i.name: i for i in list_samplers()}
    out = []
    for name in samplers:
        if name not in block or name not in infos:
            continue
        default = infos[name].defaults.get("schedule", "constant")
        rows = {default: block[name]}
        for sch in CANDIDATES:
            row = block.get(label(name, sch))
            if row is not None:
                rows[sch] = row
        if len(rows) < 2:
            continue
        best = min(rows, key=lambda s: rows[s][wall_key])
        out.append(
            {
                "sampler": name,
                "default": default,
                "winner": best,
                "schedules": {
                    s: {
                        "wall_s": r[wall_key],
                        "speedup_vs_ar": r.get("speedup_vs_ar"),
                        "step_compression": r.get("step_compression"),
                        "vs_default": rows[default][wall_key] / r[wall_key] if r[wall_key] else float("nan"),
                    }
                    for s, r in rows.items()
                },
            }
        )
    return out


def summary_markdown(summary: list[dict[str, Any]]) -> str:
    body = []
    for s in summary:
        for sch, r in s["schedules"].items():
            body.append(
                [
                    s["sampler"],
                    sch + (" (default)" if sch == s["default"] else ""),
                    fmt(r["step_compression"]),
                    f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] is not None else "-",
                    f"{r['vs_default']:.2f}x",
                    "yes" if sch == s["winner"] else "",
                ]
            )
    return markdown_table(("sampler", "schedule", "step compression", "speedup vs ar", "vs default", "fastest"), body)


__all__ = ["SCHEDULE_SAMPLERS", "label", "schedule_summary", "schedule_variants", "summary_markdown"]
