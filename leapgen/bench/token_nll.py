"""Token NLL: how likely the target model itself finds the tokens a sampler generated.

A check that a relaxed sampler (LANTERN, GSD, ...) does not drift into regions the model considers
unlikely; reported by ``leapgen bench image`` beside FID. Works on any model with the cache contract
(``new_cache(batch, cond)``, ``condition_slots(cond)``, ``model(tokens, cache)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError


@torch.inference_mode()
def token_nll(
    model: Any,
    prompts: Sequence[Sequence[int]],
    token_ids: Any,
    cond: Any = None,
    batch_size: int = 16,
) -> float:
    """Mean NLL (nats/token) of ``token_ids`` (row i generated after ``prompts[i]``) under ``model``.

    Teacher forcing: for each batch of rows, one forward of ``prompt + tokens[:-1]`` on a fresh
    cache; the NLL of token t is ``-log softmax(logits at the position before t)[t]`` in float64,
    averaged over every generated token of every row. The logits are the model's **conditional**
    ones: for a model with classifier-free guidance built in (``LlamaGenLM``), guidance is switched
    off for these forwards (a typed condition's ``unguided()``; a model attribute ``cfg_scale`` is
    set to 1), so no null-condition mix, no temperature, no top-k/top-p. ``cond``: a typed
    condition (:mod:`leapgen.models.condition`, one row per prompt) given to ``new_cache``, whose
    ``condition_slots`` are fed as placeholders before the prompt (prompts may then be empty), or
    a tensor / list / dict with the rows first, passed to the model call as is. The model's
    ``forwards`` counter is restored afterwards.
    """
    if isinstance(token_ids, Tensor):
        rows = [r.reshape(-1).tolist() for r in token_ids]
    else:
        rows = [list(np.asarray(r).reshape(-1).tolist()) for r in token_ids]
    prompts = [list(p) for p in prompts]
    if len(prompts) != len(rows):
        raise InputError(f"{len(prompts)} prompts but {len(rows)} token rows.")
    if not rows or not any(rows):
        raise InputError("no generated tokens to score.")
    before = getattr(model, "forwards", None)
    total, count = 0.0, 0
    with _no_guidance(model):
        # rows with the same prompt length and token count go together (no padding needed)
        groups: dict[tuple[int, int], list[int]] = {}
        typed = hasattr(cond, "select_rows")
        slots = int(model.condition_slots(cond)) if typed and hasattr(model, "condition_slots") else 0
        for i, (p, r) in enumerate(zip(prompts, rows)):
            if not p and not slots:
                raise InputError(f"prompt {i} is empty; the first generated token needs a context.")
            if r:
                groups.setdefault((len(p), len(r)), []).append(i)
        for (lp, _), idx in groups.items():
            for s in range(0, len(idx), batch_size):
                sel = idx[s : s + batch_size]
                seq = torch.tensor([[0] * slots + prompts[i] + rows[i] for i in sel], dtype=torch.long,
                                   device=_device(model))
                c = _select_cond(cond, sel)
                if typed:
                    cache = model.new_cache(len(sel), c)
                    logits = model(seq[:, :-1], cache)
                else:
                    cache = model.new_cache(len(sel))
                    logits = model(seq[:, :-1], cache, cond=c) if c is not None else model(seq[:, :-1], cache)
                lp_ = torch.log_softmax(logits[:, slots + lp - 1 :].double(), dim=-1)
                tgt = seq[:, slots + lp :]
                total += float(-lp_.gather(-1, tgt[..., None]).sum())
                count += tgt.numel()
    if before is not None:
        model.forwards = before
    return total / count


def _device(model: Any) -> torch.device:
    dev = getattr(model, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def _select_cond(cond: Any, sel: list[int]) -> Any:
    if cond is None:
        return None
    if hasattr(cond, "select_rows"):  # a typed condition: its rows, scored without guidance
        c = cond.select_rows(torch.tensor(sel, dtype=torch.long))
        return c.unguided() if hasattr(c, "unguided") else c
    if isinstance(cond, Tensor):
        return cond[sel]
    if isinstance(cond, dict):
        return {k: _select_cond(v, sel) for k, v in cond.items()}
    if isinstance(cond, (list, tuple)):
        return [cond[i] for i in sel]
    return cond


class _no_guidance:
    """Switch classifier-free guidance off on a model for the duration of a block."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._ctx = None
        self._old: Any = None

    def __enter__(self) -> None:
        m = self.model
        if hasattr(m, "guidance_disabled"):
            self._ctx = m.guidance_disabled()
            self._ctx.__enter__()
        elif hasattr(m, "cfg_scale"):
            self._old = m.cfg_scale
            m.cfg_scale = 1.0

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        elif self._old is not None:
            self.model.cfg_scale = self._old


__all__ = ["token_nll"]
