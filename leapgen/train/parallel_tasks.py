"""Recipe ``parallel-tasks``: tiny task models for the ParallelBench-style suite (``leapgen bench parallel``).

Trains, on the synthetic tasks of :mod:`leapgen.data.parallel_tasks` (copy, reverse, sort,
insert, permute, code_copy, code_reverse; fresh random examples every step):

* ``masked/``: a :class:`~leapgen.models.diffusion_lm.DiffusionLM` (no shift, 3 layers, 96 wide)
  with the masked-diffusion objective on the answer only (prompt never masked; each answer
  position masked with probability ``t ~ U(eps, 1)``; loss = CE / t), so every masked sampler
  can decode it;
* ``ar/``: a transformers ``LlamaForCausalLM`` of the same width and depth with next-token CE on
  the answer (the AR baseline, one token per forward).

Both see the same number of examples. The folder also holds ``vocab.json`` and
``train_metrics.json`` (held-out greedy accuracy per task). About 10 minutes on two CPU cores
with the defaults.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.parallel_tasks import GEN_LENGTH, TASKS, TaskVocab, encode, make_example, make_split
from leapgen.train.common import adamw, environment, lr_at, num_params, write_metrics

logger = logging.getLogger(__name__)

ARCH = dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=4, intermediate_size=192)
MAX_LEN = 24


def batch(vocab: TaskVocab, rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [n, MAX_LEN] padded, answer mask [n, MAX_LEN])."""
    ids = torch.full((n, MAX_LEN), vocab.pad, dtype=torch.long)
    ans = torch.zeros(n, MAX_LEN, dtype=torch.bool)
    for i in range(n):
        ex = make_example(rng.choice(TASKS), rng)
        row = encode(ex, vocab)
        ids[i, : len(row)] = torch.tensor(row)
        start = len(ex.prompt_words())
        ans[i, start : start + GEN_LENGTH] = True
    return ids, ans


def make_models(vocab: TaskVocab, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from leapgen.models.diffusion_lm import DiffusionLM, DiffusionLMConfig

    torch.manual_seed(seed)
    masked = DiffusionLM(DiffusionLMConfig(vocab_size=len(vocab), mask_id=vocab.mask, eot_id=vocab.eos, shift=False,
                                           max_position_embeddings=MAX_LEN, **ARCH))
    torch.manual_seed(seed + 1)
    ar = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), max_position_embeddings=MAX_LEN, num_key_value_heads=ARCH["num_attention_heads"],
                                      bos_token_id=vocab.sep, eos_token_id=vocab.eos, pad_token_id=vocab.pad, tie_word_embeddings=False, **ARCH))
    return masked, ar


def train(masked, ar, vocab: TaskVocab, steps: int, batch_size: int, lr: float, seed: int, time_budget_s: float | None) -> dict[str, Any]:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    opts = {"masked": adamw(masked, lr, 0.01), "ar": adamw(ar, lr, 0.01)}
    masked.train()
    ar.train()
    losses: dict[str, list[float]] = {"masked": [], "ar": []}
    t0 = time.perf_counter()
    done = 0
    for step in range(steps):
        elapsed = time.perf_counter() - t0
        if time_budget_s and elapsed > time_budget_s:
            break
        lr_now = lr_at(step, steps, lr, max(1, steps // 50), time_frac=elapsed / time_budget_s if time_budget_s else 0.0)
        ids, ans = batch(vocab, rng, batch_size)
        # masked diffusion on the answer
        t = torch.rand(batch_size, generator=gen) * (1 - 1e-3) + 1e-3
        m = ans & (torch.rand(ids.shape, generator=gen) < t[:, None])
        logits = masked(ids.masked_fill(m, vocab.mask), attention_mask=ids != vocab.pad)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), reduction="none").view(ids.shape)
        loss_m = ((ce * m).sum(1) / t).sum() / ans.sum()
        # AR next-token CE on the answer
        out = ar(input_ids=ids, attention_mask=(ids != vocab.pad).long()).logits
        ce_a = F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), ids[:, 1:].reshape(-1), reduction="none").view(batch_size, -1)
        loss_a = (ce_a * ans[:, 1:]).sum() / ans.sum()
        for name, loss, model in (("masked", loss_m, masked), ("ar", loss_a, ar)):
            opt = opts[name]
            for g in opt.param_groups:
                g["lr"] = lr_now
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses[name].append(float(loss.detach()))
        done += 1
        if step % 200 == 0:
            logger.info("parallel-tasks step %d masked %.4f ar %.4f (%.0fs)", step, float(loss_m.detach()), float(loss_a.detach()), elapsed)
    masked.eval()
    ar.eval()
    tail = {k: sum(v[-50:]) / max(1, len(v[-50:])) for k, v in losses.items()}
    return {"steps": done, "steps_planned": steps, "batch_size": batch_size, "examples": done * batch_size, "peak_lr": lr,
            "final_loss": tail, "wall_s": time.perf_counter() - t0}


