"""The pluggable parts of the masked loop: their interfaces, registries and the ``Stage`` they share.

One registry per kind of part (:data:`SCHEDULES`, :data:`SCORERS`, :data:`POLICIES`,
:data:`REGIONS`, :data:`GUIDANCES`, :data:`HOOKS`, :data:`CACHES`); implementations live in
``schedules.py``, ``scoring.py``, ``policies.py``, ``regions.py``, ``guidance.py``, ``hooks.py``
and ``cache.py`` and register themselves by name, so a new paper is a new *preset* (a parameter
set), not a new loop. Parts read the :class:`~leapgen.samplers.masked.state.MaskedDecodeState`;
only the loop (and hooks, through the state's ``fill``) writes it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ...models.condition import (
    MAX_GUIDANCE_SCALE,  # the one bound on guidance scales and weights, pipelines' too
)

if TYPE_CHECKING:  # pragma: no cover
    from ...models.masked_base import MaskedModel
    from .state import MaskedDecodeState


class PartRegistry:
    """Name -> part class for one kind of part (schedule, scorer, policy, region, guidance, hook, cache).

    ``build(spec, params)`` returns ``spec`` itself when it is already a part instance, else
    instantiates the class registered under the name ``spec`` with the entries of ``params``
    that its constructor accepts (the sampler's flat parameter dict), so parts validate their
    own parameters and raise :class:`ConfigError` on bad values.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type] = {}

    def register(self, name: str):
        def wrap(cls: type) -> type:
            if name in self._classes and self._classes[name] is not cls:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self._classes[name] = cls
            cls.part_name = name
            return cls

        return wrap

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: str) -> bool:
        return name in self._classes

    def get(self, name: str) -> type:
        if not isinstance(name, str) or name not in self._classes:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: {', '.join(self.names())}."
            )
        return self._classes[name]

    def build(self, spec: Any, params: dict[str, Any] | None = None) -> Any:
        if spec is None or isinstance(spec, (bool, int, float, bytes, list, tuple, dict, set)):
            # e.g. cache=True: a value, not a part; name one (a custom part is an object with part_name)
            raise ConfigError(
                f"{self.kind} must be one of the registered names ({', '.join(self.names())}) or a {self.kind} "
                f"object, got {spec!r}."
            )
        if not isinstance(spec, str):
            return spec  # an already-built part (custom parts plug in this way)
        cls = self.get(spec)
        sig = inspect.signature(cls.__init__)
        names = [n for n in sig.parameters if n != "self"]
        kwargs = {n: params[n] for n in names if params and n in params}
        return cls(**kwargs)


SCHEDULES = PartRegistry("schedule")
SCORERS = PartRegistry("scorer")
POLICIES = PartRegistry("policy")
REGIONS = PartRegistry("region")
GUIDANCES = PartRegistry("guidance")
HOOKS = PartRegistry("hook")
CACHES = PartRegistry("cache policy")
CONSTRAINTS = PartRegistry("constraint")


#: a step budget (``steps=``) that resolves, in every stage, to the row's masked units in it
PER_UNIT = "per_unit"


@dataclass
class Stage:
    """One sub-problem a region yields.

    * ``eligible``: bool ``[B, K, L]``, the generated positions decoded in this stage.
    * ``steps``: the stage's step budget (None: the schedule decides, e.g. one per step), one
      budget per row (``[B]`` tensor), or :data:`PER_UNIT`: as many steps as each row has masked
      units in the stage (the diffusion-LM presets' default: one step per generated token of
      every block, whatever the block's length).
    * ``units``: long ``[K, L]`` or ``[B, K, L]``, the unit (span) id of every position, ids in
      ``[0, num_units)``; None = every position is its own unit.
    * ``aggregate``: how a unit's score is formed from its positions' (``max``, ``min``, ``mean``, ``sum``).
    * ``codebook``: the codebook decoded, passed to the model as ``stage=`` (MAGNeT-style models);
      when set, only that codebook's positions are eligible, and the proposer filters and draws there alone.
    """

    eligible: Tensor
    steps: int | Tensor | str | None
    units: Tensor | None = None
    num_units: int = 0
    aggregate: str = "max"
    codebook: int | None = None
    name: str = "full"


