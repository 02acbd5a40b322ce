"""Contracts of masked (any-order, parallel) models: the partly known state, the models, their cache.

Masked decoders (MaskGIT, MAGNeT, MaskGCT, GenMol, LLaDA / Fast-dLLM, MAR ...) all refine a
*partly known state*: some units are fixed (prompt, committed tokens), the others are predicted
in parallel by one model forward and committed a few at a time. This module says what that state
is and what a model must offer; the decode loop lives in ``leapgen.samplers.masked``.

* :class:`MaskedState`: values that are either integer ids over K codebooks ``[B, K, T]``
  (``[B, T]`` is accepted as K = 1) or continuous vectors ``[B, T, D]``, a known-mask (True =
  fixed or committed) and an optional per-row attention mask (False on right-padding).
* :class:`MaskedModel`: the common part (null condition for guidance, forward counter, device,
  optional cache). :class:`MaskedTokenModel` returns logits for every position of a discrete
  state; :class:`ContinuousMaskedModel` returns a conditioning vector per position and samples
  continuous tokens from it with a small per-token head (MAR's diffusion head).
* :class:`~leapgen.models.masked_cache.MaskedCache` (its own module): a per-layer store a model fills on a *refresh* forward (every position)
  and reads on a *windowed* forward (only the positions ``[lo, hi)`` are recomputed, the others'
  keys/values come from the store): Fast-dLLM's prefix cache (``hi = T``) and dual cache
  (prefix + suffix). The decode loop owns the cache and decides when to refresh.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError, NumericalError
from .masked_cache import MaskedCache
from .per_thread import PerThread

# --------------------------------------------------------------------------------------------
# the state


@dataclass
class MaskedState:
    """A partly known sequence: discrete ids over K codebooks or continuous vectors.

    * ``values``: long ``[B, K, T]`` (``[B, T]`` is stored as ``[B, 1, T]`` with ``squeeze=True``)
      or floating ``[B, T, D]``. For discrete states unknown positions hold ``mask_id`` (kept so by
      :meth:`commit` / :meth:`remask`), so ``values`` can be handed to a network as is.
    * ``known``: bool, ``[B, K, T]`` (discrete) or ``[B, T]`` (continuous); True = fixed or committed.
    * ``attention_mask``: bool ``[B, T]``, False on right-padding of shorter rows (None: all real).
      Padding counts as known and is never written.
    * ``mask_id``: the id held at unknown discrete positions (None for continuous states).

    The *position grid* is ``[B, K, T]`` for both kinds (K = 1 for continuous states): masks,
    scores and commit decisions use it; :meth:`grid` turns a known-mask into it.
    """

    values: Tensor
    known: Tensor
    attention_mask: Tensor | None = None
    mask_id: int | None = None
    squeeze: bool = False

    def __post_init__(self) -> None:
        v = self.values
        if v.dtype.is_floating_point:
            if v.dim() != 3:
                raise InputError(f"continuous values must have shape [B, T, D], got {tuple(v.shape)}.")
            want = tuple(v.shape[:2])
        else:
            if v.dtype not in (torch.long, torch.int32, torch.int64):
                raise InputError(f"discrete values must be integer ids, got dtype {v.dtype}.")
            if v.dim() == 2:
                self.values = v = v[:, None]
                self.squeeze = True
                if self.known.dim() == 2:
                    self.known = self.known[:, None]
            if v.dim() != 3:
                raise InputError(f"discrete values must have shape [B, T] or [B, K, T], got {tuple(v.shape)}.")
            if self.mask_id is None:
                raise InputError("a discrete MaskedState needs the model's mask_id.")
            self.values = v.long()
            want = tuple(v.shape)
        if tuple(self.known.shape) != want or self.known.dtype != torch.bool:
            raise InputError(f"known must be a bool tensor of shape {want}, got {self.known.dtype} {tuple(self.known.shape)}.")
        if self.attention_mask is not None:
            am = self.attention_mask
            if tuple(am.shape) != (want[0], want[-1]):
                raise InputError(f"attention_mask must have shape [B, T] = {(want[0], want[-1])}, got {tuple(am.shape)}.")
            self.attention_mask = am.bool()
            self.known = self.known | ~self.grid(self.attention_mask)

    # ----------------------------------------------------------------------------- constructors
    @classmethod
    def from_tokens(cls, tokens: Tensor, mask_id: int, attention_mask: Tensor | None = None) -> MaskedState:
        """A discrete state whose unknown positions are those holding ``mask_id``."""
        return cls(tokens, tokens != mask_id, attention_mask, mask_id)

    @classmethod
    def trusted(
        cls, values: Tensor, known: Tensor, attention_mask: Tensor | None, mask_id: int | None, squeeze: bool
    ) -> MaskedState:
        """Build from already normalised parts without validation (the loop's per-step views)."""
        out = object.__new__(cls)
        out.values, out.known, out.attention_mask, out.mask_id, out.squeeze = values, known, attention_mask, mask_id, squeeze
        return out

    # ----------------------------------------------------------------------------- shape
    @property
    def is_continuous(self) -> bool:
        return self.values.dtype.is_floating_point

    @property
    def batch_size(self) -> int:
        return self.values.shape[0]

    @property
    def num_codebooks(self) -> int:
        return 1 if self.is_continuous else self.values.shape[1]

    @property
    def length(self) -> int:
        return self.values.shape[1] if self.is_continuous else self.values.shape[2]

    @property
    def token_dim(self) -> int | None:
        return self.values.shape[-1] if self.is_continuous else None

    @property
    def device(self) -> torch.device:
        return self.values.device

    def grid(self, mask: Tensor) -> Tensor:
        """A ``[B, T]`` or known-shaped mask as the ``[B, K, T]`` position grid."""
        if mask.dim() == 2:
            return mask[:, None].expand(mask.shape[0], self.num_codebooks, mask.shape[1])
        return mask

    # ----------------------------------------------------------------------------- queries
    @property
    def unknown(self) -> Tensor:
        """Bool ``[B, K, T]``: the positions still to be generated."""
        return ~self.grid(self.known)

    def num_unknown(self) -> Tensor:
        """Long ``[B]``: unknown positions per row (over all codebooks)."""
        return self.unknown.reshape(self.batch_size, -1).sum(1)

    def model_tokens(self) -> Tensor:
        """Discrete ids in the model's layout (``[B, T]`` when given so), ``mask_id`` where unknown."""
        return self.values[:, 0] if self.squeeze else self.values

    def rows_of(self, x: Tensor, rows: Tensor | None) -> Tensor:
        return x if rows is None else x.index_select(0, rows)

    # ----------------------------------------------------------------------------- updates
    def commit(self, where: Tensor, values: Tensor, rows: Tensor | None = None) -> None:
        """Write ``values`` at the unknown positions ``where`` (grid ``[A, K, T]``) of ``rows``
        (None: every row) and mark them known. ``values`` has the layout of ``self.values``
        restricted to those rows. Known positions are never overwritten."""
        known = self.rows_of(self.known, rows)
        cur = self.rows_of(self.values, rows)
        if self.is_continuous:
            where = where[:, 0] & ~known
            new = torch.where(where[..., None], values.to(cur.dtype), cur)
        else:
            where = where & ~known
            new = torch.where(where, values, cur)
        self._write(rows, new, known | where)

    def remask(self, where: Tensor, rows: Tensor | None = None) -> None:
        """Make the generated positions ``where`` (grid ``[A, K, T]``) of ``rows`` unknown again
        (policies that revise earlier commits, e.g. Mask-Predict). The caller must not pass
        given (prompt) positions."""
        known = self.rows_of(self.known, rows)
        cur = self.rows_of(self.values, rows)
        if self.is_continuous:
            where = where[:, 0]
            new = cur.masked_fill(where[..., None], 0.0)
        else:
            new = cur.masked_fill(where, self.mask_id)
        self._write(rows, new, known & ~where)

    def _write(self, rows: Tensor | None, values: Tensor, known: Tensor) -> None:
        if rows is None:
            self.values, self.known = values, known
        else:
            self.values[rows] = values
            self.known[rows] = known

    def select_rows(self, rows: Tensor) -> MaskedState:
        """A new state with only the given batch rows."""
        rows = rows.to(self.device)
        am = None if self.attention_mask is None else self.attention_mask.index_select(0, rows)
        return MaskedState.trusted(
            self.values.index_select(0, rows), self.known.index_select(0, rows), am, self.mask_id, self.squeeze
        )

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> MaskedState:
        """Move to ``device``; ``dtype`` applies to continuous values only (ids stay long)."""
        values = self.values.to(device=device, dtype=dtype if self.is_continuous else None)
        am = None if self.attention_mask is None else self.attention_mask.to(device)
        return MaskedState.trusted(values, self.known.to(device), am, self.mask_id, self.squeeze)

    def clone(self) -> MaskedState:
        am = None if self.attention_mask is None else self.attention_mask.clone()
        return MaskedState.trusted(self.values.clone(), self.known.clone(), am, self.mask_id, self.squeeze)


# --------------------------------------------------------------------------------------------
# the models


class MaskedModel(abc.ABC):
    """What every masked model offers the loop, discrete or continuous.

    * ``null_cond(cond)``: the unconditional counterpart of ``cond`` for classifier-free guidance
      (the one null condition; default None = the network's own unconditional path).
    * ``forwards``: forward counter (statistics read it; one count per thread, :class:`PerThread`); ``device``; ``max_length`` (or None).
    * ``supports_cache``: the model implements windowed forwards over a :class:`MaskedCache`
      (see ``_forward_cached``); ``new_cache(batch_size, mode)`` makes one.
    * ``forward_state(state, cond, stage=, cache=)``: one forward over a :class:`MaskedState`;
      the loop calls this, subclasses implement it through their ``__call__``.
    """

    max_length: int | None = None
    forwards = PerThread(0)
    supports_cache: bool = False
    #: the cache also takes subset forwards (``MaskedCache.positions``, dKV-Cache)
    supports_cache_positions: bool = False
    #: ... and per-row subsets (``positions [A, n]``, each row its own sorted positions)
    supports_row_positions: bool = False

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def null_cond(self, cond: Any) -> Any:
        """The unconditional counterpart of ``cond`` (same batch), for classifier-free guidance."""
        return None

    def new_cache(self, batch_size: int, mode: str = "prefix") -> MaskedCache:
        return MaskedCache(batch_size, mode)

    @abc.abstractmethod
    def forward_state(
        self, state: MaskedState, cond: Any = None, *, stage: int | None = None, cache: MaskedCache | None = None
    ) -> Tensor: ...

    def _check_window(self, cache: MaskedCache | None, length: int, batch: int) -> tuple[int, int] | None:
        if cache is None:
            return None
        if not self.supports_cache:
            raise InputError(f"{type(self).__name__} does not support a cache (supports_cache is False).")
        if getattr(cache, "positions", None) is not None:
            pos = cache.positions
            rows_ok = pos.dim() == 2 and self.supports_row_positions and pos.shape[0] == batch
            if not (pos.dim() == 1 or rows_ok) or pos.numel() == 0 or int(pos.min()) < 0 or int(pos.max()) >= length:
                raise InputError(
                    f"cache positions must be a non-empty 1-D set inside the {length} positions"
                    + (f", or one row of them per batch row ([{batch}, n])." if self.supports_row_positions else ".")
                )
            return None
        if cache.window is None:
            return None
        lo, hi = cache.window
        if not 0 <= lo < hi <= length:
            raise InputError(f"cache window {cache.window} is outside the sequence of {length} positions.")
        return lo, hi

    @staticmethod
    def _check_finite(out: Tensor, what: str) -> Tensor:
        out = out.float()
        # -inf is allowed (a network may rule tokens out itself); NaN, +inf or an all -inf row are
        # not. One pass: a row's max is NaN with any NaN (amax propagates it), +inf with any +inf,
        # -inf when the whole row is -inf, and finite otherwise.
        if not bool(torch.isfinite(out.amax(-1)).all()):
            raise NumericalError(
                f"the masked model produced NaN/inf {what}; check the weights and dtype (try float32), "
                "and that inputs are valid."
            )
        return out


class MaskedTokenModel(MaskedModel):
    """Contract of a bidirectional masked-token model (MaskGIT, MAGNeT, MaskGCT, GenMol, LLaDA, ...).

    ``model(tokens, cond=None, *, stage=None, attention_mask=None, cache=None)`` returns float32
    logits for **every** position of a partly masked sequence in one forward:

    * ``tokens``: long ``[B, L]`` (one stream, ``num_codebooks == 1``) or ``[B, K, L]``
      (``K = num_codebooks`` parallel codebooks, e.g. RVQ audio). Unknown positions hold ``mask_id``;
      every other id is in ``[0, vocab_size)``.
    * returns ``[B, L, V]`` or ``[B, K, L, V]`` with ``V = vocab_size``. ``mask_id`` may lie
      inside the vocabulary (BERT-style, GenMol, LLaDA) or outside it (MaskGIT: ``mask_id ==
      vocab_size``); samplers never propose ``mask_id`` either way.
    * ``cond``: whatever the network is conditioned on (class label, text embedding, ...): None,
      a tensor / list with the batch first, or a dict of those (samplers select rows of it).
      ``null_cond(cond)`` gives the matching *unconditional* input for classifier-free guidance.
    * ``stage``: the codebook being decoded, for models with per-stage attention (MAGNeT).
    * ``attention_mask``: ``[B, L]`` bool, False on right-padding of shorter rows (None = all real).
    * ``cache``: a :class:`MaskedCache` (only when ``supports_cache``): with ``cache.window ==
      (lo, hi)`` the logits cover only positions ``[lo, hi)`` (``[B, (K,) hi - lo, V]``).

    ``forwards`` counts calls; the call raises ``InputError`` on a malformed input and
    ``NumericalError`` on NaN/inf logits. Subclasses implement ``_forward`` (raw logits, any float
    dtype), and ``_forward_cached`` when they set ``supports_cache``; they set ``mask_id``,
    ``vocab_size``, ``num_codebooks`` and optionally ``max_length``.
    """

    mask_id: int
    vocab_size: int
    num_codebooks: int = 1

    @abc.abstractmethod
    def _forward(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None) -> Tensor: ...

    def _forward_cached(
        self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None, cache: MaskedCache
    ) -> Tensor:
        """Refresh (``cache.window is None``: every position, fill the cache) or windowed forward."""
        raise NotImplementedError(f"{type(self).__name__} sets supports_cache but has no _forward_cached")

    def check_tokens(self, tokens: Tensor) -> None:
        """Raise ``InputError`` unless ``tokens`` fits this model (shape, dtype, id range)."""
        want = 2 if self.num_codebooks == 1 else 3
        if tokens.dim() != want or (want == 3 and tokens.shape[1] != self.num_codebooks):
            shape = "[B, L]" if want == 2 else f"[B, {self.num_codebooks}, L]"
            raise InputError(
                f"this masked model takes tokens of shape {shape} (num_codebooks={self.num_codebooks}), "
                f"got {tuple(tokens.shape)}."
            )
        if tokens.dtype not in (torch.long, torch.int32, torch.int64):
            raise InputError(f"tokens must be integer ids, got dtype {tokens.dtype}.")
        if self.max_length is not None and tokens.shape[-1] > self.max_length:
            raise InputError(
                f"sequence of {tokens.shape[-1]} positions is longer than the model's maximum of "
                f"{self.max_length}; shorten the input."
            )
        if tokens.numel():
            bad = ((tokens < 0) | (tokens >= self.vocab_size)) & (tokens != self.mask_id)
            if bool(bad.any()):
                raise InputError(
                    f"token id {int(tokens[bad][0])} is outside the vocabulary [0, {self.vocab_size}) and is "
                    f"not the mask id {self.mask_id}."
                )

    def __call__(
        self,
        tokens: Tensor,
        cond: Any = None,
        *,
        stage: int | None = None,
        attention_mask: Tensor | None = None,
        cache: MaskedCache | None = None,
    ) -> Tensor:
        self.check_tokens(tokens)
        window = self._check_window(cache, tokens.shape[-1], tokens.shape[0])
        if cache is None:
            logits = self._forward(tokens, cond, stage, attention_mask)
        else:
            logits = self._forward_cached(tokens, cond, stage, attention_mask, cache)
        self.forwards += 1
        length = tokens.shape[-1] if window is None else window[1] - window[0]
        if cache is not None and cache.positions is not None:
            length = int(cache.positions.shape[-1])
        want = (*tokens.shape[:-1], length, self.vocab_size)
        if tuple(logits.shape) != want:
            raise InputError(
                f"the masked model returned logits of shape {tuple(logits.shape)}, expected {want} "
                "(tokens shape (or the cache window) + vocab_size); check vocab_size / num_codebooks of the adapter."
            )
        return self._check_finite(logits, "logits")

    def forward_state(
        self, state: MaskedState, cond: Any = None, *, stage: int | None = None, cache: MaskedCache | None = None
    ) -> Tensor:
        """Logits ``[B, K, T(or window), V]`` for a discrete state (K = 1 added for one stream)."""
        if state.is_continuous:
            raise InputError(f"{type(self).__name__} takes token ids; this state holds continuous vectors.")
        logits = self(state.model_tokens(), cond, stage=stage, attention_mask=state.attention_mask, cache=cache)
        return logits[:, None] if state.squeeze else logits


class ContinuousMaskedModel(MaskedModel):
    """Contract of a masked model over continuous tokens (MAR: masked autoregression with a
    per-token diffusion head).

    * ``model(values [B, T, D], known [B, T], cond=None, *, attention_mask=None, cache=None)``
      returns float32 conditioning vectors ``z [B, T, C]`` for every position (``[B, hi - lo, C]``
      for a windowed cached forward). Values at unknown positions are meaningless (the loop keeps
      them at 0); the network sees ``known`` and substitutes its mask embedding.
    * ``sample_tokens(z [N, C], generator, temperature [N]) -> [N, D]``: draw one continuous token
      per conditioning vector with the per-token head (MAR: a small denoising MLP run for a few
      steps). All randomness must come from ``generator`` (it may be None; it lives on ``z``'s
      device): ``torch.randn(..., generator=generator, device=z.device)``. ``temperature`` scales
      the head's noise (0 = its deterministic output).
    * ``token_dim`` (D) and ``cond_dim`` (C). ``null_cond`` for guidance as for token models
      (guidance mixes the conditioning vectors).

    Subclasses implement ``_forward`` (and ``_forward_cached`` with ``supports_cache``) and
    ``sample_tokens``.
    """

    token_dim: int
    cond_dim: int

    @abc.abstractmethod
    def _forward(self, values: Tensor, known: Tensor, cond: Any, attention_mask: Tensor | None) -> Tensor: ...

    def _forward_cached(
        self, values: Tensor, known: Tensor, cond: Any, attention_mask: Tensor | None, cache: MaskedCache
    ) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} sets supports_cache but has no _forward_cached")

    @abc.abstractmethod
    def sample_tokens(self, z: Tensor, generator: torch.Generator | None, temperature: Tensor) -> Tensor: ...

    def __call__(
        self,
        values: Tensor,
        known: Tensor,
        cond: Any = None,
        *,
        attention_mask: Tensor | None = None,
        cache: MaskedCache | None = None,
    ) -> Tensor:
        if values.dim() != 3 or values.shape[-1] != self.token_dim or not values.dtype.is_floating_point:
            raise InputError(f"this model takes float values [B, T, {self.token_dim}], got {values.dtype} {tuple(values.shape)}.")
        if tuple(known.shape) != tuple(values.shape[:2]):
            raise InputError(f"known must have shape [B, T] = {tuple(values.shape[:2])}, got {tuple(known.shape)}.")
        if self.max_length is not None and values.shape[1] > self.max_length:
            raise InputError(f"sequence of {values.shape[1]} positions is longer than the model's maximum of {self.max_length}.")
        window = self._check_window(cache, values.shape[1], values.shape[0])
        if cache is None:
            z = self._forward(values, known, cond, attention_mask)
        else:
            z = self._forward_cached(values, known, cond, attention_mask, cache)
        self.forwards += 1
        length = values.shape[1] if window is None else window[1] - window[0]
        if tuple(z.shape) != (values.shape[0], length, self.cond_dim):
            raise InputError(
                f"the model returned conditioning vectors of shape {tuple(z.shape)}, expected "
                f"{(values.shape[0], length, self.cond_dim)}."
            )
        return self._check_finite(z, "conditioning vectors")

    def forward_state(
        self, state: MaskedState, cond: Any = None, *, stage: int | None = None, cache: MaskedCache | None = None
    ) -> Tensor:
        """Conditioning vectors ``[B, 1, T(or window), C]`` (the position grid's K = 1 added)."""
        if not state.is_continuous:
            raise InputError(f"{type(self).__name__} takes continuous vectors; this state holds token ids.")
        return self(state.values, state.known, cond, attention_mask=state.attention_mask, cache=cache)[:, None]
