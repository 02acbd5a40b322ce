"""Molecule benchmark: masked (GenMol / MaskGIT-style) de novo generation against the AR baseline.

Protocol (``leapgen bench molecule``; :func:`run_molecule_bench`):

* **One pipeline, one process.** The molecule pipeline (default ``leapgen/molecule-safe``): its
  masked SAFE model for the masked samplers and its AR SAFE model for ``ar``, fp32 on CPU,
  ``torch.set_num_threads(1)``. Every entry generates the **same number of de novo samples**
  (``num_samples``, 1000) with the **same batch size** (``batch_size``, 64) and the same seed;
  the pipeline samples each masked row's length from the training length histogram (GenMol) and
  turns SAFE into SMILES (``fix=True``: largest fragment kept), for every entry alike.
* **Entries** (:func:`default_methods`); each runs with its preset's paper temperature unless the
  entry says otherwise (the pipeline applies ``paper_config`` when ``temperature=None``):

  - ``ar``: the SAFE-GPT-style autoregressive baseline, one token per forward with a KV cache.
  - ``genmol``: GenMol's default, confidence-ordered **one token per step** (softmax temperature
    0.5, randomness 0.5).
  - ``genmol[schedule=cosine, steps=S]``: the same scorer and temperatures, **several tokens per
    step** on MaskGIT's cosine schedule with a fixed budget of S forwards per batch.
  - ``genmol[cache=dkv_delayed, cache_refresh=R]`` and the multi-token entry with the same cache:
    GenMol on the **masked cache** (``models/bert_cache.py``; dKV-Cache's delayed keys / values):
    a forward between full refreshes recomputes only the positions masked before the previous
    step; the rest attend through stored keys / values (lossy, quality measured beside it).
  - ``genmol[policy=threshold, ...]``: optional, Fast-dLLM-style threshold unmasking on the
    GenMol scorer (commits every masked position whose confidence clears the threshold).
  - ``maskgit[steps=S]``: MaskGIT's preset (cosine, log-prob + annealed Gumbel with
    choice_temperature 4.5, proposals at temperature 1) with few steps.

* **Timing.** The samples are generated in batches of ``batch_size`` (batch j with seed
  ``seed + j``), one pipeline call per batch, and the calls are interleaved: for run r, for batch
  j, every entry in an order rotated by r + j, ``time.perf_counter`` around the whole call
  (sampling, decoding, SAFE -> SMILES). So every entry's measurements span the same stretch of
  time on a shared machine. Per entry and batch the median over runs; entry wall = sum of the
  per-batch medians; molecules/s = num_samples / wall; speedup = ar wall / entry wall (the median
  of the per-batch throughputs is reported too). One warm-up call per entry first (8 samples). Outputs must
  repeat across runs (reported).
* **Counts.** Model forwards from the pipeline's ``DecodeStats`` (summed over batches):
  forwards/molecule = forwards / num_samples; forwards/batch = forwards / number of batches (the
  sequential steps); step compression = tokens a one-token-per-forward decode needs / forwards.
  An AR forward feeds one new token per row against a KV cache, a masked forward the whole
  sequence (bidirectional; on the cache, the still-masked part of it), so forwards alone do not
  decide wall time.
* **Metrics** (:mod:`leapgen.bench.molecule_metrics`, GenMol's definitions) on the first run's
  samples: validity, strict validity (raw SAFE string is one molecule, no repair), uniqueness,
  novelty against the MOSES training split (the superset the model's training subset was drawn
  from), quality (unique valid with QED >= 0.6 and SA <= 4, over all samples), diversity (TDC:
  1 - mean pairwise Tanimoto, Morgan r=2, 2048 bits, distinct molecules), mean QED and SA.
* **Picture.** A 4x4 RDKit grid of valid molecules from the multi-token ``genmol`` entry with QED
  and SA in the legends (``docs/molecule_samples.png``).

This module holds the timed run (:func:`run_molecule_bench`, :func:`run_batch_sweep`). The entries
and targets are :mod:`leapgen.bench.molecule_entries`'s, the picture :mod:`leapgen.bench.molecule_grid`'s,
the training set for novelty :mod:`leapgen.bench.molecule_metrics`'s and the report
:mod:`leapgen.bench.molecule_tables`'s; all are re-exported here.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError
from . import molecule_metrics as mm
from .common import machine_info, median, rotate, timed, torch_threads
from .molecule_entries import (
    CACHE_REFRESH,
    DEFAULT_PIPELINE,
    MASKGIT_STEPS,
    MULTI_CACHE_REFRESH,
    MULTI_STEPS,
    TARGETS,
    MoleculeMethod,
    default_methods,
    evaluate_targets,
)
from .molecule_grid import save_grid
from .molecule_metrics import load_training_set
from .molecule_tables import format_markdown, write_outputs

logger = logging.getLogger(__name__)


# ============================================================================== helpers


def _stats_of(out: Any) -> Any:
    stats = getattr(out, "stats", None)
    if stats is None:
        raise ConfigError(
            "the molecule pipeline's output has no .stats; the bench needs forwards counts from DecodeStats."
        )
    return stats


def _forwards(stats: Any) -> tuple[int, int]:
    """(model forwards incl. draft/other, one-token-per-forward baseline steps) from DecodeStats."""
    fw = (
        int(getattr(stats, "target_forwards", 0))
        + int(getattr(stats, "draft_forwards", 0))
        + int(getattr(stats, "other_forwards", 0))
    )
    return fw, int(getattr(stats, "baseline_steps", 0))


def _smiles_list(out: Any, n: int, label: str) -> list[Any]:
    smiles = list(getattr(out, "smiles", None) or [])
    if len(smiles) != n:
        raise ConfigError(f"entry {label}: the pipeline returned {len(smiles)} SMILES for num_samples={n}.")
    return smiles


# ============================================================================== the benchmark


def run_molecule_bench(
    pipe: Any,
    num_samples: int = 1000,
    runs: int = 3,
    batch_size: int = 64,
    seed: int = 0,
    methods: Sequence[MoleculeMethod] | None = None,
    training_set: str | Iterable[str] | None = "moses",
    threads: int | None = 1,
    warmup: bool = True,
    progress: bool | None = None,
    grid_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run every entry ``runs`` times, interleaved; return settings, per-entry results, targets.

    ``pipe`` is a molecule pipeline (or any callable with its call shape: ``pipe(num_samples=,
    sampler=, seed=, batch_size=, temperature=, **params)`` returning ``.smiles`` and ``.stats``).
    """
    from tqdm.auto import tqdm

    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ConfigError(f"num_samples must be a positive integer, got {num_samples!r}.")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigError(f"runs must be a positive integer, got {runs!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}.")
    methods = list(methods) if methods is not None else default_methods()
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"duplicate bench entries: {labels}.")
    if "ar" not in labels:
        raise ConfigError("the molecule bench needs the 'ar' baseline entry (speedups are relative to it).")
    by_label = dict(zip(labels, methods))
    info = machine_info()
    disable = (not sys.stderr.isatty()) if progress is None else not progress

    n_batches = math.ceil(num_samples / batch_size)
    sizes = [min(batch_size, num_samples - j * batch_size) for j in range(n_batches)]

    def call(m: MoleculeMethod, n: int, j: int) -> Any:
        return pipe(
            num_samples=n,
            sampler=m.sampler,
            seed=seed + j,
            batch_size=batch_size,
            temperature=m.temperature,
            **m.params,
        )

    # walls[label][j] = the timings of batch j over the runs; outs[label][j] = its first output
    walls: dict[str, list[list[float]]] = {k: [[] for _ in sizes] for k in labels}
    outs: dict[str, list[Any]] = {k: [None] * n_batches for k in labels}
    repeat_ok: dict[str, bool] = {k: True for k in labels}
    with torch_threads(threads), torch.inference_mode():
        info["torch_threads"] = torch.get_num_threads()  # what the timed calls run with
        if warmup:
            for m in methods:
                call(m, min(sizes[0], 8), n_batches)  # a small batch, seeded apart from the timed ones
        bar = tqdm(
            total=runs * n_batches * len(methods), desc="bench molecule", unit="batch", disable=disable
        )
        for r in range(runs):
            for j, size in enumerate(sizes):
                for label in rotate(labels, r + j):
                    out, wall = timed(lambda m=by_label[label], n=size, j=j: call(m, n, j))
                    smiles = _smiles_list(out, size, label)
                    walls[label][j].append(wall)
                    if outs[label][j] is None:
                        outs[label][j] = out
                    elif smiles != list(outs[label][j].smiles):
                        repeat_ok[label] = False
                    bar.update(1)
        bar.close()

    train, train_desc = load_training_set(training_set)
    results: dict[str, dict[str, Any]] = {}
    first: dict[str, Any] = {}
    for label in labels:
        m = by_label[label]
        smiles = [x for o in outs[label] for x in o.smiles]
        safe_parts = [getattr(o, "safe", None) for o in outs[label]]
        safe = None
        if all(p is not None and len(p) == len(o.smiles) for p, o in zip(safe_parts, outs[label])):
            safe = [x for p in safe_parts for x in p]
        first[label] = _Joined(smiles)
        fw = base = 0
        dec_wall = 0.0
        for o in outs[label]:
            f, b = _forwards(_stats_of(o))
            fw, base = fw + f, base + b
            dec_wall += float(getattr(_stats_of(o), "wall_time", math.nan))
        metrics = mm.molecule_report(smiles, train, safe_strings=safe)
        per_batch = [median(w) for w in walls[label]]
        wall = float(sum(per_batch))
        extra = dict(getattr(_stats_of(outs[label][0]), "extra", {}) or {})
        results[label] = {
            "sampler": m.sampler,
            "params": dict(m.params),
            "temperature": m.temperature if m.temperature is not None else extra.get("temperature"),
            "note": m.note,
            "multi": m.multi,
            "guarantee": _guarantee(m.sampler),
            "wall_s": wall,
            "batch_walls_s": walls[label],
            "molecules_per_s": num_samples / wall if wall > 0 else math.nan,
            "batch_molecules_per_s_median": median([n / w for n, w in zip(sizes, per_batch) if w > 0]),
            "forwards": fw,
            "forwards_per_molecule": fw / num_samples,
            "forwards_per_batch": fw / n_batches,
            "ms_per_forward": 1000.0 * wall / fw if fw else math.nan,
            "new_tokens": sum(int(getattr(_stats_of(o), "new_tokens", 0)) for o in outs[label]),
            "step_compression": base / fw if fw else math.nan,
            "decode_wall_s": dec_wall,
            "identical_across_runs": repeat_ok[label]
            if runs > 1
            else None,  # None: one run, nothing to compare
            **metrics,
        }
    ar = results["ar"]
    for row in results.values():
        row["speedup_vs_ar"] = ar["wall_s"] / row["wall_s"] if row["wall_s"] > 0 else math.nan
        row["forwards_vs_ar"] = row["forwards"] / ar["forwards"] if ar["forwards"] else math.nan

    multi = next((m.label for m in methods if m.multi), None)
    grid = None
    if grid_path is not None:
        # the multi-token GenMol entry, else the first entry that produced a valid molecule
        order = [x for x in [multi, *(m.label for m in methods if m.sampler == "genmol"), *labels] if x]
        src = next((x for x in order if results[x]["num_valid"] > 0), None)
        if src is None:
            logger.warning("no entry produced a valid molecule; no picture written")
        else:
            grid = save_grid(first[src].smiles, grid_path, title=src)
            grid["entry"] = src
    result = {
        "suite": "molecule",
        "machine": info,
        "settings": {
            "pipeline": getattr(pipe, "name_or_path", None),
            "num_samples": num_samples,
            "batch_size": batch_size,
            "num_batches": n_batches,
            "runs": runs,
            "seed": seed,
            "threads": threads,
            "warmup": warmup,
            "entries": labels,
            "multi_entry": multi,
            "training_set": train_desc,
            "metric_definitions": {
                "validity": "valid (RDKit-parsable, after the pipeline's largest-fragment fix) / N",
                "strict_validity": "raw SAFE string parses as one connected molecule / N (no repair)",
                "uniqueness": "distinct canonical SMILES / valid",
                "novelty": "distinct valid not in the training set / distinct valid",
                "quality": f"distinct valid with QED >= {mm.QED_THRESHOLD} and SA <= {mm.SA_THRESHOLD} / N (GenMol)",
                "diversity": "1 - mean pairwise Tanimoto, Morgan r=2 2048 bits, distinct valid molecules (TDC)",
            },
        },
        "results": results,
        "grid": grid,
    }
    result["targets"] = evaluate_targets(result)
    return result


