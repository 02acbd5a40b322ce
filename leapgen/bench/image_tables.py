"""Markdown report of ``leapgen bench image``: settings, the speed + quality table, FID noise,
targets and skipped samplers. Reads only the result dict of :func:`leapgen.bench.image.run_image_bench`.
"""

from __future__ import annotations

from typing import Any

from . import draft_cost as dc
from .batch_sweep import sweep_markdown
from .common import device_line, fmt, machine_line, markdown_table
from .schedules import summary_markdown

COLUMNS = (
    "entry",
    "guarantee",
    "target fwd/batch",
    "step compression",
    "mean accepted",
    "decode s",
    "speedup vs ar",
    "efficiency",
    "end-to-end speedup",
    "FID (emoji features) median [runs]",
    "FID pooled",
    "class acc",
    "mean NLL",
)


def _params_str(p: dict[str, Any], name: str = "") -> str:
    """``[k=v, ...]`` of the parameters the entry's name does not already state."""
    p = {k: v for k, v in p.items() if f"{k}=" not in name}
    return ("[" + ", ".join(f"{k}={v}" for k, v in p.items()) + "]") if p else ""


def _row_cells(row: dict[str, Any]) -> list[str]:
    runs = ", ".join(fmt(x) for x in row["fid_runs"])
    return [
        row["name"] + _params_str(row["params"], row["name"]),
        row["guarantee"],
        fmt(row["target_forwards_per_call"], 1),
        fmt(row["step_compression"]),
        fmt(row["mean_accepted"]),
        fmt(row["decode_s"], 2),
        f"{row['speedup_vs_ar']:.2f}x",
        fmt(row.get("efficiency")),
        f"{row['e2e_speedup_vs_ar']:.2f}x",
        f"{fmt(row['fid_median'])} [{runs}]",
        fmt(row["fid_pooled"]),
        fmt(row["class_accuracy"]),
        fmt(row["mean_nll"], 3),
    ]


def format_markdown(result: dict[str, Any], header: bool = True) -> str:
    """The markdown report: title, machine and settings, the table, noise, targets, skipped."""
    st = result["settings"]
    out: list[str] = []
    if header:
        out.append("# Image benchmark\n")
        out.append(f"Machine: {machine_line(result['machine'])}.\n")
    clf = result["classifier"]
    cm = clf.get("metrics", {})
    out.append(
        f"Settings: pipeline `{st['pipeline']}`, {st['dtype']} on {st['device']}, {st['threads']} thread(s); "
        f"cfg_scale={st['cfg_scale']} (cfg_interval={st['cfg_interval']}), temperature={st['temperature']}, "
        f"top_k={st['top_k']}, top_p={st['top_p']}; {st['samples']} samples per run (classes round-robin), "
        f"batch size {st['batch_size']}, {st['runs']} interleaved runs ({st['seed_rule']}: every run a fresh "
        "sample set, the same seeds for every sampler); times are medians over runs of the run total, speedups "
        "against `ar` in the same process. `decode s` / `speedup vs ar`: the sampler's loop; end-to-end adds "
        "prefix building and VQ decoding.\n"
    )
    out.append(
        f"Quality: **FID (emoji features)** = Fréchet distance on the penultimate features "
        f"({clf['feature_dim']}-d) of the shipped emoji classifier (held-out accuracy "
        f"{fmt(cm.get('heldout_accuracy'))} over {len(clf['class_names'])} classes), samples of one run vs "
        f"all {result['reference_images']} training images; not comparable with Inception FIDs. With "
        f"{st['samples']} samples it is strongly biased upwards: compare rows with each other only. "
        "Class acc: the classifier agrees with the prompted class (all runs). Mean NLL: nats per token of the "
        "generated tokens under the target's conditional logits (teacher-forced, no CFG).\n"
    )
    rows = [_row_cells(r) for r in result["results"].values()]
    for s in result.get("skipped", []):
        reason = s["reason"] if len(s["reason"]) <= 60 else s["reason"][:57] + "..."
        rows.append([s["sampler"], f"skipped: {reason}"] + ["-"] * (len(COLUMNS) - 2))
    out.append(f"Batch size {st['batch_size']}. " + device_line(result["machine"], st) + ".\n")
    out.append(markdown_table(COLUMNS, rows))
    out.append("")
    out.append(
        "Efficiency = speedup vs ar (decode loop) / step compression: the share of the saved target steps "
        "that reaches the wall clock.\n"
    )
    if result.get("draft_cost"):
        out.append("Draft cost per accepted draft token (one untimed pass over run 0's prompts and seeds):\n")
        out.append(markdown_table(dc.COLUMNS, [dc.cost_cells(r) for r in result["draft_cost"].values()]))
        out.append("")
    if result.get("schedules"):
        out.append("Draft-length schedules:\n")
        out.append(summary_markdown(result["schedules"]))
        out.append("")
    if result.get("batch_sweep"):
        out.append("Speed against `ar` vs batch size (decode loop; speed only):\n")
        out.append(device_line(result["machine"], st) + ".\n")
        out.append(sweep_markdown(result["batch_sweep"], unit="images"))
        out.append("")
    nz = result["noise"]
    out.append(
        f"Run-to-run noise of FID (emoji features) at {st['samples']} samples: `ar`'s range over runs "
        f"{fmt(nz['fid_noise_ar'])}; FID between two `ar` runs' sample sets (median over pairs) "
        f"{fmt(nz['fid_ar_vs_ar_median'])}.\n"
    )
    if result.get("targets"):
        out.append("## Targets\n")
        for t in result["targets"]:
            mark = "x" if t["passed"] else " "
            extra = " (undetermined: one run gives no noise estimate)" if t.get("undetermined") else ""
            out.append(f"- [{mark}] {t['target']}: {t['value']}{extra}")
        out.append("")
    long = [s for s in result.get("skipped", []) if len(s["reason"]) > 60]
    if long:
        out.append("Skipped in full: " + "; ".join(f"`{s['sampler']}`: {s['reason']}" for s in long) + "\n")
    if result["settings"].get("command"):
        out.append(f"Command: `{result['settings']['command']}`\n")
    return "\n".join(out).rstrip() + "\n"


__all__ = ["COLUMNS", "format_markdown"]
