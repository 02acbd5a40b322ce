"""The time-budgeted training loop the family recipes share (ASR, OCR, peptides).

A recipe gives its batches (one iterable per epoch) and a loss function; the loop owns what every
recipe repeated: stop at ``max_steps`` or when the minutes run out, warm-up + cosine learning rate
over the steps or the time budget (:func:`~leapgen.train.common.lr_at`), optional bf16 autocast,
gradient clipping, a log record every ``log_every`` steps and a checkpoint every
``checkpoint_every_min`` minutes (so a run stopped early still leaves a usable asset).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .common import autocast, lr_at

logger = logging.getLogger(__name__)


@dataclass
class BudgetedRun:
    """What the loop did: optimiser steps, epochs started, the log records and the minutes spent."""

    steps: int = 0
    epochs: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    minutes: float = 0.0


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


__all__ = ["BudgetedRun", "train_budgeted"]
