"""``leapgen bench parallel``: a ParallelBench-style suite -- quality against tokens per step.

The tasks are :mod:`leapgen.data.parallel_tasks` (copy, reverse, sort, insert at any position,
permute = constrained word order, and copy / reverse of identifiers from the code corpus),
generated here with a fixed seed; the models are the ``parallel-tasks`` folder (a tiny masked
diffusion LM and an AR Llama of the same size, trained by ``leapgen train parallel-tasks``).

Every masked sampler decodes the same held-out prompts (the answer = ``GEN_LENGTH`` masked
positions after ``[sep]``, one block) at several parallelism settings -- ``llada`` with 8, 4, 2
and 1 steps (1, 2, 4, 8 tokens per step), ``fast_dllm`` thresholds and factors, ``prophet``,
``learn2pd`` (EoTP on ``[eos]``), ``dkv_cache`` -- and the AR model decodes greedily (one token
per forward). Reported per entry: tokens per step (mean tokens committed per step and row),
forwards, and exact accuracy per task (any valid answer counts for insert / permute).
ParallelBench's finding to look for: deterministic tasks survive moderate parallelism when the
model is confident, tasks with many valid answers (insert, permute) degrade as tokens per step
grow, since the per-position marginals mix different valid answers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.parallel_tasks import GEN_LENGTH, TASKS, TaskVocab, decode_answer, encode, make_split, score
from ..errors import AssetNotFoundError
from .common import machine_info, machine_line, markdown_table, write_json, write_text


@dataclass
class Entry:
    sampler: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            inner = ", ".join(f"{k}={v}" for k, v in self.params.items() if k != "block_length")
            self.label = f"{self.sampler}[{inner}]" if inner else self.sampler


def default_entries() -> list[Entry]:
    b = {"block_length": GEN_LENGTH}
    return [
        Entry("ar"),
        *[Entry("llada", {**b, "steps": s}) for s in (8, 4, 2, 1)],
        *[Entry("fast_dllm", {**b, "threshold": t}) for t in (0.9, 0.7, 0.5)],
        *[Entry("fast_dllm", {**b, "policy": "factor", "factor": f}) for f in (1.0, 2.0)],
        Entry("prophet", dict(b)),
        Entry("prophet", {**b, "early_exit_thresholds": (3.0, 2.0, 1.0)}),
        Entry("learn2pd", dict(b)),
        Entry("dkv_cache", {**b, "cache_refresh": 2}),
    ]


class OracleTaskLM(torch.nn.Module):
    """The *perfect* masked model of the tasks: for each row it enumerates the valid answers
    (``[eos]``-padded to ``GEN_LENGTH``) consistent with the answer tokens already known and returns,
    at every answer position, the log of the exact marginal over them (uniform over the valid
    answers). One-token-per-step decoding of it is always right; parallel decoding of its
    marginals errs exactly where answers depend on each other (ParallelBench's point)."""

    def __init__(self, vocab: TaskVocab) -> None:
        super().__init__()
        self.vocab = vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    def _answers(self, row: list[int]) -> tuple[int, list[list[int]]]:
        from itertools import permutations

        v = self.vocab
        sep = row.index(v.sep)
        task = v.tokens[row[0]]
        words = row[1:sep]
        items, extra = (words[:-1], words[-1]) if task == "insert" else (words, None)
        if task in ("copy", "code_copy"):
            outs = [items]
        elif task in ("reverse", "code_reverse"):
            outs = [items[::-1]]
        elif task == "sort":
            outs = [sorted(items)]  # the vocabulary lists each pool in its sort order
        elif task == "insert":
            outs = [[*items[:i], extra, *items[i:]] for i in range(len(items) + 1)]
        else:
            outs = [list(p) for p in permutations(items)]
        return sep + 1, [o + [v.eos] * (GEN_LENGTH - len(o)) for o in outs]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, length = tokens.shape
        out = torch.full((b, length, len(self.vocab)), -30.0)
        for i, row in enumerate(tokens.tolist()):
            start, answers = self._answers(row)
            known = {j: t for j, t in enumerate(row[start:start + GEN_LENGTH]) if t != self.vocab.mask}
            ok = [a for a in answers if all(a[j] == t for j, t in known.items())] or answers
            counts = torch.nn.functional.one_hot(torch.tensor(ok), len(self.vocab)).sum(0).float()
            n = min(GEN_LENGTH, length - start)  # EoTP may have truncated the sequence
            out[i, start:start + n] = (counts[:n] / len(ok)).clamp(min=1e-13).log()
        return out


def oracle_models(vocab: TaskVocab):
    """(masked oracle behind TorchMaskedLM, None): AR on the oracle = left-to-right one token per step."""
    from ..models.masked import TorchMaskedLM

    return TorchMaskedLM(OracleTaskLM(vocab), mask_id=vocab.mask, vocab_size=len(vocab)), None


def load_task_models(folder: str | Path):
    """(vocab, masked TorchMaskedLM, AR HFCausalLM) from a ``parallel-tasks`` folder."""
    from transformers import LlamaForCausalLM

    from ..models.diffusion_lm import DiffusionLM
    from ..models.hf import HFCausalLM
    from ..models.masked import TorchMaskedLM

    folder = Path(folder)
    if not (folder / "vocab.json").is_file():
        raise AssetNotFoundError(f"{folder} has no vocab.json; build it with `leapgen train parallel-tasks --out {folder}`.")
    vocab = TaskVocab(tuple(json.loads((folder / "vocab.json").read_text())["tokens"]))
    masked = DiffusionLM.from_pretrained(folder / "masked")
    ar = LlamaForCausalLM.from_pretrained(folder / "ar", dtype=torch.float32).eval()
    return vocab, TorchMaskedLM(masked, mask_id=vocab.mask, vocab_size=len(vocab)), HFCausalLM(ar)


def _run_entry(entry: Entry, examples, vocab: TaskVocab, masked, ar, batch_size: int) -> dict[str, Any]:
    from ..samplers.base import DecodeConfig, get_sampler

    smp = get_sampler(entry.sampler, **entry.params)
    prompts = [encode(ex, vocab, with_answer=False) for ex in examples]
    answers: list[list[int]] = []
    forwards, steps_rows, tokens = 0, 0, 0
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        if entry.sampler == "ar" and ar is None:  # the oracle: AR = left to right, one token per step
            rows = [p + [vocab.mask] * GEN_LENGTH for p in chunk]
            res = get_sampler("llada", block_length=1).generate(
                {"model": masked}, rows, DecodeConfig(temperature=0.0, eos_token_id=vocab.eos, pad_token_id=vocab.pad))
            answers.extend(list(map(int, s[len(p):len(p) + GEN_LENGTH])) for p, s in zip(chunk, res.sequences))
            forwards += res.stats.target_forwards
            tokens += res.stats.new_tokens
            steps_rows += res.stats.new_tokens
        elif entry.sampler == "ar":
            cfg = DecodeConfig(max_new_tokens=GEN_LENGTH, temperature=0.0, eos_token_id=vocab.eos, pad_token_id=vocab.pad)
            res = smp.generate({"model": ar}, chunk, cfg)
            answers.extend(list(map(int, s)) for s in res.sequences)
            forwards += res.stats.target_forwards
            n_new = sum(len(s) for s in res.sequences)
            tokens += n_new
            steps_rows += n_new  # one token per forward and row
        else:
            rows = [p + [vocab.mask] * GEN_LENGTH for p in chunk]
            cfg = DecodeConfig(temperature=0.0, eos_token_id=vocab.eos, pad_token_id=vocab.pad)
            res = smp.generate({"model": masked}, rows, cfg)
            answers.extend(list(map(int, s[len(p):len(p) + GEN_LENGTH])) for p, s in zip(chunk, res.sequences))
            forwards += res.stats.target_forwards
            tokens += res.stats.new_tokens
            steps_rows += sum(sum(1 for v in step if v > 0) for step in res.stats.accepted_per_step)
    wall = time.perf_counter() - t0
    acc: dict[str, list[bool]] = {}
    for ex, ans in zip(examples, answers):
        acc.setdefault(ex.task, []).append(score(ex, decode_answer(ans, vocab)))
    per_task = {t: sum(v) / len(v) for t, v in acc.items()}
    return {"label": entry.label, "sampler": entry.sampler, "params": {k: v for k, v in entry.params.items()},
            "tokens_per_step": tokens / max(1, steps_rows), "forwards": forwards, "wall_s": wall,
            "accuracy": per_task, "mean_accuracy": sum(per_task.values()) / len(per_task)}


def run_parallel_bench(folder: str | Path, n_per_task: int = 50, seed: int = 2024, batch_size: int = 64,
                       entries: list[Entry] | None = None) -> dict[str, Any]:
    """Every entry on the same held-out examples (seeded); see the module docstring."""
    if str(folder) == "oracle":
        vocab = TaskVocab.build()
        masked, ar = oracle_models(vocab)
    else:
        vocab, masked, ar = load_task_models(folder)
    examples = make_split(n_per_task, seed)
    results = []
    with torch.inference_mode():
        for e in entries or default_entries():
            results.append(_run_entry(e, examples, vocab, masked, ar, batch_size))
    train = {}
    if str(folder) != "oracle" and (Path(folder) / "train_metrics.json").is_file():
        train = json.loads((Path(folder) / "train_metrics.json").read_text())
    return {"machine": machine_info(), "settings": {"folder": str(folder), "n_per_task": n_per_task, "seed": seed,
            "batch_size": batch_size, "gen_length": GEN_LENGTH, "tasks": list(TASKS)}, "results": results,
            "train": {k: train.get(k) for k in ("train", "params", "heldout_greedy_accuracy")}}


def format_markdown(result: dict[str, Any]) -> str:
    tasks = result["settings"]["tasks"]
    rows = [[r["label"], f"{r['tokens_per_step']:.2f}", r["forwards"], *[f"{r['accuracy'].get(t, 0):.2f}" for t in tasks],
             f"{r['mean_accuracy']:.3f}"] for r in result["results"]]
    s = result["settings"]
    lines = [
        "# ParallelBench-style suite: quality vs tokens per step", "",
        f"Machine: {machine_line(result['machine'])}", "",
        ("Settings: model = the exact *oracle* of the tasks (its marginals are the true ones given the known "
         "answer tokens, so one token per step is always right and every error below is a parallel-decoding error; "
         "`ar` = left to right, one token per step); " if s["folder"] == "oracle" else
         f"Settings: models from `{s['folder']}` (tiny masked diffusion LM and AR Llama of the same size, "
         "`leapgen train parallel-tasks`); ")
        + f"{s['n_per_task']} held-out examples per task (seed {s['seed']}), "
        f"answers of up to {s['gen_length'] - 1} words + [eos] in {s['gen_length']} masked positions (one block), "
        f"greedy (temperature 0), batch {s['batch_size']}. Accuracy is exact (any valid answer for insert / permute).",
        "", markdown_table(["entry", "tokens/step", "forwards", *tasks, "mean"], rows), "",
        "Tokens/step: tokens committed per decoding step and row (AR: 1). Picture: `parallel_quality_vs_tokens_per_step.png`.",
    ]
    tr = result.get("train") or {}
    if tr.get("train"):
        lines += ["", f"Task models: {tr['params']} parameters, {tr['train'].get('steps')} training steps "
                      f"({tr['train'].get('wall_s', 0):.0f} s); held-out greedy accuracy at training time: "
                      + ", ".join(f"{t}: masked {v['masked']:.2f} / ar {v['ar']:.2f}" for t, v in (tr.get('heldout_greedy_accuracy') or {}).items())]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = result["settings"]["tasks"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    res = result["results"]
    llada = sorted((r for r in res if r["sampler"] == "llada"), key=lambda r: r["tokens_per_step"])
    for t in tasks:
        axes[0].plot([r["tokens_per_step"] for r in llada], [r["accuracy"][t] for r in llada], marker="o", label=t)
    axes[0].set(xscale="log", xlabel="tokens per step (llada, fixed schedule)", ylabel="accuracy", title="per task, llada steps sweep")
    axes[0].legend(fontsize=7)
    for r in res:
        axes[1].scatter(r["tokens_per_step"], r["mean_accuracy"], s=25)
        axes[1].annotate(r["label"], (r["tokens_per_step"], r["mean_accuracy"]), fontsize=6)
    axes[1].set(xscale="log", xlabel="tokens per step", ylabel="mean accuracy over tasks", title="every sampler")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(result: dict[str, Any], markdown: str | None, json_path: str | None, png: str | None) -> list[Path]:
    out = []
    if json_path:
        out.append(write_json(json_path, result))
    if markdown:
        out.append(write_text(markdown, format_markdown(result)))
    if png:
        out.append(plot(result, png))
    return out


__all__ = ["Entry", "default_entries", "format_markdown", "load_task_models", "plot", "run_parallel_bench", "write_outputs"]
