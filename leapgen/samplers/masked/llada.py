"""LLaDA: semi-autoregressive masked-diffusion sampling with low-confidence (or random) remasking.

Paper: Nie et al., "Large Language Diffusion Models", 2025; ML-GSAI/LLaDA ``generate.py``
(reference notes masked.md §5). Guarantee: **lossy** (parallel commits from per-position
marginals; quality is measured by ``leapgen bench dllm`` / ``leapgen bench parallel``).

The generation (the masked positions after the prompt) is cut into blocks of ``block_length``
decoded left to right (``region="blocks"``); each block gets ``steps / num_blocks`` steps and
commits ``N // steps`` of its masked tokens per step, the remainder on the first steps
(``schedule="per_block"`` = ``get_num_transfer_tokens``). The committed ones are the most
confident (``scorer="prob"``, LLaDA's ``remasking="low_confidence"``) or random ones
(``scorer="random"``, ``remasking="random"``); committed tokens never change.

Defaults: ``block_length=32``, ``steps=None`` = one step per generated token of each row in every
block (LLaDA's best quality setting ``steps = gen_length``; counted per row and per block, so a
row decodes as it would alone next to rows with more or fewer masked positions, and a shorter last
block gets as many steps as it has tokens), temperature 0 (``paper_config``). A generation length
that is not a multiple of ``block_length`` is handled: the last block is shorter; an explicit
``steps`` is split evenly over the blocks (floor, at least one each), so a budget that does not
divide evenly gives the last blocks slightly fewer tokens per step, never an error.

:class:`DLLMSampler` is the base of the diffusion-LM presets (``fast_dllm``, ``prophet``,
``learn2pd``, ``dkv_cache``): ``steps=None`` resolved per call, and a default cache policy that
falls back to no cache on a model without one (an explicit ``cache=`` still raises there).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar

import torch

from ...errors import ConfigError
from ...models.masked_base import MaskedModel
from ..base import DecodeConfig, new_stats, register_sampler
from .cache import DualCache, NoCache
from .loop import MaskedParts, masked_decode
from .parts import PER_UNIT
from .sampler import MaskedSampler
from .state import MaskedDecodeResult, MaskedInputs

logger = logging.getLogger(__name__)

DLLM_DEFAULTS: dict[str, Any] = {
    **MaskedSampler.defaults,
    "steps": None,
    "schedule": "per_block",
    "scorer": "prob",
    "choice_temperature": 0.0,
    "policy": "topk",
    "region": "blocks",
    "block_length": 32,
}


class DLLMSampler(MaskedSampler):
    """Base of the diffusion-LM presets (see the module docstring)."""

    defaults: ClassVar[dict[str, Any]] = DLLM_DEFAULTS
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 0.0}

    def build_parts(self) -> MaskedParts:
        if self.params["steps"] is not None:
            return super().build_parts()
        self.params["steps"] = 1  # placeholder: resolved per call (one step per generated token)
        try:
            parts = super().build_parts()
        finally:
            self.params["steps"] = None
        parts.steps = None
        return parts

    def _used_params(self, parts: MaskedParts) -> set[str]:
        return super()._used_params(parts) | {"steps"}

    def call_parts(self, model: MaskedModel, inputs: MaskedInputs) -> MaskedParts:
        """The parts of one call: steps resolved, cache dropped on a model without one (when defaulted)."""
        parts = self.parts
        if parts.steps is None:  # one step per generated token of every block, per row (rows decode as they would alone)
            parts = dataclasses.replace(parts, steps=PER_UNIT)
        cache = parts.cache
        if cache is not None and cache.mode is not None and not model.supports_cache and "cache" not in self._explicit:
            logger.info("%s: %s has no masked cache; decoding without one", self.name, type(model).__name__)
            return dataclasses.replace(parts, cache=NoCache())
        if cache is not None and cache.needs_positions and model.supports_cache and not model.supports_cache_positions:
            if "cache" in self._explicit:
                raise ConfigError(
                    f"cache={cache.part_name!r} recomputes position subsets, which {type(model).__name__} does not support "
                    "(supports_cache_positions is False); use cache='dual' or 'prefix'."
                )
            logger.info("%s: %s has no subset forwards; using the dual cache instead", self.name, type(model).__name__)
            return dataclasses.replace(parts, cache=DualCache(cache.cache_refresh))
        return parts

    def generate(
        self,
        models: dict[str, Any],
        inputs: Any,
        config: DecodeConfig,
        generator: torch.Generator | None = None,
        cond: Any = None,
    ) -> MaskedDecodeResult:
        self.check_models(models)
        model = models["model"]
        if not isinstance(model, MaskedModel):
            raise ConfigError(
                f"sampler {self.name!r} needs a masked model (MaskedTokenModel) as 'model', got {type(model).__name__}; "
                "autoregressive models take the chain samplers (ar, speculative, ...)."
            )
        inputs = MaskedInputs.coerce(
            inputs, mask_id=getattr(model, "mask_id", None), num_codebooks=getattr(model, "num_codebooks", 1),
            pad_id=config.pad_token_id,
        )
        parts = self.call_parts(model, inputs)
        stats = new_stats(self, 0)
        with torch.inference_mode():
            res = masked_decode(model, inputs, parts, config, generator, stats=stats, cond=cond)
        res.tokens, res.generated = res.tokens.clone(), res.generated.clone()
        if res.trajectory is not None:
            res.trajectory = [t.clone() for t in res.trajectory]
        stats.extra["cache"] = parts.cache.part_name if parts.cache is not None else "none"
        return res


@register_sampler(
    "llada",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Nie et al. 2025 (LLaDA, Large Language Diffusion Models)",
)
class LLaDA(DLLMSampler):
    """LLaDA semi-AR low-confidence remasking (see the module docstring for the rule and defaults)."""

    defaults: ClassVar[dict[str, Any]] = {**DLLM_DEFAULTS}
