"""MAGNeT samplers for text-conditioned audio over K codebook streams: ``magnet``, ``magnet_rescored``,
``magnet_hybrid``.

Paper: Ziv et al., "Masked Audio Generation using a Single Non-Autoregressive Transformer"
(MAGNeT), ICLR 2024; reference code ``facebookresearch/audiocraft`` ``models/lm_magnet.py``
(``_generate_stage``). All three are presets of the one masked loop (``loop.py``) over an
``audio-masked`` model (a :class:`~leapgen.models.masked_base.MaskedTokenModel` over K > 1
codebooks conditioned on text, e.g. :class:`~leapgen.models.audio_lm.MagnetMaskedLM`).

* ``magnet``: codebook stages coarse to fine (``steps_per_stage=[20, 10, 10, 10]``), cosine
  schedule over **spans of 3 frames** (non-overlapping, MAGNeT's ``nonoverlap`` arrangement), span
  score ``max p`` (MAGNeT ranks spans by ``1 - max p``), CFG annealed with the stage's masked
  fraction from 10 to 1, sampling temperature annealed linearly from 3.0 (``paper_config``:
  temperature 3.0, top-p 0.9). Guarantee: lossy.
* ``magnet_rescored``: the same, but spans are ranked by ``w * p_ar + (1 - w) * p_magnet``, where
  ``p_ar`` is the probability the autoregressive model (``ar_model``, any CausalLM over a codebook
  pattern stream, e.g. :class:`~leapgen.models.musicgen.MusicGenLM`) gives each proposal,
  teacher-forced over the pattern stream of the current state (known cells, proposals elsewhere):
  one extra forward of the AR model per step (``other_forwards``). MAGNeT §3 (not in the released
  code); ``rescore_weight`` w = 0.7 here (the paper's value is not confirmed).
* ``magnet_hybrid``: Hybrid-MAGNeT: the AR model generates the first ``ar_seconds`` (every
  codebook of those frames, plus the partial cells its pattern has produced), then MAGNeT fills the
  rest with that prefix as a prompt. The AR part runs the registered ``ar`` sampler unchanged
  (``ar_temperature``, ``ar_cfg_scale``: MusicGen's CFG 3.0); its forwards count as
  ``other_forwards``. An audio prompt (a row's first P frames given in every codebook, masks
  after) is continued: its cells come back verbatim, the AR part writes frames P..T_ar-1 after it
  (the prompt's stream prefix as input, its later cells forced through the condition's
  ``extra[FORCED_KEY]``, as the audio pipeline does for AR samplers; rows may differ in P), and a
  batch whose prompts all cover the AR span goes straight to the masked stage.

Codebook patterns are pluggable through the AR model (``MusicGenConfig.pattern``: delay, parallel,
flattened; :mod:`leapgen.models.codebook_patterns`): rescoring and the hybrid prefix convert between
the code grid and the AR stream with the AR model's own pattern.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError, InputError, ModelMismatchError
from ...models.base import CausalLM
from ...models.codebook_patterns import get_pattern
from ...models.condition import Guidance, TextEmbeddings
from ...models.masked_base import MaskedTokenModel
from ...models.musicgen import (
    FORCED_KEY,
    cell_log_probs,  # magnet_hybrid's largest ar_temperature
    continuation_plan,
)
from ...models.musicgen import MAX_TEMPERATURE as MAX_AR_TEMPERATURE
from ..base import DecodeConfig, new_stats, register_contract, register_sampler
from .loop import masked_decode
from .parts import ConfidenceScorer, _finite, guidance_scale
from .sampler import MaskedSampler
from .state import MaskedDecodeResult, MaskedDecodeState, MaskedInputs, select_rows

logger = logging.getLogger(__name__)


def is_audio_masked(model: Any) -> bool:
    """The ``audio-masked`` contract: a masked token model over several codebooks that reads text."""
    return isinstance(model, MaskedTokenModel) and getattr(model, "num_codebooks", 1) > 1 and bool(getattr(model, "text_conditioned", False))


register_contract("audio-masked", is_audio_masked)

MAGNET_DEFAULTS: dict[str, Any] = {
    **MaskedSampler.defaults,
    "steps": 10,
    "schedule": "cosine",
    "scorer": "prob",
    "policy": "topk",
    "region": "codebook_stages",
    "steps_per_stage": (20, 10, 10, 10),
    "span_len": 3,
    "span_score": "max",
    "guidance": "cfg",
    "cfg_scale": 10.0,
    "cfg_min_scale": 1.0,
    "cfg_anneal": "mask_rate",
    "temperature_anneal": "linear",
}


class _AudioMaskedSampler(MaskedSampler):
    """Shared parts: contract checks and the AR model role."""

    contracts: ClassVar[tuple[str, ...]] = ("audio-masked",)
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 3.0, "top_p": 0.9}

    def validate(self) -> None:
        for name in ("cfg_scale", "cfg_min_scale"):  # guidance scales are >= 0 (1 = no guidance)
            if self.params.get(name) is not None:
                guidance_scale(self.params[name], name, low=0.0)
        super().validate()

    def check_models(self, models: dict[str, Any]) -> None:
        """``model`` must be an audio-masked model; ``ar_model`` (when needed) a CausalLM over the
        same codebooks (its ``config`` names the pattern)."""
        missing = [n for n in self.needs if models.get(n) is None]
        if missing:
            raise ConfigError(f"sampler {self.name!r} needs model(s) {missing}, but the pipeline has none; load a pipeline that ships them.")
        model = models["model"]
        if isinstance(model, torch.nn.Module):
            raise ModelMismatchError(f"sampler {self.name!r} runs on audio-masked models; wrap the module (e.g. MagnetMaskedLM).")
        if not is_audio_masked(model):
            from ..base import model_contract, samplers_for

            contract = model_contract(model)
            raise ModelMismatchError(
                f"sampler {self.name!r} runs on audio-masked models (several codebooks, text condition), but 'model' is a "
                f"{type(model).__name__} ({contract} model). Samplers that run on {contract} models: "
                f"{', '.join(samplers_for(contract)) if contract else 'none'}."
            )
        if "ar_model" in self.needs:
            ar = models["ar_model"]
            if not isinstance(ar, CausalLM) or not hasattr(ar, "config") or not hasattr(ar.config, "pattern"):
                raise ModelMismatchError(
                    f"sampler {self.name!r} needs 'ar_model' to be a CausalLM over a codebook-pattern stream "
                    f"(e.g. MusicGenLM), got {type(ar).__name__}."
                )
            c = ar.config
            if (c.num_codebooks, c.codebook_size) != (model.num_codebooks, model.vocab_size):
                raise ModelMismatchError(
                    f"the AR model has {c.num_codebooks} codebooks of {c.codebook_size} codes, the masked model "
                    f"{model.num_codebooks} of {model.vocab_size}; they must share the codec."
                )


@register_sampler("magnet", family="masked", guarantee="lossy", needs=("model",), paper="Ziv et al. 2024 (MAGNeT, ICLR)",
                  contracts=("audio-masked",))
class Magnet(_AudioMaskedSampler):
    """MAGNeT: codebook stages x span masking, CFG annealed 10 -> 1, temperature annealed from 3.0.

    Defaults (audiocraft ``MAGNeT.set_generation_params``): ``steps_per_stage=[20, 10, 10, 10]``,
    ``span_len=3`` (nonoverlap), ``scorer="prob"`` with ``span_score="max"``, ``cfg_scale=10``,
    ``cfg_min_scale=1``, ``cfg_anneal="mask_rate"``, ``temperature_anneal="linear"``;
    ``paper_config``: temperature 3.0, top-p 0.9. Guarantee: lossy. Every MaskedSampler parameter
    can be overridden (e.g. ``steps_per_stage=[10, 5, 5, 5]`` or ``span_len=1``).
    """

    defaults: ClassVar[dict[str, Any]] = dict(MAGNET_DEFAULTS)


class RescoredScorer(ConfidenceScorer):
    """``w * p_ar(x) + (1 - w) * p_magnet(x)`` for every proposal x (see the module docstring)."""

    part_name = "rescored"

    def __init__(self, ar_model: CausalLM, weight: float, stats: Any) -> None:
        self.ar, self.weight, self.stats = ar_model, weight, stats

    def ar_probs(self, grid: Tensor, cond: Any) -> Tensor:
        """Probabilities ``[A, K, T]`` the AR model gives every cell of ``grid`` (teacher-forced)."""
        before = self.ar.forwards
        logp = cell_log_probs(self.ar, grid, cond)
        self.stats.other_forwards += self.ar.forwards - before
        return logp.exp()

    def __call__(self, log_probs: Tensor | None, proposal: Tensor, state: MaskedDecodeState) -> Tensor:
        p_magnet = log_probs.gather(-1, proposal[..., None]).squeeze(-1).double().exp()
        current = state.active(state.tokens)
        grid = torch.where(current == state.mask_id, proposal, current)
        cond = state.cond if state.all_rows else select_rows(state.cond, state.rows)
        p_ar = self.ar_probs(grid, cond).double()
        return self.weight * p_ar + (1.0 - self.weight) * p_magnet


@register_sampler("magnet_rescored", family="masked", guarantee="lossy", needs=("model", "ar_model"),
                  paper="Ziv et al. 2024 (MAGNeT §3, rescoring)", contracts=("audio-masked",))
class MagnetRescored(_AudioMaskedSampler):
    """MAGNeT whose span ranking mixes in the autoregressive model's probabilities (one extra AR forward per step).

    ``rescore_weight`` w (default 0.7): confidence ``w * p_ar + (1 - w) * p_magnet``; w = 0 is
    ``magnet``. Other defaults as ``magnet``. Guarantee: lossy.
    """

    defaults: ClassVar[dict[str, Any]] = {**MAGNET_DEFAULTS, "rescore_weight": 0.7}

    def validate(self) -> None:
        w = self.params.pop("rescore_weight")
        self._explicit.discard("rescore_weight")
        self.rescore_weight = _finite(w, "rescore_weight", low=0.0, high=1.0)
        super().validate()
        self.params["rescore_weight"] = self.rescore_weight

    def generate(self, models: dict[str, Any], inputs: Any, config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> MaskedDecodeResult:
        self.check_models(models)
        stats = new_stats(self, 0)
        parts = dataclasses.replace(self.parts, scorer=RescoredScorer(models["ar_model"], self.rescore_weight, stats))
        with torch.inference_mode():
            res = masked_decode(models["model"], inputs, parts, config, generator, stats=stats, cond=cond)
        res.tokens, res.generated = res.tokens.clone(), res.generated.clone()
        return res


def prompt_frames(given: Tensor) -> list[int]:
    """Per row of a grid's given cells ``[B, K, T]``, the number P of its leading frames given in
    every codebook (an audio prompt); InputError when a row's given cells are not exactly those
    frames (``magnet_hybrid`` continues a prompt: it does not infill). One host read: the AR part's
    input rows are host lists anyway."""
    lengths = given.all(1).long().cumprod(1).sum(1)
    frames = torch.arange(given.shape[-1], device=given.device)
    if not torch.equal(given, (frames[None, :] < lengths[:, None])[:, None, :].expand_as(given)):
        raise InputError("magnet_hybrid continues an audio prompt: a row's given cells must be its first P frames in "
                         "every codebook (masks after); for given cells elsewhere use sampler='magnet'.")
    return [int(n) for n in lengths.tolist()]


@register_sampler("magnet_hybrid", family="masked", guarantee="lossy", needs=("model", "ar_model"),
                  paper="Ziv et al. 2024 (Hybrid-MAGNeT)", contracts=("audio-masked",))
class MagnetHybrid(_AudioMaskedSampler):
    """Hybrid-MAGNeT: the AR model writes the first ``ar_seconds``, MAGNeT completes the rest.

    Defaults: ``ar_seconds=1.0`` (at the model's ``frame_rate``), ``ar_temperature=1.0``,
    ``ar_cfg_scale=3.0`` (MusicGen's guidance), MAGNeT defaults for the masked part. The AR prefix
    is decoded by the registered ``ar`` sampler; its forwards are ``other_forwards`` and its wall
    time is part of ``wall_time``. ``new_tokens`` counts the prefix too, while ``baseline_steps``,
    ``accepted_per_step`` and so ``step_compression`` describe the masked part alone: the whole
    decode takes ``extra["ar_forwards"]`` more sequential forwards. With an audio prompt (the first
    P frames of a row given, see the module docstring) the AR part starts after the prompt and
    ``new_tokens`` counts no prompt cell; ``extra["prompt_frames"]`` holds each row's P. Guarantee:
    lossy.
    """

    defaults: ClassVar[dict[str, Any]] = {**MAGNET_DEFAULTS, "ar_seconds": 1.0, "ar_temperature": 1.0, "ar_cfg_scale": 3.0}
    OWN = ("ar_seconds", "ar_temperature", "ar_cfg_scale")

    def validate(self) -> None:
        own = {n: self.params.pop(n) for n in self.OWN}
        self._explicit -= set(self.OWN)
        self.ar_seconds = _finite(own["ar_seconds"], "ar_seconds", low=0.0, open_low=True)
        # <= 100 (MusicGen's MAX_TEMPERATURE): its finite -1e9 structure logits let BOS through past ~1e7 (refused
        # downstream as a token outside the vocabulary)
        self.ar_temperature = _finite(own["ar_temperature"], "ar_temperature", low=0.0, high=MAX_AR_TEMPERATURE)
        self.ar_cfg_scale = guidance_scale(own["ar_cfg_scale"], "ar_cfg_scale", low=0.0)
        super().validate()
        self.params.update(ar_seconds=self.ar_seconds, ar_temperature=self.ar_temperature, ar_cfg_scale=self.ar_cfg_scale)

    def generate(self, models: dict[str, Any], inputs: Any, config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> MaskedDecodeResult:
        from ..base import get_sampler

        t0 = time.perf_counter()
        self.check_models(models)
        model, ar = models["model"], models["ar_model"]
        x = MaskedInputs.coerce(inputs, mask_id=model.mask_id, num_codebooks=model.num_codebooks, pad_id=config.pad_token_id)
        cond = x.cond if cond is None else cond
        b, k, t = x.tokens.shape
        given = x.known if x.known is not None else x.tokens != model.mask_id
        lengths = prompt_frames(given)
        c = ar.config
        rate = getattr(c, "frame_rate", 50)
        if t < 2:  # no frame for the AR prefix beside one for MAGNeT (the AR was asked for 0 tokens)
            raise InputError(f"magnet_hybrid needs at least 2 frames ({2 / rate:g} s: the AR model writes the first "
                             f"frames, MAGNeT the rest), got {t}; ask for a longer clip or use sampler='magnet'.")
        t_ar = min(t - 1, max(1, int(round(self.ar_seconds * rate))))
        if t_ar < int(round(self.ar_seconds * rate)):
            logger.warning("magnet_hybrid: ar_seconds=%g covers the whole %g s clip, so the AR model writes %d of its %d "
                           "frames and MAGNeT only the last; pass a smaller ar_seconds (or sampler='ar').",
                           self.ar_seconds, t / rate, t_ar, t)
        ar_forwards = n_ar = 0
        tokens = x.tokens
        if min(lengths) < t_ar:  # the AR part: frames P..t_ar-1 after each row's prompt (forced cells keep it)
            prompts = [x.tokens[r, :, :p].cpu() if p else None for r, p in enumerate(lengths)]
            rows, forced = continuation_plan(c, prompts, t_ar)
            n_ar = c.stream_tokens(t_ar) - (len(rows[0]) - 1)
            ar_cond = cond
            if isinstance(cond, TextEmbeddings):
                extra = {**cond.extra, FORCED_KEY: forced.to(cond.embeddings.device)} if max(lengths) else cond.extra
                ar_cond = dataclasses.replace(cond, guidance=Guidance(float(self.ar_cfg_scale)), extra=extra)
            elif max(lengths):
                raise InputError("magnet_hybrid continues a prompt through a TextEmbeddings condition (its forced cells "
                                 f"ride in extra[FORCED_KEY]); got {type(cond).__name__}.")
            ar_config = dataclasses.replace(config, max_new_tokens=n_ar, temperature=self.ar_temperature, top_k=0,
                                            top_p=1.0, eos_token_id=None, step_callback=None, progress=False)
            before = ar.forwards
            prefix = get_sampler("ar").generate({"model": ar}, rows, ar_config, generator, cond=ar_cond)
            ar_forwards = ar.forwards - before
            stream = torch.tensor([r[1:] + q for r, q in zip(rows, prefix.sequences)], dtype=torch.long)
            codes, known = get_pattern(c.pattern).from_stream(stream, k, t)
            codes, known = codes.to(x.tokens.device), known.to(x.tokens.device)
            tokens = torch.where(given, x.tokens, torch.where(known, codes, torch.full_like(codes, model.mask_id)))
        stats = new_stats(self, 0)
        with torch.inference_mode():
            res = masked_decode(model, MaskedInputs(tokens, cond=cond), self.parts, config, generator, stats=stats)
        res.tokens, res.generated = res.tokens.clone(), ~given
        st = res.stats
        st.other_forwards += ar_forwards
        st.new_tokens += int((tokens != model.mask_id).sum() - given.sum())
        st.extra.update(ar_frames=t_ar, ar_tokens=n_ar, ar_forwards=ar_forwards)
        if max(lengths):
            st.extra["prompt_frames"] = lengths
        st.wall_time = time.perf_counter() - t0
        return res