@torch.no_grad()
def heldout_accuracy(masked, ar, vocab: TaskVocab, n_per_task: int = 40, seed: int = 12345) -> dict[str, Any]:
    """Greedy accuracy per task: masked model one token per step (most confident first), AR greedy."""
    from leapgen.data.parallel_tasks import decode_answer, score

    out: dict[str, Any] = {}
    for ex in make_split(n_per_task, seed):
        p = encode(ex, vocab, with_answer=False)
        x = torch.tensor([p + [vocab.mask] * GEN_LENGTH])
        for _ in range(GEN_LENGTH):
            lg = masked(x)[0]
            lg[:, vocab.mask] = float("-inf")
            prob, tok = lg.softmax(-1).max(-1)
            prob = torch.where(x[0] == vocab.mask, prob, -1.0)
            i = int(prob.argmax())
            x[0, i] = tok[i]
        ok_m = score(ex, decode_answer(x[0, len(p):].tolist(), vocab))
        y = torch.tensor([p])
        for _ in range(GEN_LENGTH):
            nxt = ar(input_ids=y).logits[0, -1].argmax()
            y = torch.cat([y, nxt.view(1, 1)], 1)
            if int(nxt) == vocab.eos:
                break
        ok_a = score(ex, decode_answer(y[0, len(p):].tolist(), vocab))
        d = out.setdefault(ex.task, {"masked": 0.0, "ar": 0.0, "n": 0})
        d["masked"] += ok_m
        d["ar"] += ok_a
        d["n"] += 1
    for d in out.values():
        d["masked"] /= d["n"]
        d["ar"] /= d["n"]
    return out


def main(out_dir: str | os.PathLike = "assets/parallel-tasks", seed: int = 0, steps: int = 6000, batch_size: int = 64,
         lr: float = 2e-3, time_budget_s: float | None = 1200.0, num_threads: int | None = None, max_size_mb: float = 10.0,
         eval_per_task: int = 40) -> dict[str, Any]:
    """Train both task models and write the folder (``masked/``, ``ar/``, ``vocab.json``, ``train_metrics.json``)."""
    import transformers

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    t0 = time.perf_counter()
    vocab = TaskVocab.build()
    masked, ar = make_models(vocab, seed)
    stats = train(masked, ar, vocab, steps, batch_size, lr, seed, time_budget_s)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    masked.save_pretrained(out / "masked")
    ar.save_pretrained(out / "ar", safe_serialization=True)
    (out / "vocab.json").write_text(json.dumps({"tokens": list(vocab.tokens), "gen_length": GEN_LENGTH, "max_len": MAX_LEN}, indent=1) + "\n")
    acc = heldout_accuracy(masked, ar, vocab, n_per_task=eval_per_task)
    metrics = {"recipe": "parallel-tasks", "seed": seed, "tasks": list(TASKS), "arch": ARCH, "vocab_size": len(vocab),
               "params": {"masked": num_params(masked), "ar": num_params(ar)}, "train": stats,
               "heldout_greedy_accuracy": acc, "wall_s": time.perf_counter() - t0,
               **environment(torch.device("cpu"), transformers=transformers.__version__)}
    write_metrics(out, metrics, max_size_mb)
    return metrics


__all__ = ["ARCH", "MAX_LEN", "main", "make_models"]
