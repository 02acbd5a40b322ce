"""Models, batches, the MDLM and AR objectives, the training loop and the held-out evaluation of the
``molecule-safe`` recipe (:mod:`leapgen.train.molecule_safe` runs them).

The masked model is a bidirectional ``BertForMaskedLM`` trained with the masked discrete diffusion
(MDLM) bound of GenMol (Sahoo et al. 2024, log-linear noise ``alpha_t = 1 - t``); the AR baseline is a
``LlamaForCausalLM`` with next-token cross-entropy. Both train with AdamW, warm-up and cosine decay,
bf16 autocast on CPUs with native bf16.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from ..tokenizers.safe import BOS_ID, EOS_ID, MASK_ID, PAD_ID
from .common import adamw, autocast, lr_at, optimizer_step

logger = logging.getLogger(__name__)

MAX_POSITIONS = 128
MASKED_ARCH = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768)
AR_ARCH = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512)
MDLM_EPS = 1e-3


# -------------------------------------------------------------------------------------------- models
def make_masked_model(vocab_size: int, seed: int, arch: dict | None = None):
    """A small bidirectional ``BertForMaskedLM`` over the SAFE vocabulary."""
    from transformers import BertConfig, BertForMaskedLM

    arch = dict(MASKED_ARCH if arch is None else arch)
    cfg = BertConfig(
        vocab_size=vocab_size,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=1,
        pad_token_id=PAD_ID,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return BertForMaskedLM(cfg)


def make_ar_model(vocab_size: int, seed: int, arch: dict | None = None):
    """A small ``LlamaForCausalLM`` over the SAFE vocabulary (BOS=1, EOS=2, PAD=0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = dict(AR_ARCH if arch is None else arch)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


# ---------------------------------------------------------------------------------------------- data
def pad_rows(rows: list[list[int]]) -> torch.Tensor:
    """``[BOS] ids [EOS]`` rows right-padded with PAD into one long tensor."""
    width = max(len(r) for r in rows) + 2
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r) + 2] = torch.tensor([BOS_ID, *r, EOS_ID])
    return out


def batches(data: list[list[int]], batch_size: int, steps: int, seed: int, bucket: int = 50):
    """``steps`` padded batches; rows of similar length are grouped (within ``bucket`` batches)."""
    rng = random.Random(seed)
    order: list[int] = []
    made = 0
    while made < steps:
        if len(order) < batch_size * bucket:
            perm = list(range(len(data)))
            rng.shuffle(perm)
            order.extend(perm)
        chunk, order = order[: batch_size * bucket], order[batch_size * bucket :]
        chunk.sort(key=lambda i: len(data[i]))
        group = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(group)
        for idx in group:
            if made == steps:
                return
            yield pad_rows([data[i] for i in idx])
            made += 1


def content_mask(ids: torch.Tensor) -> torch.Tensor:
    """True on molecule tokens (not PAD / BOS / EOS)."""
    return (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID)


def mdlm_times(batch: int, generator: torch.Generator, eps: float = MDLM_EPS) -> torch.Tensor:
    """Antithetic (stratified) times in ``[eps, 1]``: ``t_i = eps + (1 - eps) * ((u + i / B) mod 1)``."""
    u = torch.rand((), generator=generator)
    t = (u + torch.arange(batch, dtype=torch.float32) / batch) % 1.0
    return eps + (1 - eps) * t


def mdlm_corrupt(ids: torch.Tensor, t: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each molecule token with probability ``t`` (per row); returns (noisy ids, masked positions)."""
    draw = torch.rand(ids.shape, generator=generator)
    masked = (draw < t[:, None]) & content_mask(ids)
    return ids.masked_fill(masked, MASK_ID), masked


def mdlm_loss(model, ids: torch.Tensor, t: torch.Tensor, generator: torch.Generator, device, amp: bool = True):
    """MDLM bound: ``sum_masked CE / t`` over the batch's molecule tokens. Returns (loss, masked CE mean)."""
    noisy, masked = mdlm_corrupt(ids, t, generator)
    attn = (ids != PAD_ID).to(device)
    with autocast(device) if amp else nullcontext():
        logits = model(input_ids=noisy.to(device), attention_mask=attn).logits
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
    ce = ce.view(ids.shape) * masked.to(device)
    weighted = (ce / t.to(device)[:, None]).sum()
    n_tok = content_mask(ids).sum().clamp(min=1)
    n_mask = masked.sum().clamp(min=1)
    return weighted / n_tok.to(device), ce.sum() / n_mask.to(device)


def ar_loss(model, ids: torch.Tensor, device, amp: bool = True) -> torch.Tensor:
    """Next-token cross-entropy on ``[BOS] safe [EOS]``, padding ignored (right padding needs no mask)."""
    ids = ids.to(device)
    with autocast(device) if amp else nullcontext():
        logits = model(input_ids=ids).logits
    labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD_ID, -100)
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


