"""A preallocated KV cache whose rollback moves pointers instead of tensors.

:class:`StaticKVCache` keeps the :class:`~leapgen.models.base.KVCache` bookkeeping API (``lengths``,
``valid``, ``crop`` / ``keep_new`` / ``select`` / ``select_rows``, ``position_ids``,
``attention_mask``) over per-layer buffers ``[rows, kv_heads, capacity, head_dim]`` that are
allocated once per ``generate`` call:

* a forward writes its new keys/values in place at slots ``n_slots ..`` (:meth:`StaticLayer.append`
  returns views of the filled prefix for attention): no ``torch.cat`` per step;
* ``crop`` and ``keep_new`` only move ``n_slots`` and flip bits of a preallocated validity mask
  (rejected slots become holes, hidden by the mask; later forwards overwrite trailing slots);
* ``select`` (an accepted tree path) copies just the few accepted slots of each row into place;
* ``select_rows`` (rows that finished) is the only operation that allocates (and it drops the
  slot columns no remaining row uses, as the reference cache does).

Capacity grows by doubling when a forward would overflow it (a handful of times per call at
most); ``capacity=`` sizes it up front (what a CUDA-graph step needs: fixed buffers).
Attention masks are **boolean** (True = may attend), which ``F.scaled_dot_product_attention``
takes directly; the models built on this cache (:mod:`leapgen.models.lean.llama`, the LlamaGen
adapter) read them as such. ``copies`` stacks several copies of every row in the buffers
(classifier-free guidance runs ``[cond, null]`` halves): every row operation applies to row b of
each copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..base import KVCache

#: slots a fresh cache holds before it first grows
DEFAULT_CAPACITY = 256


class StaticLayer:
    """One layer's buffers; :meth:`append` writes new keys/values at the cache's write slot."""

    is_initialized = True

    def __init__(self, cache: StaticKVCache, k: Tensor, v: Tensor) -> None:
        self.cache = cache
        self.k_buf = k
        self.v_buf = v

    @property
    def keys(self) -> Tensor:
        """The filled slots ``[rows, kv_heads, n_slots, head_dim]`` (a view)."""
        return self.k_buf[:, :, : self.cache.n_slots]

    @property
    def values(self) -> Tensor:
        return self.v_buf[:, :, : self.cache.n_slots]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``k, v [rows, kv_heads, n, head_dim]`` at slots ``n_slots .. n_slots+n`` and return
        views of every slot up to them (what the new queries attend over)."""
        s = self.cache.n_slots
        end = s + k.shape[2]
        self.k_buf[:, :, s:end] = k
        self.v_buf[:, :, s:end] = v
        return self.k_buf[:, :, :end], self.v_buf[:, :, :end]


class StaticBackend:
    """The ``layers`` list a network iterates over (``backend.layers[i].append(k, v)``)."""

    def __init__(self, layers: list[StaticLayer]) -> None:
        self.layers = layers


