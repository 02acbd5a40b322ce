"""Small helpers shared by the quality-for-speed text samplers (bild, judge, superposed, cntp,
first, gear, chimera): range checks and the first-failure index of a batched acceptance mask."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError


def check_float(name: str, value: Any, low: float, high: float | None = None, hint: str = "") -> None:
    """Raise ConfigError unless ``low <= value <= high`` (a real number, bools refused)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and (value < low or (high is not None and value > high)):
        ok = False
    if not ok:
        rng = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ConfigError(f"{name} must be a number {rng}{hint}, got {value!r}.")


def first_false(ok: Tensor, lens: Tensor) -> Tensor:
    """Per row, the index of the first False of ``ok [B, g]`` among its first ``lens[b]`` entries
    (``lens[b]`` when all hold): how many drafts a row accepts."""
    g = ok.shape[1]
    ok = ok & (torch.arange(g, device=ok.device)[None] < lens[:, None])
    return (~ok).cumsum(1).eq(0).sum(1) if g else torch.zeros(ok.shape[0], dtype=torch.long, device=ok.device)


# ------------------------------------------------------------------------- the text-heads contract
# Samplers that read the target's hidden states with trained heads (chimera, judge), route its
# layers (first) or feed it superposed embeddings with the corpus n-gram table (superposed) run on
# a HeadedLM: the lean Llama seen through VariantLM, with the TextHeads of <pipeline>/heads. A plain
# VariantLM (GEAR, FiRST routers given by hand) stays a `causal` model any sampler runs on.
from ..models.text_heads import HeadedLM  # noqa: E402
from .base import register_contract  # noqa: E402

register_contract("text-heads", lambda m: isinstance(m, HeadedLM))


def headed(models: dict[str, Any], part: str, sampler: str) -> HeadedLM:
    """The target as a :class:`HeadedLM` holding trained ``part`` (clear errors otherwise)."""
    lm = models["model"]
    if not isinstance(lm, HeadedLM):
        raise ConfigError(
            f"sampler {sampler!r} needs the target with its trained heads: pass "
            "leapgen.models.text_heads.HeadedLM(pipe._lms['model']) (it loads <pipeline>/heads, made by "
            "`leapgen train text-code-heads`)."
        )
    lm.heads.require(part, sampler)
    return lm
