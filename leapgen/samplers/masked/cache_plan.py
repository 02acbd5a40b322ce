"""What one cached forward of the masked loop recomputes: a refresh, a window or per-row positions.

:func:`plan_cache` turns the cache policy's choice for this step (``state.cache_window`` /
``state.cache_positions``, see :mod:`.cache`) into the settings of the model's
:class:`~leapgen.models.masked_cache.MaskedCache` for one forward, so that every row decodes as it
would alone:

* a refresh when the policy asks for one (stage start, every ``cache_refresh`` steps), when the
  cache is new or the forward's length changed;
* otherwise the stage's window (shared) or per-row subset positions; rows with different windows
  go per row on models with ``supports_row_positions`` (else the rows share their union);
* **End-of-Text truncation** (the ``eot_predict`` hook): alone, a row whose cut moves shortens its
  sequence and so refreshes; in a batch the forward keeps the cache's length
  (:func:`kept_length`: the batch's cut may not move when a shorter row's does) and each row whose
  cut moved at the last step recomputes all its positions in the same forward (a *row refresh*,
  per-row positions padded by repetition), while the others recompute only their own positions.
  When every row's cut moved (always at batch 1) the forward shortens to the new cut and
  refreshes, which is cheaper and the same.
  Positions past a row's cut are masked out of its attention, so the longer forward changes none
  of its outputs. A model without per-row subsets refreshes every row instead (not batch-exact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...models.masked_cache import MaskedCache, row_subsets

if TYPE_CHECKING:  # pragma: no cover
    from .state import MaskedDecodeState


def _caching(state: MaskedDecodeState, key: str | None) -> bool:
    return key is not None and state.cache_policy is not None and state.cache_policy.mode is not None


def kept_length(state: MaskedDecodeState, key: str | None) -> int | None:
    """The length a truncated forward keeps for cache ``key``: the cache's own length when this
    forward reuses it (no refresh due), else None (cut at the batch's End-of-Text cut)."""
    if state.truncate_len is None or state.refresh_now or state.cut_moved_all or not _caching(state, key):
        return None
    cache = state.caches.get(key)  # type: ignore[arg-type]
    length = getattr(cache, "length", None)
    return length if length is not None and length > state.truncate_len else None


def _needed(state: MaskedDecodeState, window: tuple[int, int] | None, positions: Tensor | None,
            length: int, rows: int, device: torch.device) -> Tensor:
    """bool ``[A, length]``: what each active row recomputes (window, shared or per-row positions);
    positions past ``length`` are left out."""
    if positions is None:
        need = torch.zeros(rows, length, dtype=torch.bool, device=device)
        need[:, window[0] : min(window[1], length)] = True  # type: ignore[index]
        return need
    pos = positions.to(device)
    pos = pos.expand(rows, -1) if pos.dim() == 1 else pos
    spill = torch.zeros(rows, length + 1, dtype=torch.bool, device=device)  # one spare column past the cut
    return spill.scatter_(1, pos.clamp(max=length), True)[:, :length]


def plan_cache(state: MaskedDecodeState, model: Any, key: str | None, length: int) -> MaskedCache | None:
    """The cache ``key`` set up for one forward of ``length`` positions over the active rows
    (None: this forward runs uncached); see the module docstring."""
    if not _caching(state, key):
        return None
    cache = state.caches.get(key)  # type: ignore[arg-type]
    if cache is None:
        cache = state.caches[key] = model.new_cache(state.batch_size, state.cache_policy.mode)  # type: ignore[index,union-attr]
    cache.rows = None if state.all_rows else state.rows
    refresh = state.refresh_now or getattr(cache, "length", None) != length
    window, positions = state.cache_window, state.cache_positions
    rows_ok = bool(getattr(model, "supports_row_positions", False))
    if positions is not None and window is not None and not getattr(model, "supports_cache_positions", False):
        positions = None  # per-row windows on a model with windows only: the rows share their union
    moved = state.cut_moved
    if not refresh and moved is not None and (window is not None or positions is not None):
        if rows_ok:  # row refreshes: the moved rows recompute everything, the others their own positions
            need = _needed(state, window, positions, length, len(state.rows), state.generated.device)
            need |= state.active(moved.to(need.device))[:, None]
            window, positions = None, row_subsets(need)
        else:
            refresh = True
    if not refresh and window is not None and positions is None:
        lo, hi = window[0], min(window[1], length)
        window = (lo, hi) if lo < hi else None
        refresh = window is None
    if not refresh and positions is not None:
        # per-row sets go to models that take them; elsewhere the rows share their union
        if positions.dim() == 2 and not rows_ok:
            positions = positions.unique()
        if positions.dim() == 1:
            positions = positions[positions < length]
            refresh = positions.numel() == 0
        elif bool((positions >= length).any()):  # a row's set past the cut: each its own, inside it
            positions = row_subsets(_needed(state, None, positions, length, positions.shape[0], positions.device))
            refresh = positions is None
    cache.window = None if refresh else (None if positions is not None else window)
    cache.positions = None if refresh else positions
    cache.length = length
    return cache


__all__ = ["kept_length", "plan_cache"]