class StaticKVCache(KVCache):
    """:class:`KVCache` over preallocated buffers with in-place rollback (see the module docstring)."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        capacity: int = DEFAULT_CAPACITY,
        copies: int = 1,
        cond: Any = None,
        implicit_causal: bool = False,
    ) -> None:
        # the base __init__ is not called: ``valid`` is a view of a preallocated mask here
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.cond = cond
        self.copies = copies
        self.capacity = max(int(capacity), 1)
        self.n_slots = 0
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._shape = (kv_heads, head_dim, dtype)
        rows = batch_size * copies
        self.backend = StaticBackend(
            [
                StaticLayer(self, *(torch.empty(rows, kv_heads, self.capacity, head_dim, dtype=dtype, device=self.device)
                                    for _ in range(2)))
                for _ in range(n_layers)
            ]
        )
        self._valid = torch.ones(batch_size, self.capacity, dtype=torch.bool, device=self.device)
        #: whether some slot below ``n_slots`` is a hole (else every row holds ``n_slots`` tokens)
        self.holes = False
        #: return None (not a causal mask) for several new tokens over a cache without holes, as
        #: the reference KVCache does, for networks that build that mask themselves
        self.implicit_causal = implicit_causal
        self._causal: dict[tuple[int, int], Tensor] = {}

    # ----------------------------------------------------------------------------- storage
    @property
    def valid(self) -> Tensor | None:  # type: ignore[override]
        """``[B, n_slots]`` bool (a view), or None when no row has holes."""
        return self._valid[:, : self.n_slots] if self.holes else None

    def reserve(self, n: int) -> None:
        """Make room for ``n`` more slots (doubling the buffers if needed): call before a forward."""
        need = self.n_slots + n
        if need <= self.capacity:
            return
        cap = max(2 * self.capacity, need)
        s = self.n_slots
        for layer in self.backend.layers:
            for name in ("k_buf", "v_buf"):
                old = getattr(layer, name)
                new = old.new_empty(old.shape[0], old.shape[1], cap, old.shape[3])
                new[:, :, :s] = old[:, :, :s]
                setattr(layer, name, new)
        valid = torch.ones(self.batch_size, cap, dtype=torch.bool, device=self.device)
        valid[:, :s] = self._valid[:, :s]
        self._valid = valid
        self.capacity = cap

    def _rows(self, rows: Tensor) -> Tensor:
        """Buffer rows of batch rows ``rows`` in every copy."""
        if self.copies == 1:
            return rows
        return torch.cat([rows + k * self.batch_size for k in range(self.copies)])

    # ----------------------------------------------------------------------------- bookkeeping
    def attention_mask(self, n: int, block: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """Boolean mask ``[B or 1, 1, n, slots+n]`` (True = may attend) for n new tokens, or None
        when every new token may see every slot (one new token, no holes; with ``implicit_causal``
        also for several causal tokens, which the network then masks itself). ``block`` as in
        :meth:`KVCache.attention_mask`; ``dtype`` is ignored (boolean masks need none)."""
        s = self.n_slots
        if block is None and not self.holes:
            if n == 1 or self.implicit_causal:
                return None
            key = (n, s)
            mask = self._causal.get(key)
            if mask is None:
                if len(self._causal) > 64:
                    self._causal.clear()
                mask = torch.ones(n, s + n, dtype=torch.bool, device=self.device).tril(s)[None, None]
                self._causal[key] = mask
            return mask
        b = self.batch_size
        if block is None:
            block = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()[None]
        block = block.to(self.device)
        extra = block.shape[-1] - n
        if extra < 0 or extra > s:
            raise ValueError(
                f"attn_mask covers {block.shape[-1]} columns; expected between {n} (the new tokens) and "
                f"{s + n} (all cache slots plus the new tokens)"
            )
        allowed = torch.empty(b, n, s + n, dtype=torch.bool, device=self.device)
        if self.holes:
            allowed[:, :, :s] = self._valid[:, None, :s]
        else:
            allowed[:, :, :s] = True
        if extra:
            allowed[:, :, s - extra : s] &= block[..., :extra]
        allowed[:, :, s:] = block[..., extra:]
        return allowed[:, None]

    def appended(self, n: int) -> None:
        """Record that every row's buffers grew by n valid slots (written by the forward)."""
        s = self.n_slots
        if self.holes:
            self._valid[:, s : s + n] = True
        self.n_slots = s + n
        self.lengths += n

    def _refresh(self) -> None:
        if self.holes:
            self.lengths = self._valid[:, : self.n_slots].sum(1)
        else:
            self.lengths = torch.full((self.batch_size,), self.n_slots, dtype=torch.long, device=self.device)

    # ----------------------------------------------------------------------------- rollback
    def crop(self, n_slots: int) -> None:
        """Keep the first ``n_slots`` slots of every row (a pointer move)."""
        if n_slots < 0 or n_slots > self.n_slots:
            raise ValueError(f"cannot crop a cache of {self.n_slots} slots to {n_slots}")
        self.n_slots = n_slots
        if self.holes and bool(self._valid[:, :n_slots].all()):
            self.holes = False
        self._refresh()

    def keep_new(self, start: int, counts: Tensor | Sequence[int]) -> None:
        """Of the slots from ``start`` on, row b keeps the first ``counts[b]`` (the rest become
        holes; trailing slots no row keeps are released)."""
        host = counts.tolist() if isinstance(counts, Tensor) else [int(c) for c in counts]
        keep_until = start + max(host, default=0)
        width = keep_until - start
        if keep_until > self.n_slots or start < 0:
            raise ValueError(f"cannot keep slots {start}..{keep_until} of a cache of {self.n_slots} slots")
        self.n_slots = keep_until
        if width > 0 and min(host) < width:
            c = torch.as_tensor(host, dtype=torch.long).to(self.device)
            keep = torch.arange(width, device=self.device)[None] < c[:, None]
            if self.holes:  # earlier holes in the region stay holes
                self._valid[:, start:keep_until] &= keep
            else:
                self._valid[:, :start] = True
                self._valid[:, start:keep_until] = keep
                self.holes = True
        elif self.holes and bool(self._valid[:, :keep_until].all()):  # the holes were in the released tail
            self.holes = False
        self._refresh()

    def select(self, start: int, index: Tensor, counts: Tensor | Sequence[int]) -> None:
        """Row b keeps slots ``start + index[b, :counts[b]]``, copied to ``start, start+1, ...``
        (only the accepted path's slots move)."""
        if index.numel():
            idx = self._rows_index(index.to(self.device))
            k = idx.shape[1]
            for layer in self.backend.layers:
                for buf in (layer.k_buf, layer.v_buf):
                    r, h, _, d = buf.shape
                    g = idx[:, None, :, None].expand(r, h, k, d)
                    buf[:, :, start : start + k] = torch.gather(buf[:, :, start : self.n_slots], 2, g)
        self.keep_new(start, counts)

    def _rows_index(self, index: Tensor) -> Tensor:
        return index.repeat(self.copies, 1) if self.copies > 1 else index

    def select_rows(self, rows: Tensor) -> None:
        """Keep only the given batch rows (rows that finished leave the batch). Like the reference
        :class:`KVCache`, slot columns that no remaining row uses are dropped, so the rows go on
        attending over exactly the slots they would have had in a batch of their own (the only
        operation that copies the cache; it runs when rows finish)."""
        rows = rows.to(self.device)
        full = self._rows(rows)
        valid = self._valid.index_select(0, rows)
        keep = None
        if self.holes:
            used = valid[:, : self.n_slots].any(0)
            if not bool(used.all()):
                keep = used.nonzero().squeeze(1)
        for layer in self.backend.layers:
            for name in ("k_buf", "v_buf"):
                buf = getattr(layer, name).index_select(0, full)
                if keep is not None:
                    buf[:, :, : keep.numel()] = buf.index_select(2, keep)
                setattr(layer, name, buf)
        if keep is not None:
            valid[:, : keep.numel()] = valid.index_select(1, keep)
            self.n_slots = int(keep.numel())
        self._valid = valid
        if self.cond is not None:
            self.cond = self.cond.select_rows(rows)
        self.batch_size = int(rows.numel())
        if self.holes and bool(self._valid[:, : self.n_slots].all()):
            self.holes = False
        self._refresh()


__all__ = ["DEFAULT_CAPACITY", "StaticBackend", "StaticKVCache", "StaticLayer"]
