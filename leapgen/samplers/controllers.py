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

* :class:`AcceptanceModel` + :func:`best_width`: the cost-aware choice of copy-style drafters
  (``prompt_lookup``'s ``schedule="cost"``): per context class (the matched n-gram length), the
  probability that the first draft is accepted and that each later one is, given the previous
  was (two Beta-smoothed rates, learnt from the call's own verdicts), against the target's verify
  cost ``c(n)`` (:mod:`leapgen.samplers.cost_model`); each step drafts the width that maximises
  the expected committed tokens per unit of forward cost, 0 included (a plain step).

Controllers change speed only, never the output distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from .cost_model import VerifyCost

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


class AcceptanceModel:
    """How many drafts a verifier accepts, per context class ``c`` (e.g. the matched n-gram
    length): ``P(draft 1 accepted)`` and ``P(draft j accepted | draft j-1 accepted)`` for
    ``j >= 2`` (one rate shared by every later position, so a few long verdicts teach every
    width), each a Beta-smoothed ratio of successes to trials. Priors: first ``Beta(1, 1)``,
    continuation ``Beta(3, 1)`` (a copy that started right tends to go on)."""

    def __init__(self, classes: int, first_prior: tuple[float, float] = (1.0, 1.0),
                 next_prior: tuple[float, float] = (3.0, 1.0)) -> None:
        self.first = [list(first_prior) for _ in range(classes)]  # [successes, failures]
        self.next = [list(next_prior) for _ in range(classes)]

    def rates(self, c: int) -> tuple[float, float]:
        (a1, b1), (a2, b2) = self.first[c], self.next[c]
        return a1 / (a1 + b1), a2 / (a2 + b2)

    def survival(self, c: int, k: int) -> list[float]:
        """``P(at least j drafts accepted)`` for ``j = 1..k``."""
        p1, pn = self.rates(c)
        out, s = [], p1
        for _ in range(k):
            out.append(s)
            s *= pn
        return out

    def observe(self, c: int, drafted: int, accepted: int) -> None:
        """Record a verdict: ``accepted`` of ``drafted`` drafts (the first rejection ends a chain)."""
        if drafted <= 0:
            return
        self.first[c][0 if accepted >= 1 else 1] += 1
        tried = min(accepted, drafted - 1)  # positions 2..: tested while the previous one was accepted
        if tried > 0:
            ok = accepted - 1
            self.next[c][0] += ok
            self.next[c][1] += tried - ok


def best_width(survivals: Sequence[Sequence[float]], cost: VerifyCost) -> int:
    """The draft width ``k`` (0 = a plain step) that maximises the batch's expected committed
    tokens per forward cost, ``sum_r (1 + sum_{j <= min(k, len_r)} S_r(j)) / c(k + 1)``, where
    ``S_r(j)`` is row r's probability of accepting at least j drafts (``survivals[r]``, as long as
    the row's available draft). Rows with shorter drafts ride along at no extra cost."""
    k_max = max((len(s) for s in survivals), default=0)
    best_k, best = 0, len(survivals) / cost(1)
    gain = [0.0] * len(survivals)
    for k in range(1, k_max + 1):
        for r, s in enumerate(survivals):
            if k <= len(s):
                gain[r] += s[k - 1]
        value = (len(survivals) + sum(gain)) / cost(k + 1)
        if value > best:
            best_k, best = k, value
    return best_k
