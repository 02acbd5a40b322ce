"""Sampling report of a trained molecule pipeline: what ``docs/molecules.md`` quotes.

De novo metrics per sampler (``ar``, ``genmol`` with its defaults and with a cosine 12-step
schedule, ``maskgit``), the GenMol fragment tasks (linker, motif, scaffold, superstructure) with
``genmol`` and ``ar``, and three rounds of lead optimisation. Not a timing benchmark (see
:mod:`leapgen.bench.molecule` for that): one call per entry, metrics from
:mod:`leapgen.bench.molecule_metrics`, novelty against the MOSES train split.

Run after ``leapgen train molecule-safe``::

    python -c "from leapgen.bench.molecule_sampling import sampling_report; sampling_report(out_json='docs/molecules_sampling.json')"
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..data.molecules import read_moses_smiles
from . import molecule_metrics as mm
from .common import markdown_table

logger = logging.getLogger(__name__)


def sampling_report(
    pipeline: str = "leapgen/molecule-safe",
    num_samples: int = 256,
    fragment_samples: int = 64,
    batch_size: int = 64,
    seed: int = 0,
    out_json: str | os.PathLike | None = None,
    out_md: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Sample the trained pipeline: de novo metrics per sampler and the GenMol fragment tasks.

    ``python -c "from leapgen.bench.molecule_sampling import sampling_report; sampling_report(out_json='docs/molecules_sampling.json', out_md='docs/molecules_sampling.md')"``
    (metrics from :mod:`leapgen.bench.molecule_metrics`; novelty against the MOSES train split).
    """
    from ..pipelines.base import Pipeline

    pipe = Pipeline.from_pretrained(pipeline)
    train = set(read_moses_smiles("train"))
    report: dict[str, Any] = {"pipeline": pipeline, "seed": seed, "batch_size": batch_size, "de_novo": {}, "fragments": {}}
    entries = [
        ("ar", "ar", {}),
        ("genmol", "genmol", {}),
        ("genmol[cosine, 12 steps]", "genmol", {"schedule": "cosine", "steps": 12}),
        ("maskgit[12 steps]", "maskgit", {"steps": 12}),
    ]
    for label, sampler, params in entries:
        t = time.perf_counter()
        out = pipe(num_samples=num_samples, sampler=sampler, seed=seed, batch_size=batch_size, **params)
        wall = time.perf_counter() - t
        rep = mm.molecule_report(out.smiles, train, safe_strings=out.safe)
        rep.update(
            forwards=out.stats.target_forwards,
            baseline_steps=out.stats.baseline_steps,
            temperature=out.stats.extra.get("temperature"),
            wall_s=wall,
        )
        report["de_novo"][label] = rep
        logger.info("de novo %s: %s", label, {k: rep[k] for k in ("validity", "uniqueness", "novelty", "quality", "forwards")})
    tasks = [
        ("linker", ["[*]c1ccccc1", "[*]C1CCNCC1"], {}),
        ("linker[one_step]", ["[*]c1ccccc1", "[*]C1CCNCC1"], {"linker_mode": "one_step"}),
        ("motif", ["[*]c1ccc(F)cc1"], {}),
        ("scaffold", ["[*]c1ccc([*])nc1"], {}),
        ("superstructure", ["c1ccc2[nH]ccc2c1"], {}),
    ]
    for label, frags, extra in tasks:
        task = label.split("[")[0]
        for sampler in ("genmol", "ar"):
            t = time.perf_counter()
            out = pipe(num_samples=fragment_samples, task=task, fragments=frags, sampler=sampler, seed=seed,
                       batch_size=batch_size, **extra)
            wall = time.perf_counter() - t
            rep = mm.molecule_report(out.smiles, train)
            rep.update(
                fragments=frags,
                decoded=sum(s is not None for s in out.unfiltered_smiles),
                num_filtered=out.num_filtered,
                forwards=out.stats.target_forwards,
                wall_s=wall,
            )
            report["fragments"][f"{label}/{sampler}"] = rep
            logger.info("%s %s: valid %.3f filtered %d", label, sampler, rep["validity"], out.num_filtered)
    start = ["CCOc1ccc(CC(=O)N2CCCC2)cc1", "CC(=O)Nc1ccc(O)cc1", "Cc1ccc(S(=O)(=O)N2CCCCC2)cc1"]
    for sampler in ("genmol", "ar"):
        out = pipe(task="lead_opt", molecules=start, num_rounds=3, num_samples=32, sampler=sampler, seed=seed, batch_size=batch_size)
        report.setdefault("lead_opt", {})[sampler] = {
            "start": start,
            "best": out.smiles,
            "qed_start": out.history[0]["scores"],
            "qed_best": out.scores,
            "history": out.history,
        }
    if out_json is not None:
        Path(out_json).write_text(json.dumps(report, indent=1, default=float) + "\n")
    if out_md is not None:
        Path(out_md).write_text(sampling_markdown(report))
    return report


def sampling_markdown(report: dict[str, Any]) -> str:
    """The report's three tables (de novo, fragment tasks, lead optimisation) as markdown."""
    def f(x: Any, d: int = 3) -> str:
        return "-" if x is None else f"{x:.{d}f}"

    rows = []
    for label, r in report["de_novo"].items():
        comp = r["baseline_steps"] / r["forwards"] if r.get("forwards") else None
        rows.append([f"`{label}`", f(r.get("temperature"), 1), f(r["validity"]), f(r.get("strict_validity")), f(r["uniqueness"]),
                     f(r["novelty"]), f(r["quality"]), f(r["diversity"]), r["forwards"], f(comp, 2), f(r["wall_s"], 1)])
    frag = []
    for key, r in report["fragments"].items():
        label, sampler = key.split("/")
        frag.append([label, f"`{sampler}`", ", ".join(f"`{x}`" for x in r["fragments"]), r["decoded"], r["num_filtered"],
                     f(r["validity"]), f(r["uniqueness"]), f(r["quality"]), r["forwards"], f(r["wall_s"], 1)])
    lead = []
    for sampler, r in report.get("lead_opt", {}).items():
        for start, q0, q1, best in zip(r["start"], r["qed_start"], r["qed_best"], r["best"]):
            lead.append([f"`{sampler}`", f"`{start}`", f(q0), f(q1), f"`{best}`"])
    n = next(iter(report["de_novo"].values()), {}).get("num_samples", "")

    return "\n\n".join([
        f"# Sampling `{report['pipeline']}` (seed {report['seed']}, batch {report['batch_size']})",
        f"De novo{f', {n} molecules each' if n else ''}:",
        markdown_table(["sampler", "T", "validity", "strict", "uniqueness", "novelty", "quality", "diversity", "forwards", "compression",
               "wall s"], rows),
        "Fragment tasks:",
        markdown_table(["task", "sampler", "fragments", "decoded", "filtered", "validity", "uniqueness", "quality", "forwards", "wall s"], frag),
        "Lead optimisation, QED, 3 rounds of 32 candidates per molecule:",
        markdown_table(["sampler", "start", "QED start", "QED best", "best molecule"], lead),
    ]) + "\n"


__all__ = ["sampling_markdown", "sampling_report"]
