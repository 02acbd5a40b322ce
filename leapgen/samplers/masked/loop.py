"""The one masked-decoding loop, its inputs, state and the registries of its parts.

Every masked / discrete-diffusion method runs the same loop (reference notes, masked.md §0)::

    for stage in region.stages(state):                 # full | blocks | codebook stages | fragments (x spans)
        while the stage has masked units:
            logits = guidance(model, state, model(x))  # one forward (+ one per guidance pass)
            cand   = propose(logits)                   # a token for every masked position
            score  = scorer(log_probs, cand)           # prob | log-prob + annealed Gumbel | margin | ...
            target = schedule.num_masked(step)         # how many units stay masked after this step
            keep   = policy.select(score, pool, target)   # top-k | threshold | remask-lowest (may revise)
            commit(cand where not kept); re-mask kept units the policy may revise
            hooks(state)                               # early exit, end-token truncation, trajectory

A *unit* is what is committed atomically: one position, or one span of positions (MAGNeT).
The parts are small classes registered by name in one registry per kind (:data:`SCHEDULES`,
:data:`SCORERS`, :data:`POLICIES`, :data:`REGIONS`, :data:`GUIDANCES`, :data:`HOOKS`), so a new
paper is a new *preset* (a parameter set, ``presets.py``), not a new loop.

Invariants the loop enforces (and ``tests/test_masked_engine.py`` checks):

* positions that were not ``mask_id`` in the input (prompt, fragments, class tokens) and padding
  are never written;
* under commit-only policies (``policy.revises == False``) a committed token never changes;
* with a schedule-driven commit-only policy every step reveals at least one unit and keeps at
  least one masked until the stage's last step, which reveals the rest: a stage takes exactly its
  configured number of steps when it has at least that many units, fewer otherwise;
* the threshold policy commits at least the most confident unit per step, so it terminates.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ...errors import ConfigError, InputError
from ...models.base import MaskedTokenModel
from ..base import DecodeConfig, DecodeResult, DecodeStats, Sampler, new_stats
from ..logits import LogitsProcessor, sample

# --------------------------------------------------------------------------------------------
# part registries


class PartRegistry:
    """Name -> part class for one kind of part (schedule, scorer, policy, region, guidance, hook).

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


# --------------------------------------------------------------------------------------------
# inputs


