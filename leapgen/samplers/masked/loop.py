"""The one masked-decoding loop.

Every masked / discrete-diffusion method runs the same loop (reference notes, masked.md §0)::

    for stage in region.stages(state):                 # full | blocks | codebook stages | fragments (x spans)
        while the stage has masked units:
            out    = model(x, cache?)                  # logits, or a continuous model's conditioning vectors
            out    = guidance(model, state, out)       # (+ a guidance pass: a doubled batch or one more forward)
            cand   = propose(out)                      # a token (or a vector from the model's head) everywhere
            score  = scorer(log_probs, cand)           # prob | log-prob + annealed Gumbel | margin | random ...
            target = schedule.num_masked(step)         # how many units stay masked after this step
            keep   = policy.select(score, pool, target)   # top-k | threshold | remask-lowest (may revise)
            commit(cand where not kept); re-mask kept units the policy may revise
            hooks(state)                               # early exit, end-token truncation, trajectory

A *unit* is what is committed atomically: one position, or one span of positions (MAGNeT).
The state is a :class:`~leapgen.models.masked_base.MaskedState`: token ids over K codebooks or
continuous vectors, with a known-mask. The parts are registered by name (``parts.py``); the
state and inputs live in ``state.py``, one step's proposal and commit logic in ``step.py``, the
cache policies in ``cache.py`` and the configurable sampler in ``sampler.py``. The loop owns the
model's :class:`~leapgen.models.masked_base.MaskedCache` when a cache policy asks for one.

Invariants the loop enforces (and ``tests/test_masked_engine.py`` / ``test_masked_state.py`` check):

* positions that were known in the input (prompt, fragments, class tokens) and padding are never
  written;
* under commit-only policies (``policy.revises == False``) a committed value never changes;
* with a schedule-driven commit-only policy every step reveals at least one unit and keeps at
  least one masked until the stage's last step, which reveals the rest: a stage takes exactly its
  configured number of steps when it has at least that many units, fewer otherwise;
* the threshold policy commits at least the most confident unit per step, so it terminates;
* one host synchronisation per step (choosing the active rows), plus one per stage.

This module re-exports the names that used to live here, so ``from
leapgen.samplers.masked.loop import MaskedInputs, MaskedSampler`` keeps working.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ...errors import ConfigError, InputError
from ...models.condition import Condition
from ...models.masked_base import ContinuousMaskedModel, MaskedModel
from ..base import DecodeConfig, DecodeStats
from .parts import (  # noqa: F401  (re-exported: the names that used to live here)
    CACHES,
    GUIDANCES,
    HOOKS,
    POLICIES,
    REGIONS,
    SCHEDULES,
    SCORERS,
    CachePolicy,
    ConfidenceScorer,
    Guidance,
    Hook,
    PartRegistry,
    Region,
    Schedule,
    Stage,
    UnmaskPolicy,
    _finite,
)
from .state import MaskedDecodeResult, MaskedDecodeState, MaskedInputs, select_rows  # noqa: F401
from .step import TokenProposer, commit_step, lowest, plan_stage, unit_any  # noqa: F401


@dataclass
class MaskedParts:
    """The pluggable parts of one decode (built by ``MaskedSampler`` from its parameters)."""

    schedule: Schedule
    scorer: ConfidenceScorer
    policy: UnmaskPolicy
    region: Region
    guidance: Guidance
    proposer: TokenProposer = field(default_factory=TokenProposer)
    hooks: tuple[Hook, ...] = ()
    steps: int | Tensor | str | None = 12  # str: parts.PER_UNIT
    cache: CachePolicy | None = None


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    """Raise ``InputError`` when ``generator`` lives on another device type than the model."""
    if generator is not None and generator.device.type != device.type:
        raise InputError(
            f"the generator is on {generator.device} but the model on {device}; randomness is drawn on the "
            f"model's device: pass torch.Generator(device={str(device)!r}).manual_seed(seed)."
        )


def _check_parts(model: MaskedModel, parts: MaskedParts, continuous: bool) -> None:
    cache = parts.cache
    if cache is not None and cache.mode is not None and not model.supports_cache:
        raise ConfigError(
            f"cache={cache.part_name!r} needs a model that supports a cache ({type(model).__name__}.supports_cache is "
            "False); use cache='none' or a model implementing windowed forwards (see MaskedCache)."
        )
    if continuous and parts.scorer.needs_log_probs:
        raise ConfigError(
            f"scorer {parts.scorer.part_name!r} needs token probabilities, which a continuous model has not; "
            "use scorer='random' (MAR's random order)."
        )


def _start_state(
    model: MaskedModel,
    inputs: Any,
    parts: MaskedParts,
    config: DecodeConfig,
    generator: torch.Generator | None,
    cond: Any = None,
) -> MaskedDecodeState:
    continuous = isinstance(model, ContinuousMaskedModel)
    mask_id = None if continuous else model.mask_id
    inputs = MaskedInputs.coerce(
        inputs,
        mask_id=mask_id,
        num_codebooks=getattr(model, "num_codebooks", 1),
        pad_id=config.pad_token_id,
        token_dim=model.token_dim if continuous else None,
    )
    if cond is not None and inputs.cond is not None:
        raise ConfigError("the condition was given twice (cond= and MaskedInputs.cond); give it once.")
    cond = inputs.cond if cond is None else cond  # the caller's inputs are left as they were
    device = model.device
    check_generator(generator, device)
    _check_parts(model, parts, continuous)
    x = inputs.to_state(mask_id, device)
    if isinstance(cond, (Tensor, Condition)):
        cond = cond.to(device)  # a condition built on the host follows the model (the caller's stays put)
    generated = x.unknown.clone()  # [B, K, L]
    score = torch.full(generated.shape, float("inf"), dtype=torch.float64, device=device).masked_fill(generated, float("-inf"))
    return MaskedDecodeState(
        x=x,
        generated=generated,
        mask_id=mask_id,
        vocab_size=None if continuous else model.vocab_size,
        config=config,
        generator=generator,
        cond=cond,
        score=score,
        cache_policy=parts.cache if parts.cache is not None and parts.cache.mode is not None else None,
    )


def masked_decode(
    model: MaskedModel,
    inputs: Any,
    parts: MaskedParts,
    config: DecodeConfig,
    generator: torch.Generator | None = None,
    *,
    stats: DecodeStats | None = None,
    cond: Any = None,
) -> MaskedDecodeResult:
    """Decode every unknown position of ``inputs`` with ``parts``. The one masked loop. ``cond``: the
    batch's condition, when ``inputs`` does not carry it (``MaskedInputs.cond``)."""
    t0 = time.perf_counter()
    if config.repetition_penalty != 1.0:
        raise ConfigError("repetition_penalty is not defined for masked decoding; leave it at 1.0.")
    if config.presence_penalty != 0.0 or config.frequency_penalty != 0.0:
        raise ConfigError("presence_penalty / frequency_penalty are not defined for masked decoding (no generated "
                          "prefix to count); leave them at 0.")
    state = _start_state(model, inputs, parts, config, generator, cond)
    b, _, _ = state.generated.shape
    stats = stats if stats is not None else DecodeStats(sampler="masked", batch_size=b)
    stats.batch_size = b
    parts.guidance.check(state, model)
    for hook in parts.hooks:
        hook.start(state)
    f0 = model.forwards
    n_gen = state.generated.reshape(b, -1).sum(1)
    bar = None
    if config.progress:
        bar = tqdm(total=int(n_gen.sum()), desc=stats.sampler or "masked", leave=False)
    revealed_steps: list[Tensor] = []
    n_stages = 0

    for stage in parts.region.stages(state, parts.steps):
        n_stages += 1
        state.stage = stage
        plan = plan_stage(state, stage, parts)
        if state.cache_policy is not None:
            state.cache_window = state.cache_policy.window(state, stage)
        step = 0
        while True:
            masked_pos = state.masked.reshape(b, -1) & plan.elig
            masked_units = unit_any(masked_pos, plan.unit_of, plan.n_units)
            n_masked = masked_units.sum(1)
            rows = (n_masked > 0).nonzero().squeeze(1)  # the step's one host sync
            if rows.numel() == 0:
                break
            if step >= plan.max_steps:  # pragma: no cover - a part broke the >= 1-per-step contract
                raise RuntimeError(f"masked decoding did not finish stage {stage.name!r} in {plan.max_steps} steps")
            state.rows, state.all_rows, state.step = rows, rows.numel() == b, step
            state.total, state.n_initial = state.active(plan.total), state.active(plan.n0)
            state.n_masked_units = state.active(n_masked)
            masked_before = state.active(state.masked.reshape(b, -1).sum(1))
            policy = state.cache_policy
            state.cache_positions = None if policy is None else policy.positions(state)
            state.refresh_now = policy is None or (
                state.cache_window is None and state.cache_positions is None
            ) or policy.refresh(step)

            logits = parts.guidance.guided_forward(model, state)
            state.logits = logits
            proposal, log_probs = parts.proposer(logits, state, model)
            conf = parts.scorer(log_probs, proposal, state).to(torch.float64)
            commit_step(state, plan, parts, proposal, conf, masked_pos, masked_units)

            for hook in parts.hooks:
                hook.after_step(state)
            revealed = masked_before - state.active(state.masked.reshape(b, -1).sum(1))
            revealed_steps.append(revealed)
            if bar is not None:
                bar.update(max(0, int(revealed.sum())))
            step += 1
            state.global_step += 1
            if config.step_callback is not None:  # the pipelines' callback_on_step_end (stats are filled at the end)
                config.step_callback(state.global_step, stats)

    if bar is not None:
        bar.close()
    if bool(state.masked.any()):  # pragma: no cover - a region left positions out
        raise RuntimeError("masked decoding ended with masked positions left; the region did not cover them")
    return _finish(state, model, stats, revealed_steps, n_gen, model.forwards - f0, n_stages, t0)


