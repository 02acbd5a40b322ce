"""``var`` / ``nfig``: next-scale and next-frequency decoding, every token of a level in one forward.

Papers: Tian et al., "Visual Autoregressive Modeling" (VAR), NeurIPS 2024, code
``FoundationVision/VAR`` (``models/var.py::autoregressive_infer_cfg``); Huang et al., "NFIG:
Autoregressive Image Generation with Next-Frequency Prediction", 2025, arXiv 2503.07076.

Loop (:class:`~leapgen.models.var.ScaleLM`): prefill the condition (forward 1) and sample scale 0;
then for every level ``k = 1 .. K-1``: build its inputs from the residual sum of the levels so far
(``down(f_hat, p_k)``: area pooling for VAR, the lowest DCT band for NFIG), run them in one forward
over the KV cache, and sample all ``p_k**2`` tokens in parallel. ``K`` forwards per image (9 for the
default scales 1,2,3,4,6,8,10,13,16).

Guidance grows linearly over the levels as VAR's (``t = cfg * k / (K-1)``, ``(1+t) c - t u``),
written in the pipeline's convention (``cfg_scale`` s, 1 = off): level ``k`` uses the scale
``1 + (s - 1) k / (K-1)``, so the last level gets ``s`` and the first none; ``cfg_schedule="constant"``
uses ``s`` at every level. Then temperature / top-k / top-p
(:class:`~leapgen.samplers.logits.LogitsProcessor`). Guarantee: ``distribution-exact`` (a draw from
the model's factorisation over levels, tokens of a level independent given the previous levels;
tested against the uncached block-causal forward by enumeration). ``var`` runs on ``next-scale``
models (spatial tokenizer), ``nfig`` on ``next-frequency`` models (frequency-band tokenizer); the loop
is one class. Defaults: ``cfg_schedule="linear"``.
"""

from __future__ import annotations

from typing import Any

import torch

from ...models.guidance import guidance_mix
from ...models.var import ScaleLM
from ..base import DecodeConfig, DecodeResult, Sampler, check_choice, register_contract, register_sampler
from ..logits import LogitsProcessor
from .common import OrderedRun, sample_finite

register_contract("next-scale", lambda m: isinstance(m, ScaleLM) and m.band == "spatial")
register_contract("next-frequency", lambda m: isinstance(m, ScaleLM) and m.band == "frequency")


def level_scale(cfg_scale: float, k: int, levels: int, schedule: str) -> float:
    """The guidance scale of level ``k`` of ``levels`` (linear: 1 at level 0, ``cfg_scale`` at the last)."""
    if schedule == "constant" or levels <= 1:
        return cfg_scale
    return 1.0 + (cfg_scale - 1.0) * k / (levels - 1)


class ScaleSampler(Sampler):
    """Shared loop of ``var`` and ``nfig`` (see the module docstring)."""

    defaults: dict[str, Any] = {"cfg_schedule": "linear"}

    def validate(self) -> None:
        check_choice("cfg_schedule", self.cfg_schedule, ("linear", "constant"))

    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> DecodeResult:
        self.check_models(models)
        lm: ScaleLM = models["model"]
        run = OrderedRun(self, prompts, config, lm.num_tokens)
        proc = LogitsProcessor(config)
        scale = 1.0 if cond is None or not getattr(cond, "guidance", None) else float(cond.guidance.scale)
        levels = len(lm.scales)
        out = torch.zeros(run.batch, lm.num_tokens, dtype=torch.long, device=lm.device)
        start = 0
        state, c, u = lm.start(run.batch, cond)
        for k, p in enumerate(lm.scales):
            if k:
                c, u = lm.step(state, k)
            logits = c if u is None else guidance_mix(c, u, level_scale(scale, k, levels, self.cfg_schedule))
            toks = sample_finite(proc, logits, generator, run)
            out[:, start : start + p * p] = toks
            lm.commit(state, toks)
            run.record(list(range(start, start + p * p)))
            start += p * p
        return run.result(out, scales=list(lm.scales), band=lm.band)


@register_sampler("var", family="image-parallel", guarantee="distribution-exact", needs=("model",),
                  paper="Tian et al. 2024, Visual Autoregressive Modeling (VAR, NeurIPS 2024)", contracts=("next-scale",))
class NextScale(ScaleSampler):
    """VAR next-scale decoding: every token of a scale in one forward, guidance growing over scales."""


@register_sampler("nfig", family="image-parallel", guarantee="distribution-exact", needs=("model",),
                  paper="Huang et al. 2025, NFIG: Next-Frequency Image Generation (arXiv 2503.07076)",
                  contracts=("next-frequency",))
class NextFrequency(ScaleSampler):
    """NFIG next-frequency decoding: low-frequency band first, each band in one forward (VAR's loop)."""


__all__ = ["ScaleSampler", "NextScale", "NextFrequency", "level_scale"]
