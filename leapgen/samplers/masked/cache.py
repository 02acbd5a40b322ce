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
the last refresh. The window spans every row's block, so rows with different prompt lengths
recompute a little more than their own block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .parts import CACHES, CachePolicy, Stage

if TYPE_CHECKING:  # pragma: no cover
    from .state import MaskedDecodeState


def _stage_columns(state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
    """First and one-past-last sequence position holding a masked position of the stage (any row)."""
    todo = stage.eligible.to(state.generated.device) & state.masked
    cols = todo.any(0).any(0)  # [L]
    idx = cols.nonzero().flatten()
    if idx.numel() == 0:
        return None
    lo, hi = idx[[0, -1]].tolist()
    return lo, hi + 1


@CACHES.register("none")
class NoCache(CachePolicy):
    """Every forward runs every position (the model's cache, if any, is not used)."""

    mode = None

    def __init__(self) -> None:
        super().__init__(None)

    def refresh(self, step: int) -> bool:
        return True


@CACHES.register("prefix")
class PrefixCache(CachePolicy):
    """Fast-dLLM prefix cache: recompute the block and everything after it; reuse the prefix."""

    mode = "prefix"

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
        cols = _stage_columns(state, stage)
        return None if cols is None else (cols[0], state.generated.shape[-1])


@CACHES.register("dual")
class DualCache(CachePolicy):
    """Fast-dLLM dual cache: recompute only the block; reuse the prefix and the suffix."""

    mode = "dual"

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
        return _stage_columns(state, stage)

