"""dKV-Cache: delayed key/value caching for diffusion LMs (decode and greedy-window variants).

Paper: Ma et al., "dKV-Cache: The Cache for Diffusion Language Models", 2025;
horseee/dKV-Cache ``generation_utils/llada_dkv_cache_{decode,greedy}.py`` (reference notes
masked.md §9). Guarantee: **lossy** (cached keys/values of decoded tokens are reused while the
bidirectional context changes; quality measured by the benches).

Both run LLaDA's semi-AR top-k schedule and refresh the whole cache with a full forward at each
block start and every ``cache_refresh`` steps (the paper's ``cache_reloading_step``); between
refreshes a *subset* forward (:class:`~leapgen.models.masked_base.MaskedCache` ``positions``)
recomputes only some positions and writes their keys/values back:

* ``cache="dkv_delayed"`` (**dKV-Cache-Decode**, default): a token's keys/values change most at the
  step it is decoded, so they are cached **one step later**: each step recomputes every position
  still masked before the previous step (the masks, and the tokens decoded by the previous step);
  prompt and earlier-decoded tokens come from the cache. Near-lossless per the paper.
* ``cache="dkv_window"`` (**dKV-Cache-Greedy**): keys/values are cached at once (no delay); each
  step recomputes only the current block's still-masked positions plus ``window_size`` masked
  positions after the block (the paper's local window; it fixes a random decode order up front,
  here use ``scorer="random"`` for its random remasking). Faster, with more quality loss.

Both recompute each row's own positions (``MaskedCache.positions [A, n]``, padded to the longest
row by repeating a position, :func:`~leapgen.models.masked_cache.row_subsets`), as the reference
does per sequence, so a row decodes as it would alone; on a model without per-row subsets
(``supports_row_positions``) the rows share their union. Defaults: ``cache="dkv_delayed"``, ``cache_refresh=8``, LLaDA's
``block_length=32``, one step per token, ``scorer="prob"``; greedy as in the paper's example:
``get_sampler("dkv_cache", cache="dkv_window", scorer="random", cache_refresh=2, window_size=4)``.
On a model without a masked cache the default falls back to no cache.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ...models.masked_cache import row_subsets
from ..base import register_sampler
from .llada import DLLM_DEFAULTS, DLLMSampler
from .parts import CACHES, CachePolicy, Stage
from .state import MaskedDecodeState


@CACHES.register("dkv_delayed")
class DelayedCache(CachePolicy):
    """dKV-Cache-Decode: recompute what was still masked before the previous step (delayed caching)."""

    mode = "dual"
    needs_positions = True

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
        return None

    def positions(self, state: MaskedDecodeState) -> Tensor | None:
        masked_now = state.masked
        prev = state.policy_state.get("dkv_prev")
        state.policy_state["dkv_prev"] = masked_now.clone()
        if prev is None or state.step == 0:
            return None  # first step of a stage: a refresh
        todo = state.active(prev).any(1)  # [A, L]
        return row_subsets(todo)


@CACHES.register("dkv_window")
class WindowCache(CachePolicy):
    """dKV-Cache-Greedy: recompute the block's masks plus ``window_size`` masks after it; no delay."""

    mode = "dual"
    needs_positions = True

    def __init__(self, cache_refresh: int | None = None, window_size: int = 4) -> None:
        super().__init__(cache_refresh)
        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 0:
            raise ConfigError(f"window_size must be an integer >= 0 (dKV-Cache-Greedy uses 4), got {window_size!r}.")
        self.window_size = window_size

    def window(self, state: MaskedDecodeState, stage: Stage) -> tuple[int, int] | None:
        return None

    def positions(self, state: MaskedDecodeState) -> Tensor | None:
        if state.stage is None or state.step == 0:
            return None
        masked = state.active(state.masked).any(1)  # [A, L]
        inside = masked & state.active(state.stage.eligible.to(masked.device)).any(1)
        pos = torch.arange(masked.shape[-1], device=masked.device)
        last = torch.where(inside, pos, -1).amax(-1, keepdim=True)  # each row's last block mask
        after = masked & (pos > last)
        extra = after & (after.cumsum(-1) <= self.window_size)  # its next window_size masks
        return row_subsets(inside | extra)


@register_sampler(
    "dkv_cache",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Ma et al. 2025 (dKV-Cache: The Cache for Diffusion Language Models)",
)
class DKVCache(DLLMSampler):
    """LLaDA with dKV-Cache's delayed (decode) or greedy-window key/value cache (module docstring)."""

    defaults: ClassVar[dict[str, Any]] = {
        **DLLM_DEFAULTS,
        "cache": "dkv_delayed",
        "cache_refresh": 8,
        "window_size": 4,
    }
