"""Markdown report of ``leapgen bench molecule``: the results table, targets, definitions, batch sweep.

Reads only the result dict that :func:`leapgen.bench.molecule.run_molecule_bench` returns (and
:func:`~leapgen.bench.molecule.run_batch_sweep` adds to), so the report can be rebuilt from a saved
JSON without running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import fmt, machine_line, markdown_table, write_json, write_text


def _row(label: str, r: dict[str, Any]) -> list[str]:
    return [
        label,
        fmt(r["temperature"], 2) if isinstance(r.get("temperature"), float) else fmt(r.get("temperature")),
        fmt(r["molecules_per_s"], 1),
        f"{r['speedup_vs_ar']:.2f}x",
        fmt(r["forwards_per_batch"], 1),
        fmt(r["forwards_per_molecule"], 3),
        fmt(r.get("ms_per_forward"), 1),
        fmt(r["step_compression"], 2),
        fmt(r["validity"], 3),
        fmt(r.get("strict_validity"), 3),
        fmt(r["uniqueness"], 3),
        fmt(r.get("novelty"), 3),
        fmt(r["quality"], 3),
        fmt(r["diversity"], 3),
        fmt(r["qed_mean"], 3),
        fmt(r["sa_mean"], 2),
    ]


HEADERS = (
    "entry",
    "T",
    "molecules/s",
    "speedup vs ar",
    "forwards/batch",
    "forwards/molecule",
    "ms/forward",
    "step compression",
    "validity",
    "strict validity",
    "uniqueness",
    "novelty",
    "quality",
    "diversity",
    "QED mean",
    "SA mean",
)


def format_markdown(result: dict[str, Any], header: bool = True) -> str:
    """Markdown: title, machine and settings header, the results table, targets, notes."""
    s, res = result["settings"], result["results"]
    out = []
    if header:
        out.append("# Molecule benchmark\n")
        out.append(f"Machine: {machine_line(result['machine'])}.\n")
        out.append(
            f"Settings: pipeline `{s.get('pipeline') or '?'}`, fp32 on CPU, {s.get('threads')} torch thread(s); "
            f"{s['num_samples']} de novo samples per entry at batch size {s['batch_size']} ({s['num_batches']} batches), "
            f"batch j seeded {s['seed']} + j; every batch timed {s['runs']} time(s), entries interleaved batch by batch "
            f"(order rotated each batch and run), median per batch, wall = sum over batches; one warm-up call "
            f"(8 samples) per entry. Wall = the whole pipeline call (sampling + SAFE -> SMILES). Metrics on all samples (first run); novelty against {s['training_set']}. T = sampling temperature (GenMol's softmax_temp; "
            f"`-` = the pipeline's default for that sampler).\n"
        )
        if s.get("command"):
            out.append(f"Command: `{s['command']}`\n")
    out.append(markdown_table(HEADERS, [_row(k, v) for k, v in res.items()]))
    out.append("")
    notes = [
        f"- `{k}`: {v['note']}"
        + (" (outputs differed across runs!)" if v["identical_across_runs"] is False else "")
        for k, v in res.items()
        if v.get("note")
    ]
    if notes:
        out.append("Entries:\n")
        out.extend(notes)
        out.append("")
    if result.get("targets"):
        out.append("## Targets\n")
        rows = []
        for t in result["targets"]:
            met = "-" if t["met"] is None else ("met" if t["met"] else "missed")
            ref = t.get("reference")
            ref_s = "-" if ref is None else (fmt(ref, 3) if isinstance(ref, float) else str(ref))
            rows.append(
                [t["target"], f"`{t['entry']}`" if t.get("entry") else "-", fmt(t["measured"], 3), ref_s, met]
            )
        out.append(markdown_table(("target", "entry", "measured", "reference", "result"), rows))
        out.append("")
    out.append("## Definitions\n")
    for k, v in s["metric_definitions"].items():
        out.append(f"- **{k}**: {v}")
    out.append(
        "- **forwards/batch**: model calls per batch of samples (sequential steps); an AR forward feeds one token "
        "per row against a KV cache, a masked forward the whole sequence (on the masked cache, between refreshes, "
        "the positions masked before the previous step), so per-forward cost differs."
    )
    out.append(
        "- **ms/forward**: entry wall / forwards (post-processing included): what one forward of that model costs "
        "at this batch size on this machine."
    )
    out.append(
        "- **step compression**: tokens a one-token-per-forward decode of each batch needs (longest row) / forwards."
    )
    if result.get("grid"):
        g = result["grid"]
        out.append("")
        out.append(
            f"Samples from `{g['entry']}` (first 16 valid, legends QED / SA): `{Path(g['path']).name}`."
        )
    if result.get("batch_sweep"):
        out.append("")
        out.append("## Speed at other batch sizes\n")
        first = next(iter(result["batch_sweep"].values()))
        out.append(
            f"The same entries, {first['num_samples']} samples each, every batch timed {first['runs']} time(s), "
            "interleaved as above (no novelty). Where a forward is cheap (small batches), fewer sequential forwards "
            "pay off in wall time; at large batch on a CPU the forward cost grows with the tokens fed, which favours "
            "the AR model's KV cache.\n"
        )
        rows = []
        for bs, sw in result["batch_sweep"].items():
            for label, r in sw["results"].items():
                rows.append(
                    [
                        bs,
                        label,
                        fmt(r["molecules_per_s"], 1),
                        f"{r['speedup_vs_ar']:.2f}x",
                        fmt(r["forwards_per_batch"], 1),
                        fmt(r["validity"], 3),
                        fmt(r["quality"], 3),
                    ]
                )
        out.append(
            markdown_table(
                ("batch", "entry", "molecules/s", "speedup vs ar", "forwards/batch", "validity", "quality"),
                rows,
            )
        )
    return "\n".join(out) + "\n"


def write_outputs(
    result: dict[str, Any], json_path: str | Path | None, md_path: str | Path | None
) -> list[Path]:
    """Write the JSON (full result) and the markdown report."""
    paths = []
    if json_path:
        paths.append(write_json(json_path, result))
    if md_path:
        paths.append(write_text(md_path, format_markdown(result)))
    return paths


__all__ = ["HEADERS", "format_markdown", "write_outputs"]
