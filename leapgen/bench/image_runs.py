"""The passes of the image benchmark besides its main timed loop: one pipeline call, the draft-cost
pass, the batch-size sweep, and the issue's targets.

* :func:`call_pipeline`: one timed pipeline call (a CUDA device is synchronised around the clock).
* :func:`image_draft_cost`: one untimed pass per drafting sampler under a
  :class:`~leapgen.bench.draft_cost.DraftCostProfiler` (run 0's prompts and seeds).
* :func:`image_batch_sweep`: wall (decode loop) speedup against ``ar`` vs batch size
  (:func:`leapgen.bench.batch_sweep.run_batch_sweep`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ..samplers.base import get_sampler
from .batch_sweep import run_batch_sweep
from .common import fmt, stats_record, synchronize
from .draft_cost import DraftCostProfiler, cost_row

#: the samplers of the batch-size sweep (those the pipeline serves)
BATCH_SWEEP_SAMPLERS = ("speculative", "sjd", "gsd", "lantern")

#: the issue's targets
TARGETS_TEXT = (
    "sjd step compression >= 1.8 with FID (emoji features) within run-to-run noise of ar",
    "gsd step compression above sjd's (FID change reported)",
    "lantern mean accepted length above speculative's with the same draft at delta = 0.1",
)


def call_pipeline(pipe: Any, entry: Any, prompts: list[str], seed: int, settings: dict[str, Any]) -> tuple[Any, float]:
    device = getattr(pipe, "device", None)
    synchronize(device)
    t0 = time.perf_counter()
    out = pipe(
        prompts,
        sampler=entry.sampler,
        cfg_scale=settings["cfg_scale"],
        cfg_interval=settings["cfg_interval"],
        temperature=settings["temperature"],
        top_k=settings["top_k"],
        top_p=settings["top_p"],
        seed=seed,
        **entry.params,
    )
    synchronize(device)
    return out, time.perf_counter() - t0


def image_targets(results: dict[str, dict[str, Any]], noise: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    ar, sjd, gsd = results.get("ar"), results.get("sjd"), results.get("gsd")
    spec, lan = results.get("speculative"), results.get("lantern")
    nz = noise["fid_noise_ar"]
    if sjd is not None:
        within = abs(sjd["fid_change_vs_ar"]) <= nz if not math.isnan(nz) else None
        out.append(
            {
                "target": TARGETS_TEXT[0],
                "value": f"step compression {fmt(sjd['step_compression'])}; FID change {fmt(sjd['fid_change_vs_ar'])} "
                f"vs noise {fmt(nz)}",
                "passed": bool(sjd["step_compression"] >= 1.8 and within) if within is not None else False,
                "undetermined": within is None,
            }
        )
    if gsd is not None and sjd is not None:
        out.append(
            {
                "target": TARGETS_TEXT[1],
                "value": f"gsd {fmt(gsd['step_compression'])} vs sjd {fmt(sjd['step_compression'])}; FID change vs ar "
                f"{fmt(gsd['fid_change_vs_ar'])} (sjd {fmt(sjd['fid_change_vs_ar'])}, noise {fmt(nz)})",
                "passed": bool(gsd["step_compression"] > sjd["step_compression"]),
            }
        )
    if lan is not None and spec is not None:
        out.append(
            {
                "target": TARGETS_TEXT[2],
                "value": f"lantern {fmt(lan['mean_accepted'])} vs speculative {fmt(spec['mean_accepted'])}",
                "passed": bool(lan["mean_accepted"] > spec["mean_accepted"]),
            }
        )
    del ar
    return out


def image_draft_cost(
    pipe: Any,
    entries: Sequence[Any],
    models: dict[str, Any],
    chunks: list[list[str]],
    seeds: list[int],
    settings: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Draft cost per accepted token of every drafting entry (``entry.sampler``), one untimed pass
    over ``chunks`` of prompts with ``seeds``."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        proposer = getattr(type(get_sampler(e.sampler)), "proposer", None)
        if proposer is None or not getattr(proposer, "drafts", True):
            continue
        acc = new = 0
        dec = 0.0
        with DraftCostProfiler(proposer, [models.get("draft")], getattr(pipe, "device", None)) as prof:
            for prompts, seed in zip(chunks, seeds):
                res, _ = call_pipeline(pipe, e, prompts, seed, settings)
                st = stats_record(res.stats)
                acc += st["accepted_draft_tokens"]
                new += st["new_tokens"]
                dec += st["decode_s"]
        out[e.name] = cost_row(e.name, prof.totals(), acc, dec, new)
    return out


def image_batch_sweep(
    pipe: Any,
    entries: Sequence[Any],
    prompts: list[str],
    batch_sizes: Sequence[int],
    settings: dict[str, Any],
    seed: int,
    runs: int,
) -> dict[str, Any]:
    """Decode-loop speedup against ``ar`` at every batch size over ``prompts`` (one image each;
    chunk starting at image i has seed ``seed + i`` for every sampler)."""
    by_name = {e.name: e for e in entries}

    def call(name: str, idx: list[int]) -> tuple[dict[str, Any], float]:
        res, _ = call_pipeline(pipe, by_name[name], [prompts[i] for i in idx], seed + idx[0], settings)
        st = stats_record(res.stats)
        return st, st["decode_s"]

    res = run_batch_sweep(list(by_name), batch_sizes, len(prompts), call, runs=runs)
    res["device"] = str(getattr(pipe, "device", ""))
    res["wall"] = "decode loop (DecodeStats.wall_time)"
    return res