@dataclass
class _Joined:
    smiles: list[Any]


def _guarantee(name: str) -> str | None:
    try:
        from ..samplers.base import sampler_info

        return sampler_info(name).guarantee
    except Exception:  # noqa: BLE001 - a stand-in sampler name in tests
        return None


def run_batch_sweep(
    pipe: Any,
    batch_sizes: Sequence[int],
    num_samples: int,
    methods: Sequence[MoleculeMethod] | None = None,
    runs: int = 1,
    seed: int = 0,
    threads: int | None = 1,
    progress: bool | None = None,
) -> dict[int, dict[str, Any]]:
    """Speed (and validity / quality) of the same entries at other batch sizes, ``num_samples`` each."""
    out: dict[int, dict[str, Any]] = {}
    for bs in batch_sizes:
        res = run_molecule_bench(
            pipe,
            num_samples=num_samples,
            runs=runs,
            batch_size=int(bs),
            seed=seed,
            methods=methods,
            training_set=None,
            threads=threads,
            progress=progress,
        )
        keep = (
            "molecules_per_s",
            "speedup_vs_ar",
            "forwards_per_batch",
            "forwards",
            "wall_s",
            "validity",
            "uniqueness",
            "quality",
        )
        out[int(bs)] = {
            "num_samples": num_samples,
            "runs": runs,
            "results": {k: {f: v[f] for f in keep} for k, v in res["results"].items()},
        }
    return out


__all__ = [
    "CACHE_REFRESH",
    "DEFAULT_PIPELINE",
    "MASKGIT_STEPS",
    "MULTI_CACHE_REFRESH",
    "MULTI_STEPS",
    "MoleculeMethod",
    "TARGETS",
    "default_methods",
    "evaluate_targets",
    "format_markdown",
    "load_training_set",
    "run_batch_sweep",
    "run_molecule_bench",
    "save_grid",
    "write_outputs",
]
