"""Mechanics shared by ``maskgct_t2s`` and ``maskgct_s2a`` (MaskGCT, Wang et al., ICLR 2025).

Reference: ``open-mmlab/Amphion`` ``models/tts/maskgct/maskgct_t2s.py`` / ``maskgct_s2a.py``
(``reverse_diffusion``). Everything else of the MaskGCT loop is an existing part of the masked
loop: the ``sin`` schedule (``floor(sin(pi/2 t_{i+1}) N)`` still masked), ``prob_gumbel`` scoring
with ``noise_anneal="maskgct"`` (``c = p + choice_temperature * t_i * Gumbel``: noise on the
*probability*), linear temperature anneal (``temp * t_i``), top-k and the ``codebook_stages`` region.
This module adds:

* guidance ``embedding_cfg``: classifier-free guidance mixed on the **last hidden states**, not the
  logits: ``g = h_c + cfg_scale (h_c - h_u)``, rescaled ``g_r = g * std(h_c) / std(g)`` (std over the
  feature axis, per position) and mixed ``rescale_cfg * g_r + (1 - rescale_cfg) * g``, then
  ``model.to_logits(g)``. ``cfg_scale = 0`` is no guidance (one forward per step); otherwise the
  unconditional pass (the model's ``null_cond``: no phones / prompt) shares the conditional pass's
  forward as the second half of a doubled batch (``cond["uncond"]`` per row) where that pays
  (``cfg_batch="auto"``: on an accelerator, or for one row on a CPU); otherwise it is a second
  forward, as MaskGCT runs it.
* :class:`MaskGCTProposer`: the last step of a stage is ``argmax`` (MaskGCT), except a one-step stage,
  which samples at ``single_step_temperature`` (S2A's fine layers: Gumbel at 0.2).
* ``steps_per_stage`` longer or shorter than the model's layers is cut, or extended with one-step
  layers (MaskGCT's ``[25, 10, 1, 1, ...]`` rule).
* top-k as MaskGCT's ``filter_thres``: keep ``ceil((1 - filter_thres) * V)`` logits (0.98: ~2 %)
  unless ``DecodeConfig.top_k`` is set.
* the contracts ``tts-semantic`` (one stream) and ``tts-acoustic`` (K codebooks): masked token models
  offering ``last_hidden`` / ``to_logits`` / ``null_cond`` (``hidden_guidance = True``), e.g.
  :mod:`leapgen.models.tts_lm`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError, ModelMismatchError
from ...models.masked_base import MaskedModel, MaskedTokenModel
from ..base import DecodeConfig, new_stats, register_contract
from .guidance import batch_guidance, check_cfg_batch
from .loop import MaskedParts, masked_decode
from .parts import GUIDANCES, Guidance, _finite, guidance_scale
from .sampler import MaskedSampler
from .state import MaskedDecodeResult, MaskedDecodeState, select_rows
from .step import TokenProposer


def _hidden_model(model: Any) -> bool:
    return isinstance(model, MaskedTokenModel) and bool(getattr(model, "hidden_guidance", False)) and callable(getattr(model, "to_logits", None))


def is_tts_semantic(model: Any) -> bool:
    """Contract ``tts-semantic``: a one-stream masked model with hidden-state guidance (MaskGCT T2S)."""
    return _hidden_model(model) and getattr(model, "num_codebooks", 1) == 1


def is_tts_acoustic(model: Any) -> bool:
    """Contract ``tts-acoustic``: a K-codebook masked model with hidden-state guidance (MaskGCT S2A)."""
    return _hidden_model(model) and getattr(model, "num_codebooks", 1) > 1


register_contract("tts-semantic", is_tts_semantic)
register_contract("tts-acoustic", is_tts_acoustic)


@GUIDANCES.register("embedding_cfg")
class EmbeddingCFG(Guidance):
    """MaskGCT's CFG in embedding space with rescaling (see the module docstring)."""

    def __init__(self, cfg_scale: float = 2.5, rescale_cfg: float = 0.75, cfg_batch: bool | str = "auto") -> None:
        self.cfg_scale = guidance_scale(cfg_scale, "cfg_scale", low=0.0)
        self.rescale_cfg = _finite(rescale_cfg, "rescale_cfg", low=0.0, high=1.0)
        #: both passes in one forward over the doubled batch (``uncond`` per row) where it pays
        self.cfg_batch = check_cfg_batch(cfg_batch)

    def check(self, state: MaskedDecodeState, model: MaskedModel) -> None:
        if self.cfg_scale > 0 and not _hidden_model(model):
            raise ModelMismatchError(
                f"guidance='embedding_cfg' mixes hidden states; {type(model).__name__} exposes no last_hidden / to_logits."
            )

    def guided_forward(self, model: MaskedModel, state: MaskedDecodeState) -> Tensor:
        """With a dict condition (MaskGCT's views) the conditional and the unconditional pass run
        as one forward over the doubled batch (``uncond`` per row); otherwise two forwards."""
        c = select_rows(state.cond, state.rows)
        if self.cfg_scale == 0.0 or not batch_guidance(self.cfg_batch, state) or not isinstance(c, dict):
            return super().guided_forward(model, state)
        a = state.rows.numel()
        dev = state.generated.device
        on = {**c, "uncond": torch.zeros(a, dtype=torch.bool, device=dev)}
        off = {**model.null_cond(c), "uncond": torch.ones(a, dtype=torch.bool, device=dev)}
        pair = state.forward_pair(model, off, cond=on)
        if pair is None:
            return super().guided_forward(model, state)
        state.extra["guidance_batched"] = state.extra.get("guidance_batched", 0) + 1
        h = model.last_hidden  # type: ignore[attr-defined]
        return self.mix(model, h[:a], h[a:], pair[0].shape)

    def __call__(self, model: MaskedModel, state: MaskedDecodeState, logits: Tensor) -> Tensor:
        if self.cfg_scale == 0.0:
            return logits
        h_c = model.last_hidden  # type: ignore[attr-defined]
        null = model.null_cond(select_rows(state.cond, state.rows))
        state.forward(model, cond=null, cache_key="uncond")
        return self.mix(model, h_c, model.last_hidden, logits.shape)  # type: ignore[attr-defined]

    def mix(self, model: MaskedModel, h_c: Tensor, h_u: Tensor, shape: torch.Size) -> Tensor:
        """Logits of the rescaled embedding-space mix of the conditional and unconditional states."""
        g = h_c + self.cfg_scale * (h_c - h_u)
        g_r = g * h_c.std(-1, keepdim=True) / g.std(-1, keepdim=True).clamp(min=1e-6)
        g = self.rescale_cfg * g_r + (1.0 - self.rescale_cfg) * g
        return model.to_logits(g).reshape(shape)  # type: ignore[attr-defined]


