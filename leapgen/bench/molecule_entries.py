"""The molecule benchmark's entries and targets: what ``leapgen bench molecule`` runs and what it is judged by.

:class:`MoleculeMethod` is one entry (a sampler of the molecule pipeline with explicit
parameters), :func:`default_methods` the entries the bench runs by default (``ar``, ``genmol`` one
token per step and multi-token, both on the masked cache too, optionally a threshold entry,
``maskgit``), :data:`TARGETS` the issue's targets and :func:`evaluate_targets` those targets
checked against a result of :func:`leapgen.bench.molecule.run_molecule_bench` (which re-exports
all of these).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_PIPELINE = "leapgen/molecule-safe"
#: steps of the multi-token GenMol entry (forwards per batch) and of the MaskGIT entry
MULTI_STEPS = 16
MASKGIT_STEPS = 12
#: steps between full refreshes of the cached GenMol entries (one token per step / multi-token):
#: a forward between refreshes recomputes only what was masked before the previous step
CACHE_REFRESH = 8
MULTI_CACHE_REFRESH = 4

#: the issue's targets: (label, entry, metric, comparison, threshold or entry to beat)
TARGETS = (
    ("genmol (one token per step) validity >= 0.95", "genmol", "validity", ">=", 0.95),
    ("genmol (one token per step) strict validity >= 0.85", "genmol", "strict_validity", ">=", 0.85),
    ("genmol (one token per step) uniqueness >= 0.95", "genmol", "uniqueness", ">=", 0.95),
    ("genmol (one token per step) quality >= ar's", "genmol", "quality", ">=", "ar"),
    ("genmol multi-token validity >= 0.95", "@multi", "validity", ">=", 0.95),
    ("genmol multi-token strict validity >= 0.85", "@multi", "strict_validity", ">=", 0.85),
    ("genmol multi-token uniqueness >= 0.95", "@multi", "uniqueness", ">=", 0.95),
    ("genmol multi-token quality >= ar's", "@multi", "quality", ">=", "ar"),
    ("genmol multi-token molecules/s >= 2x ar (same batch size)", "@multi", "speedup_vs_ar", ">=", 2.0),
)


@dataclass(frozen=True)
class MoleculeMethod:
    """One benchmark entry: a sampler of the pipeline with explicit parameters."""

    sampler: str
    params: dict[str, Any] = field(default_factory=dict)
    temperature: float | None = None  # None: the pipeline's default for the sampler (paper_config)
    note: str = ""
    multi: bool = False  # the multi-token GenMol entry the targets and the picture refer to

    @property
    def label(self) -> str:
        if not self.params and self.temperature is None:
            return self.sampler
        items = [f"{k}={v}" for k, v in self.params.items()]
        if self.temperature is not None:
            items.append(f"T={self.temperature}")
        return f"{self.sampler}[{', '.join(items)}]"


def default_methods(
    multi_steps: int = MULTI_STEPS, maskgit_steps: int = MASKGIT_STEPS, threshold: float | None = None
) -> list[MoleculeMethod]:
    """``ar``, ``genmol`` (one token per step), ``genmol`` with a cosine schedule of ``multi_steps``
    steps, both again on the masked cache (``cache="dkv_delayed"``), optionally ``genmol`` with a confidence threshold (log-probability ``threshold``), and
    ``maskgit`` with ``maskgit_steps`` steps."""
    out = [
        MoleculeMethod("ar", note="SAFE-GPT-style AR baseline, KV cache, one token per forward"),
        MoleculeMethod("genmol", note="GenMol default: one token per step"),
        MoleculeMethod(
            "genmol",
            {"schedule": "cosine", "steps": int(multi_steps)},
            note=f"GenMol scorer, cosine multi-token schedule, {multi_steps} forwards per batch",
            multi=True,
        ),
    ]
    out += [
        MoleculeMethod(
            "genmol",
            {"cache": "dkv_delayed", "cache_refresh": CACHE_REFRESH},
            note="GenMol, one token per step, on the masked cache (dKV-Cache delayed keys / values, a full refresh "
            f"every {CACHE_REFRESH} steps; lossy)",
        ),
        MoleculeMethod(
            "genmol",
            {"schedule": "cosine", "steps": int(multi_steps), "cache": "dkv_delayed", "cache_refresh": MULTI_CACHE_REFRESH},
            note=f"the multi-token entry on the masked cache (a full refresh every {MULTI_CACHE_REFRESH} steps; lossy)",
        ),
    ]
    if threshold is not None:
        out.append(
            MoleculeMethod(
                "genmol",
                {"policy": "threshold", "threshold": float(threshold)},
                note="GenMol scorer, commit every position whose confidence clears the threshold",
            )
        )
    out.append(
        MoleculeMethod(
            "maskgit", {"steps": int(maskgit_steps)}, note=f"MaskGIT preset, {maskgit_steps} steps"
        )
    )
    return out


def evaluate_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets against the measured results (missing entries are reported as such)."""
    res = result["results"]
    multi = result["settings"].get("multi_entry")
    out = []
    for label, entry, metric, op, want in TARGETS:
        name = multi if entry == "@multi" else entry
        row = res.get(name) if name else None
        if row is None:
            out.append(
                {"target": label, "entry": name, "measured": None, "met": None, "note": "entry not run"}
            )
            continue
        got = row.get(metric)
        ref = res["ar"].get(metric) if want == "ar" else want
        met = None if got is None or ref is None else (got >= ref if op == ">=" else got > ref)
        out.append(
            {"target": label, "entry": name, "metric": metric, "measured": got, "reference": ref, "met": met}
        )
    return out
