"""``leapgen bench text-lossy``: the quality-for-speed text samplers against ``ar`` and ``speculative``.

One process, the shipped ``leapgen/text-code`` pipeline (target on the lean runtime, its draft,
its trained heads when ``heads/`` exists), batch 1, greedy (``cntp`` rows sample at T=1 beside an
``ar`` row at T=1). Prompts are function headers cut from held-out stdlib files
(:func:`function_prompts`). For every row:

* **step compression** (``ar``'s steps / target forwards) and mean accepted length;
* **wall ratio to ar** (``ar``'s wall / the row's; > 1 is faster), medians over interleaved runs;
* **greedy agreement with ar** (position-wise share of identical tokens);
* **held-out perplexity** of the generated tokens under the target (teacher forced);
* **ast pass rate**: the header plus the generated body (up to the first line back at the
  header's indentation; an unfinished last line is dropped) parses with :func:`ast.parse`.

GEAR gets its own table: KV-cache storage against the float32 cache (and an fp16 one), the mean KL
of the next-token distribution against the uncompressed cache along ``ar``'s tokens, and greedy
agreement over ``long_tokens`` (256) new tokens. Writes ``bench_text_lossy.md`` / ``.json`` and
``text_lossy_quality_speed.png``.
"""

from __future__ import annotations

import ast
import logging
import math
import random
from pathlib import Path
from typing import Any

import torch

from .common import (
    fmt,
    interleaved,
    machine_info,
    machine_line,
    markdown_table,
    median,
    write_json,
    write_text,
)
from .token_nll import token_nll

logger = logging.getLogger(__name__)

#: (label, sampler, params, temperature)
ROWS: list[tuple[str, str, dict[str, Any], float]] = [
    ("ar", "ar", {}, 0.0),
    ("speculative", "speculative", {}, 0.0),
    ("bild fb=0.5 rb=3", "bild", {"fallback_threshold": 0.5, "rollback_threshold": 3.0}, 0.0),
    ("bild fb=0.3 rb=2", "bild", {"fallback_threshold": 0.3, "rollback_threshold": 2.0}, 0.0),
    ("bild fb=0.6 rb=5", "bild", {"fallback_threshold": 0.6, "rollback_threshold": 5.0}, 0.0),
    ("chimera", "chimera", {}, 0.0),
    ("hidden_transfer", "hidden_transfer", {}, 0.0),
    ("hidden_transfer b=1", "hidden_transfer", {"branches": 1}, 0.0),
    ("judge t=0.5", "judge", {"threshold": 0.5}, 0.0),
    ("judge t=0.8", "judge", {"threshold": 0.8}, 0.0),
    ("first t=0.5", "first", {"threshold": 0.5}, 0.0),
    ("first t=0.5 max_skip=1", "first", {"threshold": 0.5, "max_skip": 1}, 0.0),
    ("gear 4-bit", "gear", {"bits": 4}, 0.0),
    ("gear 2-bit r=4", "gear", {"bits": 2, "rank": 4}, 0.0),
    ("superposed k=3", "superposed", {"k": 3}, 0.0),
    ("ar T=1", "ar", {}, 1.0),
    ("cntp T=1", "cntp", {}, 1.0),
]
HEADED = {"chimera", "hidden_transfer", "judge", "first", "superposed"}


def all_rows() -> list[tuple[str, str, dict[str, Any], float]]:
    """:data:`ROWS`, then every other registered sampler of the ``causal`` contract at its defaults
    (greedy), so that the table and the plot cover all text samplers, exact and lossy."""
    from ..samplers.base import list_samplers

    named = {r[1] for r in ROWS}
    extra = sorted(i.name for i in list_samplers() if "causal" in i.contracts and i.name not in named
                   and set(i.needs) <= {"model", "draft"})
    return ROWS + [(n, n, {}, 0.0) for n in extra]