@dataclass
class MaskedInputs:
    """What a masked sampler generates from: partly masked sequences.

    * ``tokens``: long ``[B, L]`` (one stream) or ``[B, K, L]`` (K codebooks). Positions holding the
      model's ``mask_id`` are generated; every other position is *fixed* (prompt, fragment,
      class token, already known codebooks) and is never overwritten.
    * ``attention_mask``: bool ``[B, L]``, False on right-padding of rows shorter than L (padding is
      neither generated nor returned). None: every position is real.
    * ``cond``: the model's condition (class labels, text embeddings, ...): None, a tensor or list
      with the batch first, or a dict of those. Rows are selected from it as rows finish.

    Samplers also accept a plain tensor, or a list of token lists (rows may differ in length; they
    are right-padded with ``DecodeConfig.pad_token_id``), or for K codebooks a list of ``[K][L]``
    lists. :meth:`from_prompts` builds ``prompt + [mask] * n (+ suffix)`` rows.
    """

    tokens: Tensor
    cond: Any = None
    attention_mask: Tensor | None = None

    @classmethod
    def from_prompts(
        cls,
        prompts: Sequence[Sequence[int]],
        num_masks: int | Sequence[int],
        mask_id: int,
        *,
        suffix: Sequence[int] = (),
        cond: Any = None,
        pad_id: int = 0,
    ) -> MaskedInputs:
        """Rows ``prompt + [mask_id] * n + suffix`` (n per row or shared), right-padded."""
        counts = [num_masks] * len(prompts) if isinstance(num_masks, int) else list(num_masks)
        if len(counts) != len(prompts):
            raise InputError(f"num_masks has {len(counts)} entries for {len(prompts)} prompts.")
        rows = [list(p) + [mask_id] * int(n) + list(suffix) for p, n in zip(prompts, counts)]
        out = cls.coerce(rows, mask_id=mask_id, num_codebooks=1, pad_id=pad_id)
        out.cond = cond
        return out

    @classmethod
    def coerce(cls, inputs: Any, *, mask_id: int, num_codebooks: int, pad_id: int = 0) -> MaskedInputs:
        """Turn a tensor / list of rows / MaskedInputs into a validated MaskedInputs."""
        if isinstance(inputs, MaskedInputs):
            out = cls(inputs.tokens, inputs.cond, inputs.attention_mask)
        elif isinstance(inputs, Tensor):
            out = cls(inputs)
        elif isinstance(inputs, (list, tuple)):
            out = cls._from_lists(list(inputs), num_codebooks, pad_id)
        else:
            raise InputError(
                f"masked samplers take MaskedInputs, a token tensor or a list of token lists, got "
                f"{type(inputs).__name__}."
            )
        out._validate(mask_id, num_codebooks)
        return out

    @classmethod
    def _from_lists(cls, rows: list, num_codebooks: int, pad_id: int) -> MaskedInputs:
        if not rows:
            raise InputError("no input rows were given.")
        if num_codebooks == 1:
            if not all(isinstance(r, (list, tuple)) and all(isinstance(t, int) for t in r) for r in rows):
                raise InputError("each row must be a list of integer token ids (mask_id where to generate).")
            lengths = [len(r) for r in rows]
            nested = [[list(r)] for r in rows]
        else:
            ok = all(isinstance(r, (list, tuple)) and len(r) == num_codebooks for r in rows)
            if not ok:
                raise InputError(
                    f"for a model with {num_codebooks} codebooks each row must be a list of {num_codebooks} token lists."
                )
            lengths = []
            for i, r in enumerate(rows):
                lens = {len(c) for c in r}
                if len(lens) != 1:
                    raise InputError(f"row {i}: its codebooks have different lengths {sorted(lens)}.")
                lengths.append(lens.pop())
            nested = [[list(c) for c in r] for r in rows]
        if min(lengths) == 0:
            raise InputError(f"row {lengths.index(0)} is empty; give at least one (masked) position.")
        width = max(lengths)
        tokens = torch.full((len(rows), num_codebooks, width), pad_id, dtype=torch.long)
        for i, r in enumerate(nested):
            tokens[i, :, : lengths[i]] = torch.tensor(r, dtype=torch.long)
        attn = None
        if min(lengths) != width:
            attn = torch.arange(width)[None] < torch.tensor(lengths)[:, None]
        if num_codebooks == 1:
            tokens = tokens[:, 0]
        return cls(tokens, None, attn)

    def _validate(self, mask_id: int, num_codebooks: int) -> None:
        t = self.tokens
        want = 2 if num_codebooks == 1 else 3
        if t.dim() != want or (want == 3 and t.shape[1] != num_codebooks):
            shape = "[B, L]" if want == 2 else f"[B, {num_codebooks}, L]"
            raise InputError(
                f"the model has {num_codebooks} codebook(s) and takes tokens of shape {shape}, got {tuple(t.shape)}."
            )
        if t.dtype not in (torch.long, torch.int64, torch.int32):
            raise InputError(f"tokens must be integer ids, got dtype {t.dtype}.")
        if t.shape[0] == 0 or t.shape[-1] == 0:
            raise InputError(f"empty input of shape {tuple(t.shape)}.")
        self.tokens = t.long()
        if self.attention_mask is not None:
            am = self.attention_mask
            if am.shape != (t.shape[0], t.shape[-1]):
                raise InputError(f"attention_mask must have shape [B, L] = {(t.shape[0], t.shape[-1])}, got {tuple(am.shape)}.")
            self.attention_mask = am.bool()
        gen = self.generate_mask(mask_id)
        per_row = gen.reshape(gen.shape[0], -1).sum(1)
        if bool((per_row == 0).any()):
            row = int((per_row == 0).nonzero()[0])
            raise InputError(
                f"row {row} has no masked positions, so there is nothing to generate; put the model's "
                f"mask_id ({mask_id}) at the positions to generate (see MaskedInputs.from_prompts)."
            )

    def generate_mask(self, mask_id: int) -> Tensor:
        """Bool, shape of ``tokens``: the positions to generate (masked and not padding)."""
        gen = self.tokens == mask_id
        if self.attention_mask is not None:
            am = self.attention_mask if self.tokens.dim() == 2 else self.attention_mask[:, None, :]
            gen = gen & am
        return gen


