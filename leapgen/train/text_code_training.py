"""The models of the ``text-code`` recipe: built, trained (or distilled) and evaluated.

:func:`make_config` / :func:`make_model` build a ``LlamaForCausalLM`` of a given architecture on the
recipe's vocabulary; :func:`train_model` trains one on packed sequences with AdamW + warmup + cosine
decay, distilling from a ``teacher`` when given one (``(1 - w) * CE(data) + w * KL(teacher || model)``);
:func:`evaluate` measures held-out perplexity of target and draft and their greedy agreement. Used
by :mod:`leapgen.train.text_code`, which re-exports these names.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.train.common import adamw, autocast, lr_at, optimizer_step
from leapgen.train.text_code_tokenizer import MODEL_MAX_LENGTH, VOCAB_SIZE

logger = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------- models
def make_config(arch: dict, eot_id: int = 0):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MODEL_MAX_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
        attn_implementation="sdpa",
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def make_model(arch: dict, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(make_config(arch))
    return model


# ------------------------------------------------------------------------------------------ training
def _batches(data: torch.Tensor, batch_size: int, steps: int, seed: int):
    """``steps`` batches of rows of ``data``, in a seeded order that reshuffles every epoch."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(data.shape[0], generator=gen)
    pos = 0
    for _ in range(steps):
        idx = []
        while len(idx) < batch_size:
            if pos == perm.numel():
                perm = torch.randperm(data.shape[0], generator=gen)
                pos = 0
            take = min(batch_size - len(idx), perm.numel() - pos)
            idx.extend(perm[pos : pos + take].tolist())
            pos += take
        yield data[idx]


def _ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train_model(
    model,
    data: torch.Tensor,
    *,
    tokens: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup_frac: float,
    device: torch.device,
    seed: int,
    desc: str,
    teacher=None,
    kd_weight: float = 0.5,
    kd_temperature: float = 1.0,
) -> dict[str, Any]:
    """Train ``model`` on ``tokens`` tokens of ``data``; with ``teacher``, distil from it as well."""
    from tqdm.auto import tqdm

    tokens_per_step = batch_size * data.shape[1]
    steps = max(1, math.ceil(tokens / tokens_per_step))
    warmup = max(1, int(warmup_frac * steps))
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    opt = adamw(model, lr, weight_decay)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, mininterval=2.0, dynamic_ncols=True, file=sys.stderr)
    for step, batch in enumerate(_batches(data, batch_size, steps, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        ids = batch.to(device)
        with autocast(device):
            logits = model(input_ids=ids).logits
        ce = _ce(logits, ids)
        if teacher is not None:
            with torch.no_grad(), autocast(device):
                t_logits = teacher(input_ids=ids).logits
            t = kd_temperature
            s_logp = F.log_softmax(logits[:, :-1].float() / t, dim=-1).reshape(-1, logits.shape[-1])
            t_logp = F.log_softmax(t_logits[:, :-1].float() / t, dim=-1).reshape(-1, logits.shape[-1])
            kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean") * (t * t)
            loss = (1 - kd_weight) * ce + kd_weight * kl
        else:
            kl = None
            loss = ce
        loss_v, gnorm = optimizer_step(opt, model, loss, desc, step)
        losses.append(loss_v)
        elapsed = time.perf_counter() - t0
        post = {"loss": f"{loss_v:.3f}", "tok/s": f"{(step + 1) * tokens_per_step / elapsed:,.0f}"}
        if kl is not None:
            post.update(ce=f"{float(ce.detach()):.3f}", kl=f"{float(kl.detach()):.3f}")
        bar.set_postfix(post, refresh=False)
        bar.update(1)
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            logger.info(
                "%s step %d/%d loss %.4f ce %.4f gnorm %.2f lr %.2e tok/s %.0f",
                desc,
                step + 1,
                steps,
                loss_v,
                float(ce.detach()),
                float(gnorm),
                opt.param_groups[0]["lr"],
                (step + 1) * tokens_per_step / elapsed,
            )
    bar.close()
    model.eval()
    wall = time.perf_counter() - t0
    tail = losses[-max(1, min(20, len(losses) // 10)) :]
    return {
        "steps": steps,
        "tokens": steps * tokens_per_step,
        "batch_size": batch_size,
        "seq_len": int(data.shape[1]),
        "peak_lr": lr,
        "warmup_steps": warmup,
        "weight_decay": weight_decay,
        "final_loss": sum(tail) / len(tail),
        "first_loss": losses[0],
        "wall_s": wall,
        "tokens_per_s": steps * tokens_per_step / wall,
    }


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(target, draft, data: torch.Tensor, device: torch.device, batch_size: int = 8) -> dict[str, Any]:
    """Token-level held-out perplexity of both models and draft/target greedy agreement, in fp32."""
    target.to(device, torch.float32).eval()
    draft.to(device, torch.float32).eval()
    nll_t = nll_d = 0.0
    agree = 0
    count = 0
    for i in range(0, data.shape[0], batch_size):
        ids = data[i : i + batch_size].to(device)
        lt = target(input_ids=ids).logits[:, :-1].float()
        ld = draft(input_ids=ids).logits[:, :-1].float()
        labels = ids[:, 1:]
        nll_t += float(F.cross_entropy(lt.reshape(-1, lt.shape[-1]), labels.reshape(-1), reduction="sum"))
        nll_d += float(F.cross_entropy(ld.reshape(-1, ld.shape[-1]), labels.reshape(-1), reduction="sum"))
        agree += int((lt.argmax(-1) == ld.argmax(-1)).sum())
        count += labels.numel()
    return {
        "heldout_tokens": count,
        "target_ppl": math.exp(nll_t / count),
        "draft_ppl": math.exp(nll_d / count),
        "draft_target_greedy_agreement": agree / count,
    }
