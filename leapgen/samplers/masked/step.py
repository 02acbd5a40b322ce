"""One step of the masked loop: propose values, group positions into units, decide and commit.

* :class:`TokenProposer` draws a value for every position: a token from the (guided) logits
  (temperature / top-k / top-p, optional linear temperature anneal), or for a continuous model a
  vector from its per-token head (``model.sample_tokens(z, generator, temperature)``). On a codebook
  stage only the stage's codebook is filtered and sampled (the others, never committed there, get
  their argmax).
* :class:`StagePlan` (built once per stage by :func:`plan_stage`) maps positions to units (single
  positions or spans) and fixes each row's step budget.
* :func:`commit_step` turns scores into the policy's decision under the schedule and writes it:
  commits proposals where the unit is not kept masked, re-masks revised units (Mask-Predict).
  With a constraint, the chosen commits first pass its ``filter_commits`` (``constraints.py``),
  which keeps masked those that would break it jointly with the step's more confident commits.

All maths stays on the logits' device; randomness comes only from ``state.generator``. A
constraint adds one host sync per step (the most units a row commits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...errors import ConfigError
from ...models.masked_base import ContinuousMaskedModel, MaskedModel
from ..base import check_token_ids
from ..logits import LogitsProcessor, sample
from .parts import PER_UNIT, Stage

if TYPE_CHECKING:  # pragma: no cover
    from .loop import MaskedParts
    from .state import MaskedDecodeState


class TokenProposer:
    """Draws a value for every position from the (guided) model output.

    Uses ``DecodeConfig``'s temperature / top-k / top-p through :class:`LogitsProcessor`
    (temperature 0 = argmax). ``temperature_anneal="linear"`` scales the temperature by
    ``(total - step) / total``, floored at 0.01 (MAGNeT). ``mask_id`` (when inside the vocabulary)
    and ``suppress_ids`` are never proposed. For continuous models the (annealed) temperature is
    passed to the model's head.
    """

    ANNEALS = ("none", "linear")

    def __init__(self, temperature_anneal: str = "none", suppress_ids: Sequence[int] = (), constraint: Any = None) -> None:
        if temperature_anneal not in self.ANNEALS:
            raise ConfigError(f"temperature_anneal must be one of {self.ANNEALS}, got {temperature_anneal!r}.")
        self.temperature_anneal = temperature_anneal
        self.suppress_ids = check_token_ids("suppress_ids", suppress_ids)
        #: a ``Constraint`` (``constraints.py``) or None: ids ruled out per row and step
        self.constraint = constraint

    def ban(self, logits: Tensor, state: MaskedDecodeState) -> Tensor:
        banned = [t for t in (state.mask_id, *self.suppress_ids) if t is not None and 0 <= t < logits.shape[-1]]
        if banned:
            logits = logits.clone()
            logits[..., banned] = float("-inf")
        return logits

    def temperatures(self, rows: int, state: MaskedDecodeState, device: torch.device) -> Tensor:
        """Float64 ``[A]``: each active row's sampling temperature at this step."""
        temp = torch.full((rows,), float(state.config.temperature), dtype=torch.float64, device=device)
        if self.temperature_anneal == "linear":
            total = state.total.double().to(device)
            temp = (temp * (total - state.step) / total).clamp(min=1e-2)
        return temp

    def __call__(
        self, logits: Tensor, state: MaskedDecodeState, model: MaskedModel | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``(proposal, log_probs)``: ids ``[A,K,L]`` and ``[A,K,L,V]``, or vectors ``[A,L,D]`` and None."""
        config = state.config
        if state.continuous:
            return self.continuous(logits, state, model), None
        logits = self.ban(logits, state)
        bad = None if self.constraint is None else self.constraint.disallowed(state, logits.shape[-1])
        if bad is not None and bad.dim() == 2:
            bad = bad[:, None, None, :]
        if config.temperature == 0.0:
            lp = logits.log_softmax(-1)
            if bad is None:
                return logits.argmax(-1), lp
            # pick among allowed ids; score by the unconstrained probability
            lp = lp.masked_fill(bad, float("-inf"))
            return lp.argmax(-1), lp
        cb = None if state.stage is None else state.stage.codebook
        if bad is None and cb is not None and logits.shape[1] > 1:
            # a codebook stage (MAGNeT, MaskGCT S2A) commits only codebook ``cb``: filter and draw
            # there alone; the other codebooks get the (never committed) argmax and raw log-probs
            proposal, log_probs = logits.argmax(-1), logits.log_softmax(-1)
            proposal[:, cb : cb + 1], log_probs[:, cb : cb + 1] = self.draw(logits[:, cb : cb + 1], state)
            return proposal, log_probs
        if bad is None:
            return self.draw(logits, state)
        processed = self.filtered(logits, state)
        lp = processed.log_softmax(-1).masked_fill(bad, float("-inf"))
        # a position with every id ruled out keeps its unconstrained draw (never committed: p = 0)
        dead = torch.isneginf(lp).all(-1, keepdim=True)
        probs = torch.where(dead, processed.softmax(-1), lp.exp())
        return sample(probs, state.generator), lp

    def log_probs(self, state: MaskedDecodeState) -> Tensor:
        """``[A, K, L, V]``: the (unconstrained) log-probabilities this step's token proposals were
        drawn from, recomputed from ``state.logits`` (no forward): a constraint's re-draws use it."""
        logits = self.ban(state.logits, state)
        if state.config.temperature == 0.0:
            return logits.log_softmax(-1)
        return self.filtered(logits, state).log_softmax(-1)

    def filtered(self, logits: Tensor, state: MaskedDecodeState) -> Tensor:
        """Logits ``[A, K, L, V]`` at each row's (annealed) temperature, top-k / top-p filtered."""
        # the temperature is applied here, per row (it may be annealed); the processor then only filters
        temp = self.temperatures(logits.shape[0], state, logits.device)
        scaled = logits / temp.to(logits.dtype)[:, None, None, None]
        return LogitsProcessor(replace(state.config, temperature=1.0)).process(scaled)

    def draw(self, logits: Tensor, state: MaskedDecodeState) -> tuple[Tensor, Tensor]:
        """``(proposal, log_probs)`` drawn from the filtered distribution of ``logits``."""
        processed = self.filtered(logits, state)
        return sample(processed.softmax(-1), state.generator), processed.log_softmax(-1)

    def continuous(self, z: Tensor, state: MaskedDecodeState, model: MaskedModel | None) -> Tensor:
        """Vectors ``[A, L, D]`` from conditioning vectors ``z [A, 1, L, C]`` via the model's head."""
        if not isinstance(model, ContinuousMaskedModel):
            raise ConfigError("continuous proposals need a ContinuousMaskedModel (its sample_tokens head).")
        a, _, length, c = z.shape
        temp = self.temperatures(a, state, z.device)
        temp = temp[:, None].expand(a, length).reshape(-1).to(z.dtype)
        vals = model.sample_tokens(z.reshape(a * length, c), state.generator, temp)
        return vals.reshape(a, length, -1)


# --------------------------------------------------------------------------------------------
# units


def unit_any(mask: Tensor, unit_of: Tensor, n_units: int) -> Tensor:
    """``[A, P]`` bool -> ``[A, N]`` bool: does any position of each unit have the flag."""
    out = torch.zeros(mask.shape[0], n_units, dtype=torch.long, device=mask.device)
    return out.scatter_reduce(1, unit_of, mask.long(), reduce="amax").bool()


def unit_score(score: Tensor, valid: Tensor, unit_of: Tensor, n_units: int, how: str) -> Tensor:
    """Aggregate position scores ``[A, P]`` (only ``valid`` ones) into unit scores ``[A, N]``."""
    a = score.shape[0]
    dt = score.dtype
    if how == "max":
        src = score.masked_fill(~valid, float("-inf"))
        return torch.full((a, n_units), float("-inf"), dtype=dt, device=score.device).scatter_reduce(
            1, unit_of, src, reduce="amax"
        )
    if how == "min":
        src = score.masked_fill(~valid, float("inf"))
        return torch.full((a, n_units), float("inf"), dtype=dt, device=score.device).scatter_reduce(
            1, unit_of, src, reduce="amin"
        )
    src = score.masked_fill(~valid, 0.0)
    total = torch.zeros(a, n_units, dtype=dt, device=score.device).scatter_add(1, unit_of, src)
    if how == "sum":
        return total
    count = torch.zeros(a, n_units, dtype=dt, device=score.device).scatter_add(1, unit_of, valid.to(dt))
    return total / count.clamp(min=1)


def lowest(score: Tensor, pool: Tensor, k: Tensor) -> Tensor:
    """Bool ``[A, N]``: the ``k[a]`` lowest-scoring units of ``pool`` in each row (ties: lower index)."""
    s = score.masked_fill(~pool, float("inf"))
    order = torch.sort(s, dim=1, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(s.shape[1], device=s.device).expand_as(order))
    return pool & (rank < k[:, None])


@dataclass
class StagePlan:
    """Per-stage constants: eligible positions ``elig [B, P]``, position -> unit ``unit_of [B, P]``,
    ``n_units``, eligible units ``unit_elig [B, N]``, masked units at the start ``n0 [B]`` and each
    row's step budget ``total [B]``; ``max_steps`` bounds the stage (every step commits >= 1 unit)."""

    stage: Stage
    elig: Tensor
    unit_of: Tensor
    n_units: int
    unit_elig: Tensor
    n0: Tensor
    total: Tensor
    max_steps: int


def plan_stage(state: MaskedDecodeState, stage: Stage, parts: MaskedParts) -> StagePlan:
    """Units and step budgets of one stage (one host sync, for the safety bound)."""
    b, k, seq = state.generated.shape
    device = state.generated.device
    elig = (stage.eligible.to(device) & state.generated).reshape(b, -1)  # [B, P]
    if stage.units is None:
        unit_of = torch.arange(k * seq, device=device).expand(b, -1)
        n_units = k * seq
    else:
        unit_of = stage.units.to(device).reshape(-1 if stage.units.dim() == 3 else 1, k * seq).expand(b, -1)
        n_units = int(stage.num_units)
    unit_elig = unit_any(elig, unit_of, n_units)
    n0 = unit_any(elig & state.masked.reshape(b, -1), unit_of, n_units).sum(1)
    policy, schedule = parts.policy, parts.schedule
    steps = n0.clamp(min=1) if isinstance(stage.steps, str) and stage.steps == PER_UNIT else stage.steps
    total = schedule.total_steps(steps, n0) if policy.uses_schedule else n0.clamp(min=1)
    # every step commits >= 1 unit (or, for revising policies, the schedule ends at step total-1)
    max_steps = int(torch.maximum(n0.max(), total.max())) + 1
    return StagePlan(stage, elig, unit_of, n_units, unit_elig, n0, total, max_steps)


def commit_step(
    state: MaskedDecodeState,
    plan: StagePlan,
    parts: MaskedParts,
    proposal: Tensor,
    conf: Tensor,
    masked_pos: Tensor,
    masked_units: Tensor,
) -> None:
    """Decide which units of the active rows stay masked and write the decision into the state.

    ``proposal`` / ``conf``: the active rows' proposals and position confidences; ``masked_pos``
    ``[B, P]`` / ``masked_units`` ``[B, N]``: what was masked before this step (whole batch).
    With a constraint (``parts.proposer.constraint``), commits it rejects jointly stay masked for a
    later step (the most confident unit is always committed, so a step still commits >= 1 unit);
    on a row's last scheduled step, where every masked unit must be committed, a rejected position
    is re-drawn from this step's distribution among the ids the constraint allows instead (no
    forward), so the step budget and the loop's invariants hold.
    """
    rows, policy, schedule = state.rows, parts.policy, parts.schedule
    a = rows.numel()
    _, k, seq = state.generated.shape
    r_elig = state.active(plan.elig)
    r_masked = state.active(masked_pos)
    r_units = state.active(plan.unit_of)
    old_score = state.active(state.score).reshape(a, -1)
    pos_score = torch.where(r_masked, conf.reshape(a, -1), old_score)
    u_score = unit_score(pos_score, r_elig, r_units, plan.n_units, plan.stage.aggregate)
    pool = state.active(plan.unit_elig) if policy.revises else state.active(masked_units)
    n_pool = pool.sum(1)
    last = step_is_last(state)
    if policy.uses_schedule:
        sched = schedule.num_masked(state.step, state.total, state.n_initial)
        if policy.revises:
            target = torch.minimum(sched.clamp(min=0), n_pool)
        else:  # reveal >= 1, keep >= 1 masked until the last step
            target = torch.minimum(sched.clamp(min=1), n_pool - 1).clamp(min=0)
        target = torch.where(last, torch.zeros_like(target), target)
    else:
        target = torch.zeros_like(n_pool)
    keep_units = policy.select(u_score, pool, target, state) & pool
    keep_pos = keep_units.gather(1, r_units) & r_elig

    # commit proposals at masked positions not kept masked; re-mask revised positions
    commit = r_masked & ~keep_pos
    remask = (keep_pos & ~r_masked) if policy.revises else None
    constraint = getattr(parts.proposer, "constraint", None)
    if constraint is not None and not state.continuous:
        # commits that break the constraint jointly with the step's more confident ones stay
        # masked (the most confident one is always kept: >= 1 commit per step); on the last
        # scheduled step (everything is committed) they are re-drawn among the allowed ids
        final = last if policy.uses_schedule else torch.zeros_like(last)
        commit, proposal = constraint.filter_commits(
            state, proposal, commit, r_units, u_score, remask, final, lambda: parts.proposer.log_probs(state)
        )
    state.x.commit(commit.reshape(a, k, seq), proposal, rows)
    new_score = torch.where(commit, conf.reshape(a, -1), old_score)
    if remask is not None:
        # a re-masked position keeps its score: Mask-Predict re-predicts it next step
        state.x.remask(remask.reshape(a, k, seq), rows)
    state.score[rows] = new_score.reshape(a, k, seq)


def step_is_last(state: MaskedDecodeState) -> Tensor:
    """Bool ``[A]``: this is the active row's last scheduled step of the stage."""
    return state.step >= state.total - 1
