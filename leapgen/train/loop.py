"""The training loops the recipes share.

* :func:`train_budgeted` (ASR, OCR, peptides): epochs over a dataset until the steps or the minutes
  run out. A recipe gives its batches (one iterable per epoch) and a loss function; the loop owns
  the stop rule, warm-up + cosine learning rate over the steps or the time budget
  (:func:`~leapgen.train.common.lr_at`), optional bf16 autocast, gradient clipping, a log record
  every ``log_every`` steps and a checkpoint every ``checkpoint_every_min`` minutes (so a run
  stopped early still leaves a usable asset).
* :func:`train_planned` (image families, MAR, Distilled Decoding): a planned number of steps of a
  loss function that draws its own batch; after 10 steps the plan shrinks to what fits the time
  budget, so the cosine schedule still completes.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError
from .common import adamw, autocast, lr_at

logger = logging.getLogger(__name__)


def progress_bar(total: int, desc: str) -> Any:
    """A tqdm bar on stderr that redraws at most every 5 s (logs stay readable)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, mininterval=5.0, dynamic_ncols=True, file=sys.stderr)


def fit_steps(step: int, steps: int, t0: float, max_minutes: float, desc: str, cost_factor: float = 1.0) -> int:
    """After 10 steps, shrink the planned step count to what fits the stage's time budget (so
    the cosine schedule still completes); logs the change."""
    if step != 10:
        return steps
    per_step = (time.perf_counter() - t0) / 10 * cost_factor
    fit = int(max_minutes * 60 / per_step)
    if fit < steps:
        logger.warning("%s: %.2f s/step, planned %d steps do not fit %.1f min; training %d steps", desc, per_step,
                       steps, max_minutes, max(fit, 11))
        return max(fit, 11)
    return steps


@dataclass
class BudgetedRun:
    """What the loop did: optimiser steps, epochs started, the log records and the minutes spent."""

    steps: int = 0
    epochs: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    minutes: float = 0.0


#: minutes a recipe keeps for its closing evaluation and save when its budget is the whole run
EVAL_RESERVE_MIN = 2.0


def training_minutes(budget: float, t_start: float, reserve: float = EVAL_RESERVE_MIN) -> float:
    """The training loop's share of a recipe's whole ``budget`` (minutes, corpus build and
    evaluation included) when the recipe started at ``time.perf_counter() == t_start``: what is
    left, less ``reserve``. Raises when nothing is left, naming the budget to give."""
    spent = (time.perf_counter() - t_start) / 60
    left = budget - spent - reserve
    if left <= 0:
        raise ConfigError(f"the budget of {budget:g} minutes is spent before training starts ({spent:.1f} min went to "
                          f"the corpus and set-up, {reserve:g} are kept for the evaluation); give --minutes above "
                          f"{spent + reserve + 1:.0f}")
    logger.info("budget %.1f min: %.1f min of set-up, %.1f min of training, %.1f kept for evaluation",
                budget, spent, left, reserve)
    return left


def train_budgeted(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    epoch_batches: Callable[[], Iterable[Any]],
    losses: Callable[[Any, float], dict[str, Tensor]],
    *,
    minutes: float,
    max_steps: int | None,
    lr: float,
    warmup: int,
    device: torch.device,
    bf16: bool = False,
    clip: float = 5.0,
    log_every: int = 50,
    checkpoint_every_min: float = 10.0,
    save: Callable[[], None] | None = None,
    log_extra: Callable[[float], dict[str, Any]] | None = None,
) -> BudgetedRun:
    """Train until ``max_steps`` (if given) or ``minutes`` are spent.

    ``losses(batch, progress)`` returns the named loss terms with the total under ``"loss"``;
    ``progress`` in [0, 1] is the larger of the time and step fractions (for loss-weight schedules),
    and ``log_extra(progress)`` adds entries to each log record. ``save`` writes a checkpoint (the
    model is moved back to ``device`` afterwards)."""
    budget = minutes * 60.0
    total = max_steps or 10**9
    run = BudgetedRun()
    t0 = last_ckpt = time.time()
    model.train()
    while True:
        run.epochs += 1
        stepped = False
        for batch in epoch_batches():
            elapsed = time.time() - t0
            if run.steps >= total or elapsed >= budget:
                run.minutes = (time.time() - t0) / 60
                return run
            progress = min(1.0, max(elapsed / budget, run.steps / total if max_steps else 0.0))
            for g in opt.param_groups:
                g["lr"] = lr_at(run.steps, total if max_steps else 10**9, lr, warmup, time_frac=elapsed / budget)
            with autocast(device, bf16):
                parts = losses(batch, progress)
            opt.zero_grad(set_to_none=True)
            parts["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            run.steps += 1
            stepped = True
            if run.steps % log_every == 0 or run.steps == 1:
                rec = {"step": run.steps, "epoch": run.epochs, "min": round((time.time() - t0) / 60, 2),
                       **{k: round(float(v.detach()), 4) for k, v in parts.items()},
                       **(log_extra(progress) if log_extra is not None else {})}
                run.history.append(rec)
                logger.info("%s", rec)
            if save is not None and time.time() - last_ckpt > checkpoint_every_min * 60:
                last_ckpt = time.time()
                save()
                model.to(device)
        if not stepped:  # an epoch with no full batch would loop forever
            raise ValueError("the training set has fewer examples than one batch; lower --batch-size or build more data")


def train_planned(
    model: torch.nn.Module,
    loss_fn: Callable[[int, torch.Generator], Tensor],
    *,
    steps: int,
    lr: float,
    weight_decay: float,
    device: torch.device,
    max_minutes: float,
    desc: str,
    seed: int = 0,
    generator: torch.Generator | None = None,
    min_ratio: float = 0.05,
    use_autocast: bool = True,
    curve_every: int = 50,
    clip: float = 1.0,
) -> dict[str, Any]:
    """``steps`` AdamW steps of ``loss_fn(step, generator)`` (warm-up over 5% of the steps, then cosine
    down to ``min_ratio * lr``). After 10 steps the plan shrinks to what fits ``max_minutes``; a run
    still past 1.25x the budget stops. ``use_autocast=False`` when ``loss_fn`` autocasts only part of
    its work. Returns steps (done and planned), first / final loss, a loss curve (means over
    ``curve_every`` steps) and minutes."""
    model.to(device).train()
    opt = adamw(model, lr, weight_decay)
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = progress_bar(steps, desc)
    step = 0
    while step < steps:
        steps = fit_steps(step, steps, t0, max_minutes, desc)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, max(1, steps // 20), min_ratio=min_ratio)
        with autocast(device, use_autocast):
            loss = loss_fn(step, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        bar.update(1)
        if step % curve_every == 0:
            bar.set_postfix(loss=f"{sum(losses[-curve_every:]) / curve_every:.4f}")
        if (time.perf_counter() - t0) / 60 > 1.25 * max_minutes:
            logger.warning("%s: stopping at step %d of %d (time budget %.1f min)", desc, step, steps, max_minutes)
            break
    bar.close()
    model.eval()
    tail = losses[-curve_every:]
    return {"steps": step, "planned_steps": steps, "first_loss": losses[0] if losses else None,
            "final_loss": sum(tail) / max(1, len(tail)), "minutes": (time.perf_counter() - t0) / 60,
            "loss_curve": [round(sum(losses[i:i + curve_every]) / len(losses[i:i + curve_every]), 4)
                           for i in range(0, len(losses), curve_every)]}


__all__ = ["BudgetedRun", "fit_steps", "progress_bar", "train_budgeted", "train_planned"]
