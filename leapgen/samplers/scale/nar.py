"""``nar``: next-neighbour decoding of a NAR image model, one anti-diagonal per forward.

Paper: He et al., "Neighboring Autoregressive Modeling for Efficient Visual Generation" (NAR), 2025,
arXiv 2503.10696; code ``ThisisBillhe/NAR`` (``generate.py``, ``decode_n_tokens``).

Loop (:class:`~leapgen.models.nar.NARLM`): prefill the condition slots (forward 1), whose last
position predicts cell ``(0, 0)`` with the mean of the right and below logits; then feed the cells
of anti-diagonal ``d`` (all at once, attending to the KV cache and to each other, the proximity
mask at inference) and sample every cell of diagonal ``d + 1``: a cell ``(i, j)`` takes the right
head's logits read at its left neighbour ``(i, j-1)``, the below head's at its upper neighbour
``(i-1, j)``, and their mean ("mixed logits") when it has both; first row right only, first column
below only. ``H + W - 1`` forwards (31 for 16x16). Guidance, temperature, top-k and top-p as the
raster model (guidance inside the adapter, then :class:`~leapgen.samplers.logits.LogitsProcessor`).

``order="raster"`` disables the below head and decodes one cell per forward in raster order (the
right head at the previous cell, a causal context): token for token the ``ar`` sampler on the same
network's :class:`~leapgen.models.llamagen_lm.LlamaGenLM` (tested), so the two orders compare on one
model. Guarantee: ``distribution-exact`` -- a draw from the model's own factorised distribution in
its order (greedy: the argmax of every factor); tested against uncached teacher-forced enumeration.
Defaults: ``order="diagonal"``.
"""

from __future__ import annotations

from typing import Any

import torch

from ...models.image_orders import diagonal_order, raster_order
from ...models.nar import NARLM
from ..base import DecodeConfig, DecodeResult, Sampler, check_choice, register_contract, register_sampler
from ..logits import LogitsProcessor
from .common import OrderedRun, sample_finite

register_contract("next-neighbour", lambda m: isinstance(m, NARLM))


def neighbour_sources(h: int, w: int, prev: torch.Tensor, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For every cell of ``cells``, the index within ``prev`` of its left neighbour and of its upper
    neighbour (-1 where it has none)."""
    where = {int(c): k for k, c in enumerate(prev.tolist())}
    left = [where.get(int(c) - 1, -1) if int(c) % w else -1 for c in cells]
    up = [where.get(int(c) - w, -1) if int(c) >= w else -1 for c in cells]
    return torch.tensor(left, device=cells.device), torch.tensor(up, device=cells.device)


def mixed_logits(right: torch.Tensor, below: torch.Tensor, left: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``[B, n, V]`` logits of the next cells from the heads' outputs ``[B, m, V]`` at the previous
    cells: right at the left neighbour, below at the upper one, their mean where both exist."""
    dev = right.device
    left, up = left.to(dev), up.to(dev)
    lr = right.index_select(1, left.clamp_min(0))
    lb = below.index_select(1, up.clamp_min(0))
    has_l, has_u = (left >= 0)[None, :, None], (up >= 0)[None, :, None]
    both = (lr + lb) / 2
    return torch.where(has_l & has_u, both, torch.where(has_l, lr, lb))


@register_sampler("nar", family="image-parallel", guarantee="distribution-exact", needs=("model",),
                  paper="He et al. 2025, Neighboring Autoregressive Modeling (arXiv 2503.10696)",
                  contracts=("next-neighbour",))
class NextNeighbour(Sampler):
    """NAR next-neighbour decoding: every anti-diagonal in one forward, right/below heads mixed."""

    defaults: dict[str, Any] = {"order": "diagonal"}

    def validate(self) -> None:
        check_choice("order", self.order, ("diagonal", "raster"))

    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> DecodeResult:
        self.check_models(models)
        lm: NARLM = models["model"]
        h, w = lm.grid
        run = OrderedRun(self, prompts, config, h * w)
        proc = LogitsProcessor(config)
        raster = self.order == "raster"
        order = raster_order(h, w) if raster else diagonal_order(h, w)
        grid = torch.zeros(run.batch, h * w, dtype=torch.long, device=lm.device)
        state, r0, b0 = lm.start(run.batch, cond)
        first = r0 if raster else (r0 + b0) / 2
        grid[:, 0] = sample_finite(proc, first, generator, run)
        run.record(order[0])
        for k in range(1, len(order)):
            prev, cells = order[k - 1], order[k]
            right, below = lm.step(state, grid[:, prev.to(grid.device)], prev)
            if raster:
                toks = sample_finite(proc, right[:, -1], generator, run)[:, None]
            else:
                left, up = neighbour_sources(h, w, prev, cells)
                toks = sample_finite(proc, mixed_logits(right, below, left, up), generator, run)
            grid[:, cells.to(grid.device)] = toks
            run.record(cells)
        return run.result(grid, order=self.order)


__all__ = ["NextNeighbour", "neighbour_sources", "mixed_logits"]