class Schedule:
    """How many units of a stage stay masked after each step.

    ``total_steps(steps, n_initial)``: each row's step budget ``[B]`` (``steps`` is the stage's
    configured budget, possibly None). ``num_masked(step, total, n_initial)``: units still masked
    after 0-based ``step`` (before the loop's clamping: at least one revealed, at least one kept
    until the last step, none after it).
    """

    part_name: ClassVar[str] = "schedule"
    needs_steps: ClassVar[bool] = True

    def total_steps(self, steps: int | Tensor | None, n_initial: Tensor) -> Tensor:
        if steps is None:
            raise ConfigError(f"schedule {self.part_name!r} needs a step count; pass steps=<positive int>.")
        if isinstance(steps, Tensor):  # one budget per row (``[B]``)
            return steps.to(n_initial.device, n_initial.dtype).clamp(min=1)
        return torch.full_like(n_initial, int(steps))

    def num_masked(self, step: int, total: Tensor, n_initial: Tensor) -> Tensor:
        ratio = torch.full_like(total, step + 1, dtype=torch.float64) / total.double()
        # 1e-9 guards floor() against 12 coming out as 11.999999999999998
        return torch.floor(n_initial.double() * self.mask_ratio(ratio) + 1e-9).long()

    def mask_ratio(self, ratio: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class ConfidenceScorer:
    """``scorer(log_probs [A,K,L,V], proposal [A,K,L], state) -> confidence [A,K,L]``, higher = surer.

    ``log_probs`` are the log-probabilities of the distribution proposals were drawn from (the
    processed, temperature-scaled distribution; the raw one when greedy); ``mask_id`` has -inf.
    For continuous tokens there are no log-probabilities (``log_probs is None``): only scorers
    with ``needs_log_probs = False`` (``random``, MAR's random order) work there.
    """

    part_name: ClassVar[str] = "scorer"
    needs_log_probs: ClassVar[bool] = True

    def __call__(self, log_probs: Tensor | None, proposal: Tensor, state: MaskedDecodeState) -> Tensor:  # pragma: no cover
        raise NotImplementedError


class UnmaskPolicy:
    """``select(score [A,N], pool [A,N], target [A], state) -> keep_masked [A,N]`` (subset of pool).

    ``pool`` holds the units that compete this step: the masked ones, or for a policy that
    ``revises`` every generated unit of the stage (committed units bring the score they had when
    they were last predicted). Units of the pool not kept masked are committed; committed units
    kept masked are re-masked. ``target`` is the schedule's count of units to keep masked (after
    the loop's clamping); policies with ``uses_schedule = False`` ignore it.
    """

    part_name: ClassVar[str] = "policy"
    revises: ClassVar[bool] = False
    uses_schedule: ClassVar[bool] = True

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:  # pragma: no cover
        raise NotImplementedError


class Region:
    """``stages(state, steps) -> iterator of Stage``: which positions are decodable, stage by stage.

    Stages are produced lazily, so a stage may depend on what earlier stages decoded. ``steps`` is
    the sampler's budget: an int, one per row (``[B]`` tensor), None, or :data:`PER_UNIT` (the
    diffusion-LM presets' default), which a region passes on to its stages unchanged: it is
    resolved per stage when the stage is planned.
    """

    part_name: ClassVar[str] = "region"

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:  # pragma: no cover
        raise NotImplementedError


class Guidance:
    """``guidance(model, state, out [A,K,L,V or C]) -> out``: may run extra forwards (counted).

    For continuous models ``out`` holds the conditioning vectors, which guidance mixes the same way.
    The loop calls :meth:`guided_forward`, which by default runs the conditional forward and then
    ``__call__``; a guidance whose extra pass can share that forward (a doubled batch) overrides it.
    """

    part_name: ClassVar[str] = "guidance"

    def __call__(self, model: MaskedModel, state: MaskedDecodeState, logits: Tensor) -> Tensor:
        return logits

    def guided_forward(self, model: MaskedModel, state: MaskedDecodeState) -> Tensor:
        """The step's guided output for the active rows: the conditional forward, then guidance."""
        return self(model, state, state.forward(model))

    def check(self, state: MaskedDecodeState, model: MaskedModel) -> None:
        """Raise on inputs this guidance cannot work with (called once before decoding)."""


class Hook:
    """``hook.after_step(state)`` runs after every commit; it may fill masked positions
    (through ``state.fill``, never others)."""

    part_name: ClassVar[str] = "hook"

    def start(self, state: MaskedDecodeState) -> None:
        """Called once before decoding (validate, allocate)."""

    def after_step(self, state: MaskedDecodeState) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class CachePolicy:
    """Whether and how the loop uses the model's :class:`~leapgen.models.masked_base.MaskedCache`.

    ``mode``: None (no cache), ``"prefix"`` or ``"dual"``. Per stage ``window(state, stage)``
    gives the positions ``(lo, hi)`` recomputed by windowed forwards (computed once per stage);
    ``refresh(step)`` says whether 0-based ``step`` of the stage runs a full refresh forward
    (always the first step of a stage: block boundaries refresh). ``cache_refresh`` = refresh
    every that many steps within a stage as well (1 = every step: identical to no cache).
    """

    part_name: ClassVar[str] = "cache policy"
    mode: ClassVar[str | None] = None
    #: the policy recomputes position subsets (``positions``): the model must support them
    needs_positions: ClassVar[bool] = False

    def __init__(self, cache_refresh: int | None = None) -> None:
        if cache_refresh is not None and (
            isinstance(cache_refresh, bool) or not isinstance(cache_refresh, int) or cache_refresh <= 0
        ):
            raise ConfigError(f"cache_refresh must be a positive integer (steps between refreshes) or None, got {cache_refresh!r}.")
        self.cache_refresh = cache_refresh

    def refresh(self, step: int) -> bool:
        return step == 0 or (self.cache_refresh is not None and step % self.cache_refresh == 0)

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:  # pragma: no cover
        return None

    def positions(self, state: MaskedDecodeState) -> Tensor | None:
        """Called before every forward: sorted long positions that a cached forward recomputes
        instead of the stage's window (dKV-Cache), shared by the active rows (``[n]``) or per
        active row (``[A, n]``; on a model without ``supports_row_positions`` the loop uses their
        union), or None (use the window). Only used when the step does not refresh; policies may keep per-decode
        bookkeeping in ``state.policy_state``."""
        return None


class Constraint:
    """``disallowed(state, vocab) -> bool [A, V] | [A, K, L, V] | None``: ids the active rows may not
    propose this step (None = no restriction). ``filter_commits(state, proposal, commit, unit_of,
    unit_score, remask, final, log_probs)`` -> ``(commit [A, P], proposal)``: the subset of the
    step's chosen commits that is kept (the rest stays masked) and the proposals, re-drawn where a
    ``final`` row (one that must commit everything) needed it; by default all, unchanged. See
    ``constraints.py``."""

    part_name: ClassVar[str] = "constraint"

    def disallowed(self, state: MaskedDecodeState, vocab: int) -> Tensor | None:  # pragma: no cover - interface
        return None

    def filter_commits(
        self,
        state: MaskedDecodeState,
        proposal: Tensor,
        commit: Tensor,
        unit_of: Tensor,
        unit_score: Tensor,
        remask: Tensor | None = None,
        final: Tensor | None = None,
        log_probs: Callable[[], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Kept commits (within ``commit``: at least the best-scoring unit, and all of a ``final``
        row's) and the proposals."""
        return commit, proposal


def finite(x: Any, name: str, *, low: float | None = None, high: float | None = None, open_low: bool = False) -> float:
    """Validate a float parameter (used by the parts)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {x!r}.") from None
    if not math.isfinite(v) or (low is not None and (v <= low if open_low else v < low)) or (high is not None and v > high):
        lo = "" if low is None else (f"> {low}" if open_low else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        raise ConfigError(f"{name} must be a finite number {' and '.join(s for s in (lo, hi) if s)}, got {x!r}.")
    return v


_finite = finite  # the name the parts used before the split


def guidance_scale(x: Any, name: str, *, low: float | None = None) -> float:
    """Validate a guidance scale or weight: a finite number in ``[low, MAX_GUIDANCE_SCALE]``
    (``low`` None: ``-MAX_GUIDANCE_SCALE``)."""
    return finite(x, name, low=-MAX_GUIDANCE_SCALE if low is None else low, high=MAX_GUIDANCE_SCALE)
