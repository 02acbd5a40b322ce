"""Recipes for the masked diffusion LMs on the shipped code corpus (``text-code-diffusion[-adapted]``).

Both train a :class:`~leapgen.models.diffusion_lm.DiffusionLM` of the shipped AR ``text-code``
model's size (8 layers, 384 wide, ~17M parameters, its byte-level BPE tokenizer + one ``[MASK]``)
on the Python standard library's sources (:mod:`leapgen.data.code`), with the masked-diffusion
(MDLM / LLaDA) objective:

* per sequence ``t ~ U(eps, 1)`` (antithetic over the batch); each token is masked with
  probability ``t``; for half of the rows a random prefix (up to half the sequence) is never
  masked (prompt-style rows, so completion from a prompt is in-distribution);
* loss = ``sum over masked tokens of CE / t``, divided by the number of tokens (the negative
  ELBO per token, an upper bound on the NLL).

``text-code-diffusion`` (:func:`main`) starts from random weights, with full bidirectional
attention from the first step. ``text-code-diffusion-adapted`` (:func:`main_adapted`) starts from
the shipped AR model's weights (:meth:`DiffusionLM.from_causal_lm`, ``shift=True`` so its
next-token head is reused) and anneals the attention mask from causal to bidirectional over the
first ``anneal_frac`` of the budget (DiffuLLaMA, Gong et al. 2025: each future key becomes
visible with probability rising linearly from 0 to 1). Both runs stop at ``tokens`` or at
``time_budget_s``, whichever comes first (the learning-rate decay follows the time budget), so
"equal budget" comparisons are equal in wall time.

Evaluation on held-out files: the MDLM bound (nats/token, ``bound_repeats`` draws of t per
sequence) and the masked CE at fixed mask rates; the pipeline folder (``model/`` fp16,
``tokenizer/``, ``model_index.json`` naming ``DiffusionTextPipeline``, ``train_metrics.json``)
is written to ``out_dir``, with Learn2PD's commit filter fitted on the trained model
(:func:`train_commit_filter`, ``learn2pd_filter.safetensors``). Defaults fit 90 minutes on two CPU cores; the shipped runs used
``time_budget_s=900`` (see ``train_metrics.json``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.code import iter_texts, stdlib_files
from leapgen.train.common import (
    adamw,
    autocast,
    environment,
    lr_at,
    num_params,
    optimizer_step,
    pick_device,
    write_metrics,
)

logger = logging.getLogger(__name__)

AR_ASSET = "text-code"
SEQ_LEN = 256
MDLM_EPS = 1e-3
ARCH = dict(hidden_size=384, num_hidden_layers=8, num_attention_heads=6, intermediate_size=1024)


def load_ar_parts(ar_dir: str | os.PathLike | None = None):
    """(tokenizer, causal LM, folder) of the shipped AR text-code asset."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from leapgen.pipelines.base import resolve_pretrained

    folder = Path(ar_dir) if ar_dir is not None else resolve_pretrained(f"leapgen/{AR_ASSET}")
    tok = AutoTokenizer.from_pretrained(folder / "tokenizer")
    ar = LlamaForCausalLM.from_pretrained(folder / "model", dtype=torch.float32).eval()
    return tok, ar, folder


def corpus(tokenizer, split: str, seq_len: int = SEQ_LEN) -> torch.Tensor:
    """The split's files as ``[n, seq_len]`` rows (``<|endoftext|>`` before each document)."""
    texts = list(iter_texts(stdlib_files(split)))
    encs = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    stream: list[int] = []
    for enc in encs:
        stream.append(eot)
        stream.extend(enc.ids)
    ids = torch.tensor(stream, dtype=torch.long)
    n = ids.numel() // seq_len
    return ids[: n * seq_len].view(n, seq_len)