def function_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` function headers (the ``def`` line and the first body line) from held-out files."""
    from ..data.code import read_text, stdlib_files

    rng = random.Random(seed)
    files = stdlib_files("heldout")
    rng.shuffle(files)
    out: list[str] = []
    for f in files:
        lines = read_text(f).splitlines(keepends=True)
        for i, line in enumerate(lines[:-1]):
            s = line.lstrip()
            if s.startswith("def ") and line.rstrip().endswith(":") and lines[i + 1].strip():
                ind = len(line) - len(s)
                body = lines[i + 1]
                if len(body) - len(body.lstrip()) <= ind or body.strip().startswith(('"', "'")):
                    continue
                out.append(line[ind:] + body[ind:])
                break
        if len(out) >= n:
            break
    return out


def body_parses(prompt: str, generated: str) -> bool:
    """Whether the header + generated body (cut at the first line back at column 0, an unfinished
    last line dropped) parses."""
    text = prompt + generated
    lines = text.split("\n")
    head = prompt.count("\n")
    keep = lines[:head]
    complete = False
    for j, line in enumerate(lines[head:], start=head):
        if j == len(lines) - 1:  # the last piece has no newline after it: unfinished
            break
        if line.strip() and not line[:1].isspace():
            complete = True
            break
        keep.append(line)
    _ = complete
    body = "\n".join(keep).rstrip()
    if body.count("\n") < 1:
        return False
    try:
        ast.parse(body + "\n")
        return True
    except SyntaxError:
        return False


def _agreement(got: list[int], ref: list[int]) -> float:
    n = max(len(ref), 1)
    return sum(a == b for a, b in zip(got, ref)) / n


def _models(pipe: Any, headed: Any) -> dict[str, dict[str, Any]]:
    plain = {"model": pipe._lms["model"], "draft": pipe._lms["draft"]}
    return {"plain": plain, "headed": {"model": headed, "draft": pipe._lms["draft"]} if headed is not None else None}


def gear_table(pipe: Any, prompts: list[list[int]], long_tokens: int, settings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Storage, KL against the uncompressed cache along ar's tokens, and greedy agreement at length."""
    from ..models.text_variants import Gear, VariantLM, cache_bytes
    from ..samplers import DecodeConfig, get_sampler

    lean = pipe._lms["model"]
    c = lean.net.c
    cfg = DecodeConfig(max_new_tokens=long_tokens, eos_token_id=None)
    refs = [get_sampler("ar").generate({"model": lean}, [p], cfg).sequences[0] for p in prompts]
    out = []
    for s in settings:
        gear = Gear(**s)
        agree, kls, sizes, forced, diverge = [], [], [], [], []
        for p, ref in zip(prompts, refs):
            got = get_sampler("gear", **s).generate({"model": lean}, [p], cfg)
            agree.append(_agreement(got.sequences[0], ref))
            diverge.append(next((i for i, (a, b) in enumerate(zip(got.sequences[0], ref)) if a != b), len(ref)))
            # KL along ar's tokens: the same inputs through a compressed and a plain cache
            comp, full = VariantLM(lean, gear=gear), lean
            cc, cf = comp.new_cache(1), full.new_cache(1)
            seq = torch.tensor([p + ref[:-1]], device=lean.device)
            lc = comp(seq[:, : len(p)], cc)[:, -1:]
            lf = full(seq[:, : len(p)], cf)[:, -1:]
            kl, same = [], []
            for t in range(len(p), seq.shape[1]):
                kl.append(float(torch.nn.functional.kl_div(lc.log_softmax(-1), lf.log_softmax(-1), log_target=True,
                                                           reduction="sum")))
                same.append(bool(lc.argmax(-1).eq(lf.argmax(-1)).all()))
                lc, lf = comp(seq[:, t : t + 1], cc), full(seq[:, t : t + 1], cf)
            kls.append(sum(kl) / len(kl))
            forced.append(sum(same) / len(same))
            n = len(p) + len(ref)
            sizes.append((cache_bytes(n, c.n_layers, c.kv_heads, c.head_dim, gear, full_bytes=4),
                          cache_bytes(n, c.n_layers, c.kv_heads, c.head_dim, None, full_bytes=2)["full"]))
        full32 = sum(a["full"] for a, _ in sizes)
        comp_b = sum(a["compressed"] for a, _ in sizes)
        full16 = sum(b for _, b in sizes)
        out.append({"setting": s, "kv_ratio_vs_fp32": full32 / comp_b, "kv_ratio_vs_fp16": full16 / comp_b,
                    "kl_vs_uncompressed": sum(kls) / len(kls), "greedy_agreement": sum(agree) / len(agree),
                    "teacher_forced_agreement": sum(forced) / len(forced), "first_divergence": diverge,
                    "tokens": long_tokens})
    return out


def run(prompts: int = 6, max_new_tokens: int = 96, runs: int = 2, long_tokens: int = 256, seed: int = 0,
        threads: int = 1, rows: list[str] | None = None, out_dir: str | Path = "docs",
        heads: str | Path | None = None) -> dict[str, Any]:
    """Run the suite (see the module docstring); ``heads``: a heads folder instead of the pipeline's."""
    from ..models.text_heads import HeadedLM, load_heads
    from ..pipelines.base import Pipeline
    from ..samplers import DecodeConfig, get_sampler
    from ..samplers.cntp import punctuation_ids

    torch.set_num_threads(threads)
    pipe = Pipeline.from_pretrained("leapgen/text-code")
    try:
        headed = HeadedLM(pipe._lms["model"], load_heads(pipe._lms["model"], heads) if heads else None)
    except Exception as err:  # noqa: BLE001 - the heads are optional: their rows are left out, with the reason
        logger.warning("heads not loaded (%s); chimera / hidden_transfer / judge / first / superposed rows are skipped", err)
        headed = None
    texts = function_prompts(prompts, seed)
    ids = pipe.encode(texts)
    models = _models(pipe, headed)
    stop = punctuation_ids(pipe.tokenizer, pipe._lms["model"].vocab_size)
    table = [r for r in all_rows() if (rows is None or r[0] in rows) and (r[1] not in HEADED or headed is not None)]
    labels = [r[0] for r in table]
    spec = {r[0]: r for r in table}
    rec: dict[str, dict[str, Any]] = {lab: {"wall": [], "seqs": {}, "stats": {}} for lab in labels}

    def measure(label: str, i: int, r: int) -> None:
        _, name, params, temp = spec[label]
        extra = {"stop_ids": stop} if name == "cntp" else {}
        smp = get_sampler(name, **params, **extra)
        cfg = DecodeConfig(max_new_tokens=max_new_tokens, temperature=temp, eos_token_id=pipe.tokenizer.eos_token_id)
        gen = torch.Generator().manual_seed(seed + i)
        m = models["headed"] if name in HEADED else models["plain"]
        with torch.inference_mode():
            res = smp.generate(m, [ids[i]], cfg, gen)
        rec[label]["wall"].append((i, res.stats.wall_time))
        rec[label]["seqs"][i] = res.sequences[0]
        rec[label]["stats"][i] = res.stats

    interleaved(labels, list(range(len(ids))), runs, measure, desc="text-lossy")
    target = pipe._lms["model"]
    results = []
    base_wall = {}
    for lab in labels:
        walls = {}
        for i, w in rec[lab]["wall"]:
            walls.setdefault(i, []).append(w)
        base_wall[lab] = sum(median(v) for v in walls.values())
    for lab in labels:
        _, name, params, temp = spec[lab]
        ref_lab = "ar T=1" if temp > 0 and "ar T=1" in rec else "ar"
        seqs = [rec[lab]["seqs"][i] for i in range(len(ids))]
        ref = [rec[ref_lab]["seqs"][i] for i in range(len(ids))] if ref_lab in rec else seqs
        st = [rec[lab]["stats"][i] for i in range(len(ids))]
        forwards = sum(s.target_forwards for s in st)
        steps = sum(s.baseline_steps for s in st)
        nll = token_nll(target, ids, seqs) if any(seqs) else float("nan")
        row = {
            "method": lab, "sampler": name, "params": params, "temperature": temp,
            "step_compression": steps / max(1, forwards),
            "mean_accepted": sum(s.new_tokens for s in st) / max(1, forwards),
            "wall_s": base_wall[lab], "wall_ratio_to_ar": base_wall.get(ref_lab, float("nan")) / base_wall[lab],
            "greedy_agreement_with_ar": sum(_agreement(a, b) for a, b in zip(seqs, ref)) / len(ids),
            "heldout_ppl": math.exp(nll),
            "ast_pass_rate": sum(body_parses(t, pipe.tokenizer.decode(s)) for t, s in zip(texts, seqs)) / len(ids),
            "new_tokens": sum(len(s) for s in seqs),
        }
        if name == "superposed":
            row["completions_per_call"] = params.get("k", 3)
        if name == "first":
            row["layers_run_per_forward"] = sum(s.extra.get("layers_run_per_forward", 0) for s in st) / len(st)
        if name == "cntp":
            row["cntp_trials"] = sum(s.extra.get("cntp_trials", 0) for s in st)
        # what the drafts cost per target forward: draft-model forwards, head calls, pseudo positions
        if name == "speculative":
            row["draft_forwards_per_step"] = sum(s.draft_forwards for s in st) / max(1, forwards)
        if name == "chimera":
            row["head_calls_per_step"] = sum(s.extra.get("head_calls", 0) for s in st) / max(1, forwards)
        if name == "hidden_transfer":
            row["pseudo_positions_per_step"] = sum(s.extra.get("pseudo_positions", 0) for s in st) / max(1, forwards)
        results.append(row)
    gear_rows = gear_table(pipe, ids[:2], long_tokens, [{"bits": 4}, {"bits": 4, "buffer": 4, "block": 32},
                                                        {"bits": 2, "rank": 4}, {"bits": 3},
                                                        {"bits": 3, "buffer": 4, "block": 32},
                                                        {"bits": 2, "rank": 2, "buffer": 4, "block": 32}]) if long_tokens else []
    info = machine_info()
    out = {"machine": info, "settings": {"prompts": len(ids), "max_new_tokens": max_new_tokens, "runs": runs,
                                         "long_tokens": long_tokens, "seed": seed, "threads": threads,
                                         "heads": headed is not None},
           "rows": results, "gear": gear_rows, "prompts": texts}
    out_dir = Path(out_dir)
    write_json(out_dir / "bench_text_lossy.json", out)
    write_text(out_dir / "bench_text_lossy.md", _markdown(out))
    _plot(results, out_dir / "text_lossy_quality_speed.png")
    return out


#: a row's optional measures and how its notes column states them
NOTES = (("completions_per_call", "{} completions per call"), ("layers_run_per_forward", "{:.2f} layers/forward"),
         ("cntp_trials", "{} trials"), ("draft_forwards_per_step", "{:.2f} draft-model forwards/step"),
         ("head_calls_per_step", "{:.2f} head calls/step"),
         ("pseudo_positions_per_step", "{:.1f} pseudo positions/step, no extra forward"))


def _markdown(out: dict[str, Any]) -> str:
    s = out["settings"]
    head = ["method", "T", "step compr.", "tokens/forward", "wall ratio to ar", "greedy agree w/ ar",
            "held-out ppl", "ast pass", "notes"]
    rows = []
    for r in out["rows"]:
        note = [text.format(r[key]) for key, text in NOTES if key in r]
        rows.append([r["method"], fmt(r["temperature"], 0), fmt(r["step_compression"]), fmt(r["mean_accepted"]),
                     fmt(r["wall_ratio_to_ar"]), fmt(r["greedy_agreement_with_ar"], 3), fmt(r["heldout_ppl"]),
                     fmt(r["ast_pass_rate"]), "; ".join(note)])
    gear = markdown_table(["setting", "KV ratio vs fp32 cache", "vs fp16 cache", "KL vs uncompressed",
                           f"greedy agreement ({s['long_tokens']} tokens)", "teacher-forced top-1 agreement",
                           "first divergence (token)"],
                          [[", ".join(f"{k}={v}" for k, v in g["setting"].items()), fmt(g["kv_ratio_vs_fp32"]),
                            fmt(g["kv_ratio_vs_fp16"]), fmt(g["kl_vs_uncompressed"], 4), fmt(g["greedy_agreement"], 3),
                            fmt(g.get("teacher_forced_agreement"), 3), ", ".join(map(str, g.get("first_divergence", [])))]
                           for g in out["gear"]]) if out["gear"] else "(not run)"
    return (
        "# Text: quality-for-speed samplers (`leapgen bench text-lossy`)\n\n"
        f"{machine_line(out['machine'])}\n\n"
        f"Shipped `leapgen/text-code` (lean runtime), batch 1, {s['prompts']} function-header prompts from held-out "
        f"stdlib files, {s['max_new_tokens']} new tokens, medians of {s['runs']} interleaved runs; trained heads "
        f"{'loaded' if s['heads'] else 'absent'}. Wall ratio > 1 is faster than `ar` (the T=1 rows against `ar T=1`); "
        "greedy agreement is position-wise against `ar` (T=1 rows: against `ar T=1`, same seed).\n\n"
        + markdown_table(head, rows)
        + "\n\n## GEAR KV-cache compression\n\nAlong greedy `ar` continuations of the first two prompts. "
        "KL: mean over steps of KL(uncompressed || compressed) of the next-token distribution. Greedy agreement: "
        "position-wise between the free-running GEAR continuation and `ar`'s (one flipped token shifts the rest); "
        "teacher-forced top-1 agreement: along `ar`'s tokens, how often the compressed cache's next-token argmax "
        "equals the uncompressed one's; first divergence: the first position where the free-running continuations "
        "differ, per prompt.\n\n"
        + gear + "\n\n![quality vs speed](text_lossy_quality_speed.png)\n"
    )


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..samplers.base import sampler_info

    colour = {"greedy-exact": "tab:blue", "distribution-exact": "tab:blue", "bounded": "tab:orange", "lossy": "tab:red"}
    fig, ax = plt.subplots(1, 2, figsize=(13, 5.5))
    for a, key in zip(ax, ("heldout_ppl", "greedy_agreement_with_ar")):
        placed: list[tuple[float, float]] = []
        for r in sorted(rows, key=lambda r: (r[key], r["wall_ratio_to_ar"])):
            x, y = r["wall_ratio_to_ar"], r[key]
            a.scatter(x, y, marker="o" if r["temperature"] == 0 else "s",
                      color=colour.get(sampler_info(r["sampler"]).guarantee, "tab:grey"), zorder=3)
            # stack labels that would land on each other (same neighbourhood in axes units)
            near = sum(1 for px, py in placed if abs(px - x) < 0.08 and abs(py - y) < (0.06 if key != "heldout_ppl" else 0.04 * y))
            placed.append((x, y))
            a.annotate(r["method"], (x, y), fontsize=6.5, xytext=(4, 3 + 8 * near), textcoords="offset points")
        a.set_xlabel("wall speed-up over ar (batch 1, CPU)")
        a.axvline(1.0, color="grey", lw=0.5)
    ax[0].set_yscale("log")
    ax[0].set_ylabel("held-out perplexity of outputs under the target (log; lower is better)")
    ax[1].set_ylabel("greedy agreement with ar (T=1 rows: with ar T=1)")
    fig.suptitle("text-code: quality against speed, every text sampler "
                 "(blue: exact, orange: bounded, red: lossy; circles T=0, squares T=1)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
