"""``leapgen bench dllm``: diffusion LMs on the code corpus -- models compared, samplers timed.

**Prompts.** File completion on held-out files of the code corpus (:mod:`leapgen.data.code`):
the prompt is the 64 tokens before the last ``gen_length // 2`` tokens of a file, the
reference is those last tokens and ``<|endoftext|>`` (so a model that knows a file ends can stop,
which is what Learn2PD's EoTP exploits). Generation length ``gen_length`` (one or more blocks).

**Models** (one process, same prompts): the from-scratch and the AR-adapted diffusion LM (held-out
MDLM bound from their ``train_metrics.json``, greedy ``llada`` completions) and the AR
``text-code`` model (greedy; held-out NLL from its ``train_metrics.json``). Quality: token
accuracy of the first 16 generated tokens against the reference, exact match of the whole
reference, and the AR model's NLL per token of the generated text (fluency judged by the AR model).

**Samplers** on the default (adapted) model, at batch 1 and batch 8: ``llada`` (one token per step),
``fast_dllm`` (threshold 0.9; dual cache, prefix cache; factor rule), ``prophet``, ``learn2pd``
(+ EoTP, the folder's trained filter; also on the dual cache, the reference's ``L2P+EoT+dual_cache``), ``dkv_cache`` (decode; greedy window). Reported: tokens/s
(generated positions per second of wall time, EoT padding included, as the papers count),
forwards, tokens per step, and quality (agreement with ``llada``'s tokens, exact match, AR NLL).
Wall times are single runs under the machine's load, interleaved by prompt; ratios to ``llada``
are in the same process.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.code import iter_texts, stdlib_files
from ..pipelines.base import Pipeline, resolve_pretrained
from .common import machine_info, machine_line, markdown_table, write_json, write_text


@dataclass
class SamplerEntry:
    sampler: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            inner = ", ".join(f"{k}={v}" for k, v in self.params.items())
            self.label = f"{self.sampler}[{inner}]" if inner else self.sampler


#: Learn2PD + EoTP on Fast-dLLM's dual cache: a method of the reference's eval script (``L2P+EoT+dual_cache``)
L2P_DUAL = "learn2pd[cache=dual]"


def sampler_entries(batch8: bool = False) -> list[SamplerEntry]:
    full = [
        SamplerEntry("llada"),
        SamplerEntry("fast_dllm"),
        SamplerEntry("fast_dllm", {"cache": "prefix"}),
        SamplerEntry("fast_dllm", {"policy": "factor", "factor": 1.0}),
        SamplerEntry("fast_dllm", {"threshold": 0.5}),
        SamplerEntry("prophet"),
        SamplerEntry("learn2pd"),
        SamplerEntry("learn2pd", {"cache": "dual"}),
        SamplerEntry("dkv_cache"),
        SamplerEntry("dkv_cache", {"cache": "dkv_window", "scorer": "random", "cache_refresh": 2}),
    ]
    if batch8:
        keep = {"llada", "fast_dllm", "learn2pd", L2P_DUAL, "dkv_cache"}
        return [e for e in full if e.label in keep]
    return full


def file_prompts(tokenizer: Any, n: int, prompt_tokens: int = 64, ref_tokens: int = 40) -> list[tuple[str, list[int]]]:
    """(prompt text, reference ids ending with <|endoftext|>) from the ends of held-out files."""
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    out = []
    for text in iter_texts(stdlib_files("heldout")):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < prompt_tokens + ref_tokens + 8:
            continue
        prompt, ref = ids[-(prompt_tokens + ref_tokens):-ref_tokens], ids[-ref_tokens:]
        out.append((tokenizer.decode(prompt), [*ref, eot]))
        if len(out) == n:
            break
    return out


@torch.no_grad()
def ar_nll(ar: Any, prompt_ids: list[int], gen: list[int]) -> float | None:
    """Mean NLL (nats/token) of ``gen`` after ``prompt_ids`` under the AR model."""
    if not gen:
        return None
    x = torch.tensor([[*prompt_ids, *gen]])
    logp = ar(input_ids=x).logits[0, :-1].float().log_softmax(-1)
    tgt = x[0, 1:]
    lp = logp.gather(-1, tgt[:, None])[:, 0][len(prompt_ids) - 1:]
    return float(-lp.mean())


def _quality(gen: list[int], ref: list[int], eot: int) -> dict[str, float]:
    k = 16
    acc = sum(1 for a, b in zip(gen[:k], ref[:k]) if a == b) / k
    cut = gen[: gen.index(eot) + 1] if eot in gen else gen
    return {"token_acc16": acc, "exact": float(cut == ref)}


def _run(pipe: Any, entry: SamplerEntry, prompts: list[str], gen_length: int, batch: int) -> tuple[list[list[int]], dict[str, Any]]:
    """Full generated id rows (EoT kept) and timing / step statistics for one entry."""
    rows: list[list[int]] = []
    wall, forwards, steps_rows, tokens = 0.0, 0, 0, 0
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        t0 = time.perf_counter()
        out = pipe(chunk, sampler=entry.sampler, max_new_tokens=gen_length, stop_at_eos=False, seed=0, **entry.params)
        wall += time.perf_counter() - t0
        rows.extend(out.token_ids)
        forwards += out.stats.target_forwards
        tokens += len(chunk) * gen_length
        steps_rows += sum(sum(1 for v in step if v > 0) for step in out.stats.accepted_per_step)
    return rows, {"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall, "forwards": forwards,
                  "tokens_per_step": tokens / max(1, steps_rows)}


def _train_record(name: str) -> dict[str, Any]:
    """Held-out bound, training wall and tokens of a diffusion-LM folder (a resumed run adds its first part)."""
    tm = json.loads((resolve_pretrained(name) / "train_metrics.json").read_text())
    first = (tm.get("resumed_from") or {}).get("train") or {}
    return {"heldout_mdlm_bound": tm["eval"]["mdlm_bound_nats_per_token"],
            "train_wall_s": tm["train"]["wall_s"] + first.get("wall_s", 0.0),
            "train_tokens": tm["train"]["tokens"] + first.get("tokens", 0),
            "train_steps": tm["train"]["steps"] + first.get("steps", 0)}


def run_dllm_bench(pipeline: str = "leapgen/text-code-diffusion-adapted", scratch: str | None = "leapgen/text-code-diffusion",
                   ar_pipeline: str = "leapgen/text-code", n_prompts: int = 4, gen_length: int = 64,
                   batch8_prompts: int = 8, long_length: int = 256, long_prompts: int = 2, repeats: int = 3) -> dict[str, Any]:
    """Models compared at ``gen_length``; samplers at batch 1 and 8 there, and at batch 1 at
    ``long_length`` (the papers' length; ``long_prompts=0`` skips it), each timed ``repeats``
    times with the entries interleaved (median wall); targets evaluated on the result."""
    from transformers import LlamaForCausalLM

    machine = machine_info()  # before the runs: its load average is the one at the start
    pipe = Pipeline.from_pretrained(pipeline)
    tok = pipe.tokenizer
    eot = pipe.eot_id
    ar = LlamaForCausalLM.from_pretrained(resolve_pretrained(ar_pipeline) / "model", dtype=torch.float32).eval()

    def prompt_set(n: int, length: int) -> tuple[list[str], list[list[int]], list[list[int]]]:
        data = file_prompts(tok, n, ref_tokens=max(1, length // 2))
        texts = [p for p, _ in data]
        return texts, [r for _, r in data], [tok(p, add_special_tokens=False)["input_ids"] for p in texts]

    def score_rows(rows: list[list[int]], refs: list[list[int]], penc: list[list[int]],
                   base: list[list[int]] | None = None) -> dict[str, float]:
        n = len(rows)
        q = [_quality(r, ref, eot) for r, ref in zip(rows, refs)]
        nll = [ar_nll(ar, p, r[: r.index(eot)] if eot in r else r) for p, r in zip(penc, rows)]
        nll = [x for x in nll if x is not None]
        out = {"token_acc16": sum(x["token_acc16"] for x in q) / n, "exact": sum(x["exact"] for x in q) / n,
               "ar_nll": sum(nll) / len(nll) if nll else None}
        if base is not None:
            agree = [sum(a == b for a, b in zip(r, b0)) / max(1, len(b0)) for r, b0 in zip(rows, base)]
            out["agree_llada"] = sum(agree) / n
        return out

    texts, refs, penc = prompt_set(max(n_prompts, batch8_prompts), gen_length)

    # 1. models: scratch vs adapted (llada, greedy) vs AR (greedy)
    models = []
    for name in [pipeline, scratch]:
        if name is None:
            continue
        p = pipe if name == pipeline else Pipeline.from_pretrained(name)
        rows, timing = _run(p, SamplerEntry("llada"), texts[:n_prompts], gen_length, 1)
        models.append({"model": name, **_train_record(name), **score_rows(rows, refs[:n_prompts], penc[:n_prompts]), **timing})
    ar_rows, t_ar = [], 0.0
    for p in penc[:n_prompts]:
        t0 = time.perf_counter()
        with torch.no_grad():
            g = ar.generate(torch.tensor([p]), max_new_tokens=gen_length, do_sample=False, eos_token_id=eot, pad_token_id=eot)
        t_ar += time.perf_counter() - t0
        gen = g[0, len(p):].tolist()
        ar_rows.append(gen + [eot] * (gen_length - len(gen)))
    tm = json.loads((resolve_pretrained(ar_pipeline) / "train_metrics.json").read_text())
    models.append({"model": ar_pipeline + " (AR, greedy)", "heldout_ar_nll": float(torch.tensor(tm["eval"]["target_ppl"]).log()),
                   "train_wall_s": tm["target_train"]["wall_s"], **score_rows(ar_rows, refs[:n_prompts], penc[:n_prompts]),
                   "wall_s": t_ar, "tokens_per_s": n_prompts * gen_length / t_ar})

    # 2. samplers on the default model: batch 1 and 8 at gen_length, batch 1 at long_length
    runs = [(gen_length, 1, n_prompts, sampler_entries(), (texts, refs, penc)),
            (gen_length, 8, batch8_prompts, sampler_entries(True), (texts, refs, penc))]
    if long_prompts > 0 and long_length > 0:
        runs.append((long_length, 1, long_prompts, [e for e in sampler_entries() if e.label in LONG_ENTRIES],
                     prompt_set(long_prompts, long_length)))
    samplers = []
    for length, batch, n, entries, (tx, rf, pe) in runs:
        # every entry timed ``repeats`` times, entries interleaved within each repeat; the median
        # wall counts (outputs are seeded, so every repeat's rows are the first one's)
        walls: dict[str, list[float]] = {e.label: [] for e in entries}
        first: dict[str, tuple[list[list[int]], dict[str, Any]]] = {}
        for _ in range(repeats):
            for e in entries:
                rows, timing = _run(pipe, e, tx[:n], length, batch)
                walls[e.label].append(timing["wall_s"])
                first.setdefault(e.label, (rows, timing))
        base, group = None, []
        for e in entries:
            rows, timing = first[e.label]
            wall = statistics.median(walls[e.label])
            timing = {**timing, "wall_s": wall, "tokens_per_s": timing["tokens"] / wall, "wall_s_runs": walls[e.label]}
            if e.label == "llada":
                base = rows
            group.append({"length": length, "batch": batch, "label": e.label, **timing, **score_rows(rows, rf[:n], pe[:n], base)})
        ref = next(s for s in group if s["label"] == "llada")
        for s in group:
            s["speedup_vs_llada"] = s["tokens_per_s"] / ref["tokens_per_s"]
        samplers.extend(group)
    r = {"machine": machine, "settings": {"pipeline": pipeline, "scratch": scratch, "ar": ar_pipeline,
         "n_prompts": n_prompts, "batch8_prompts": batch8_prompts, "gen_length": gen_length, "block_length": 32,
         "long_length": long_length, "long_prompts": long_prompts, "repeats": repeats},
         "models": models, "samplers": samplers}
    r["targets"] = evaluate_targets(r)
    return r


LONG_ENTRIES = ("llada", "fast_dllm", "learn2pd", L2P_DUAL, "dkv_cache")
QUALITY_POINTS = 0.02  # "quality within 2 points": token accuracy@16 within 0.02 of llada's


def evaluate_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each as {target, measured, met} from the bench's own records."""
    by = {(s["length"], s["batch"], s["label"]): s for s in r["samplers"]}
    out: list[dict[str, Any]] = []

    def close(s: dict[str, Any], base: dict[str, Any]) -> bool:
        return s["token_acc16"] >= base["token_acc16"] - QUALITY_POINTS

    for length in sorted({k[0] for k in by}):
        base, fd = by.get((length, 1, "llada")), by.get((length, 1, "fast_dllm"))
        if base and fd:
            out.append({"target": f"fast_dllm (dual cache) >= 4x llada tokens/s, token acc@16 within 2 points (length {length}, batch 1)",
                        "measured": f"{fd['speedup_vs_llada']:.2f}x, acc@16 {fd['token_acc16']:.3f} vs {base['token_acc16']:.3f}",
                        "met": fd["speedup_vs_llada"] >= 4.0 and close(fd, base)})
        l2 = by.get((length, 1, "learn2pd"))
        if base and l2 and length >= 256:
            out.append({"target": f"learn2pd + EoTP >= 5x llada tokens/s (length {length}, batch 1)",
                        "measured": f"{l2['speedup_vs_llada']:.2f}x, acc@16 {l2['token_acc16']:.3f} vs {base['token_acc16']:.3f}",
                        "met": l2["speedup_vs_llada"] >= 5.0})
        l2c = by.get((length, 1, L2P_DUAL))
        if base and l2c and length >= 256:
            out.append({"target": f"learn2pd + EoTP with the dual cache (the reference's L2P+EoT+dual_cache) >= 5x llada "
                                  f"tokens/s (length {length}, batch 1)",
                        "measured": f"{l2c['speedup_vs_llada']:.2f}x, acc@16 {l2c['token_acc16']:.3f} vs {base['token_acc16']:.3f}",
                        "met": l2c["speedup_vs_llada"] >= 5.0})
    gl = r["settings"]["gen_length"]
    base, pr = by.get((gl, 1, "llada")), by.get((gl, 1, "prophet"))
    if base and pr:
        fewer = base["forwards"] / max(1, pr["forwards"])
        out.append({"target": f"prophet >= 2x fewer steps than llada at equal quality (length {gl}, batch 1)",
                    "measured": f"{fewer:.2f}x fewer forwards, acc@16 {pr['token_acc16']:.3f} vs {base['token_acc16']:.3f}",
                    "met": fewer >= 2.0 and close(pr, base)})
    base, dk = by.get((gl, 8, "llada")), by.get((gl, 8, "dkv_cache"))
    if base and dk:
        out.append({"target": f"dkv_cache (decode) >= 2x llada at batch 8, near-lossless (acc@16 within 2 points; length {gl})",
                    "measured": f"{dk['speedup_vs_llada']:.2f}x, acc@16 {dk['token_acc16']:.3f} vs {base['token_acc16']:.3f}, "
                                f"agreement {dk['agree_llada']:.3f}",
                    "met": dk["speedup_vs_llada"] >= 2.0 and close(dk, base)})
    dl = [m for m in r["models"] if "heldout_mdlm_bound" in m]
    if len(dl) == 2:
        adapted, scratch = dl
        equal = adapted["train_tokens"] == scratch["train_tokens"]
        out.append({"target": "the adapted diffusion LM beats the from-scratch one at equal training budget "
                              "(lower held-out bound, token acc@16 not lower)",
                    "measured": f"bound {adapted['heldout_mdlm_bound']:.3f} vs {scratch['heldout_mdlm_bound']:.3f}, acc@16 "
                                f"{adapted['token_acc16']:.3f} vs {scratch['token_acc16']:.3f}; training tokens "
                                f"{adapted['train_tokens']:,} vs {scratch['train_tokens']:,}" + ("" if equal else " (UNEQUAL budgets)"),
                    "met": equal and adapted["heldout_mdlm_bound"] < scratch["heldout_mdlm_bound"]
                    and adapted["token_acc16"] >= scratch["token_acc16"]})
    return out


def _f(x: Any, d: int = 3) -> str:
    return "-" if x is None else (f"{x:.{d}f}" if isinstance(x, float) else str(x))


def format_markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    mrows = [[m["model"], _f(m.get("heldout_mdlm_bound", m.get("heldout_ar_nll"))), _f(m["train_wall_s"], 0),
              f"{m['train_tokens']:,}" if "train_tokens" in m else "-", _f(m["token_acc16"]), _f(m["exact"]), _f(m["ar_nll"]),
              _f(m["tokens_per_s"], 1)] for m in r["models"]]
    srows = [[x.get("length", s["gen_length"]), x["batch"], x["label"], _f(x["tokens_per_s"], 1), f"{x['speedup_vs_llada']:.2f}x",
              x["forwards"], _f(x["tokens_per_step"], 2), _f(x.get("agree_llada")), _f(x["token_acc16"]), _f(x["exact"]),
              _f(x["ar_nll"])] for x in r["samplers"]]
    long = (f"; batch 1 also at generation length {s['long_length']} ({s['long_prompts']} prompts, reference = the last "
            f"{s['long_length'] // 2} tokens)") if s.get("long_prompts") else ""
    lines = [
        "# Diffusion LMs on the code corpus", "",
        f"Machine: {machine_line(r['machine'])}", "",
        f"Settings: file completion of held-out stdlib files (prompt 64 tokens, reference = the last {s['gen_length'] // 2} tokens + <|endoftext|>), "
        f"generation length {s['gen_length']} (blocks of 32), greedy; {s['n_prompts']} prompts at batch 1, {s['batch8_prompts']} at batch 8"
        f"{long}. "
        + (f"Every sampler entry timed {s['repeats']} times, the entries of a length and batch size interleaved within each "
           "repeat; tokens/s from the median wall (ratios within a length and batch size come from the same process)."
           if s.get("repeats", 1) > 1 else
           "Single timed runs under the machine's load (see the load average above): ratios within a length and batch size come "
           "from the same process."),
    ]
    if s.get("command"):
        lines += ["", f"Command: `{s['command']}`"]
    lines += [
        "", "## Models", "",
        "Held-out bound: the diffusion LMs' MDLM bound (nats/token, an upper bound on the NLL) / the AR model's NLL (nats/token). "
        "Training tokens: what the optimiser saw (equal tokens = equal training budget; both diffusion LMs have the same size). "
        "Completions: `llada` one token per step for the diffusion LMs, greedy for AR.", "",
        markdown_table(["model", "held-out bound / NLL", "train wall s", "train tokens", "token acc@16", "exact", "AR NLL of output",
                        "tokens/s"], mrows),
        "", "## Samplers (default model)", "",
        "tokens/s counts every generated position (EoT padding included); agreement = share of positions equal to `llada`'s output "
        "at the same length and batch size.", "",
        markdown_table(["length", "batch", "sampler", "tokens/s", "vs llada", "forwards", "tokens/step", "agree llada", "token acc@16",
                        "exact", "AR NLL"], srows), "",
    ]
    if r.get("targets"):
        lines += ["### Targets", ""]
        lines += [f"- [{'x' if t['met'] else ' '}] {t['target']}: {t['measured']}" for t in r["targets"]]
        lines.append("")
    return "\n".join(lines)


def write_outputs(r: dict[str, Any], markdown: str | None, json_path: str | None) -> list[Path]:
    out = []
    if json_path:
        out.append(write_json(json_path, r))
    if markdown:
        out.append(write_text(markdown, format_markdown(r)))
    return out


__all__ = ["SamplerEntry", "evaluate_targets", "file_prompts", "format_markdown", "run_dllm_bench", "sampler_entries", "write_outputs"]
