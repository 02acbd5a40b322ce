"""The statistics every sampler reports (:class:`DecodeStats`) and a decode's result (:class:`DecodeResult`).

Kept apart from :mod:`.base` (the registry and the sampler base class), which re-exports both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DecodeStats:
    """Statistics every sampler reports.

    * ``new_tokens``: tokens generated, summed over rows.
    * ``target_forwards``: calls of the target model (prefill included); one call over a batch counts once.
    * ``draft_forwards`` / ``other_forwards``: calls of a draft model / of any other network.
    * ``accepted_per_step``: for every target forward, the number each row it ran committed
      (accepted drafts plus the target's own token); the prefill forward counts, since it commits
      each row's first new token (so ``ar`` gives ``[[1], [1], ...]``, one per token), and a target
      forward that commits nothing (``cntp``'s trial forwards, ``ar_beam``'s forwards past a row's
      kept beam) lists 0 for its rows, so that the autoregressive samplers have one step per target
      forward. The masked loop lists one entry per decode step instead (a step whose guidance pass
      runs as a second forward counts once; see ``MaskedSampler``).
    * ``baseline_steps``: sequential target steps plain AR decoding needs for the same output
      (the longest row's new tokens: rows of a batch advance together).
    * ``step_compression`` = ``baseline_steps / target_forwards``; 1.0 for ``ar``.
    * ``mean_accepted``: tokens committed per row per target step (the acceptance length tau,
      bonus token included), averaged over (row, step) pairs.
    """

    sampler: str = ""
    batch_size: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    other_forwards: int = 0
    drafted_tokens: int = 0
    accepted_draft_tokens: int = 0
    baseline_steps: int = 0
    wall_time: float = 0.0
    accepted_per_step: list[list[int]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def step_compression(self) -> float:
        return self.baseline_steps / self.target_forwards if self.target_forwards else float("nan")

    @property
    def mean_accepted(self) -> float:
        flat = [n for step in self.accepted_per_step for n in step]
        return sum(flat) / len(flat) if flat else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / drafted tokens (nan when nothing was drafted)."""
        return self.accepted_draft_tokens / self.drafted_tokens if self.drafted_tokens else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time if self.wall_time > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "accepted_per_step"}
        d.update(
            step_compression=self.step_compression,
            mean_accepted=self.mean_accepted,
            acceptance_rate=self.acceptance_rate,
            tokens_per_second=self.tokens_per_second,
        )
        return d

    def summary(self) -> str:
        parts = [
            f"sampler={self.sampler}",
            f"new_tokens={self.new_tokens}",
            f"target_forwards={self.target_forwards}",
        ]
        if self.draft_forwards:
            parts.append(f"draft_forwards={self.draft_forwards}")
        if self.other_forwards:
            parts.append(f"other_forwards={self.other_forwards}")
        parts += [
            f"mean_accepted={self.mean_accepted:.2f}",
            f"step_compression={self.step_compression:.2f}",
            f"tokens/s={self.tokens_per_second:.1f}",
            f"wall={self.wall_time:.3f}s",
        ]
        return " ".join(parts)

    def __str__(self) -> str:
        return self.summary()

    @classmethod
    def merged(cls, parts: list[DecodeStats], sampler: str, batch_size: int | None = None,
               sum_extra: tuple[str, ...] = ()) -> DecodeStats:
        """One DecodeStats for several decode calls (e.g. a pipeline's sequential batches): counts
        and wall time add up, per-step lists concatenate; ``batch_size`` defaults to the sum of the
        parts'; ``sum_extra`` keys of ``extra`` add up where every part has them as integers."""
        out = cls(sampler=sampler)
        for s in parts:
            for f in ("batch_size", "new_tokens", "target_forwards", "draft_forwards", "other_forwards",
                      "drafted_tokens", "accepted_draft_tokens", "baseline_steps", "wall_time"):
                setattr(out, f, getattr(out, f) + getattr(s, f))
            out.accepted_per_step.extend(s.accepted_per_step)
        if batch_size is not None:
            out.batch_size = batch_size
        for key in sum_extra:
            if parts and all(isinstance(s.extra.get(key), int) for s in parts):
                out.extra[key] = sum(s.extra[key] for s in parts)
        return out


@dataclass
class DecodeResult:
    """Generated token ids per row (prompt excluded) and the statistics of the run."""

    sequences: list[list[int]]
    stats: DecodeStats
    #: for every generated token of every row, the index of the target forward that produced it
    #: (0 = the first forward, over the prompt); the data behind acceptance maps. Empty when a loop does not record it.
    token_steps: list[list[int]] = field(default_factory=list)


__all__ = ["DecodeResult", "DecodeStats"]
