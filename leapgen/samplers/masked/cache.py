"""Cache policies: when the masked loop reuses a model's :class:`~leapgen.models.masked_base.MaskedCache`.

A masked model that declares ``supports_cache`` can run a *windowed* forward: only the positions
``[lo, hi)`` are recomputed and the others attend through keys/values stored at the last
*refresh* (a full forward). The policy picks the window once per stage (a block, for semi-AR
decoding) and refreshes at every stage boundary and, optionally, every ``cache_refresh`` steps.

| name | window recomputed | reused from the refresh | source |
|---|---|---|---|
| ``none`` | everything, every step | nothing | |
| ``prefix`` | from the stage's first masked position to the end | the prefix before the block | Fast-dLLM ``generate_with_prefix_cache`` |
| ``dual`` | the stage's span only (first to last masked position) | the prefix and the suffix after the block | Fast-dLLM ``generate_with_dual_cache`` |

The cache is approximate (bidirectional attention makes cached keys stale as the block changes);
with ``cache_refresh=1`` every forward is a refresh and decoding equals the uncached path token
for token. Outputs of positions outside the window, when a part reads them (hooks), are those of
the last refresh. Each row recomputes its own block (rows with different prompt lengths have
different windows: they run as per-row position subsets padded by repetition,
:func:`~leapgen.models.masked_cache.row_ranges`), so a row decodes as it would alone. On a model
without per-row subsets (``supports_row_positions``) the rows share their union.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from ...models.masked_cache import row_ranges
from .parts import CACHES, CachePolicy, Stage

if TYPE_CHECKING:  # pragma: no cover
    from .state import MaskedDecodeState


def _stage_bounds(state: MaskedDecodeState, stage: Stage) -> tuple[Tensor, Tensor, Tensor]:
    """Per row, the first and one-past-last sequence position holding a masked position of the
    stage and whether it has one (``lo, hi, has [B]``; ``lo == hi == 0`` for a row with none)."""
    todo = (stage.eligible.to(state.generated.device) & state.masked).any(1)  # [B, L]
    has = todo.any(-1)
    pos = torch.arange(todo.shape[-1], device=todo.device)
    lo = torch.where(todo, pos, todo.shape[-1]).amin(-1)
    hi = torch.where(todo, pos + 1, 0).amax(-1)
    return torch.where(has, lo, 0), hi, has


class _WindowPolicy(CachePolicy):
    """Fast-dLLM's block windows, one per row: the stage's window is the union over the rows
    (``window``) and, when the rows' windows differ, each row recomputes only its own
    (``positions``: :func:`~leapgen.models.masked_cache.row_ranges`)."""

    #: the window runs to the end of the sequence (prefix cache) instead of the block's end
    to_end: ClassVar[bool] = False

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
        state.policy_state.pop("row_windows", None)
        lo, hi, has = _stage_bounds(state, stage)
        big = state.generated.shape[-1]
        if self.to_end:
            hi = torch.where(has, big, 0)
        lo_u, hi_u = torch.where(has, lo, big).min(), torch.where(has, hi, 0).max()
        differ = (has & ((lo != lo_u) | (hi != hi_u))).any()
        any_row, lo_u, hi_u, differ = torch.stack([has.any(), lo_u, hi_u, differ]).long().tolist()  # one host sync
        if not any_row:
            return None
        if differ:  # rows differ: each its own window
            state.policy_state["row_windows"] = row_ranges(lo, hi)
        return lo_u, hi_u

    def positions(self, state: MaskedDecodeState) -> Tensor | None:
        rows = state.policy_state.get("row_windows")
        return None if rows is None else state.active(rows)


@CACHES.register("none")
class NoCache(CachePolicy):
    """Every forward runs every position (the model's cache, if any, is not used)."""

    mode = None

    def __init__(self) -> None:
        super().__init__(None)

    def refresh(self, step: int) -> bool:
        return True


@CACHES.register("prefix")
class PrefixCache(_WindowPolicy):
    """Fast-dLLM prefix cache: recompute the block and everything after it; reuse the prefix."""

    mode = "prefix"
    to_end = True


@CACHES.register("dual")
class DualCache(_WindowPolicy):
    """Fast-dLLM dual cache: recompute only the block; reuse the prefix and the suffix."""

    mode = "dual"