def _finish(
    state: MaskedDecodeState,
    model: MaskedModel,
    stats: DecodeStats,
    revealed_steps: list[Tensor],
    n_gen: Tensor,
    forwards: int,
    n_stages: int,
    t0: float,
) -> MaskedDecodeResult:
    """Statistics and the result tensors (host transfers happen here, once)."""
    b = state.batch_size
    if revealed_steps:
        flat = torch.cat(revealed_steps).tolist()
        at = 0
        for r in revealed_steps:
            stats.accepted_per_step.append(flat[at : at + r.numel()])
            at += r.numel()
    stats.target_forwards += forwards
    stats.new_tokens = int(n_gen.sum())
    stats.baseline_steps = int(n_gen.max())
    extra = {k: (v.item() if isinstance(v, Tensor) else v) for k, v in state.extra.items()}
    stats.extra.update(
        steps=state.global_step,
        stages=n_stages,
        forwards_per_step=forwards / max(1, state.global_step),
        hook_filled=int(state.hook_filled),
        **extra,
    )
    if state.caches:
        if state.cache_policy is not None:
            stats.extra.setdefault("cache", state.cache_policy.part_name)
        stats.extra["cache_refreshes"] = sum(c.refreshes for c in state.caches.values())
        stats.extra["cache_reuses"] = sum(c.reuses for c in state.caches.values())
    stats.wall_time = time.perf_counter() - t0
    squeeze = state.squeeze
    out = state.tokens[:, 0] if squeeze else state.tokens
    gen_out = state.generated[:, 0] if squeeze or state.continuous else state.generated
    if state.continuous:
        seqs: list[list[int]] = [[] for _ in range(b)]
    elif state.attention_mask is None:
        seqs = [out[i].reshape(-1).tolist() for i in range(b)]
    else:  # drop padding wherever it is
        am = state.attention_mask
        seqs = [out[i][..., am[i]].reshape(-1).tolist() for i in range(b)]
    traj = None
    if state.trajectory is not None:
        traj = [t[:, 0] if squeeze else t for t in state.trajectory]
    return MaskedDecodeResult(sequences=seqs, stats=stats, tokens=out, generated=gen_out, trajectory=traj)


def __getattr__(name: str) -> Any:
    """``MaskedSampler`` moved to ``sampler.py``; keep ``from .loop import MaskedSampler`` working."""
    if name == "MaskedSampler":
        from .sampler import MaskedSampler

        return MaskedSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
