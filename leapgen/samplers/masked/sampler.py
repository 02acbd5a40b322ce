"""The configurable masked sampler: every part of the loop chosen by name through flat parameters.

:class:`MaskedSampler` validates its parameters by building the parts (each part checks its
own), rejects parameters no chosen part uses, and runs :func:`~leapgen.samplers.masked.loop.masked_decode`.
Presets (``presets.py``) are subclasses that only change ``defaults``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import torch

from ...errors import ConfigError
from ...models.masked_base import MaskedModel
from ..base import DecodeConfig, Sampler, new_stats
from .loop import MaskedParts, masked_decode
from .parts import CACHES, CONSTRAINTS, GUIDANCES, HOOKS, POLICIES, REGIONS, SCHEDULES, SCORERS, Region
from .state import MaskedDecodeResult
from .step import TokenProposer

#: the most steps of a stage under a revising policy (Mask-Predict: 4 to 10): such a policy re-predicts at
#: every scheduled step, so its forwards grow with ``steps`` however few masks there are (10**9 hung)
MAX_REVISING_STEPS = 1000


def check_revising_steps(steps: Any, steps_per_stage: Any) -> None:
    """Refuse a step budget past :data:`MAX_REVISING_STEPS` for a revising policy (``remask_lowest``);
    commit-only policies reveal at least one unit per step, so their forwards never pass the masks."""
    budgets = [("steps", steps)] + [(f"steps_per_stage[{i}]", s) for i, s in enumerate(steps_per_stage or ())]
    for name, value in budgets:
        if isinstance(value, int) and value > MAX_REVISING_STEPS:
            raise ConfigError(
                f"{name} must be <= {MAX_REVISING_STEPS} with a revising policy such as remask_lowest (Mask-Predict), "
                f"which runs every scheduled step; got {value!r}. Mask-Predict uses 4 to 10."
            )


class MaskedSampler(Sampler):
    """The generic masked sampler: every part chosen by name through flat parameters.

    Presets (``presets.py``) are subclasses that only change ``defaults``. Parameters:

    * ``steps``: step budget (per stage; ``region="blocks"`` splits it over the blocks). None only
      with a schedule that sets its own count (``one_per_step``). A commit-only policy never takes
      more steps than the stage has units; a revising one runs every step, so it takes at most
      :data:`MAX_REVISING_STEPS` (also per entry of ``steps_per_stage``).
    * ``schedule``: cosine | sin | linear | one_per_step | per_block (``schedules.py``).
    * ``scorer``: prob | logprob | logprob_gumbel | prob_gumbel | margin | neg_entropy | random,
      with ``choice_temperature`` and ``noise_anneal`` for the Gumbel ones (``scoring.py``).
    * ``policy``: topk | threshold (``threshold``) | remask_lowest (``policies.py``).
    * ``region``: full | blocks (``block_length``) | codebook_stages (``steps_per_stage``) |
      fragments (``separator_id``) | spans; ``span_len > 1`` groups any region's positions into
      spans scored by ``span_score`` (``regions.py``).
    * ``guidance``: none | cfg (``cfg_scale``, ``cfg_min_scale``, ``cfg_anneal``, ``cfg_batch``) | context
      (``context_gamma``, ``context_weight``, ``context_special_ids``) (``guidance.py``); scales and
      weights at most ``parts.MAX_GUIDANCE_SCALE`` in magnitude.
    * ``hooks``: names among early_exit (``early_exit_thresholds``), eos_truncate (``eos_id``),
      trajectory (``hooks.py``).
    * ``cache``: none | prefix | dual, with ``cache_refresh`` (steps between refreshes within a
      stage; None = only at stage / block boundaries) (``cache.py``); needs a model with
      ``supports_cache``.
    * ``temperature_anneal`` (none | linear) and ``suppress_ids``: the token proposal.
    * ``constraint``: none | balanced (``pair_ids``, ``bracket_pairs``) (``constraints.py``): ids
      ruled out per row and step (e.g. SMILES ring digits kept pairable).

    Token proposals use ``DecodeConfig.temperature / top_k / top_p`` (0 = argmax);
    ``paper_config`` lists the values the paper used, for pipelines to apply as their defaults.
    ``DecodeConfig.max_new_tokens`` is not used: the masks in the input set the length;
    ``repetition_penalty`` must stay 1. A parameter passed explicitly that none of the chosen parts
    uses raises :class:`ConfigError` (e.g. ``threshold`` with ``policy="topk"``).

    Statistics (:class:`DecodeStats`): ``target_forwards`` = every model forward, guidance passes
    included (a guidance pass batched with the conditional one, ``cfg_batch``, shares its forward:
    ``extra["guidance_batched"]`` counts those steps;
    ``extra["steps"]`` = decode steps); ``new_tokens`` = masked positions filled;
    ``baseline_steps`` = the largest number of masked positions in a row (all codebooks), i.e. the
    steps a one-token-per-step decode of the batch needs, so ``step_compression`` is relative to
    one token per forward; ``accepted_per_step`` = per step, per active row, the drop in its count
    of masked positions (tokens revealed; hook fills included, re-masked tokens subtracted).

    Inputs: :class:`MaskedInputs`, a :class:`MaskedState`, a ``[B, L]`` / ``[B, K, L]`` tensor, or
    lists of token ids with the model's ``mask_id`` at the positions to generate; for a
    :class:`ContinuousMaskedModel`, ``MaskedInputs(values [B, L, D], known=[B, L])`` (use
    ``scorer="random"``). Output: :class:`MaskedDecodeResult`.
    """

    defaults: ClassVar[dict[str, Any]] = {
        "steps": 12,
        "schedule": "cosine",
        "scorer": "logprob_gumbel",
        "choice_temperature": 4.5,
        "noise_anneal": None,
        "policy": "topk",
        "threshold": 0.9,
        "region": "full",
        "block_length": 32,
        "steps_per_stage": None,
        "separator_id": None,
        "span_len": 1,
        "span_score": "max",
        "guidance": "none",
        "cfg_scale": 3.0,
        "cfg_min_scale": None,
        "cfg_anneal": "const",
        "cfg_batch": "auto",
        "context_gamma": 0.0,
        "context_weight": 2.0,
        "context_special_ids": (),
        "hooks": (),
        "eos_id": None,
        "early_exit_thresholds": (7.5, 5.0, 2.5),
        "temperature_anneal": "none",
        "suppress_ids": (),
        "cache": "none",
        "cache_refresh": None,
        "constraint": "none",
        "pair_ids": (),
        "bracket_pairs": (),
    }
    paper_config: ClassVar[dict[str, Any]] = {}
    name: ClassVar[str] = "masked"
    #: runs on masked models (also when used unregistered, e.g. ``MaskedSampler(...)`` directly)
    contracts: ClassVar[tuple[str, ...]] = ("masked",)

    def __init__(self, **params: Any) -> None:
        self._explicit = set(params)
        super().__init__(**params)

    def validate(self) -> None:
        self.parts = self.build_parts()
        unused = sorted(self._explicit - self._used_params(self.parts))
        if unused:
            raise ConfigError(
                f"sampler {self.name!r}: parameter(s) {unused} have no effect with schedule={self.params['schedule']!r}, "
                f"scorer={self.params['scorer']!r}, policy={self.params['policy']!r}, region={self.params['region']!r}, "
                f"guidance={self.params['guidance']!r}, hooks={self.params['hooks']!r}, cache={self.params['cache']!r}; choose the part that uses them "
                "(see the MaskedSampler docstring) or drop them."
            )

    @staticmethod
    def _ctor_params(part: Any) -> set[str]:
        return {n for n in inspect.signature(type(part).__init__).parameters if n != "self"}

    def _used_params(self, parts: MaskedParts) -> set[str]:
        used = {"schedule", "scorer", "policy", "region", "guidance", "hooks", "temperature_anneal", "suppress_ids", "span_len", "cache",
                "constraint"}
        if parts.schedule.needs_steps:
            used.add("steps")
        region = parts.region
        while True:
            used |= self._ctor_params(region) - {"base"}
            base = getattr(region, "base", None)
            if not isinstance(base, Region):
                break
            region = base
        for part in (parts.schedule, parts.scorer, parts.policy, parts.guidance, parts.cache, parts.proposer.constraint, *parts.hooks):
            used |= self._ctor_params(part)
        return used

    def build_parts(self) -> MaskedParts:
        from . import cache, constraints, guidance, hooks, policies, regions, schedules, scoring  # noqa: F401  (register parts)

        p = self.params
        steps = p["steps"]
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
            raise ConfigError(f"steps must be a positive integer (or None for one_per_step), got {steps!r}.")
        schedule = SCHEDULES.build(p["schedule"], p)
        if steps is None and schedule.needs_steps:
            raise ConfigError(
                f"schedule {p['schedule']!r} needs steps; pass steps=<positive int> (only one_per_step sets its own)."
            )
        region = REGIONS.build(p["region"], p)
        span_len = p["span_len"]
        if isinstance(span_len, bool) or not isinstance(span_len, int) or span_len < 1:
            raise ConfigError(f"span_len must be an integer >= 1 (1 = single tokens), got {span_len!r}.")
        if span_len > 1 and not isinstance(region, regions.Spans):
            region = regions.Spans(region, span_len=span_len, span_score=p["span_score"])
        policy = POLICIES.build(p["policy"], p)
        if policy.revises:  # a revising policy runs every scheduled step, masks left or not
            check_revising_steps(steps, getattr(getattr(region, "base", region), "steps_per_stage", None))
        hook_specs = p["hooks"]
        if isinstance(hook_specs, str) or not isinstance(hook_specs, (list, tuple)):
            hook_specs = (hook_specs,)
        try:
            hooks = tuple(HOOKS.build(h, p) for h in hook_specs)
        except ConfigError as e:  # name the parameter: the registry speaks of one "hook"
            raise ConfigError(f"hooks={p['hooks']!r}: {e}") from None
        return MaskedParts(
            schedule=schedule,
            scorer=SCORERS.build(p["scorer"], p),
            policy=policy,
            region=region,
            guidance=GUIDANCES.build(p["guidance"], p),
            proposer=TokenProposer(p["temperature_anneal"], p["suppress_ids"], CONSTRAINTS.build(p["constraint"], p)),
            hooks=hooks,
            steps=steps,
            cache=CACHES.build(p["cache"], p),
        )

    def generate(
        self,
        models: dict[str, Any],
        inputs: Any,
        config: DecodeConfig,
        generator: torch.Generator | None = None,
        cond: Any = None,
    ) -> MaskedDecodeResult:
        """Fill the masks of ``inputs`` (:class:`MaskedInputs`, a tensor or lists) with ``models["model"]``;
        ``cond`` is the batch's condition (the same as ``MaskedInputs.cond``; give it one way)."""
        self.check_models(models)
        model = models["model"]
        if not isinstance(model, MaskedModel):
            raise ConfigError(
                f"sampler {self.name!r} needs a MaskedTokenModel (or a ContinuousMaskedModel) as 'model', got "
                f"{type(model).__name__}; wrap a torch module with leapgen.models.TorchMaskedLM(module, mask_id=..., "
                "vocab_size=...)."
            )
        stats = new_stats(self, 0)
        with torch.inference_mode():
            res = masked_decode(model, inputs, self.parts, config, generator, stats=stats, cond=cond)
        # hand back ordinary tensors (inference tensors refuse in-place edits outside inference mode)
        res.tokens, res.generated = res.tokens.clone(), res.generated.clone()
        if res.trajectory is not None:
            res.trajectory = [t.clone() for t in res.trajectory]
        return res
