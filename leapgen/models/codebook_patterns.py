"""Codebook patterns: how K parallel codebook streams ``[K, T]`` are laid out as one token stream.

MusicGen (Copet et al. 2023, audiocraft ``modules/codebooks_patterns.py``) decodes K residual-VQ
codebooks with one model by choosing a *pattern*: which (codebook, frame) cells a decoding step
holds. A :class:`CodebookPattern` maps every cell of the code grid to a position of a 1-D stream
read step by step (and, within a step, codebook by codebook), so a plain causal LM over that
stream (the :class:`~leapgen.models.base.CausalLM` contract, one token per position) generates
it, and every autoregressive sampler (``ar``, ``speculative``, ...) runs on it unchanged.

| name | step of cell (k, t) | steps for T frames | stream | source |
|---|---|---|---|---|
| ``delay`` | ``t + k`` | ``T + K - 1`` | ``(T + K - 1) * K`` positions; the ``K(K-1)`` cells outside the grid hold ``empty_id`` | MusicGen's default (``DelayedPatternProvider``, delays ``[0, 1, ..., K-1]``) |
| ``parallel`` | ``t`` | ``T`` | ``T * K`` positions, frame by frame | ``ParallelPatternProvider`` (MAGNeT's layout) |
| ``flattened`` | ``t * K + k`` | ``T * K`` | ``T * K`` positions (one cell per step) | ``UnrolledPatternProvider`` with full flattening |

With one token per forward, ``parallel`` and ``flattened`` give the same stream order (they differ
for a model that predicts a whole step's K cells in one forward, as MusicGen's K heads do);
``delay`` lets codebook k of frame t come after codebooks < k of the same frame *and* after
codebook 0 of the next k frames. Register another pattern with :func:`register_pattern`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import ConfigError, InputError


class CodebookPattern:
    """A layout of a ``[K, T]`` code grid as a 1-D stream (see the module docstring).

    ``steps(K, T)``: decoding steps; ``cell_step(k, t, K)``: the step of cell (k, t). The stream
    has ``K`` positions per step (cells outside the grid are ``empty_id``) for step-based patterns,
    or one per step for ``flattened``; :meth:`index_map` gives, for every stream position, the flat
    grid index ``k * T + t`` or -1 (an empty cell).
    """

    name: str = "pattern"

    def index_map(self, num_codebooks: int, frames: int) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def stream_length(self, num_codebooks: int, frames: int) -> int:
        return int(self.index_map(num_codebooks, frames).numel())

    def to_stream(self, codes: Tensor, empty_id: int) -> Tensor:
        """Codes ``[B, K, T]`` -> stream ``[B, N]`` (``empty_id`` at empty cells)."""
        if codes.dim() != 3:
            raise InputError(f"codes must be [B, K, T], got {tuple(codes.shape)}")
        b, k, t = codes.shape
        idx = self.index_map(k, t).to(codes.device)
        flat = codes.reshape(b, k * t)
        out = flat[:, idx.clamp(min=0)]
        return out.masked_fill((idx < 0)[None], empty_id)

    def from_stream(self, stream: Tensor, num_codebooks: int, frames: int, fill: int = 0) -> tuple[Tensor, Tensor]:
        """A (possibly partial) stream ``[B, n]`` -> ``(codes [B, K, T], known [B, K, T])``: the cells
        the first ``n`` stream positions cover are known, the others hold ``fill``."""
        b, n = stream.shape
        idx = self.index_map(num_codebooks, frames).to(stream.device)
        if n > idx.numel():
            raise InputError(f"a stream of {n} tokens is longer than the pattern's {idx.numel()} for {frames} frames")
        idx = idx[:n]
        keep = idx >= 0
        codes = torch.full((b, num_codebooks * frames), fill, dtype=torch.long, device=stream.device)
        known = torch.zeros(b, num_codebooks * frames, dtype=torch.bool, device=stream.device)
        codes[:, idx[keep]] = stream[:, keep].long()
        known[:, idx[keep]] = True
        return codes.view(b, num_codebooks, frames), known.view(b, num_codebooks, frames)

    def codebook_of(self, num_codebooks: int, frames: int) -> Tensor:
        """Long ``[N]``: the codebook of every stream position (-1 for empty cells)."""
        idx = self.index_map(num_codebooks, frames)
        return torch.where(idx >= 0, idx // frames, torch.full_like(idx, -1))

    def empty_mask(self, num_codebooks: int, frames: int) -> Tensor:
        """Bool ``[N]``: stream positions that hold ``empty_id``."""
        return self.index_map(num_codebooks, frames) < 0

    def prefix_length(self, num_codebooks: int, frames: int, complete_frames: int) -> int:
        """Stream tokens needed so that frames ``[0, complete_frames)`` are complete (every codebook)."""
        idx = self.index_map(num_codebooks, frames)
        t = torch.where(idx >= 0, idx % frames, torch.full_like(idx, -1))
        need = (t >= 0) & (t < complete_frames)
        return 0 if not bool(need.any()) else int(need.nonzero().max()) + 1


class DelayPattern(CodebookPattern):
    name = "delay"

    def index_map(self, num_codebooks: int, frames: int) -> Tensor:
        k = torch.arange(num_codebooks)
        steps = frames + num_codebooks - 1
        s = torch.arange(steps)[:, None]
        t = s - k[None]
        valid = (t >= 0) & (t < frames)
        return torch.where(valid, k[None] * frames + t, torch.full_like(t, -1)).reshape(-1)


class ParallelPattern(CodebookPattern):
    name = "parallel"

    def index_map(self, num_codebooks: int, frames: int) -> Tensor:
        k = torch.arange(num_codebooks)
        t = torch.arange(frames)[:, None]
        return (k[None] * frames + t).reshape(-1)


class FlattenedPattern(ParallelPattern):
    name = "flattened"


PATTERNS: dict[str, Callable[[], CodebookPattern]] = {"delay": DelayPattern, "parallel": ParallelPattern, "flattened": FlattenedPattern}


def register_pattern(name: str, factory: Callable[[], CodebookPattern]) -> None:
    """Make ``get_pattern(name)`` return ``factory()``."""
    PATTERNS[name] = factory


def get_pattern(name: str | CodebookPattern) -> CodebookPattern:
    if isinstance(name, CodebookPattern):
        return name
    if name not in PATTERNS:
        raise ConfigError(f"unknown codebook pattern {name!r}; known: {', '.join(sorted(PATTERNS))}")
    return PATTERNS[name]()
