"""What the masked loop decodes from and works on: inputs, the decode state, the result.

* :class:`MaskedInputs`: the caller's partly known sequences (token ids or continuous vectors),
  condition and padding, validated and turned into a :class:`~leapgen.models.masked_base.MaskedState`.
* :class:`MaskedDecodeState`: the state plus everything the parts read during a decode (active
  rows, step, stage, scores, logits, caches). :meth:`MaskedDecodeState.forward` is the only place
  the model is called (with or without the cache); :meth:`MaskedDecodeState.fill` is how hooks
  write.
* :class:`MaskedDecodeResult`: the decoded tensor and statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ...errors import InputError
from ...models.masked_base import MaskedCache, MaskedModel, MaskedState
from ..base import DecodeConfig, DecodeResult
from .cache_plan import kept_length, plan_cache
from .parts import CachePolicy, Stage


@dataclass
class MaskedInputs:
    """What a masked sampler generates from: partly known sequences.

    * ``tokens``: long ``[B, L]`` (one stream) or ``[B, K, L]`` (K codebooks), or for a continuous
      model float ``[B, L, D]``. Positions holding the model's ``mask_id`` (or, when ``known`` is
      given, the positions where it is False) are generated; every other position is *fixed*
      (prompt, fragment, class token, already known codebooks) and is never overwritten.
    * ``attention_mask``: bool ``[B, L]``, False on right-padding of rows shorter than L (padding is
      neither generated nor returned). None: every position is real.
    * ``cond``: the model's condition (class labels, text embeddings, ...): None, a tensor or list
      with the batch first, or a dict of those. Rows are selected from it as rows finish.
    * ``known``: bool, the shape of ``tokens`` (``[B, L]`` for continuous values): True = fixed.
      Required for continuous values; optional for ids (default: ``tokens != mask_id``).

    Samplers also accept a plain tensor, a :class:`MaskedState`, or a list of token lists (rows
    may differ in length; they are right-padded with ``DecodeConfig.pad_token_id``), or for K
    codebooks a list of ``[K][L]`` lists. :meth:`from_prompts` builds ``prompt + [mask] * n (+ suffix)`` rows.
    """

    tokens: Tensor
    cond: Any = None
    attention_mask: Tensor | None = None
    known: Tensor | None = None

    @property
    def is_continuous(self) -> bool:
        return self.tokens.dtype.is_floating_point

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
    def coerce(
        cls, inputs: Any, *, mask_id: int | None, num_codebooks: int, pad_id: int = 0, token_dim: int | None = None
    ) -> MaskedInputs:
        """Turn a tensor / list of rows / MaskedState / MaskedInputs into a validated MaskedInputs.

        ``token_dim`` is set for continuous models (values ``[B, L, token_dim]``)."""
        if isinstance(inputs, MaskedInputs):
            out = cls(inputs.tokens, inputs.cond, inputs.attention_mask, inputs.known)
        elif isinstance(inputs, MaskedState):
            vals = inputs.values[:, 0] if inputs.squeeze else inputs.values
            known = inputs.known[:, 0] if inputs.squeeze else inputs.known
            out = cls(vals, None, inputs.attention_mask, known)
        elif isinstance(inputs, Tensor):
            out = cls(inputs)
        elif isinstance(inputs, (list, tuple)) and token_dim is None:
            out = cls._from_lists(list(inputs), num_codebooks, pad_id)
        else:
            what = "a [B, L, D] tensor of values with a known-mask" if token_dim is not None else "a token tensor or a list of token lists"
            raise InputError(f"masked samplers take MaskedInputs, a MaskedState or {what}, got {type(inputs).__name__}.")
        out._validate(mask_id, num_codebooks, token_dim)
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

    def _validate(self, mask_id: int | None, num_codebooks: int, token_dim: int | None) -> None:
        t = self.tokens
        if token_dim is not None:
            if t.dim() != 3 or t.shape[-1] != token_dim or not t.dtype.is_floating_point:
                raise InputError(
                    f"the model takes continuous values of shape [B, L, {token_dim}] (float), got {t.dtype} {tuple(t.shape)}."
                )
            if self.known is None:
                raise InputError("continuous values need a known-mask (MaskedInputs(values, known=[B, L] bool)).")
            want_known = tuple(t.shape[:2])
        else:
            want = 2 if num_codebooks == 1 else 3
            if t.dim() != want or (want == 3 and t.shape[1] != num_codebooks):
                shape = "[B, L]" if want == 2 else f"[B, {num_codebooks}, L]"
                raise InputError(
                    f"the model has {num_codebooks} codebook(s) and takes tokens of shape {shape}, got {tuple(t.shape)}."
                )
            if t.dtype not in (torch.long, torch.int64, torch.int32):
                raise InputError(f"tokens must be integer ids, got dtype {t.dtype}.")
            self.tokens = t.long()
            want_known = tuple(t.shape)
        if t.shape[0] == 0 or t.shape[1 if token_dim is not None else -1] == 0:
            raise InputError(f"empty input of shape {tuple(t.shape)}.")
        if self.known is not None:
            if tuple(self.known.shape) != want_known:
                raise InputError(f"known must have shape {want_known}, got {tuple(self.known.shape)}.")
            self.known = self.known.bool()
        length = t.shape[1] if token_dim is not None else t.shape[-1]
        if self.attention_mask is not None:
            am = self.attention_mask
            if am.shape != (t.shape[0], length):
                raise InputError(f"attention_mask must have shape [B, L] = {(t.shape[0], length)}, got {tuple(am.shape)}.")
            self.attention_mask = am.bool()
        gen = self.generate_mask(mask_id)
        per_row = gen.reshape(gen.shape[0], -1).sum(1)
        if bool((per_row == 0).any()):
            row = int((per_row == 0).nonzero()[0])
            where = "mark the positions to generate False in `known`" if token_dim is not None else (
                f"put the model's mask_id ({mask_id}) at the positions to generate (see MaskedInputs.from_prompts)"
            )
            raise InputError(f"row {row} has no masked positions, so there is nothing to generate; {where}.")

    def generate_mask(self, mask_id: int | None) -> Tensor:
        """Bool, shape of ``tokens`` (``[B, L]`` for continuous values): the positions to generate."""
        gen = ~self.known if self.known is not None else self.tokens == mask_id
        if self.attention_mask is not None:
            am = self.attention_mask if gen.dim() == 2 else self.attention_mask[:, None, :]
            gen = gen & am
        return gen

    def to_state(self, mask_id: int | None, device: torch.device) -> MaskedState:
        """The decode's :class:`MaskedState` on ``device`` (a copy; generated positions unknown)."""
        gen = self.generate_mask(mask_id).to(device)
        am = None if self.attention_mask is None else self.attention_mask.to(device)
        values = self.tokens.to(device).clone()
        if self.is_continuous:
            values = values.masked_fill(gen[..., None], 0.0)
        elif self.known is not None:
            values = values.masked_fill(gen, mask_id)
        return MaskedState(values, ~gen, am, None if self.is_continuous else mask_id)


