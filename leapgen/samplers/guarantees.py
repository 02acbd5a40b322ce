"""What a sampler promises beyond the name of its guarantee, in a form tests can measure.

* :class:`StepBound`: the per-verification-step bound of a ``bounded`` sampler
  (:meth:`~leapgen.samplers.base.Sampler.step_bound`), e.g. LANTERN's ``TV <= delta``.
* :func:`report_verification` / :func:`observe_verification`: acceptance rules that test drafts
  against a distribution other than the target's report it; the registry-driven tests
  (``tests/registry_harness.py``) observe the reports and check the stated bound on real runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepBound:
    """The per-verification-step bound of a ``bounded`` sampler (:meth:`Sampler.step_bound`).

    At every verification a draft ``x`` is tested against a distribution ``p~`` instead of the
    target's processed distribution ``p``; the sampler promises ``TV(p~, p) <= tv`` or
    ``p~(x) <= ratio * p(x)`` (one of the two is set). Acceptance rules hand ``(p, p~, x)`` to
    :func:`report_verification`, so a test measures the bound on real runs."""

    tv: float | None = None
    ratio: float | None = None

    def __post_init__(self) -> None:
        if (self.tv is None) == (self.ratio is None):
            raise ValueError("a StepBound states exactly one of tv= or ratio=")


_VERIFICATION_OBSERVERS: list[Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]] = []


@contextlib.contextmanager
def observe_verification(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]) -> Iterator[None]:
    """Within the block, ``fn(p, tested, x)`` sees every :func:`report_verification` (tests use it
    to measure a ``bounded`` sampler's :class:`StepBound`)."""
    _VERIFICATION_OBSERVERS.append(fn)
    try:
        yield
    finally:
        _VERIFICATION_OBSERVERS.remove(fn)


def report_verification(p: torch.Tensor, tested: torch.Tensor, x: torch.Tensor) -> None:
    """Called by an acceptance rule that tests drafts ``x [...]`` against distributions ``tested
    [..., V]`` other than the target's ``p [..., V]``; costs nothing (no host sync) unless a test
    observes it."""
    for fn in _VERIFICATION_OBSERVERS:
        fn(p, tested, x)
