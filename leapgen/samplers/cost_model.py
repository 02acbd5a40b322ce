"""What a target forward costs for ``n`` new tokens per row, relative to one token: ``c(n) = t(n) / t(1)``.

A draft-and-verify step that drafts ``k`` tokens pays one target forward over ``k + 1`` tokens per
row. Whether drafting one more token pays off depends on that curve: on a GPU it is nearly flat
for small ``n`` (the weights are read once whatever ``n`` is), on a CPU thread it rises (small-``M``
matrix products are compute-bound). A measured curve is made non-decreasing (timing noise would
otherwise make some block size look cheaper than a smaller one). :class:`VerifyCost` holds the curve; :func:`verify_cost` gives the one a sampler
uses, measured once per model, batch size and process (``"measured"``, the default of the
cost-aware draft-length schedules), or given by the user (a list of ratios, a linear slope, or
``"flat"``).

The curve only steers *how many* tokens are drafted; it never changes which tokens are committed,
so outputs keep their guarantee. But when sampling, the number of drafts verified decides how many
random numbers a step draws, so a curve measured anew in each process would make a seed give other
samples in another process. Hence ``"auto"`` (the default): the measured curve at temperature 0
(the output is the greedy one whatever is drafted; only the forward count may vary between
processes), and a fixed per-device curve (:data:`DEVICE_CURVES`) when sampling, so that a seed
reproduces everywhere.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import ConfigError

logger = logging.getLogger(__name__)

#: block sizes the measured curve samples (others are interpolated)
MEASURE_SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16)

#: fixed curves for seeded sampling: the shipped 17M-parameter target's on one AMD EPYC thread with
#: the CPU small-M GEMM (:func:`leapgen.bench.verify_cost.verify_cost_curve`, 40 interleaved rounds,
#: 2026-11-29; docs/bench_text.md has the bench's own table; with MKL's GEMM the curve was
#: 1.30 / 1.50 / 1.73 / 1.92 / 1.93 / 2.70 at 2 / 3 / 4 / 6 / 8 / 16), and an H100-class GPU's,
#: where a forward of a few tokens costs what one costs
DEVICE_CURVES: dict[str, dict[int, float]] = {
    "cpu": {1: 1.0, 2: 1.15, 3: 1.34, 4: 1.39, 6: 1.49, 8: 1.78, 12: 2.07, 16: 2.42},
    "cuda": {1: 1.0, 16: 1.3},
}

_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[int, tuple[int, ...]], VerifyCost]] = weakref.WeakKeyDictionary()


class VerifyCost:
    """``c(n)`` from sampled points ``{n: t(n) / t(1)}``: piecewise-linear between them, the last
    segment's slope past the largest one. ``c(1) = 1``."""

    def __init__(self, ratios: dict[int, float], source: str = "given") -> None:
        pts = sorted((int(n), float(r)) for n, r in ratios.items())
        if not pts or pts[0][0] != 1 or any(n < 1 or not (r > 0 and math.isfinite(r)) for n, r in pts):
            raise ConfigError(f"a verify-cost curve (verify_cost) needs finite positive ratios for block sizes >= 1, "
                              f"starting at 1; got {ratios!r}.")
        base = pts[0][1]
        self.points = [(n, r / base) for n, r in pts]
        self.source = source

    def __call__(self, n: int) -> float:
        pts = self.points
        if n <= pts[0][0]:
            return pts[0][1]
        for (n0, r0), (n1, r1) in zip(pts, pts[1:]):
            if n <= n1:
                return r0 + (r1 - r0) * (n - n0) / (n1 - n0)
        if len(pts) == 1:
            return pts[0][1]
        (n0, r0), (n1, r1) = pts[-2], pts[-1]
        return r1 + max(0.0, (r1 - r0) / (n1 - n0)) * (n - n1)

    @classmethod
    def linear(cls, slope: float) -> VerifyCost:
        """``c(n) = 1 + slope (n - 1)``."""
        return cls({1: 1.0, 2: 1.0 + slope}, source=f"linear slope {slope:g}")

    def describe(self) -> str:
        return f"{self.source}: " + ", ".join(f"c({n})={r:.2f}" for n, r in self.points)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def block_timer(lm: Any, context: int, batch: int, gen: torch.Generator, cond: Any = None) -> Callable[[int], float]:
    """``time(n) -> seconds`` of ``lm`` on ``n`` new random tokens per row of a ``batch`` after a
    warm cache of ``context`` random tokens. Each call fills a fresh cache (untimed), so nothing is
    ever rolled back here: only the loops own cache rollback."""
    vocab, dev = int(lm.vocab_size), lm.device

    def tokens(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, n), generator=gen, device=gen.device).to(dev)

    def run(n: int) -> float:
        cache = lm.new_cache(batch, cond) if cond is not None else lm.new_cache(batch)
        lm(tokens(context), cache)
        block = tokens(n)
        _sync(dev)
        t0 = time.perf_counter()
        lm(block, cache)
        _sync(dev)
        return time.perf_counter() - t0

    return run


