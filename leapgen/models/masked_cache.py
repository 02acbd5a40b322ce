"""The masked-model cache (Fast-dLLM prefix / dual cache, dKV-Cache subsets) and per-row subset positions.

:class:`MaskedCache` is the store a cache-capable :class:`~leapgen.models.masked_base.MaskedModel`
fills on a refresh forward and reads on a windowed or subset forward; the decode loop
(``leapgen.samplers.masked``) owns it and decides when to refresh. :func:`row_subsets` turns each
row's needed positions, and :func:`row_ranges` each row's window, into the ``[A, n]`` subset a
cached forward recomputes.
"""

from __future__ import annotations

import torch
from torch import Tensor


class MaskedCache:
    """Per-layer tensors a cache-capable masked model stores on a refresh forward and reads later.

    The loop creates one per guidance pass (``model.new_cache(batch_size, mode)``) and, before
    each forward, sets ``rows`` (the active batch rows, None = all) and ``window``:

    * ``window is None``: a *refresh*. The model runs every position exactly as without a cache
      (the logits must be identical) and ``put``s what later forwards need (e.g. each layer's
      keys and values, ``[A, heads, T, dim]``).
    * ``window == (lo, hi)``: a *windowed* forward. The model computes only positions
      ``[lo, hi)`` and returns their outputs (``[A, (K,) hi - lo, V]``); positions outside the
      window attend through the stored tensors (``get``). ``mode == "prefix"`` has ``hi == T``
      (Fast-dLLM prefix cache); ``"dual"`` also reuses the suffix ``[hi, T)`` (dual cache).

    Stored tensors are batch-first and kept for the whole batch; ``put`` writes the active rows,
    ``get`` returns them. ``refreshes`` / ``reuses`` count forwards of each kind.
    """

    MODES = ("prefix", "dual")

    def __init__(self, batch_size: int, mode: str = "prefix") -> None:
        if mode not in self.MODES:
            raise ValueError(f"cache mode must be one of {self.MODES}, got {mode!r}")
        self.batch_size = batch_size
        self.mode = mode
        self.rows: Tensor | None = None
        self.window: tuple[int, int] | None = None
        #: a *subset* forward (dKV-Cache): sorted long positions, shared by the rows (``[n]``) or
        #: per row (``[A, n]``, models with ``supports_row_positions``); only they are recomputed
        #: and returned (``[A, (K,) n, V]``); None = window / refresh
        self.positions: Tensor | None = None
        self.refreshes = 0
        self.reuses = 0
        self._store: dict[str, Tensor] = {}

    def put(self, name: str, value: Tensor) -> None:
        """Store ``value`` (batch-first, the active rows) under ``name``."""
        if self.rows is None:
            self._store[name] = value
            return
        buf = self._store.get(name)
        want = (self.batch_size, *value.shape[1:])
        if buf is None or tuple(buf.shape) != want or buf.dtype != value.dtype or buf.device != value.device:
            buf = torch.zeros(want, dtype=value.dtype, device=value.device)
            self._store[name] = buf
        buf.index_copy_(0, self.rows, value)

    def get(self, name: str) -> Tensor:
        """The active rows of the tensor stored under ``name``."""
        if name not in self._store:
            raise KeyError(f"nothing cached under {name!r}; a windowed forward needs a refresh first")
        buf = self._store[name]
        return buf if self.rows is None else buf.index_select(0, self.rows)

    def __contains__(self, name: str) -> bool:
        return name in self._store

    def clear(self) -> None:
        self._store.clear()


def row_subsets(need: Tensor) -> Tensor | None:
    """Per-row subset positions ``[A, n]`` for the bool ``need [A, L]``: each row's needed
    positions in ascending order, padded to the largest row's count by repeating that row's last
    needed position; None when no row needs any (one host sync: ``n``).

    Padding with a repeat recomputes nothing a row would not recompute alone (a repeated position
    computes the same keys / values and logits twice and writes them back once), so a row's
    cached decode does not depend on what it is batched with. A row that needs nothing repeats
    position 0 (its outputs are not read)."""
    length = need.shape[-1]
    n = int(need.sum(-1).max()) if need.numel() else 0
    if n == 0:
        return None
    pos = torch.arange(length, device=need.device)
    key = torch.where(need, pos, pos + length)  # needed first, in order, then the rest
    first = key.sort(-1).values[:, :n]
    last = torch.where(first < length, first, -1).amax(-1, keepdim=True).clamp(min=0)
    return torch.where(first < length, first, last)


def row_ranges(lo: Tensor, hi: Tensor) -> Tensor:
    """Per-row contiguous windows ``[lo_b, hi_b)`` as subset positions ``[A, n]`` (``n`` the widest
    window), each padded by repeating its last position (see :func:`row_subsets`); an empty
    window repeats ``lo_b`` (clamped to 0)."""
    width = (hi - lo).clamp(min=1)
    n = int(width.max())  # one host sync per stage
    offsets = torch.arange(n, device=lo.device)
    return lo.clamp(min=0)[:, None] + torch.minimum(offsets[None], width[:, None] - 1)


def take_positions(x: Tensor, idx: Tensor) -> Tensor:
    """``x [B, L, ...]`` at sequence positions ``idx``: shared ``[n]`` or per row ``[B, n]``."""
    if idx.dim() == 1:
        return x[:, idx]
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:]))


def write_positions(stored: Tensor, new: Tensor, idx: Tensor) -> Tensor:
    """A copy of the stored keys / values ``[B, H, L, D]`` with ``new [B, H, n, D]`` written at
    positions ``idx`` (shared ``[n]`` or per row ``[B, n]``), in ``stored``'s dtype."""
    out = stored.clone()
    if idx.dim() == 1:
        out[:, :, idx] = new.to(out.dtype)
    else:  # per-row positions (index_put: 4x faster than scatter_ on a CPU)
        at = torch.arange(out.shape[0], device=idx.device)[:, None]
        out[at, :, idx] = new.transpose(1, 2).to(out.dtype)
    return out


__all__ = ["MaskedCache", "row_ranges", "row_subsets", "take_positions", "write_positions"]
