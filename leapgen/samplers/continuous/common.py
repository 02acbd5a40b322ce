"""Shared parts of the continuous-token image samplers (``mar``, ``cspd``): the ``"mar"`` model
contract, MAR's cosine schedule, random orders, the linear CFG schedule, the per-token noise bank
and the result type.

* **cosine schedule** (MaskGIT / MAR ``sample_tokens``): before step ``s`` of ``num_iter`` with
  ``m`` positions still unknown, ``mask_len = floor(N * cos(pi/2 * (s+1)/num_iter))`` clamped to
  ``[1, m - 1]``; the last step commits everything left. :func:`cosine_counts` gives the number of
  tokens committed per step (they sum to ``N``).
* **order**: a random permutation per row (MAR's ``sample_orders``); :func:`step_of_position`
  turns it and the counts into the step at which every position is generated.
* **linear CFG** (MAR ``cfg_schedule="linear"``): ``cfg_s = 1 + (cfg - 1) * (N - mask_len) / N``
  with ``mask_len`` the number still unknown after step ``s``; ``"constant"`` uses ``cfg``.
* **noise bank** ``[B, N, K + 1, D]``: the head's initial noise and one noise vector per denoising
  step for every position, drawn once from the caller's generator. ``mar`` reads it as it goes;
  ``cspd`` gives the same bank to the draft and the target (denoising-trajectory alignment).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ...errors import ConfigError, InputError
from ...models.condition import ClassCondition
from ...models.mar import MARModel
from ..base import DecodeResult, register_contract

register_contract("mar", lambda m: isinstance(m, MARModel))


def cosine_counts(n_tokens: int, num_iter: int) -> list[int]:
    """Tokens committed at each of ``num_iter`` MAR steps over ``n_tokens`` positions."""
    if not isinstance(num_iter, int) or isinstance(num_iter, bool) or not 1 <= num_iter <= n_tokens:
        raise ConfigError(f"num_iter must be an int in [1, {n_tokens}] (the number of tokens), got {num_iter!r}")
    counts, masked = [], n_tokens
    for s in range(num_iter):
        if s == num_iter - 1:
            counts.append(masked)
            break
        mask_len = math.floor(n_tokens * math.cos(math.pi / 2 * (s + 1) / num_iter))
        mask_len = max(1, min(masked - 1, mask_len))
        counts.append(masked - mask_len)
        masked = mask_len
    return counts


def cfg_per_step(counts: list[int], cfg: float, schedule: str) -> list[float]:
    """Guidance scale of every step (``linear`` ramps from ~1 to ``cfg`` with the known fraction)."""
    n = sum(counts)
    out, known = [], 0
    for c in counts:
        known += c
        out.append(1 + (cfg - 1) * known / n if schedule == "linear" else cfg)
    return out


def random_orders(batch: int, n: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """A random permutation of the ``n`` positions per row (``[B, n]``)."""
    return torch.rand((batch, n), generator=generator, device=device).argsort(1)


def step_of_position(order: Tensor, counts: list[int]) -> Tensor:
    """``[B, n]``: the MAR step at which each position is generated, from the orders and counts."""
    steps = torch.repeat_interleave(torch.arange(len(counts), device=order.device),
                                    torch.tensor(counts, device=order.device))
    out = torch.empty_like(order)
    out.scatter_(1, order, steps[None].expand_as(order))
    return out


def noise_bank(batch: int, n: int, head_steps: int, dim: int, generator: torch.Generator | None,
               device: torch.device) -> Tensor:
    """Initial + per-step head noise of every position, ``[B, n, K + 1, D]``."""
    return torch.randn((batch, n, head_steps + 1, dim), generator=generator, device=device)


def check_condition(cond: Any, batch: int) -> tuple[ClassCondition | None, float]:
    """The condition and its guidance scale (1 = none)."""
    if cond is None:
        return None, 1.0
    if not isinstance(cond, ClassCondition):
        raise InputError(f"continuous image samplers take a ClassCondition, got {type(cond).__name__}")
    if cond.batch_size != batch:
        raise InputError(f"the condition has {cond.batch_size} rows but {batch} prompts were given")
    return cond, float(cond.guidance.scale)


def head_steps_of(model: MARModel, head_steps: int | None) -> int:
    """The head's sampling steps: its default, or ``head_steps`` checked against its training steps
    before the noise bank (``[B, N, head_steps + 1, D]``) is drawn."""
    head = model.net.head
    if head_steps is None:
        return head.sampling_steps
    train_steps = getattr(head, "train_steps", None)
    if train_steps is not None and head_steps > train_steps:
        raise ConfigError(f"head_steps must be an int in [1, {train_steps}] (the diffusion head's training steps), "
                          f"got {head_steps!r}.")
    return int(head_steps)


def check_head_params(num_iter: Any, head_steps: Any, cfg_schedule: Any) -> None:
    if not isinstance(num_iter, int) or isinstance(num_iter, bool) or num_iter < 1:
        raise ConfigError(f"num_iter must be an integer >= 1 (MAR steps), got {num_iter!r}.")
    if head_steps is not None and (not isinstance(head_steps, int) or isinstance(head_steps, bool) or head_steps < 1):
        raise ConfigError(f"head_steps must be None (the model's default) or an integer >= 1, got {head_steps!r}.")
    if cfg_schedule not in ("linear", "constant"):
        raise ConfigError(f"cfg_schedule must be 'linear' or 'constant', got {cfg_schedule!r}.")


@dataclass
class ContinuousDecodeResult(DecodeResult):
    """A :class:`DecodeResult` whose tokens are continuous: ``values [B, N, D]`` (raster order);
    ``sequences`` holds each row's values flattened (for equality checks); ``token_steps`` the
    target forward that produced each position."""

    values: Tensor = field(default_factory=lambda: torch.empty(0, device="cpu"))


def mar_step(model: MARModel, values: Tensor, known: Tensor, commit: Tensor, cond: ClassCondition | None,
             bank: Tensor, cfg_tok: Tensor, temperature: float, head_steps: int) -> tuple[Tensor, Tensor, Tensor]:
    """One MAR step of ``model`` on ``values/known [A, N(, D)]``: one transformer forward, then the
    head samples the positions ``commit [A, N]`` with their bank noise and guidance ``cfg_tok [A, N]``.
    Returns ``(tokens [M, D], mu_0 [M, D], sigma_0 [M])`` for the ``M`` committed positions (row-major)."""
    guided = bool((cfg_tok != 1).any())
    z, zn = model.conditioning(values, known, cond, guided)
    temp = torch.full((int(commit.sum()),), float(temperature), device=values.device)
    return model.head_sample(z[commit], bank[commit], temp, cfg_tok[commit] if guided else None,
                             zn[commit] if guided else None, head_steps)


__all__ = [
    "ContinuousDecodeResult", "cfg_per_step", "check_condition", "check_head_params", "cosine_counts",
    "head_steps_of", "mar_step", "noise_bank", "random_orders", "step_of_position",
]