class MaskGCTProposer(TokenProposer):
    """Last step of a stage: argmax (one-step stages: sampling at ``single_step_temperature``)."""

    def __init__(self, base: TokenProposer, single_step_temperature: float = 0.0) -> None:
        super().__init__(base.temperature_anneal, base.suppress_ids, base.constraint)
        self.single_step_temperature = single_step_temperature

    def __call__(self, logits: Tensor, state: MaskedDecodeState, model: MaskedModel | None = None) -> tuple[Tensor, Tensor | None]:
        proposal, log_probs = super().__call__(logits, state, model)
        total = state.total.to(logits.device)
        last = (state.step + 1) >= total  # [A]
        if not bool(last.any()):
            return proposal, log_probs
        banned = self.ban(logits, state)
        final = banned.argmax(-1)
        t1 = self.single_step_temperature
        if t1 > 0 and bool((total == 1).any()):
            g = torch.rand(banned.shape, generator=state.generator, device=banned.device, dtype=torch.float64)
            gumbel = -torch.log(-torch.log(g.clamp(1e-20, 1 - 1e-16)))
            sampled = (banned.double() / t1 + gumbel).argmax(-1)
            final = torch.where((total == 1).reshape(-1, *([1] * (final.dim() - 1))), sampled, final)
        shape = (-1, *([1] * (proposal.dim() - 1)))
        return torch.where(last.reshape(shape), final, proposal), log_probs