def select_rows(obj: Any, rows: Tensor) -> Any:
    """Rows ``rows`` of a batched condition: tensors / lists / tuples / dicts of those."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        return obj.index_select(0, rows.to(obj.device)) if obj.dim() > 0 else obj
    if hasattr(obj, "select_rows"):  # a typed Condition (leapgen.models.condition)
        return obj.select_rows(rows)
    if isinstance(obj, dict):
        return {k: select_rows(v, rows) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(obj[i] for i in rows.tolist())
    return obj


def concat_rows(a: Any, b: Any) -> Any:
    """The rows of ``a`` followed by the rows of ``b``: two conditions of one structure (tensors,
    typed conditions, dicts, lists) stacked along the batch, e.g. a condition and its null
    counterpart for one guided forward. Raises ``ValueError`` when they do not stack (other types,
    shapes or keys, or differing shared fields such as a condition's guidance)."""
    if a is None and b is None:
        return None
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.dim() == 0 or b.dim() == 0:
            if a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b)):
                return a
            raise ValueError("scalar tensors differ")
        if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype or a.device != b.device:
            raise ValueError(f"tensors of shape {tuple(a.shape)} and {tuple(b.shape)} do not stack")
        return torch.cat([a, b])
    if type(a) is not type(b):
        raise ValueError(f"{type(a).__name__} and {type(b).__name__} do not stack")
    if hasattr(a, "concat_rows"):  # a typed Condition (leapgen.models.condition)
        return a.concat_rows(b)
    if isinstance(a, dict):
        if a.keys() != b.keys():
            raise ValueError("dict keys differ")
        return {k: concat_rows(a[k], b[k]) for k in a}
    if isinstance(a, (list, tuple)):
        return type(a)([*a, *b])
    if a is b or a == b:
        return a
    raise ValueError(f"{type(a).__name__} values differ")


