"""Model options for the lean Llama runtime that trade quality for speed or expose hidden states.

:class:`VariantLM` is a :class:`~leapgen.models.base.CausalLM` over a
:class:`~leapgen.models.lean.lm.LeanCausalLM`'s network (same weights, same
:class:`~leapgen.models.lean.static_cache.StaticKVCache`) that runs the decoder layer by layer
(:func:`layered_forward`, the arithmetic of :meth:`LeanLlama.forward`) with three optional hooks:

* ``capture=True``: keep the final hidden states (the final norm's output, the lm head's input) of the last forward in
  ``last_hidden [B, n, D]`` (Chimera, Judge decoding);
* ``router``: FiRST layer skipping (Jain et al. 2024, arXiv 2410.12513). At the prefill forward of
  a row (its first forward), a per-layer router reads the mean hidden state entering the layer (over
  the row's real tokens when the router takes ``valid``, as FiRST's does) and
  decides whether the row skips it; the decision holds for every later step, so the KV cache stays
  consistent (a skipped layer is never attended by that row). Rows of a batch may differ (the
  residual update is masked); the layer is not computed at all when every row skips it;
* ``gear``: GEAR KV-cache compression (Kang et al. 2024, arXiv 2403.05527), see :class:`Gear`.

Nothing here changes :class:`LeanLlama` or its default speed: the options live in this wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from .base import CausalLM, KVCache
from .lean.llama import LeanLlama, _linear
from .lean.lm import LeanCausalLM
from .lean.static_cache import StaticKVCache
from .per_thread import PerThread


def rope(net: LeanLlama, position_ids: Tensor, dt: torch.dtype) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` ``[B, n, 1, head_dim]`` for ``position_ids [B, n]`` (sin carries the rotation's sign)."""
    return net.rope(position_ids, dt)


def float_mask(mask: Tensor | None, dt: torch.dtype) -> Tensor | None:
    """A boolean attention mask (True = may attend) as the additive mask SDPA takes."""
    if mask is not None and mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dt, device=mask.device).masked_fill_(~mask, torch.finfo(dt).min)
    return mask


