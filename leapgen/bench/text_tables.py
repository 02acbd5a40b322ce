"""Markdown tables of ``leapgen bench text``: one per prompt set and batch mode, the draft-length
sweep, the targets and the skipped samplers. Reads only the result dict of
:func:`leapgen.bench.text.run_text_bench`, so a saved JSON can be re-rendered.
"""

from __future__ import annotations

from typing import Any

from . import draft_cost as dc
from .batch_sweep import sweep_markdown
from .common import device_line, fmt, machine_line, markdown_table
from .efficiency import identity_lines
from .schedules import summary_markdown

COLUMNS = (
    "entry",
    "guarantee",
    "target fwd/call",
    "mean accepted",
    "step compression",
    "tokens/s",
    "speedup vs ar",
    "efficiency",
    "exact match vs ar",
    "vs transformers peer",
)


def _peer_cell(row: dict[str, Any]) -> str:
    if "peer_speedup" not in row:
        return ""
    same = "identical" if row["peer_identical"] else "OUTPUTS DIFFER"
    return f"{row['peer_speedup']:.2f}x vs {row['counterpart']}, {same}"


def _row_cells(row: dict[str, Any]) -> list[str]:
    guarantee = row["guarantee"] + (" (peer)" if row["kind"] == "transformers" else "")
    em = fmt(row["exact_match"])
    if row["mismatched_prompts"]:
        em += f" (differ: {row['mismatched_prompts']})"
    if not row.get("stable_across_runs", True):
        em += " UNSTABLE"
    return [
        row["name"],
        guarantee,
        fmt(row["target_forwards_per_call"], 1),
        fmt(row["mean_accepted"]),
        fmt(row["step_compression"]),
        fmt(row["tokens_per_s"], 1),
        f"{row['speedup_vs_ar']:.2f}x",
        fmt(row.get("efficiency")),
        em,
        _peer_cell(row),
    ]


def format_markdown(result: dict[str, Any], header: bool = True) -> str:
    """Markdown tables (one per prompt set and batch mode), sweep, targets and skipped samplers."""
    st = result["settings"]
    out: list[str] = []
    if header:
        out.append("## Text benchmark\n")
        out.append(f"Machine: {machine_line(result['machine'])}.\n")
        out.append(
            f"Settings: pipeline `{st['pipeline']}`, {st['dtype']} on {st['device']}, {st['threads']} thread(s), greedy, "
            f"max_new_tokens={st['max_new_tokens']} (EOS stops), {st['n_prompts']} prompts per set, "
            f"median of {st['runs']} interleaved runs per prompt, wall = sum of per-prompt medians. "
            f"Peers: transformers `generate()` plain, `assistant_model=draft` ({_kv(st['hf_assisted'])}), "
            f"prompt lookup ({_kv(st['hf_prompt_lookup'])}).\n"
        )
    for sname, modes in result["results"].items():
        for mode, block in modes.items():
            title = {
                "heldout": "held-out stdlib snippets (free continuation)",
                "code-edit": "code editing (output mostly copies the prompt)",
            }.get(sname, sname)
            out.append(f"### {sname}: {title}, {mode.replace('batch', 'batch ')}\n")
            if mode != "batch1":
                per_call = min(st["batch_size"], st["n_prompts"])
                out.append(f"{per_call} prompt(s) per call as one batch (consecutive prompts grouped).\n")
            out.append(device_line(result["machine"], st) + ".\n")
            with_peers = any("peer_speedup" in r for r in block.values())
            out.append(
                markdown_table(
                    COLUMNS if with_peers else COLUMNS[:-1],
                    [_row_cells(r)[: (None if with_peers else -1)] for r in block.values()],
                )
            )
            out.append("")
            if any(r.get("kind") == "transformers" for r in block.values()):
                out.append("Outputs at T=0, transformers vs leapgen: " + "; ".join(identity_lines(block)) + ".\n")
            cost = result.get("draft_cost", {}).get(sname, {}).get(mode)
            if cost:
                out.append(f"Draft cost per accepted draft token ({sname}, {mode.replace('batch', 'batch ')}; "
                           "one untimed pass):\n")
                out.append(markdown_table(dc.COLUMNS, [dc.cost_cells(r) for r in cost.values()]))
                out.append("")
            sched = result.get("schedules", {}).get(sname, {}).get(mode)
            if sched:
                out.append(f"Draft-length schedules ({sname}, {mode.replace('batch', 'batch ')}):\n")
                out.append(summary_markdown(sched))
                out.append("")
    if result.get("batch_sweep"):
        out.append("### speedup against ar vs batch size (held-out prompts)\n")
        out.append(device_line(result["machine"], st) + ".\n")
        out.append(sweep_markdown(result["batch_sweep"], unit="prompts"))
        out.append("")
    if result.get("verify_cost"):
        out.append(verify_cost_section(result))
    if result.get("sweep"):
        sw = result["sweep"]
        out.append(
            f"### speculative draft-length sweep ({sw['n_prompts']} other held-out prompts, median of {sw['runs']} runs; best: "
            f"num_draft_tokens={sw['best']})\n"
        )
        out.append(
            markdown_table(
                ("num_draft_tokens", "wall s", "tokens/s", "step compression"),
                [
                    (
                        r["num_draft_tokens"],
                        fmt(r["wall_s"], 3),
                        fmt(r["tokens_per_s"], 1),
                        fmt(r["step_compression"]),
                    )
                    for r in sw["rows"]
                ],
            )
        )
        out.append("")
    if result.get("targets"):
        out.append("### targets\n")
        for t in result["targets"]:
            out.append(f"- [{'x' if t['passed'] else ' '}] {t['target']}: {fmt(t['value'])}")
        out.append("")
    if result.get("skipped"):
        out.append(
            "Skipped samplers: "
            + "; ".join(f"`{s['sampler']}` ({s['reason']})" for s in result["skipped"])
            + "\n"
        )
    return "\n".join(out).rstrip() + "\n"


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


__all__ = ["COLUMNS", "format_markdown"]


def verify_cost_section(result: dict[str, Any]) -> str:
    """The target's forward cost for a block of n new tokens against one (per batch size), and the
    wall speedup ceiling it puts on ``speculative`` at its measured tokens per step (held-out)."""
    from .verify_cost import curve_markdown, speedup_ceiling

    lines = []
    for curve in result["verify_cost"]:
        b = curve.get("batch", 1)
        lines += [
            f"### Target forward cost vs new tokens per forward, batch {b} (warm cache of "
            f"{curve['context']} tokens, median of {curve['runs']} interleaved runs)\n",
            curve_markdown(curve),
            "",
        ]
        mode = "batch1" if b == 1 else f"batch{b}"
        row = result["results"].get("heldout", {}).get(mode, {}).get("speculative[schedule=constant]")
        if row is not None:  # the formula assumes k drafts every step
            k = int(row.get("params", {}).get("num_draft_tokens", 5))
            comp = row["step_compression"]
            lines.append(
                f"With k={k} drafts every step and the {fmt(comp)} tokens per target step that "
                f"`{row['name']}` measured above ({mode.replace('batch', 'batch ')}), draft-and-verify can be "
                f"at most {fmt(speedup_ceiling(curve, k, comp))}x faster than `ar` on this device "
                "(E / (t(k+1)/t(1) + k d(1)/t(1)); leapgen.bench.verify_cost).\n"
            )
    return "\n".join(lines)