@torch.inference_mode()
def measure_verify_cost(
    lm: Any, batch: int = 1, sizes: Sequence[int] = MEASURE_SIZES, runs: int = 7, context: int = 64,
    cond: Any = None, seed: int = 0,
) -> VerifyCost:
    """Median forward time of ``lm`` per block size in ``sizes`` (interleaved over ``runs`` rounds
    after one warm-up round), made non-decreasing (:func:`isotonic`), as a :class:`VerifyCost`. The model's forward counter is left as it
    was: these forwards are not part of any decode's statistics."""
    sizes = sorted({1, *(int(s) for s in sizes)})
    context = max(1, min(context, int(lm.max_length) - max(sizes)))
    before = getattr(lm, "forwards", None)
    try:
        timer = block_timer(lm, context, batch, torch.Generator().manual_seed(seed), cond)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for r in range(runs + 1):
            for n in sizes[r % len(sizes):] + sizes[: r % len(sizes)]:
                dt = timer(n)
                if r:
                    times[n].append(dt)
    finally:
        if before is not None:
            lm.forwards = before
    med = isotonic([statistics.median(times[n]) for n in sizes])
    return VerifyCost(dict(zip(sizes, med)), source=f"measured at batch {batch}")


def isotonic(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent
    violators): a timing spike at one block size is averaged with its neighbours instead of
    making that size look cheaper or dearer than the sizes around it."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out


SPEC_HELP = "'auto', 'measured', 'device', 'flat', a slope >= 0 or a list of ratios c(1), c(2), ..."


def verify_cost(lm: Any, batch: int, spec: Any = "auto", cond: Any = None, greedy: bool = True) -> VerifyCost:
    """The curve a cost-aware schedule uses. ``spec``: ``"auto"`` (``"measured"`` when ``greedy``,
    else ``"device"``; see the module docstring), ``"measured"`` (once per model, batch size and
    process; a model that cannot be timed this way falls back to ``"device"``, logged),
    ``"device"`` (:data:`DEVICE_CURVES` for the model's device type, flat for others), ``"flat"``
    (``c(n) = 1``: drafting is free), a number (a linear slope), a sequence of ratios for
    ``n = 1, 2, ...``, or a :class:`VerifyCost`."""
    if isinstance(spec, VerifyCost):
        return spec
    if isinstance(spec, str):
        if spec == "auto":
            spec = "measured" if greedy else "device"
        if spec == "flat":
            return VerifyCost.linear(0.0)
        if spec == "device":
            kind = getattr(getattr(lm, "device", None), "type", "cpu")
            return VerifyCost(DEVICE_CURVES[kind], source=f"{kind} default") if kind in DEVICE_CURVES else VerifyCost.linear(0.0)
        if spec != "measured":
            raise ConfigError(f"verify_cost must be {SPEC_HELP}; got {spec!r}.")
        key = (int(batch), MEASURE_SIZES)
        try:
            per_lm = _CACHE.setdefault(lm, {})
        except TypeError:  # not weak-referenceable: measure every call
            per_lm = {}
        if key not in per_lm:
            try:
                per_lm[key] = measure_verify_cost(lm, batch, cond=cond)
                logger.info("verify cost of %s: %s", type(lm).__name__, per_lm[key].describe())
            except Exception as e:  # noqa: BLE001 - any model that cannot run the probe
                logger.warning("could not time %s's forward (%s); using the device's default verify cost", type(lm).__name__, e)
                per_lm[key] = verify_cost(lm, batch, "device")
        return per_lm[key]
    if isinstance(spec, bool):
        raise ConfigError(f"verify_cost must be {SPEC_HELP}; got {spec!r}.")
    if isinstance(spec, (int, float)):
        if not math.isfinite(spec) or spec < 0:
            raise ConfigError(f"verify_cost must be a finite slope >= 0 when given as a number, got {spec!r} "
                              f"(or pass {SPEC_HELP}).")
        return VerifyCost.linear(float(spec))
    if isinstance(spec, Sequence):
        try:
            return VerifyCost({i + 1: float(r) for i, r in enumerate(spec)})
        except (TypeError, ValueError):
            pass
    raise ConfigError(f"verify_cost must be {SPEC_HELP}; got {spec!r}.")


__all__ = ["DEVICE_CURVES", "MEASURE_SIZES", "VerifyCost", "block_timer", "isotonic", "measure_verify_cost", "verify_cost"]