MASKGCT_DEFAULTS: dict[str, Any] = {
    **MaskedSampler.defaults,
    "schedule": "sin",
    "scorer": "prob_gumbel",
    "choice_temperature": 1.0,
    "noise_anneal": "maskgct",
    "policy": "topk",
    "guidance": "embedding_cfg",
    "cfg_scale": 2.5,
    "rescale_cfg": 0.75,
    "temperature_anneal": "linear",
    "filter_thres": 0.98,
    "single_step_temperature": 0.0,
}


class MaskGCTSampler(MaskedSampler):
    """Base of the two MaskGCT samplers: own parameters ``filter_thres`` and ``single_step_temperature``."""

    OWN: ClassVar[tuple[str, ...]] = ("filter_thres", "single_step_temperature")
    contract: ClassVar[str] = ""

    def validate(self) -> None:
        own = {n: self.params.pop(n) for n in self.OWN}
        self._explicit -= set(self.OWN)
        self.filter_thres = _finite(own["filter_thres"], "filter_thres", low=0.0, high=1.0)
        self.single_step_temperature = _finite(own["single_step_temperature"], "single_step_temperature", low=0.0)
        super().validate()
        self.params.update(own)

    def build_parts(self) -> MaskedParts:
        parts = super().build_parts()
        return dataclasses.replace(parts, proposer=MaskGCTProposer(parts.proposer, self.single_step_temperature))

    def check_models(self, models: dict[str, Any]) -> None:
        if models.get("model") is None:
            raise ConfigError(f"sampler {self.name!r} needs a 'model'.")
        model = models["model"]
        test = is_tts_semantic if self.contract == "tts-semantic" else is_tts_acoustic
        if not test(model):
            from ..base import model_contract, samplers_for

            contract = model_contract(model)
            raise ModelMismatchError(
                f"sampler {self.name!r} runs on {self.contract} models (masked, with hidden-state guidance), but 'model' is a "
                f"{type(model).__name__} ({contract} model). Samplers that run on {contract} models: "
                f"{', '.join(samplers_for(contract)) if contract else 'none'}."
            )

    def generate(self, models: dict[str, Any], inputs: Any, config: DecodeConfig, generator: torch.Generator | None = None,
                 cond: Any = None) -> MaskedDecodeResult:
        self.check_models(models)
        model = models["model"]
        if config.top_k == 0 and config.temperature > 0 and self.filter_thres > 0:
            config = dataclasses.replace(config, top_k=max(1, math.ceil((1.0 - self.filter_thres) * model.vocab_size)))
        parts = self.parts
        stages = getattr(parts.region, "base", parts.region)  # under span_len > 1 the stages are the spans' base
        sps = getattr(stages, "steps_per_stage", None)
        k = getattr(model, "num_codebooks", 1)
        if sps is not None and len(sps) != k:  # MaskGCT's [25, 10, 1, 1, ...]: cut, or extend with one-step layers
            region = fitted = type(stages)(tuple(sps[:k]) + (1,) * max(0, k - len(sps)))
            if stages is not parts.region:  # the spans wrapper keeps its settings around the fitted stages
                region = copy.copy(parts.region)
                region.base = fitted
            parts = dataclasses.replace(parts, region=region)
        stats = new_stats(self, 0)
        with torch.inference_mode():
            res = masked_decode(model, inputs, parts, config, generator, stats=stats, cond=cond)
        res.tokens, res.generated = res.tokens.clone(), res.generated.clone()
        return res


__all__ = ["EmbeddingCFG", "MASKGCT_DEFAULTS", "MaskGCTProposer", "MaskGCTSampler", "is_tts_acoustic", "is_tts_semantic"]