@dataclass
class MaskedDecodeState:
    """Everything the parts may read (and hooks may change through :meth:`fill`) during decoding.

    ``x`` is the :class:`MaskedState`; grids (``generated``, ``score``, :attr:`masked`) are
    ``[B, K, L]`` (K = 1 for single-stream and continuous models). Per-step fields refer to the
    rows in the current forward: ``rows`` (indices into the batch; ``all_rows`` when that is every
    row), ``step`` (0-based step in the current stage), ``total`` (each active row's step budget for
    the stage), ``n_initial`` (masked units of each active row when the stage began), ``logits``
    (guided model output of the forward, ``[A, K, L, V]``, or conditioning vectors ``[A, 1, L, C]``).
    The cache fields are set by the loop from the cache policy.
    """

    x: MaskedState
    generated: Tensor
    mask_id: int | None
    vocab_size: int | None
    config: DecodeConfig
    generator: torch.Generator | None
    cond: Any = None
    score: Tensor | None = None
    stage: Stage | None = None
    rows: Tensor | None = None
    all_rows: bool = False
    step: int = 0
    global_step: int = 0
    total: Tensor | None = None
    n_initial: Tensor | None = None
    n_masked_units: Tensor | None = None
    logits: Tensor | None = None
    trajectory: list[Tensor] | None = None
    hook_filled: Tensor | int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    cache_policy: CachePolicy | None = None
    caches: dict[str, MaskedCache] = field(default_factory=dict)
    cache_window: tuple[int, int] | None = None
    refresh_now: bool = True
    #: positions a subset-cached forward recomputes this step (from ``CachePolicy.positions``)
    cache_positions: Tensor | None = None
    #: per-decode bookkeeping of parts (cache policies, scorers): never reported
    policy_state: dict[str, Any] = field(default_factory=dict)
    #: End-of-Text truncation (Learn2PD EoTP hook): forwards run on the first ``truncate_len``
    #: positions only (every later position is settled); their outputs are zero-padded back
    truncate_len: int | None = None
    #: each row's own End-of-Text cut (``[B]``, positions from it on are settled), set only when the
    #: rows' cuts differ: a row cut before ``truncate_len`` has its later positions masked out of
    #: attention, so it decodes as it would alone
    truncate_rows: Tensor | None = None
    #: rows whose End-of-Text cut moved at the last step (``[B]`` bool; None when none did): a cached
    #: forward recomputes all their positions, as their solo decode would refresh (:mod:`.cache_plan`)
    cut_moved: Tensor | None = None
    #: every active row's cut moved at the last step: the forwards shorten and refresh, as alone
    cut_moved_all: bool = False

    @property
    def tokens(self) -> Tensor:
        """The values: ids ``[B, K, L]`` (``mask_id`` where unknown) or vectors ``[B, L, D]``."""
        return self.x.values

    @property
    def attention_mask(self) -> Tensor | None:
        return self.x.attention_mask

    @property
    def squeeze(self) -> bool:
        return self.x.squeeze

    @property
    def continuous(self) -> bool:
        return self.x.is_continuous

    @property
    def batch_size(self) -> int:
        return self.x.batch_size

    @property
    def masked(self) -> Tensor:
        """Bool ``[B, K, L]``: generated positions that are still unknown."""
        return self.x.unknown

    def progress(self) -> Tensor:
        """``(step + 1) / total`` per active row (float64): 1 on the stage's last step."""
        return torch.full_like(self.total, self.step + 1, dtype=torch.float64) / self.total.double()

    def active(self, x: Tensor) -> Tensor:
        """The active rows of a batch-first tensor."""
        return x if self.all_rows else x.index_select(0, self.rows)

    def forward(self, model: MaskedModel, tokens: Tensor | None = None, cond: Any = "same", cache_key: str | None = None) -> Tensor:
        """One model forward over the active rows: logits ``[A, K, L, V]`` (or vectors ``[A, 1, L, C]``).

        ``tokens`` (discrete ``[A, K, L]``, ``mask_id`` where unknown) default to the active rows'
        current values; ``cond`` to their condition (pass another, e.g. the null condition, for
        guidance). With a cache policy, forwards over the current values use the cache named
        ``cache_key`` (default ``"cond"`` for the plain conditional pass; guidance passes name
        their own, or none to run uncached).
        """
        same = isinstance(cond, str) and cond == "same"
        c = self._active_cond() if same else cond
        if tokens is None:
            if cache_key is None and same:
                cache_key = "cond"
            sub = self._current(kept_length(self, cache_key))
        else:
            am = None if self.attention_mask is None else self.active(self.attention_mask)
            sub = MaskedState.trusted(tokens, tokens != self.mask_id, am, self.mask_id, self.squeeze)
            cache_key = None
        length = self.x.length if tokens is None else sub.length
        cache = plan_cache(self, model, cache_key, sub.length)
        out = model.forward_state(sub, c, stage=self._codebook(), cache=cache)
        if cache is not None:
            if cache.window is None and cache.positions is None:
                cache.refreshes += 1
                cache.put("_out", out)
            else:
                cache.reuses += 1
                full = cache.get("_out")  # outside the window: the outputs of the last refresh
                if cache.positions is not None:
                    full, pos = full.clone(), cache.positions
                    if pos.dim() == 1:
                        full[..., pos, :] = out
                    else:  # per-row positions [A, n] into [A, (K,) L, V]
                        rows = torch.arange(pos.shape[0], device=pos.device)[:, None]
                        if out.dim() == 3:
                            full[rows, pos] = out
                        else:
                            full[rows, :, pos] = out.movedim(-2, 1)
                    out = full
                else:
                    lo, hi = cache.window
                    out = torch.cat([full[..., :lo, :], out, full[..., hi:, :]], dim=-2)
        return _pad_positions(out, length)

    def forward_pair(self, model: MaskedModel, other_cond: Any, cond: Any = "same") -> tuple[Tensor, Tensor] | None:
        """The active rows' outputs under ``cond`` (default: their condition) and under
        ``other_cond`` (e.g. the null condition of classifier-free guidance) from **one** forward
        over the doubled batch, as diffusers batches its guidance passes; None where that is not
        possible (a cache policy keeps one cache per pass, or the two conditions do not stack, see
        :func:`concat_rows`), and the caller then runs two forwards."""
        if self.cache_policy is not None:
            return None
        try:
            first = self._active_cond() if isinstance(cond, str) and cond == "same" else cond
            both = concat_rows(first, other_cond)
        except ValueError:
            return None
        sub = self._current()
        am = None if sub.attention_mask is None else sub.attention_mask.repeat(2, 1)
        twice = MaskedState.trusted(
            torch.cat([sub.values, sub.values]), torch.cat([sub.known, sub.known]), am, sub.mask_id, sub.squeeze
        )
        out = _pad_positions(model.forward_state(twice, both, stage=self._codebook()), self.x.length)
        a = sub.values.shape[0]
        return out[:a], out[a:]

    def _active_cond(self) -> Any:
        return self.cond if self.all_rows else select_rows(self.cond, self.rows)

    def _codebook(self) -> int | None:
        return self.stage.codebook if self.stage is not None else None

    def _current(self, keep: int | None = None) -> MaskedState:
        """The active rows' current values, cut at the End-of-Text truncation when one is set (at
        ``keep`` positions instead when given: a cached forward keeps its cache's length)."""
        sub = self.x if self.all_rows else self.x.select_rows(self.rows)
        cut = self.truncate_len if not sub.is_continuous else None
        if cut is None:
            return sub
        view = min(max(cut, keep or 0), sub.length)  # End-of-Text truncation: later positions are settled
        if view == sub.length and self.truncate_rows is None and view <= cut:
            return sub
        am = None if sub.attention_mask is None else sub.attention_mask[:, :view]
        if self.truncate_rows is not None or view > cut:  # positions past a row's own cut are not seen
            own = self.active(self.truncate_rows.to(sub.values.device)) if self.truncate_rows is not None else None
            pos = torch.arange(view, device=sub.values.device)[None]
            seen = pos < (own[:, None] if own is not None else cut)  # no host sync: always applied
            seen = seen.expand(sub.values.shape[0], view)
            am = seen if am is None else am & seen
        cut = view
        return MaskedState.trusted(sub.values[..., :cut], sub.known[..., :cut], am, sub.mask_id, sub.squeeze)

    def fill(self, rows: Tensor, where: Tensor, values: Tensor) -> None:
        """Hooks: commit ``values`` (``[A, K, L]`` ids) at ``where`` (``[A, K, L]`` bool, only still
        unknown generated positions are written) of ``rows``, with infinite confidence."""
        where = where & self.x.unknown.index_select(0, rows)
        self.x.commit(where, values, rows)
        sc = self.score.index_select(0, rows)
        self.score[rows] = sc.masked_fill(where, float("inf"))
        self.hook_filled = self.hook_filled + where.sum()


def _pad_positions(out: Tensor, length: int) -> Tensor:
    """Zero-pad a truncated forward's outputs ``[..., L', V]`` back to ``length`` positions."""
    if out.shape[-2] >= length:
        return out
    pad = out.new_zeros((*out.shape[:-2], length - out.shape[-2], out.shape[-1]))
    return torch.cat([out, pad], dim=-2)


@dataclass
class MaskedDecodeResult(DecodeResult):
    """A :class:`DecodeResult` plus the decoded tensor.

    ``sequences[b]`` is row b's whole decoded sequence, fixed tokens included (in masked decoding
    they interleave with generated ones), padding removed; for K codebooks it is flattened
    codebook-major (``tokens[b, :, :len].reshape(-1)``); empty lists for continuous values.
    ``tokens`` has the input's layout (``[B, L]``, ``[B, K, L]`` or continuous ``[B, L, D]``),
    ``generated`` marks the positions that were masked, and ``trajectory`` (with the
    ``trajectory`` hook) holds the values after every step.
    """

    tokens: Tensor | None = None
    generated: Tensor | None = None
    trajectory: list[Tensor] | None = None