def select_rows(obj: Any, rows: Tensor) -> Any:
    """Rows ``rows`` of a batched condition: tensors / lists / tuples / dicts of those."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        return obj.index_select(0, rows.to(obj.device)) if obj.dim() > 0 else obj
    if isinstance(obj, dict):
        return {k: select_rows(v, rows) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(obj[i] for i in rows.tolist())
    return obj


# --------------------------------------------------------------------------------------------
# stages and state


@dataclass
class Stage:
    """One sub-problem a region yields.

    * ``eligible``: bool ``[B, K, L]``, the generated positions decoded in this stage.
    * ``steps``: the stage's step budget (None: the schedule decides, e.g. one per step).
    * ``units``: long ``[K, L]`` or ``[B, K, L]``, the unit (span) id of every position, ids in
      ``[0, num_units)``; None = every position is its own unit.
    * ``aggregate``: how a unit's score is formed from its positions' (``max``, ``min``, ``mean``, ``sum``).
    * ``codebook``: the codebook decoded, passed to the model as ``stage=`` (MAGNeT-style models).
    """

    eligible: Tensor
    steps: int | None
    units: Tensor | None = None
    num_units: int = 0
    aggregate: str = "max"
    codebook: int | None = None
    name: str = "full"


@dataclass
class MaskedDecodeState:
    """Everything the parts may read (and hooks may change) during decoding.

    Tensors are kept as ``[B, K, L]`` (K = 1 for single-stream models). Per-step fields refer to
    the rows in the current forward: ``rows`` (indices into the batch), ``step`` (0-based step in
    the current stage), ``total`` (each active row's step budget for the stage), ``n_initial``
    (masked units of each active row when the stage began), ``logits`` (guided logits of the
    forward, ``[A, K, L, V]``).
    """

    tokens: Tensor
    generated: Tensor
    mask_id: int
    vocab_size: int
    config: DecodeConfig
    generator: torch.Generator | None
    cond: Any = None
    attention_mask: Tensor | None = None
    squeeze: bool = True
    score: Tensor | None = None
    stage: Stage | None = None
    rows: Tensor | None = None
    step: int = 0
    global_step: int = 0
    total: Tensor | None = None
    n_initial: Tensor | None = None
    n_masked_units: Tensor | None = None
    logits: Tensor | None = None
    trajectory: list[Tensor] | None = None
    hook_filled: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def masked(self) -> Tensor:
        """Bool ``[B, K, L]``: generated positions that are still masked."""
        return (self.tokens == self.mask_id) & self.generated

    def progress(self) -> Tensor:
        """``(step + 1) / total`` per active row (float64): 1 on the stage's last step."""
        return torch.full_like(self.total, self.step + 1, dtype=torch.float64) / self.total.double()

    def forward(self, model: MaskedTokenModel, tokens: Tensor | None = None, cond: Any = "same") -> Tensor:
        """One model forward over the active rows: logits ``[A, K, L, V]``.

        ``tokens`` (``[A, K, L]``) default to the active rows' current tokens; ``cond`` to their
        condition (pass another, e.g. the null condition, for guidance).
        """
        rows = self.rows
        x = self.tokens.index_select(0, rows) if tokens is None else tokens
        c = select_rows(self.cond, rows) if isinstance(cond, str) and cond == "same" else cond
        am = self.attention_mask.index_select(0, rows) if self.attention_mask is not None else None
        codebook = self.stage.codebook if self.stage is not None else None
        if self.squeeze:
            return model(x[:, 0], c, stage=codebook, attention_mask=am)[:, None]
        return model(x, c, stage=codebook, attention_mask=am)


# --------------------------------------------------------------------------------------------
# parts: the interfaces (implementations live in schedules.py, scoring.py, policies.py, ...)


class Schedule:
    """How many units of a stage stay masked after each step.

    ``total_steps(steps, n_initial)``: each row's step budget ``[B]`` (``steps`` is the stage's
    configured budget, possibly None). ``num_masked(step, total, n_initial)``: units still masked
    after 0-based ``step`` (before the loop's clamping: at least one revealed, at least one kept
    until the last step, none after it).
    """

    part_name: ClassVar[str] = "schedule"
    needs_steps: ClassVar[bool] = True

    def total_steps(self, steps: int | None, n_initial: Tensor) -> Tensor:
        if steps is None:
            raise ConfigError(f"schedule {self.part_name!r} needs a step count; pass steps=<positive int>.")
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
    """

    part_name: ClassVar[str] = "scorer"

    def __call__(self, log_probs: Tensor, proposal: Tensor, state: MaskedDecodeState) -> Tensor:  # pragma: no cover
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

    Stages are produced lazily, so a stage may depend on what earlier stages decoded.
    """

    part_name: ClassVar[str] = "region"

    def stages(self, state: MaskedDecodeState, steps: int | None) -> Iterator[Stage]:  # pragma: no cover
        raise NotImplementedError


class Guidance:
    """``guidance(model, state, logits [A,K,L,V]) -> logits``: may run extra forwards (counted)."""

    part_name: ClassVar[str] = "guidance"

    def __call__(self, model: MaskedTokenModel, state: MaskedDecodeState, logits: Tensor) -> Tensor:
        return logits

    def check(self, state: MaskedDecodeState, model: MaskedTokenModel) -> None:
        """Raise on inputs this guidance cannot work with (called once before decoding)."""


class Hook:
    """``hook.after_step(state)`` runs after every commit; it may fill masked positions (never others)."""

    part_name: ClassVar[str] = "hook"

    def start(self, state: MaskedDecodeState) -> None:
        """Called once before decoding (validate, allocate)."""

    def after_step(self, state: MaskedDecodeState) -> None:  # pragma: no cover - interface
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# proposals


class TokenProposer:
    """Draws a token for every position from the (guided) logits.

    Uses ``DecodeConfig``'s temperature / top-k / top-p through :class:`LogitsProcessor`
    (temperature 0 = argmax). ``temperature_anneal="linear"`` scales the temperature by
    ``(total - step) / total``, floored at 0.01 (MAGNeT). ``mask_id`` (when inside the vocabulary)
    and ``suppress_ids`` are never proposed.
    """

    ANNEALS = ("none", "linear")

    def __init__(self, temperature_anneal: str = "none", suppress_ids: Sequence[int] = ()) -> None:
        if temperature_anneal not in self.ANNEALS:
            raise ConfigError(f"temperature_anneal must be one of {self.ANNEALS}, got {temperature_anneal!r}.")
        self.temperature_anneal = temperature_anneal
        try:
            self.suppress_ids = tuple(int(t) for t in (suppress_ids or ()))
        except (TypeError, ValueError):
            raise ConfigError(f"suppress_ids must be a sequence of token ids, got {suppress_ids!r}.") from None

    def ban(self, logits: Tensor, state: MaskedDecodeState) -> Tensor:
        banned = [t for t in (state.mask_id, *self.suppress_ids) if 0 <= t < logits.shape[-1]]
        if banned:
            logits = logits.clone()
            logits[..., banned] = float("-inf")
        return logits

    def __call__(self, logits: Tensor, state: MaskedDecodeState) -> tuple[Tensor, Tensor]:
        """``(proposal [A,K,L], log_probs [A,K,L,V])``."""
        config = state.config
        logits = self.ban(logits, state)
        if config.temperature == 0.0:
            return logits.argmax(-1), logits.log_softmax(-1)
        proc = LogitsProcessor(DecodeConfig(temperature=1.0, top_k=config.top_k, top_p=config.top_p))
        temp = torch.full((logits.shape[0],), float(config.temperature), dtype=torch.float64, device=logits.device)
        if self.temperature_anneal == "linear":
            total = state.total.double().to(logits.device)
            temp = (temp * (total - state.step) / total).clamp(min=1e-2)
        scaled = logits / temp.to(logits.dtype)[:, None, None, None]
        processed = proc.process(scaled)
        return sample(processed.softmax(-1), state.generator), processed.log_softmax(-1)


# --------------------------------------------------------------------------------------------
# results


@dataclass
class MaskedDecodeResult(DecodeResult):
    """A :class:`DecodeResult` plus the decoded tensor.

    ``sequences[b]`` is row b's whole decoded sequence, fixed tokens included (in masked decoding
    they interleave with generated ones), padding removed; for K codebooks it is flattened
    codebook-major (``tokens[b, :, :len].reshape(-1)``). ``tokens`` has the input's layout
    (``[B, L]`` or ``[B, K, L]``), ``generated`` marks the positions that were masked, and
    ``trajectory`` (with the ``trajectory`` hook) holds the tokens after every step.
    """

    tokens: Tensor | None = None
    generated: Tensor | None = None
    trajectory: list[Tensor] | None = None


# --------------------------------------------------------------------------------------------
# the loop


@dataclass
class MaskedParts:
    """The pluggable parts of one decode (built by :class:`MaskedSampler` from its parameters)."""

    schedule: Schedule
    scorer: ConfidenceScorer
    policy: UnmaskPolicy
    region: Region
    guidance: Guidance
    proposer: TokenProposer = field(default_factory=TokenProposer)
    hooks: tuple[Hook, ...] = ()
    steps: int | None = 12


def _unit_any(mask: Tensor, unit_of: Tensor, n_units: int) -> Tensor:
    """``[A, P]`` bool -> ``[A, N]`` bool: does any position of each unit have the flag."""
    out = torch.zeros(mask.shape[0], n_units, dtype=torch.long, device=mask.device)
    return out.scatter_reduce(1, unit_of, mask.long(), reduce="amax").bool()


def _unit_score(score: Tensor, valid: Tensor, unit_of: Tensor, n_units: int, how: str) -> Tensor:
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


def masked_decode(
    model: MaskedTokenModel,
    inputs: MaskedInputs,
    parts: MaskedParts,
    config: DecodeConfig,
    generator: torch.Generator | None = None,
    *,
    stats: DecodeStats | None = None,
) -> MaskedDecodeResult:
    """Decode every masked position of ``inputs`` with ``parts``. The one masked loop."""
    t0 = time.perf_counter()
    if config.repetition_penalty != 1.0:
        raise ConfigError("repetition_penalty is not defined for masked decoding; leave it at 1.0.")
    inputs = MaskedInputs.coerce(inputs, mask_id=model.mask_id, num_codebooks=model.num_codebooks, pad_id=config.pad_token_id)
    device = model.device
    squeeze = inputs.tokens.dim() == 2
    tokens = (inputs.tokens[:, None] if squeeze else inputs.tokens).to(device).clone()
    generated = inputs.generate_mask(model.mask_id)
    generated = (generated[:, None] if squeeze else generated).to(device)
    b, k, seq = tokens.shape
    score = torch.full(tokens.shape, float("inf"), dtype=torch.float64, device=device)
    score[generated] = float("-inf")
    state = MaskedDecodeState(
        tokens=tokens,
        generated=generated,
        mask_id=model.mask_id,
        vocab_size=model.vocab_size,
        config=config,
        generator=generator,
        cond=inputs.cond,
        attention_mask=inputs.attention_mask.to(device) if inputs.attention_mask is not None else None,
        squeeze=squeeze,
        score=score,
    )
    stats = stats if stats is not None else DecodeStats(sampler="masked", batch_size=b)
    stats.batch_size = b
    parts.guidance.check(state, model)
    for hook in parts.hooks:
        hook.start(state)
    f0 = model.forwards
    n_gen = generated.reshape(b, -1).sum(1)
    bar = tqdm(total=int(n_gen.sum()), disable=not config.progress, desc=stats.sampler or "masked", leave=False)
    policy, schedule = parts.policy, parts.schedule
    n_stages = 0
    pos = torch.arange(k * seq, device=device)

    for stage in parts.region.stages(state, parts.steps):
        n_stages += 1
        state.stage = stage
        elig = (stage.eligible.to(device) & generated).reshape(b, -1)  # [B, P]
        if stage.units is None:
            unit_of = pos.expand(b, -1)
            n_units = k * seq
        else:
            unit_of = stage.units.to(device).reshape(-1 if stage.units.dim() == 3 else 1, k * seq).expand(b, -1)
            n_units = int(stage.num_units)
        unit_elig = _unit_any(elig, unit_of, n_units)
        n0 = _unit_any(elig & state.masked.reshape(b, -1), unit_of, n_units).sum(1)
        total = schedule.total_steps(stage.steps, n0) if policy.uses_schedule else n0.clamp(min=1)
        # every step commits >= 1 unit (or, for revising policies, the schedule ends at step total-1)
        max_steps = int(max(int(n0.max()), int(total.max()))) + 1
        step = 0
        while True:
            masked_pos = state.masked.reshape(b, -1) & elig
            masked_units = _unit_any(masked_pos, unit_of, n_units)
            n_masked = masked_units.sum(1)
            active = n_masked > 0
            if not bool(active.any()):
                break
            if step >= max_steps:  # pragma: no cover - a part broke the >= 1-per-step contract
                raise RuntimeError(f"masked decoding did not finish stage {stage.name!r} in {max_steps} steps")
            rows = active.nonzero().squeeze(1)
            state.rows, state.step = rows, step
            state.total, state.n_initial = total.index_select(0, rows), n0.index_select(0, rows)
            state.n_masked_units = n_masked.index_select(0, rows)
            masked_before = state.masked.reshape(b, -1).sum(1).index_select(0, rows)

            logits = state.forward(model)
            logits = parts.guidance(model, state, logits)
            state.logits = logits
            proposal, log_probs = parts.proposer(logits, state)
            conf = parts.scorer(log_probs, proposal, state).to(torch.float64)

            a = rows.numel()
            r_elig = elig.index_select(0, rows)
            r_masked = masked_pos.index_select(0, rows)
            r_units = unit_of.index_select(0, rows)
            pos_score = torch.where(r_masked, conf.reshape(a, -1), state.score.index_select(0, rows).reshape(a, -1))
            u_score = _unit_score(pos_score, r_elig, r_units, n_units, stage.aggregate)
            pool = unit_elig.index_select(0, rows) if policy.revises else masked_units.index_select(0, rows)
            n_pool = pool.sum(1)
            last = step >= state.total - 1
            if policy.uses_schedule:
                sched = schedule.num_masked(step, state.total, state.n_initial)
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
            new_tok = state.tokens.index_select(0, rows).reshape(a, -1)
            new_score = state.score.index_select(0, rows).reshape(a, -1)
            commit = r_masked & ~keep_pos
            new_tok = torch.where(commit, proposal.reshape(a, -1), new_tok)
            new_score = torch.where(commit, conf.reshape(a, -1), new_score)
            if policy.revises:
                remask = keep_pos & ~r_masked
                new_tok = new_tok.masked_fill(remask, model.mask_id)
                # a re-masked position keeps its score: Mask-Predict re-predicts it next step
            state.tokens[rows] = new_tok.reshape(a, k, seq)
            state.score[rows] = new_score.reshape(a, k, seq)

            for hook in parts.hooks:
                hook.after_step(state)
            masked_after = state.masked.reshape(b, -1).sum(1).index_select(0, rows)
            revealed = (masked_before - masked_after).tolist()
            stats.accepted_per_step.append(revealed)
            bar.update(max(0, sum(revealed)))
            step += 1
            state.global_step += 1

    bar.close()
    if bool(state.masked.any()):  # pragma: no cover - a region left positions out
        raise RuntimeError("masked decoding ended with masked positions left; the region did not cover them")
    stats.target_forwards += model.forwards - f0
    stats.new_tokens = int(n_gen.sum())
    stats.baseline_steps = int(n_gen.max())
    stats.wall_time = time.perf_counter() - t0
    stats.extra.update(
        steps=state.global_step,
        stages=n_stages,
        forwards_per_step=(model.forwards - f0) / max(1, state.global_step),
        hook_filled=state.hook_filled,
        **state.extra,
    )
    out = state.tokens[:, 0] if squeeze else state.tokens
    gen_out = generated[:, 0] if squeeze else generated
    if inputs.attention_mask is None:
        seqs = [out[i].reshape(-1).tolist() for i in range(b)]
    else:  # drop padding wherever it is
        am = state.attention_mask
        seqs = [out[i][..., am[i]].reshape(-1).tolist() for i in range(b)]
    traj = None
    if state.trajectory is not None:
        traj = [t[:, 0] if squeeze else t for t in state.trajectory]
    return MaskedDecodeResult(sequences=seqs, stats=stats, tokens=out, generated=gen_out, trajectory=traj)


# --------------------------------------------------------------------------------------------
# the sampler


class MaskedSampler(Sampler):
    """The generic masked sampler: every part chosen by name through flat parameters.

    Presets (``presets.py``) are subclasses that only change ``defaults``. Parameters:

    * ``steps``: step budget (per stage; ``region="blocks"`` splits it over the blocks). None only
      with a schedule that sets its own count (``one_per_step``).
    * ``schedule``: cosine | sin | linear | one_per_step | per_block (``schedules.py``).
    * ``scorer``: prob | logprob | logprob_gumbel | prob_gumbel | margin | neg_entropy | random,
      with ``choice_temperature`` and ``noise_anneal`` for the Gumbel ones (``scoring.py``).
    * ``policy``: topk | threshold (``threshold``) | remask_lowest (``policies.py``).
    * ``region``: full | blocks (``block_length``) | codebook_stages (``steps_per_stage``) |
      fragments (``separator_id``) | spans; ``span_len > 1`` groups any region's positions into
      spans scored by ``span_score`` (``regions.py``).
    * ``guidance``: none | cfg (``cfg_scale``, ``cfg_min_scale``, ``cfg_anneal``) | context
      (``context_gamma``, ``context_weight``, ``context_special_ids``) (``guidance.py``).
    * ``hooks``: names among early_exit (``early_exit_thresholds``), eos_truncate (``eos_id``),
      trajectory (``hooks.py``).
    * ``temperature_anneal`` (none | linear) and ``suppress_ids``: the token proposal.

    Token proposals use ``DecodeConfig.temperature / top_k / top_p`` (0 = argmax);
    ``paper_config`` lists the values the paper used, for pipelines to apply as their defaults.
    ``DecodeConfig.max_new_tokens`` is not used: the masks in the input set the length;
    ``repetition_penalty`` must stay 1. A parameter passed explicitly that none of the chosen parts
    uses raises :class:`ConfigError` (e.g. ``threshold`` with ``policy="topk"``).

    Statistics (:class:`DecodeStats`): ``target_forwards`` = every model forward, guidance passes
    included (``extra["steps"]`` = decode steps); ``new_tokens`` = masked positions filled;
    ``baseline_steps`` = the largest number of masked positions in a row (all codebooks), i.e. the
    steps a one-token-per-step decode of the batch needs, so ``step_compression`` is relative to
    one token per forward; ``accepted_per_step`` = per step, per active row, the drop in its count
    of masked positions (tokens revealed; hook fills included, re-masked tokens subtracted).

    Inputs: :class:`MaskedInputs`, a ``[B, L]`` / ``[B, K, L]`` tensor, or lists of token ids with
    the model's ``mask_id`` at the positions to generate. Output: :class:`MaskedDecodeResult`.
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
        "context_gamma": 0.0,
        "context_weight": 2.0,
        "context_special_ids": (),
        "hooks": (),
        "eos_id": None,
        "early_exit_thresholds": (7.5, 5.0, 2.5),
        "temperature_anneal": "none",
        "suppress_ids": (),
    }
    paper_config: ClassVar[dict[str, Any]] = {}
    name: ClassVar[str] = "masked"

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
                f"guidance={self.params['guidance']!r}, hooks={self.params['hooks']!r}; choose the part that uses them "
                "(see the MaskedSampler docstring) or drop them."
            )

    @staticmethod
    def _ctor_params(part: Any) -> set[str]:
        return {n for n in inspect.signature(type(part).__init__).parameters if n != "self"}

    def _used_params(self, parts: MaskedParts) -> set[str]:
        used = {"schedule", "scorer", "policy", "region", "guidance", "hooks", "temperature_anneal", "suppress_ids", "span_len"}
        if parts.schedule.needs_steps:
            used.add("steps")
        region = parts.region
        while True:
            used |= self._ctor_params(region) - {"base"}
            base = getattr(region, "base", None)
            if not isinstance(base, Region):
                break
            region = base
        for part in (parts.schedule, parts.scorer, parts.policy, parts.guidance, *parts.hooks):
            used |= self._ctor_params(part)
        return used

    def build_parts(self) -> MaskedParts:
        from . import guidance, hooks, policies, regions, schedules, scoring  # noqa: F401  (register parts)

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
        hook_specs = p["hooks"]
        if isinstance(hook_specs, str) or not isinstance(hook_specs, (list, tuple)):
            hook_specs = (hook_specs,)
        return MaskedParts(
            schedule=schedule,
            scorer=SCORERS.build(p["scorer"], p),
            policy=POLICIES.build(p["policy"], p),
            region=region,
            guidance=GUIDANCES.build(p["guidance"], p),
            proposer=TokenProposer(p["temperature_anneal"], p["suppress_ids"]),
            hooks=tuple(HOOKS.build(h, p) for h in hook_specs),
            steps=steps,
        )

    def generate(
        self,
        models: dict[str, Any],
        inputs: Any,
        config: DecodeConfig,
        generator: torch.Generator | None = None,
    ) -> MaskedDecodeResult:
        """Fill the masks of ``inputs`` (:class:`MaskedInputs`, a tensor or lists) with ``models["model"]``."""
        self.check_models(models)
        model = models["model"]
        if not isinstance(model, MaskedTokenModel):
            raise ConfigError(
                f"sampler {self.name!r} needs a MaskedTokenModel as 'model', got {type(model).__name__}; wrap a "
                "torch module with leapgen.models.TorchMaskedLM(module, mask_id=..., vocab_size=...)."
            )
        stats = new_stats(self, 0)
        with torch.inference_mode():
            res = masked_decode(model, inputs, self.parts, config, generator, stats=stats)
        # hand back ordinary tensors (inference tensors refuse in-place edits outside inference mode)
        res.tokens, res.generated = res.tokens.clone(), res.generated.clone()
        if res.trajectory is not None:
            res.trajectory = [t.clone() for t in res.trajectory]
        return res


def _finite(x: Any, name: str, *, low: float | None = None, high: float | None = None, open_low: bool = False) -> float:
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
