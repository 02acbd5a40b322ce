"""Draft-length controllers shared by every draft-model sampler.

* ``constant``: always draft ``num_draft_tokens``.
* ``heuristic``: transformers' ``num_assistant_tokens_schedule="heuristic"``: +2 after a step in
  which every active row accepted all drafts, -1 (floor 1) otherwise.
* ``confidence``: DISCO-style dynamic speculation (transformers' ``assistant_confidence_threshold``):
  a row stops drafting after a token whose draft probability is below ``confidence_threshold``;
  the budget itself stays constant.
* ``auto``: ``confidence`` for a single sequence, ``heuristic`` for a batch. A confident-stop
  saves draft forwards only when every row of the batch has stopped, so at batch > 1 it rarely
  fires, while the +2/-1 length adapts to the batch's joint acceptance. Chosen from the text
  bench's ``--compare-schedules`` tables (batch 1 and batch 8; docs/benchmarks.md).

Controllers change speed only, never the output distribution.
"""

from __future__ import annotations

from ..errors import ConfigError

SCHEDULES = ("constant", "heuristic", "confidence", "auto")


class DraftLengthController:
    def __init__(
        self,
        schedule: str,
        num_draft_tokens: int,
        confidence_threshold: float,
        max_draft_tokens: int = 64,
        batch_size: int = 1,
    ):
        if schedule not in SCHEDULES:
            raise ConfigError(f"draft schedule must be one of {SCHEDULES}, got {schedule!r}.")
        if not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
            raise ConfigError(f"num_draft_tokens must be an integer >= 1, got {num_draft_tokens!r}.")
        ct = confidence_threshold
        if isinstance(ct, bool) or not isinstance(ct, (int, float)) or not (0.0 <= ct < 1.0):
            raise ConfigError(f"confidence_threshold must be in [0, 1), got {confidence_threshold!r}.")
        if schedule == "auto":
            schedule = "confidence" if batch_size <= 1 else "heuristic"
        self.schedule = schedule
        self.length = num_draft_tokens
        self.max = max(max_draft_tokens, num_draft_tokens)
        self.threshold = confidence_threshold if schedule == "confidence" else 0.0

    def budget(self) -> int:
        return self.length

    def stop_row(self, draft_top_prob: float) -> bool:
        """Whether a row stops drafting after a token whose draft probability is given."""
        return draft_top_prob < self.threshold

    def observe(self, all_accepted: bool) -> None:
        if self.schedule == "heuristic":
            self.length = min(self.max, self.length + 2) if all_accepted else max(1, self.length - 1)