def decoder_layer(net: LeanLlama, layer: Any, cache: Any, h: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
    """One pre-norm decoder layer over ``h [B, n, D]`` (its keys/values appended to ``cache``), the
    arithmetic of :meth:`LeanLlama.forward`."""
    c = net.c
    b, n = h.shape[:2]
    hq, hk, d = c.n_heads, c.kv_heads, c.head_dim
    x = net._rms(h, layer.attn_norm)
    qkv = _linear(x, layer.wqkv, layer.b_qkv).view(b, n, hq + 2 * hk, d)
    qk = qkv[:, :, : hq + hk]
    qk = qk * cos + qk.roll(d // 2, -1) * sin
    q = qk[:, :, :hq].transpose(1, 2)
    k = qk[:, :, hq:].transpose(1, 2)
    v = qkv[:, :, hq + hk :].transpose(1, 2)
    keys, values = cache.append(k, v)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=net.scale, enable_gqa=net.gqa)
    h = h + _linear(out.transpose(1, 2).reshape(b, n, hq * d), layer.wo, layer.b_o)
    x = net._rms(h, layer.mlp_norm)
    gate, up = _linear(x, layer.w_gate_up, layer.b_gate_up).chunk(2, dim=-1)
    return h + _linear(F.silu(gate) * up, layer.w_down, layer.b_down)


def layered_forward(
    net: LeanLlama,
    tokens: Tensor,
    position_ids: Tensor,
    mask: Tensor | None,
    backend: Any,
    skip: Tensor | None = None,
    decide: Any = None,
    embeds: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(logits [B, n, V], final hidden [B, n, D])``, the same function as ``net.forward`` (the
    hidden states are the final norm's output, the lm head's input).

    ``skip [B, L]`` (bool): row b leaves layer l out (its residual is not updated). ``decide(l, h)``
    (prefill only) returns the skip column of layer l from the hidden states entering it, and is
    written into ``skip`` as the forward proceeds. ``embeds [B, n, D]``: input embeddings used
    instead of the tokens' (Superposed decoding feeds mixtures of embeddings)."""
    b, n = tokens.shape
    h = F.embedding(tokens, net.embed.weight) if embeds is None else embeds.to(net.embed.weight.dtype)
    cos, sin = rope(net, position_ids, h.dtype)
    mask = float_mask(mask, h.dtype)
    for li, (layer, cache) in enumerate(zip(net.layers, backend.layers)):
        if decide is not None and skip is not None:
            skip[:, li] = decide(li, h)
        keep_rows = None
        if skip is not None:
            col = skip[:, li]
            if bool(col.all()):
                # every row skips: still write keys/values so the slot bookkeeping stays uniform
                # (no row ever attends to this layer's cache, so their content does not matter)
                hk, d = net.c.kv_heads, net.c.head_dim
                cache.append(*(torch.zeros(b, hk, n, d, dtype=h.dtype, device=h.device) for _ in range(2)))
                continue
            keep_rows = (~col).to(h.dtype)[:, None, None]
        h2 = decoder_layer(net, layer, cache, h, cos, sin, mask)
        h = h2 if keep_rows is None else h + keep_rows * (h2 - h)
    hn = net._rms(h, net.norm)
    return _linear(hn, net.lm_head, None), hn


# ------------------------------------------------------------------------------------------- GEAR


@dataclass(frozen=True)
class Gear:
    """GEAR KV compression ``X ~ D + L + S`` (Kang et al. 2024).

    Keys and values are compressed in blocks of ``block`` slots, per layer and head, once the whole
    block is older than the streaming ``buffer`` of recent slots: the ``outlier`` fraction of entries with the largest
    magnitude is kept exactly (sparse S: value + index), the rest is quantised uniformly to ``bits``
    per entry with a per-channel min/max over the block (D), and the residual gets a rank-``rank``
    approximation (L). ``bits=0`` means no compression. The compression is simulated in place
    (the buffer holds the dequantised values); :meth:`bytes_per_block` is the storage the compressed
    form takes, which :func:`cache_bytes` reports. The buffer (>= any draft length) is never
    compressed, so speculative rollback only touches uncompressed slots.
    """

    bits: int = 4
    rank: int = 2
    outlier: float = 0.02
    buffer: int = 16
    block: int = 64

    def validate(self, head_dim: int | None = None) -> None:
        if not isinstance(self.bits, int) or not 0 <= self.bits <= 8:
            raise ConfigError(f"gear bits must be an integer in [0, 8] (0 = no compression), got {self.bits!r}")
        if not isinstance(self.rank, int) or self.rank < 0:
            raise ConfigError(f"gear rank must be an integer >= 0, got {self.rank!r}")
        if head_dim is not None and self.rank > head_dim:
            raise ConfigError(f"gear rank={self.rank} is larger than the head dimension {head_dim}; use rank <= {head_dim}")
        if not isinstance(self.outlier, (int, float)) or not 0.0 <= self.outlier < 0.5:
            raise ConfigError(f"gear outlier fraction must be in [0, 0.5), got {self.outlier!r}")
        if not isinstance(self.buffer, int) or self.buffer < 1:
            raise ConfigError(f"gear buffer must be an integer >= 1, got {self.buffer!r}")
        if not isinstance(self.block, int) or self.block < 2:
            raise ConfigError(f"gear block must be an integer >= 2, got {self.block!r}")

    def compress(self, x: Tensor) -> Tensor:
        """The dequantised approximation of ``x [..., n, d]`` (blocks of slots per head)."""
        if self.bits == 0:
            return x
        xf = x.float()
        n, d = xf.shape[-2:]
        sparse = torch.zeros_like(xf)
        keep = torch.zeros_like(xf, dtype=torch.bool)
        n_out = int(self.outlier * n * d)
        if n_out:
            flat = xf.reshape(*xf.shape[:-2], n * d)
            idx = flat.abs().topk(n_out, dim=-1).indices
            kflat = keep.reshape(*keep.shape[:-2], n * d)
            kflat.scatter_(-1, idx, True)
            sparse = torch.where(keep, xf, sparse)
        rest = torch.where(keep, torch.zeros_like(xf), xf)
        lo = torch.where(keep, torch.full_like(xf, float("inf")), rest).amin(-2, keepdim=True)
        hi = torch.where(keep, torch.full_like(xf, float("-inf")), rest).amax(-2, keepdim=True)
        lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
        hi = torch.where(torch.isfinite(hi), hi, torch.zeros_like(hi))
        levels = 2**self.bits - 1
        scale = ((hi - lo) / levels).clamp_min(1e-8)
        deq = ((rest - lo) / scale).round().clamp(0, levels) * scale + lo
        deq = torch.where(keep, torch.zeros_like(deq), deq)
        approx = deq + sparse
        if self.rank:
            resid = xf - approx
            u, s, vh = torch.linalg.svd(resid, full_matrices=False)
            r = min(self.rank, s.shape[-1])
            approx = approx + (u[..., :r] * s[..., None, :r]) @ vh[..., :r, :]
        return approx.to(x.dtype)

    def bytes_per_block(self, n: int, d: int, full_bytes: int = 2) -> float:
        """Storage of one compressed ``[n, d]`` block: packed ``bits`` codes, per-channel min and
        scale (fp16), outliers (fp16 value + int16 index within the block) and the rank factors (fp16)."""
        if self.bits == 0:
            return n * d * full_bytes
        n_out = int(self.outlier * n * d)
        return n * d * self.bits / 8 + 2 * d * 2 + n_out * (2 + 2) + self.rank * (n + d) * 2


class GearState:
    """Per-cache bookkeeping: slots below ``done`` are compressed."""

    def __init__(self) -> None:
        self.done = 0


def gear_step(gear: Gear, cache: StaticKVCache, state: GearState) -> None:
    """Compress every full block of ``gear.block`` slots that left the streaming buffer."""
    state.done = min(state.done, cache.n_slots)  # a rollback below compressed slots (never with buffer >= drafts)
    while cache.n_slots - state.done - gear.block >= gear.buffer:
        lo, hi = state.done, state.done + gear.block
        for layer in cache.backend.layers:
            layer.k_buf[:, :, lo:hi] = gear.compress(layer.k_buf[:, :, lo:hi])
            layer.v_buf[:, :, lo:hi] = gear.compress(layer.v_buf[:, :, lo:hi])
        state.done = hi


def cache_bytes(n_slots: int, n_layers: int, kv_heads: int, head_dim: int, gear: Gear | None, rows: int = 1,
                full_bytes: int = 4) -> dict[str, float]:
    """KV-cache storage of ``n_slots`` slots: uncompressed (``full_bytes`` per entry: 4 for the
    float32 cache the CPU runtime holds, 2 for fp16) and with GEAR (compressed blocks + the
    uncompressed streaming buffer)."""
    per_entry_blocks = 2 * n_layers * kv_heads * rows  # keys and values, per layer, head and row
    full = per_entry_blocks * n_slots * head_dim * full_bytes
    if gear is None or gear.bits == 0:
        return {"full": float(full), "compressed": float(full)}
    blocks = max(0, (n_slots - gear.buffer) // gear.block)
    tail = n_slots - blocks * gear.block
    comp = per_entry_blocks * (blocks * gear.bytes_per_block(gear.block, head_dim, full_bytes)
                               + tail * head_dim * full_bytes)
    return {"full": float(full), "compressed": float(comp)}


# ------------------------------------------------------------------------------------------ wrapper


class _RoutedCache(StaticKVCache):
    """A :class:`StaticKVCache` whose per-row layer-skip decisions follow ``select_rows``."""

    def select_rows(self, rows: Tensor) -> None:
        super().select_rows(rows)
        if getattr(self, "skip", None) is not None:
            self.skip = self.skip[rows.to(self.skip.device)]


class VariantLM(CausalLM):
    """A lean Llama with the options of the module docstring (a plain ``causal`` model: every
    sampler runs on it). ``router(l, h) -> bool [B]`` decides at prefill; ``gear``: a :class:`Gear`."""

    #: what one forward leaves for the same call to read (or the call for the next forward), one value
    #: per thread (:class:`PerThread`): concurrent calls of one shared model each see their own
    last_hidden = PerThread(None)
    next_embeds = PerThread(None)
    layers_run = PerThread(0)

    def __init__(self, base: LeanCausalLM, *, capture: bool = False, router: Any = None, gear: Gear | None = None) -> None:
        if not isinstance(base, LeanCausalLM):
            raise ConfigError(
                f"this option needs a model on the lean runtime (LeanCausalLM), got {type(base).__name__}; "
                "load the pipeline with runtime='lean' (the default) or wrap a Llama with LeanCausalLM.from_hf."
            )
        if gear is not None:
            gear.validate(base.net.c.head_dim)
        self.base, self.net = base, base.net
        self.vocab_size, self.max_length = base.vocab_size, base.max_length
        self.forwards = 0
        self.unsupported = dict(base.unsupported)
        self.capture, self.router, self.gear = capture, router, gear
        self.last_hidden: Tensor | None = None
        #: input embeddings ``[B, n, D]`` for the next forward only (its token ids are then placeholders)
        self.next_embeds: Tensor | None = None
        self.layers_run = 0  # layer evaluations (all rows skipping a layer saves one)

    @property
    def device(self) -> torch.device:
        return self.base.device

    @property
    def dtype(self) -> torch.dtype:
        return self.base.dtype

    def describe(self) -> str:
        opts = [n for n, v in (("first", self.router), ("gear", self.gear)) if v is not None]
        return f"{self.base.describe()} ({', '.join(opts) or 'layered'})"

    def embeddings(self) -> Tensor:
        return self.net.embed.weight

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        cache = self.base.new_cache(batch_size, cond)
        cache.gear_state = GearState()
        cache.skip = None  # [B, L] per-row skip decisions, made at the prefill forward
        cache.__class__ = _RoutedCache  # skip decisions follow the rows that stay
        return cache

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        cache.reserve(tokens.shape[1])
        dev = self.device
        decide = None
        if self.router is not None:
            if cache.skip is None:  # the prefill forward: the routers decide, once per row
                cache.skip = torch.zeros(tokens.shape[0], self.net.c.n_layers, dtype=torch.bool, device=dev)
                decide = self.router
                lengths = getattr(cache, "real_lengths", None)  # KVCache.real_lengths: the rest is right-padding
                if getattr(decide, "takes_valid", False) and lengths is not None and len(lengths) == tokens.shape[0]:
                    valid = torch.arange(tokens.shape[1], device=dev)[None] < lengths.to(dev)[:, None]
                    router = self.router
                    decide = lambda li, h: router(li, h, valid)  # noqa: E731  (each row reads its own tokens only)
        embeds, self.next_embeds = self.next_embeds, None
        logits, h = layered_forward(self.net, tokens.to(dev), position_ids.to(dev), mask, cache.backend,
                                    skip=cache.skip, decide=decide, embeds=embeds)
        self._after_forward(cache, h, int((~cache.skip).any(0).sum()) if cache.skip is not None else self.net.c.n_layers)
        return logits

    def _after_forward(self, cache: Any, h: Tensor, layers_run: int) -> None:
        """Bookkeeping every forward variant shares: layers counted, final hidden states kept
        (``capture``), GEAR blocks that left the streaming buffer compressed."""
        self.layers_run += layers_run
        if self.capture:
            self.last_hidden = h
        if self.gear is not None and self.gear.bits:
            # the forward wrote its slots; compress after the caller's rollback has a chance (next call)
            gear_step(self.gear, cache, cache.gear_state)


__all__ = ["Gear", "GearState", "VariantLM", "cache_bytes", "decoder_layer", "float_mask", "gear_step", "layered_forward", "rope"]
