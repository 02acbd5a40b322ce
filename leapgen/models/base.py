"""Model contracts that samplers rely on, and the rollback-capable KV cache.

Samplers never touch a network's internals: they call a :class:`CausalLM` with a chunk of tokens
and a :class:`KVCache`, and get float32 logits back. The cache keeps per-row lengths so that rows
of a batch can accept different numbers of tokens: slots a row rejected become *holes* that the
attention mask hides, and position ids come from each row's own length.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import InputError, NumericalError
from .masked_base import MaskedTokenModel  # noqa: F401  (moved to masked_base.py; old imports keep working)
from .per_thread import PerThread


class KVCache:
    """Per-row-length view over a backend KV cache of shape ``[B, heads, slots, dim]`` per layer.

    * ``lengths[b]``: the number of valid tokens of row b (= the position id of its next token).
    * ``valid``: ``[B, slots]`` bool, or None when every slot of every row is valid (the fast path:
      no explicit attention mask is needed then).
    * ``crop(n)``: keep the first n slots (chain rollback, batch-wide).
    * ``keep_new(start, counts)``: of the slots from ``start`` on, row b keeps the first
      ``counts[b]``; the rest become holes, and trailing slots that no row uses are dropped.
    * ``select(start, index, counts)``: row b moves slots ``start + index[b, :counts[b]]`` to
      ``start, start+1, ...`` (keeping an accepted tree path), then ``keep_new``.
    * ``select_rows(rows)``: drop finished rows from the batch.
    * ``real_lengths``: ``[B]`` real token counts of the block being fed when its rows are
      right-padded (set by the decode runtime around that one forward, None otherwise), so a model
      that decides per row from a whole forward (FiRST's routers) reads its own tokens only.

    The backend is anything with per-layer ``keys`` / ``values`` tensors (transformers'
    ``DynamicCache`` layers); subclass and override the ``_backend_*`` hooks for another layout.
    """

    def __init__(self, backend: Any, batch_size: int, device: torch.device | str = "cpu", cond: Any = None) -> None:
        self.backend = backend
        self.batch_size = batch_size
        self.device = torch.device(device)
        #: the batch's condition (class labels, text, encoder state ...), rows kept in step with the cache
        self.cond = cond
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self.valid: Tensor | None = None
        self.n_slots = 0
        self.real_lengths: Tensor | None = None

    def __len__(self) -> int:
        return self.n_slots

    # ----------------------------------------------------------------------------- backend hooks
    def _layers(self) -> list[Any]:
        return [layer for layer in self.backend.layers if getattr(layer, "is_initialized", True)]

    def _backend_crop(self, n_slots: int) -> None:
        remove = self.n_slots - n_slots
        if remove > 0:
            for layer in self._layers():
                layer.keys = layer.keys[..., :n_slots, :]
                layer.values = layer.values[..., :n_slots, :]

    def _backend_gather(self, start: int, index: Tensor) -> None:
        # index: [B, K] slot offsets relative to start
        for layer in self._layers():
            for name in ("keys", "values"):
                t = getattr(layer, name)
                b, h, _, d = t.shape
                idx = index[:, None, :, None].expand(b, h, index.shape[1], d)
                t[:, :, start : start + index.shape[1]] = torch.gather(t[:, :, start:], 2, idx)

    def _backend_select_rows(self, rows: Tensor) -> None:
        for layer in self._layers():
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)

    # ----------------------------------------------------------------------------- bookkeeping
    def position_ids(self, n: int, offsets: Tensor | None = None) -> Tensor:
        """Positions of ``n`` new tokens per row: ``lengths + arange(n)`` or ``lengths + offsets``."""
        if offsets is None:
            offsets = torch.arange(n, device=self.device)[None]
        return self.lengths[:, None] + offsets

    def attention_mask(self, n: int, block: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """Additive 4-D mask ``[B, 1, n, slots+n]`` for a forward of n new tokens, or None.

        ``block`` ([B or 1, n, m] bool, m >= n) says which new tokens see which (a tree's
        ancestors); by default they are causal among themselves. When ``m > n`` the block also
        covers the last ``m - n`` cache slots (a tree fed level by level: new nodes see only
        their ancestors among the nodes fed before). Holes are hidden from every query.
        """
        if self.valid is None and block is None:
            return None
        b = self.batch_size
        if block is None:
            block = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()[None]
        block = block.to(self.device)
        extra = block.shape[-1] - n
        if extra < 0 or extra > self.n_slots:
            raise ValueError(
                f"attn_mask covers {block.shape[-1]} columns; expected between {n} (the new tokens) and "
                f"{self.n_slots + n} (all cache slots plus the new tokens)"
            )
        past = (
            self.valid
            if self.valid is not None
            else torch.ones(b, self.n_slots, dtype=torch.bool, device=self.device)
        )
        past = past[:, None, :].expand(b, n, self.n_slots)
        if extra:
            head = past[..., : self.n_slots - extra]
            tail = past[..., self.n_slots - extra :] & block[..., :extra].expand(b, n, extra)
            past = torch.cat([head, tail], dim=-1)
        allowed = torch.cat([past, block[..., extra:].expand(b, n, n)], dim=-1)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    @torch.inference_mode()
    def appended(self, n: int) -> None:
        """Record that the backend grew by n slots for every row (all valid for now)."""
        self.n_slots += n
        if self.valid is not None:
            self.valid = torch.cat(
                [self.valid, torch.ones(self.batch_size, n, dtype=torch.bool, device=self.device)], dim=1
            )
        self.lengths = self.lengths + n

    def _refresh(self) -> None:
        if self.valid is not None and bool(self.valid.all()):
            self.valid = None
        self.lengths = (
            self.valid.sum(1)
            if self.valid is not None
            else torch.full((self.batch_size,), self.n_slots, dtype=torch.long, device=self.device)
        )

    # ----------------------------------------------------------------------------- rollback
    @torch.inference_mode()
    def crop(self, n_slots: int) -> None:
        """Keep the first ``n_slots`` slots of every row."""
        if n_slots < 0 or n_slots > self.n_slots:
            raise ValueError(f"cannot crop a cache of {self.n_slots} slots to {n_slots}")
        self._backend_crop(n_slots)
        self.n_slots = n_slots
        if self.valid is not None:
            self.valid = self.valid[:, :n_slots]
        self._refresh()

    @torch.inference_mode()
    def keep_new(self, start: int, counts: Tensor) -> None:
        """Of the slots from ``start`` on, row b keeps the first ``counts[b]``."""
        counts = counts.to(self.device)
        keep_until = start + int(counts.max()) if counts.numel() else start
        self._backend_crop(keep_until)
        self.n_slots = keep_until
        width = keep_until - start
        if width > 0 and bool((counts < width).any()):
            if self.valid is None:
                self.valid = torch.ones(self.batch_size, self.n_slots, dtype=torch.bool, device=self.device)
            else:
                self.valid = self.valid[:, :keep_until]
            ar = torch.arange(width, device=self.device)[None]
            self.valid[:, start:] &= ar < counts[:, None]
        elif self.valid is not None:
            self.valid = self.valid[:, :keep_until]
        self._refresh()

    @torch.inference_mode()
    def select(self, start: int, index: Tensor, counts: Tensor) -> None:
        """Row b keeps slots ``start + index[b, :counts[b]]``, moved to ``start, start+1, ...``."""
        if index.numel():
            self._backend_gather(start, index.to(self.device))
        self.keep_new(start, counts)

    @torch.inference_mode()
    def select_rows(self, rows: Tensor) -> None:
        """Keep only the given batch rows (e.g. drop rows that finished)."""
        rows = rows.to(self.device)
        self._backend_select_rows(rows)
        if self.cond is not None:
            self.cond = self.cond.select_rows(rows)
        self.batch_size = int(rows.numel())
        self.lengths = self.lengths.index_select(0, rows)
        if self.valid is not None:
            self.valid = self.valid.index_select(0, rows)
            # drop slot columns no remaining row uses
            used = self.valid.any(0)
            if not bool(used.all()):
                keep = used.nonzero().squeeze(1)
                for layer in self._layers():
                    layer.keys = layer.keys.index_select(2, keep)
                    layer.values = layer.values.index_select(2, keep)
                self.valid = self.valid.index_select(1, keep)
                self.n_slots = int(keep.numel())
        self._refresh()


class CausalLM(abc.ABC):
    """Contract of an autoregressive model as the samplers see it.

    ``model(tokens[B, n], cache, position_ids=None, attn_mask=None, cond=None)`` returns float32
    logits ``[B, n, V]`` and appends n slots to ``cache``. ``attn_mask`` ([B or 1, n, n] bool)
    restricts which of the new tokens see each other (token trees, Jacobi windows); the default
    is causal. A wider ``[B or 1, n, m + n]`` mask also covers the last m cache slots (a tree
    fed level by level). ``position_ids`` default to each row's length plus ``arange(n)``.
    ``forwards`` counts calls, which is what the statistics report; the count is per thread
    (:class:`~leapgen.models.per_thread.PerThread`), so that concurrent calls of one loaded model each
    count their own forwards.
    """

    vocab_size: int
    max_length: int
    forwards = PerThread(0)
    #: ``(rows, cols)`` of the token grid for image models generating in raster order (samplers
    #: such as SJD's ``repeat_horizon`` initialisation use it); None for 1-D sequences.
    grid: tuple[int, int] | None = None

    #: What a sampler may need from a model beyond a plain causal forward over rows that
    #: advance together, with what each means. A model lists the ones it lacks in ``unsupported``.
    CAPABILITIES: ClassVar[dict[str, str]] = {
        "rollback": "dropping rejected draft slots from the KV cache (crop / keep_new)",
        "tree_mask": "an arbitrary attention mask among the new tokens, with their own position ids "
        "(token trees, Jacobi / lookahead windows)",
        "ragged_rows": "rows of one batch at different positions (prompts of different lengths, rows "
        "accepting different numbers of tokens, which leaves holes in the cache)",
        "multi_token": "several new tokens in one forward over a filled cache (verifying a draft)",
    }
    #: capability -> why this model lacks it (empty: it supports every capability above). Samplers
    #: check it with :meth:`require` when a call starts, so that an unsupported pair fails with a
    #: reason instead of giving tokens that silently differ.
    unsupported: dict[str, str] = {}
    #: True when the logits at a position depend only on that position and the condition, never on
    #: the tokens fed or the cache (a NAR hypothesis seen as a draft model, :class:`NARDraftLM`). A
    #: drafter then reads a whole block of positions in one call (:meth:`position_logits`).
    position_indexed: bool = False

    def supports(self, capability: str) -> bool:
        """Whether this model offers ``capability`` (a key of ``CAPABILITIES``)."""
        if capability not in self.CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}; known: {sorted(self.CAPABILITIES)}")
        return capability not in self.unsupported

    def require(self, *capabilities: str, sampler: str, batch_size: int = 1) -> None:
        """Raise ``ModelMismatchError`` naming the reason unless this model offers every one of
        ``capabilities``. ``ragged_rows`` is only needed when ``batch_size > 1``."""
        from ..errors import ModelMismatchError

        for cap in capabilities:
            if cap == "ragged_rows" and batch_size <= 1:
                continue
            if not self.supports(cap):
                raise ModelMismatchError(
                    f"sampler {sampler!r} cannot run on {type(self).__name__} ({self.describe()}): it needs "
                    f"{cap} ({self.CAPABILITIES[cap]}), and this model does not support it: "
                    f"{self.unsupported[cap]}"
                    + (" Use batch size 1." if cap == "ragged_rows" else " Choose another sampler.")
                )

    def describe(self) -> str:
        """A short name of the network, for error messages."""
        return type(self).__name__

    @abc.abstractmethod
    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        """An empty cache for ``batch_size`` rows decoding under condition ``cond`` (None = the
        model's unconditional input). The cache carries the condition (``KVCache.cond``) and drops
        its rows with the cache's."""

    def position_logits(self, cache: KVCache, position_ids: Tensor) -> Tensor:
        """Float32 logits ``[B, n, V]`` at ``position_ids [B, n]``, feeding nothing and leaving
        ``cache`` as it is; only models that are ``position_indexed`` have it. Counts a forward."""
        raise NotImplementedError(f"{type(self).__name__} is not position-indexed")

    def position_tokens(self, cache: KVCache) -> Tensor | None:
        """A ``position_indexed`` model's hypothesis: its most likely token at every position,
        ``[B, L]`` long, -1 where it has none (past its end). A drafter uses it to re-align the
        positions after the verifier inserted or dropped a token. None: the model cannot say."""
        return None

    def condition_slots(self, cond: Any) -> int:
        """How many leading sequence slots the model fills from ``cond`` (0 = none: the
        condition reaches the network another way, e.g. cross-attention, or there is none).
        The runtime feeds that many placeholder positions before a row's prompt."""
        return 0

    @abc.abstractmethod
    def _forward(
        self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any
    ) -> Tensor: ...

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def __call__(
        self,
        tokens: Tensor,
        cache: KVCache,
        position_ids: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cond: Any = None,
    ) -> Tensor:
        n = tokens.shape[1]
        if position_ids is None:
            position_ids = cache.position_ids(n)
        top = int(position_ids.max()) if position_ids.numel() else 0
        if top >= self.max_length:
            raise InputError(
                f"position {top} is outside the model's context window of {self.max_length} tokens; "
                "shorten the prompt or lower max_new_tokens."
            )
        mask = cache.attention_mask(n, attn_mask, self.dtype)
        logits = self._forward(tokens, cache, position_ids, mask, cache.cond if cond is None else cond)
        cache.appended(n)
        self.forwards += 1
        logits = logits.float()
        if not torch.isfinite(logits).all():
            guidance = getattr(cache.cond if cond is None else cond, "guidance", None)
            hint = ""
            if getattr(guidance, "active", False):  # uncond + s (cond - uncond) leaves float range for a huge s
                hint = f" The call's guidance (cfg_scale={guidance.scale:g}) may have pushed them out of float range: lower cfg_scale."
            raise NumericalError(
                "the model produced NaN/inf logits; check the weights and dtype (try float32: "
                f"`pipe.to(dtype=torch.float32)`), and that inputs are valid token ids.{hint}"
            )
        return logits

    def embeddings(self) -> Tensor | None:
        """Input embedding table [V, d], for samplers that relax acceptance in latent space."""
        return None

    def token_latents(self) -> Tensor | None:
        """One latent vector per output token ``[V, d]`` in which nearby tokens mean similar
        content: an image model returns its VQ codebook (LANTERN's proximity sets); the default
        is the input embedding table."""
        return self.embeddings()