# ------------------------------------------------------------------------------------------ training
def train_model(
    model,
    data: list[list[int]],
    kind: str,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup_frac: float,
    device: torch.device,
    seed: int,
    max_minutes: float | None = None,
) -> dict[str, Any]:
    """Train ``model`` (``kind`` = "masked" (MDLM) or "ar") for ``steps`` batches.

    ``max_minutes`` is a time budget for a shared machine: the cosine decay follows the elapsed
    fraction of it when that is ahead of the step fraction, and training stops when it is spent
    (recorded as ``stopped_early`` with the steps actually run).
    """
    from tqdm.auto import tqdm

    model.to(device).train()
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    warmup = max(1, int(warmup_frac * steps))
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    masked_ce: list[float] = []
    tokens = 0
    t0 = time.perf_counter()
    stopped_early = False
    bar = tqdm(total=steps, desc=kind, mininterval=5.0, dynamic_ncols=True, file=sys.stderr)
    step = 0
    for step, ids in enumerate(batches(data, batch_size, steps, seed)):
        frac = (time.perf_counter() - t0) / (60 * max_minutes) if max_minutes else 0.0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup, time_frac=frac)
        if kind == "masked":
            t = mdlm_times(ids.shape[0], gen)
            loss, mce = mdlm_loss(model, ids, t, gen, device)
            masked_ce.append(float(mce.detach()))
        else:
            loss = ar_loss(model, ids, device)
        v, gnorm = optimizer_step(opt, model, loss, kind, step)
        losses.append(v)
        tokens += int(content_mask(ids).sum())
        bar.set_postfix(loss=f"{v:.3f}", refresh=False)
        bar.update(1)
        if (step + 1) % max(1, steps // 20) == 0 or step + 1 == steps:
            elapsed = time.perf_counter() - t0
            logger.info(
                "%s step %d/%d loss %.4f (mean of last 50: %.4f) gnorm %.2f lr %.2e  %.0f mol-tok/s  %.1f min",
                kind, step + 1, steps, v, sum(losses[-50:]) / len(losses[-50:]), float(gnorm),
                opt.param_groups[0]["lr"], tokens / elapsed, elapsed / 60,
            )
        if max_minutes is not None and time.perf_counter() - t0 > 60 * max_minutes:
            stopped_early = True
            logger.warning("%s: stopped at step %d of %d (max_minutes=%s)", kind, step + 1, steps, max_minutes)
            break
    bar.close()
    model.eval()
    wall = time.perf_counter() - t0
    tail = losses[-max(1, min(100, len(losses) // 10)) :]
    out = {
        "steps_planned": steps,
        "steps": len(losses),
        "stopped_early": stopped_early,
        "batch_size": batch_size,
        "molecule_tokens_seen": tokens,
        "peak_lr": lr,
        "warmup_steps": warmup,
        "weight_decay": weight_decay,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "loss_curve": [round(sum(losses[i : i + 50]) / len(losses[i : i + 50]), 4) for i in range(0, len(losses), max(50, len(losses) // 40))],
        "wall_s": wall,
        "molecule_tokens_per_s": tokens / wall,
    }
    if masked_ce:
        mtail = masked_ce[-len(tail) :]
        out["final_masked_ce"] = sum(mtail) / len(mtail)
    return out


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate_masked(model, data: list[list[int]], device, batch_size: int = 64, repeats: int = 4, seed: int = 1234) -> dict[str, Any]:
    """Held-out MDLM bound (nats / molecule token) and masked-token CE at fixed mask rates, fp32."""
    model.to(device, torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    bound = 0.0
    n_tok = 0
    fixed = {0.15: [0.0, 0], 0.5: [0.0, 0], 0.9: [0.0, 0]}
    for r in range(repeats):
        for i in range(0, len(data), batch_size):
            ids = pad_rows(data[i : i + batch_size])
            t = mdlm_times(ids.shape[0], gen)
            loss, _ = mdlm_loss(model, ids, t, gen, device, amp=False)
            n = int(content_mask(ids).sum())
            bound += float(loss) * n
            n_tok += n
            if r == 0:
                for rate, acc in fixed.items():
                    tt = torch.full((ids.shape[0],), rate)
                    noisy, masked = mdlm_corrupt(ids, tt, gen)
                    logits = model(input_ids=noisy.to(device), attention_mask=(ids != PAD_ID).to(device)).logits.float()
                    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
                    acc[0] += float((ce.view(ids.shape) * masked.to(device)).sum())
                    acc[1] += int(masked.sum())
    return {
        "heldout_molecules": len(data),
        "mdlm_bound_nats_per_token": bound / max(1, n_tok),
        "mdlm_bound_repeats": repeats,
        "masked_ce_at_rate": {str(k): v[0] / max(1, v[1]) for k, v in fixed.items()},
    }


@torch.no_grad()
def evaluate_ar(model, data: list[list[int]], device, batch_size: int = 64) -> dict[str, Any]:
    """Held-out AR perplexity per token (molecule tokens + EOS) and nats per molecule token, fp32."""
    model.to(device, torch.float32).eval()
    nll = 0.0
    count = 0
    n_mol_tok = 0
    for i in range(0, len(data), batch_size):
        ids = pad_rows(data[i : i + batch_size]).to(device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD_ID, -100)
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"))
        count += int((labels != -100).sum())
        n_mol_tok += int(content_mask(ids).sum())
    return {
        "heldout_molecules": len(data),
        "ppl_per_token": math.exp(nll / count),
        "nll_nats_per_token": nll / count,
        "nll_nats_per_molecule_token": nll / max(1, n_mol_tok),
        "nll_nats_per_molecule": nll / len(data),
    }