def corrupt(ids: torch.Tensor, mask_id: int, generator: torch.Generator, prefix_rows: bool = True):
    """(noisy ids, masked bool, t [B]): MDLM masking with antithetic t; prompt-style rows keep a prefix."""
    b, length = ids.shape
    u0 = torch.rand((), generator=generator)
    t = ((u0 + torch.arange(b) / b) % 1.0) * (1 - MDLM_EPS) + MDLM_EPS
    masked = torch.rand(b, length, generator=generator) < t[:, None]
    masked[:, 0] = False  # position 0 is always known (the shifted head reads position i - 1)
    if prefix_rows:
        keep = torch.randint(0, length // 2 + 1, (b,), generator=generator)
        keep = torch.where(torch.rand(b, generator=generator) < 0.5, keep, torch.zeros_like(keep))
        masked &= torch.arange(length)[None] >= keep[:, None]
    return ids.masked_fill(masked, mask_id), masked, t


def mdlm_loss(model, ids: torch.Tensor, generator: torch.Generator, device, attn_mask=None, prefix_rows: bool = True):
    noisy, masked, t = corrupt(ids, model.config.mask_id, generator, prefix_rows)
    noisy, masked, t = noisy.to(device), masked.to(device), t.to(device)
    with autocast(device):
        logits = model(noisy, attn_mask=attn_mask)
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
    ce = ce.view(ids.shape) * masked
    return (ce.sum(1) / t).sum() / ids.numel()


def train(model, data: torch.Tensor, *, tokens: int, time_budget_s: float | None, batch_size: int, lr: float,
          weight_decay: float, warmup_frac: float, device, seed: int, anneal_frac: float = 0.0, desc: str = "dllm") -> dict[str, Any]:
    """Train with the MDLM loss until ``tokens`` or ``time_budget_s``; ``anneal_frac`` > 0 anneals the
    attention from causal to full over that fraction of the budget (AR adaptation)."""
    from tqdm.auto import tqdm

    from leapgen.models.diffusion_lm import training_attention

    steps = max(1, math.ceil(tokens / (batch_size * data.shape[1])))
    warmup = max(1, int(warmup_frac * steps))
    model.to(device).train()
    opt = adamw(model, lr, weight_decay)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, mininterval=5.0, file=sys.stderr)
    step = 0
    for step in range(steps):
        elapsed = time.perf_counter() - t0
        frac = max(step / steps, elapsed / time_budget_s if time_budget_s else 0.0)
        if time_budget_s and elapsed >= time_budget_s:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup, time_frac=elapsed / time_budget_s if time_budget_s else 0.0)
        idx = torch.randint(0, data.shape[0], (batch_size,), generator=gen)
        batch = data[idx]
        attn = None
        if anneal_frac > 0:
            ratio = min(1.0, frac / anneal_frac)
            attn = training_attention(batch.shape[1], ratio, gen, batch_size, torch.device("cpu")).to(device)
        loss = mdlm_loss(model, batch, gen, device, attn)
        v, _ = optimizer_step(opt, model, loss, desc, step)
        losses.append(v)
        bar.update(1)
        if step % 20 == 0:
            logger.info("%s step %d loss %.4f lr %.2e elapsed %.0fs", desc, step, v, opt.param_groups[0]["lr"], elapsed)
    bar.close()
    model.eval()
    wall = time.perf_counter() - t0
    done = len(losses)
    tail = losses[-max(1, min(20, done // 10)):]
    return {
        "steps_planned": steps, "steps": done, "stopped_by_time": done < steps, "batch_size": batch_size,
        "seq_len": int(data.shape[1]), "tokens": done * batch_size * int(data.shape[1]), "peak_lr": lr,
        "warmup_steps": warmup, "weight_decay": weight_decay, "anneal_frac": anneal_frac,
        "first_loss": losses[0] if losses else None, "final_loss": sum(tail) / len(tail) if tail else None,
        "loss_curve": [round(sum(losses[i:i + 10]) / len(losses[i:i + 10]), 4) for i in range(0, done, max(10, done // 40))],
        "wall_s": wall, "tokens_per_s": done * batch_size * data.shape[1] / wall,
    }


@torch.no_grad()
def evaluate(model, data: torch.Tensor, device, repeats: int = 4, seed: int = 1234, batch_size: int = 8) -> dict[str, Any]:
    """Held-out MDLM bound (nats/token, an upper bound on the NLL) and masked CE at fixed rates."""
    gen = torch.Generator().manual_seed(seed)
    total, n = 0.0, 0
    for _ in range(repeats):
        for i in range(0, data.shape[0], batch_size):
            ids = data[i:i + batch_size]
            total += float(mdlm_loss(model, ids, gen, device, prefix_rows=False)) * ids.numel()
            n += ids.numel()
    rates = {}
    for rate in (0.15, 0.5, 0.9):
        ce_sum, cnt = 0.0, 0
        for i in range(0, data.shape[0], batch_size):
            ids = data[i:i + batch_size]
            masked = torch.rand(ids.shape, generator=gen) < rate
            masked[:, 0] = False
            logits = model(ids.masked_fill(masked, model.config.mask_id).to(device)).float()
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
            ce_sum += float((ce.view(ids.shape) * masked.to(device)).sum())
            cnt += int(masked.sum())
        rates[str(rate)] = ce_sum / max(1, cnt)
    return {"heldout_sequences": int(data.shape[0]), "mdlm_bound_nats_per_token": total / max(1, n),
            "bound_repeats": repeats, "masked_ce_at_rate": rates}


def write_folder(out: Path, model, ar_folder: Path) -> None:
    """The DiffusionTextPipeline folder: model (fp16), tokenizer copied from the AR asset, model_index.json."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "model", dtype=torch.float16)
    if (out / "tokenizer").exists():
        shutil.rmtree(out / "tokenizer")
    shutil.copytree(ar_folder / "tokenizer", out / "tokenizer")
    index = json.loads((ar_folder / "model_index.json").read_text())
    index = {"_class_name": "DiffusionTextPipeline", "_leapgen_version": index.get("_leapgen_version", "0.1.0"),
             "model": ["leapgen.models.diffusion_lm", "DiffusionLM"], "tokenizer": index["tokenizer"]}
    (out / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def train_commit_filter(folder: str | os.PathLike, n_prompts: int = 4, gen_length: int = 64, block_length: int = 32,
                        prompt_tokens: int = 48, epochs: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Learn2PD's filter for the model in ``folder``: extremely-greedy-parallel oracle records on the
    model's own greedy outputs for ``n_prompts`` training-split snippets, a 2-layer MLP fitted to
    them, saved as ``learn2pd_filter.safetensors`` beside ``model/`` (the pipeline hands it to
    ``sampler="learn2pd"``). Returns the fit's metrics."""
    from leapgen.models.diffusion_lm import DiffusionLM
    from leapgen.models.masked import TorchMaskedLM
    from leapgen.samplers.masked.learn2pd import egp_records, train_filter

    folder = Path(folder)
    model = DiffusionLM.from_pretrained(folder / "model")
    wrapped = TorchMaskedLM(model, mask_id=model.config.mask_id, vocab_size=model.config.vocab_size)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder / "tokenizer")
    data = corpus(tok, "train", seq_len=prompt_tokens)
    gen = torch.Generator().manual_seed(seed)
    rows = data[torch.randperm(data.shape[0], generator=gen)[:n_prompts]]
    prompts = [[model.config.eot_id, *r.tolist()] for r in rows]
    t0 = time.perf_counter()
    conf, correct = egp_records(wrapped, prompts, gen_length, block_length, eot_id=model.config.eot_id)
    filt, metrics = train_filter(conf, correct, epochs=epochs, seed=seed)
    filt.save(folder / "learn2pd_filter.safetensors")
    metrics.update(prompts=n_prompts, gen_length=gen_length, block_length=block_length, wall_s=time.perf_counter() - t0,
                   positive_rate=float(correct.mean()))
    return metrics


def main(
    out_dir: str | os.PathLike = "assets/text-code-diffusion",
    seed: int = 0,
    adapt: bool = False,
    tokens: int = 6_000_000,
    time_budget_s: float | None = 5400.0,
    batch_size: int = 16,
    lr: float | None = None,
    weight_decay: float = 0.1,
    warmup_frac: float = 0.03,
    anneal_frac: float = 0.3,
    eval_sequences: int = 48,
    device: str | None = None,
    num_threads: int | None = None,
    ar_dir: str | None = None,
    resume_from: str | None = None,
    filter_prompts: int = 4,
    max_size_mb: float = 40.0,
) -> dict[str, Any]:
    """Train a diffusion LM on the code corpus (``adapt=True``: from the shipped AR model) and save it."""
    import transformers

    from leapgen.models.diffusion_lm import DiffusionLM, DiffusionLMConfig

    t_start = time.perf_counter()
    dev = pick_device(device)
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    tok, ar, ar_folder = load_ar_parts(ar_dir)
    train_data = corpus(tok, "train")
    eval_data = corpus(tok, "heldout")[:eval_sequences]
    previous = None
    if resume_from is not None:  # continue an earlier run of this recipe (its metrics are kept)
        model = DiffusionLM.from_pretrained(Path(resume_from) / "model")
        previous = json.loads((Path(resume_from) / "train_metrics.json").read_text())
        lr = (3e-4 if adapt else 1.5e-3) if lr is None else lr
        anneal_frac = 0.0  # the attention is already bidirectional
    elif adapt:
        model = DiffusionLM.from_causal_lm(ar, shift=True)
        lr = 3e-4 if lr is None else lr
    else:
        model = DiffusionLM(DiffusionLMConfig(vocab_size=len(tok) + 1, max_position_embeddings=1024, shift=True, **ARCH))
        lr = 1.5e-3 if lr is None else lr
        anneal_frac = 0.0
    del ar
    logger.info("%s: %.2fM parameters, %d train sequences", "adapted" if adapt else "scratch", num_params(model) / 1e6, train_data.shape[0])
    stats = train(model, train_data, tokens=tokens, time_budget_s=time_budget_s, batch_size=batch_size, lr=lr,
                  weight_decay=weight_decay, warmup_frac=warmup_frac, device=dev, seed=seed, anneal_frac=anneal_frac,
                  desc="adapted" if adapt else "scratch")
    out = Path(out_dir)
    write_folder(out, model.cpu(), ar_folder)
    filter_metrics = train_commit_filter(out, n_prompts=filter_prompts) if filter_prompts > 0 else None
    shipped = DiffusionLM.from_pretrained(out / "model").to(dev)  # evaluate what is shipped (fp16 weights)
    t = time.perf_counter()
    ev = evaluate(shipped, eval_data, dev)
    metrics = {
        "recipe": "text-code-diffusion-adapted" if adapt else "text-code-diffusion",
        "seed": seed, "init": "shipped AR text-code (LlamaForCausalLM), shift=True" if adapt else "random",
        "params": num_params(model), "arch": {**ARCH, "vocab_size": model.config.vocab_size, "mask_id": model.config.mask_id},
        "objective": "MDLM: t~U(1e-3,1) antithetic, tokens masked w.p. t (position 0 never; half the rows keep a random prefix of <= L/2), "
                     "loss = sum masked CE / t / #tokens" + ("; attention mask annealed causal -> full over anneal_frac of the budget" if adapt else ""),
        "corpus": {"source": "python stdlib sources (leapgen.data.code)", "train_sequences": int(train_data.shape[0]), "seq_len": SEQ_LEN},
        "train": stats, "eval": ev, "eval_wall_s": time.perf_counter() - t,
        "options": {"tokens": tokens, "time_budget_s": time_budget_s, "batch_size": batch_size, "lr": lr},
        "resumed_from": previous,
        "learn2pd_filter": filter_metrics,
        "wall_s": time.perf_counter() - t_start,
        **environment(dev, transformers=transformers.__version__),
    }
    write_metrics(out, metrics, max_size_mb)
    return metrics


def main_adapted(out_dir: str | os.PathLike = "assets/text-code-diffusion-adapted", **kwargs: Any) -> dict[str, Any]:
    """``text-code-diffusion-adapted``: :func:`main` with ``adapt=True`` (initialised from the AR model)."""
    return main(out_dir=out_dir, adapt=True, **kwargs)


if __name__ == "__main__":  # pragma: no cover
    import argparse

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--adapt", action="store_true")
    ap.add_argument("--time-budget-s", type=float, default=5400.0)
    ap.add_argument("--tokens", type=int, default=6_000_000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--resume-from", default=None)
    a = ap.parse_args()
    m = main(out_dir=a.out_dir, adapt=a.adapt, time_budget_s=a.time_budget_s, tokens=a.tokens, batch_size=a.batch_size,
             num_threads=a.threads, resume_from=a.resume_from)
    print(json.dumps({k: m[k] for k in ("train", "eval")}, indent=1)[:3000])
