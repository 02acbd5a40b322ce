"""Regions: which generated positions are decodable at each stage, and how they group into units.

A region yields :class:`~leapgen.samplers.masked.parts.Stage` objects; the loop decodes one stage
to the end (every eligible position committed) before asking for the next.

| name | stages | source |
|---|---|---|
| ``full`` | one stage: every masked position | MaskGIT, Mask-Predict, GenMol, MaskGCT T2S |
| ``blocks`` | left-to-right blocks of ``block_length`` positions from each row's first masked position; ``steps`` is split evenly over them | LLaDA / Fast-dLLM semi-autoregressive decoding |
| ``codebook_stages`` | codebook 0, then 1, ... (``steps_per_stage`` each; the model gets ``stage=k``) | MAGNeT ``[20,10,10,10]``, MaskGCT S2A |
| ``fragments`` | each contiguous run of masked positions (or, with ``separator_id``, each separator-delimited fragment holding masks) in turn | GenMol fragment tasks |
| ``spans`` | wraps a region: positions group into spans of ``span_len`` that are scored (``span_score``) and committed as units | MAGNeT ``span_len=3``, nonoverlap |

``span_len > 1`` with any other region wraps it in :class:`Spans`, so MAGNeT is
``region="codebook_stages", span_len=3``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from .parts import PER_UNIT, REGIONS, Region, Stage
from .state import MaskedDecodeState

SPAN_SCORES = ("max", "min", "mean", "sum")


@REGIONS.register("full")
class Full(Region):
    """Every masked position in one stage."""

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:
        yield Stage(eligible=state.generated.clone(), steps=steps, name="full")


@REGIONS.register("blocks")
class Blocks(Region):
    """Semi-autoregressive blocks of ``block_length`` positions, decoded left to right.

    Blocks start at each row's first masked position; the ``steps`` budget is split evenly over
    the (longest row's) blocks, at least one step each (LLaDA: ``steps / num_blocks``). A per-row
    budget (``[B]`` tensor) is split over each row's own blocks, so a row decodes as it would alone;
    ``PER_UNIT`` gives every block one step per masked position of the row in it.
    """

    def __init__(self, block_length: int = 32) -> None:
        if isinstance(block_length, bool) or not isinstance(block_length, int) or block_length <= 0:
            raise ConfigError(f"block_length must be a positive integer, got {block_length!r}.")
        self.block_length = block_length

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:
        gen = state.generated.any(1)  # [B, L]
        seq = gen.shape[1]
        idx = torch.arange(seq, device=gen.device)
        first = torch.where(gen, idx, seq).amin(1)
        last = torch.where(gen, idx, -1).amax(1)
        row_blocks = ((last - first) // self.block_length + 1).clamp(min=1)
        n_blocks = int(row_blocks.max())
        if isinstance(steps, Tensor):
            per_block: int | Tensor | str | None = (steps.to(row_blocks.device) // row_blocks).clamp(min=1)
        elif steps == PER_UNIT:  # resolved per block, from its own masked positions
            per_block = steps
        else:
            per_block = None if steps is None else max(1, steps // n_blocks)
        for j in range(n_blocks):
            lo = first + j * self.block_length
            inside = (idx[None] >= lo[:, None]) & (idx[None] < (lo + self.block_length)[:, None])
            yield Stage(eligible=state.generated & inside[:, None], steps=per_block, name=f"block{j}")


@REGIONS.register("codebook_stages")
class CodebookStages(Region):
    """One stage per codebook, coarse to fine; ``steps_per_stage[k]`` steps for codebook k
    (None: ``steps`` for every codebook). The model receives ``stage=k``."""

    def __init__(self, steps_per_stage: Sequence[int] | None = None) -> None:
        if steps_per_stage is not None:
            ok = isinstance(steps_per_stage, (list, tuple)) and all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in steps_per_stage
            )
            if not ok or not steps_per_stage:
                raise ConfigError(
                    f"steps_per_stage must be a list of positive integers, one per codebook (MAGNeT: [20, 10, 10, 10]), "
                    f"got {steps_per_stage!r}."
                )
            steps_per_stage = tuple(steps_per_stage)
        self.steps_per_stage = steps_per_stage

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:
        k = state.generated.shape[1]
        if self.steps_per_stage is not None and len(self.steps_per_stage) != k:
            raise ConfigError(
                f"steps_per_stage has {len(self.steps_per_stage)} entries but the model has {k} codebooks; give one per codebook."
            )
        for c in range(k):
            eligible = torch.zeros_like(state.generated)
            eligible[:, c] = state.generated[:, c]
            n = steps if self.steps_per_stage is None else self.steps_per_stage[c]
            yield Stage(eligible=eligible, steps=n, codebook=c, name=f"codebook{c}")


@REGIONS.register("fragments")
class Fragments(Region):
    """Masked fragments one after another (single-stream models).

    Without ``separator_id`` a fragment is a maximal run of consecutive masked positions; with it,
    the positions between two separator tokens (or the sequence ends) that hold masks. Stage j
    decodes every row's j-th fragment, with the full ``steps`` budget.
    """

    def __init__(self, separator_id: int | None = None) -> None:
        if separator_id is not None and (isinstance(separator_id, bool) or not isinstance(separator_id, int)):
            raise ConfigError(f"separator_id must be a token id or None, got {separator_id!r}.")
        self.separator_id = separator_id

    def _fragments(self, toks: list[int], gen: list[bool]) -> list[list[int]]:
        frags: list[list[int]] = []
        cur: list[int] = []
        for i, (t, g) in enumerate(zip(toks, gen)):
            boundary = (not g) if self.separator_id is None else (t == self.separator_id and not g)
            if boundary:
                if any(gen[j] for j in cur):
                    frags.append(cur)
                cur = []
            else:
                cur.append(i)
        if any(gen[j] for j in cur):
            frags.append(cur)
        return [[j for j in f if gen[j]] for f in frags]

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:
        if state.continuous or state.generated.shape[1] != 1:
            raise ConfigError(
                "region='fragments' works on single-stream token models; use codebook_stages for codebooks, "
                "blocks or full for continuous tokens."
            )
        toks, gen = state.tokens[:, 0].tolist(), state.generated[:, 0].tolist()
        per_row = [self._fragments(t, g) for t, g in zip(toks, gen)]
        for j in range(max(len(f) for f in per_row)):
            eligible = torch.zeros_like(state.generated)
            for b, frags in enumerate(per_row):
                if j < len(frags):
                    eligible[b, 0, frags[j]] = True
            yield Stage(eligible=eligible, steps=steps, name=f"fragment{j}")


@REGIONS.register("spans")
class Spans(Region):
    """Group the positions of ``base``'s stages into non-overlapping spans of ``span_len``
    (per codebook, aligned at position 0; the last span may be shorter). A span is scored by
    ``span_score`` over its masked / generated positions and committed as a whole (MAGNeT
    ``span_arrangement="nonoverlap"``; ``max`` = MAGNeT's ``1 - max p`` ranking with
    ``scorer="prob"``, ``sum`` with ``scorer="logprob"`` = its ``prod``)."""

    def __init__(self, base: Region | None = None, span_len: int = 3, span_score: str = "max") -> None:
        if isinstance(span_len, bool) or not isinstance(span_len, int) or span_len < 2:
            raise ConfigError(f"spans need span_len >= 2 (MAGNeT uses 3), got {span_len!r}.")
        if span_score not in SPAN_SCORES:
            raise ConfigError(f"span_score must be one of {SPAN_SCORES}, got {span_score!r}.")
        self.base = base if base is not None else Full()
        self.span_len = span_len
        self.span_score = span_score

    def stages(self, state: MaskedDecodeState, steps: int | Tensor | str | None) -> Iterator[Stage]:
        k, seq = state.generated.shape[1:]
        device = state.generated.device
        n_spans = -(-seq // self.span_len)
        units = torch.arange(k, device=device)[:, None] * n_spans + torch.arange(seq, device=device)[None] // self.span_len
        for stage in self.base.stages(state, steps):
            stage.units, stage.num_units, stage.aggregate = units, k * n_spans, self.span_score
            stage.name = f"{stage.name}/spans{self.span_len}"
            yield stage
