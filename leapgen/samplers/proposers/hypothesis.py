"""A position-indexed draft's hypothesis, read on the host: alignment and greedy chains.

A position-indexed draft (:attr:`~leapgen.models.base.CausalLM.position_indexed`, e.g. a
Paraformer or CTC hypothesis seen as a draft model) predicts, at position ``p``, the token after
position ``p``, whatever was fed. Two things follow, both used by ``speculative``'s
:class:`~leapgen.samplers.speculative.DraftChain`:

* **Re-alignment.** Once the verifier inserts or drops a token, every later draft is off by one
  and rejected. Each step, if the hypothesis token at a row's current alignment is not the row's
  last committed token, the nearest hypothesis position within ``window`` that holds it becomes
  the new alignment (the row's ``shift``), as a reader re-finds their place in a transcript after
  a skipped word (IAD's re-anchoring, which ``gad`` also uses: :func:`nearest_anchor`). The shift depends only on committed tokens, so drafting stays a function of the
  context: exactness is unchanged, only the number of accepted drafts moves.
* **Greedy chains on the host.** At temperature 0 with context-free logits processing, a
  position's draft token and its confidence never change during a decode, so they are computed
  once (one draft call, one host transfer) and every step's chain is a slice of host lists: no
  tensor work and no device sync per step.

A row drafts up to the hypothesis' end (its ``</s>``), never past it.
"""

from __future__ import annotations

from typing import Any

import torch


def nearest_anchor(hyp: list[int], at: int, token: int, window: int) -> int | None:
    """The index of ``hyp`` nearest ``at`` (``at`` itself first, then ``at - 1``, ``at + 1``, ...
    up to ``window`` away) that holds ``token``; None when there is none. The search stops at the
    ends of ``hyp``, so a huge ``window`` costs no more than one as long as the hypothesis."""
    reach = min(window, max(at, len(hyp) - 1 - at))  # no index of hyp lies further than this
    for d in range(reach + 1):
        for i in (at,) if d == 0 else (at - d, at + d):
            if 0 <= i < len(hyp) and hyp[i] == token:
                return i
    return None


class HypothesisReader:
    """The hypothesis of every row of one decode (see the module docstring).

    ``runner`` is the draft's :class:`~leapgen.samplers.runtime.Runner` (its model must be
    position-indexed); ``window``: how far re-alignment looks (0: never); ``proc``: the logits
    processor, given for the greedy table when the decode is greedy and context-free."""

    def __init__(self, runner: Any, window: int, proc: Any = None) -> None:
        lm, rows = runner.lm, list(runner.active)
        hyp = lm.position_tokens(runner.cache)
        self.window = int(window)
        self.shift = dict.fromkeys(rows, 0)
        self.hyp: dict[int, list[int]] = {}
        self.table: dict[int, tuple[list[int], list[float]]] | None = None
        if hyp is None:
            return
        self.hyp = {r: [t for t in row if t >= 0] for r, row in zip(rows, hyp.tolist())}
        if proc is not None:
            width = hyp.shape[1]
            pos = torch.arange(width, device=lm.device).expand(len(rows), width)
            logits = lm.position_logits(runner.cache, pos)
            tok = proc.argmax(logits)
            conf = logits.softmax(-1).gather(-1, tok[..., None]).squeeze(-1)
            self.table = {r: (t, c) for r, t, c in zip(rows, tok.tolist(), conf.tolist())}

    @property
    def available(self) -> bool:
        return bool(self.hyp)

    def _realign(self, h: list[int], tokens: list[int], shift: int) -> int:
        at = len(tokens) - 2 + shift  # the hypothesis position that drafted the last committed token
        j = nearest_anchor(h, at, tokens[-1], self.window)
        return shift if j is None else shift + j - at

    def positions(self, rows: Any, active: list[int], first: list[int], budget: list[int]) -> tuple[list[int], list[int]]:
        """(each row's first draft position after re-alignment, its budget cut at the hypothesis' end)."""
        out_first, out_budget = [], []
        for r, f, b in zip(active, first, budget):
            h = self.hyp.get(r)
            if h is None:
                out_first.append(f)
                out_budget.append(b)
                continue
            if self.window and len(rows.tokens[r]) > rows.prompt_len[r]:
                self.shift[r] = self._realign(h, rows.tokens[r], self.shift.get(r, 0))
            f = max(0, f + self.shift[r])
            out_first.append(f)
            out_budget.append(max(0, min(b, len(h) - f)))
        return out_first, out_budget

    def greedy_chain(self, row: int, first: int, budget: int, threshold: float) -> list[int]:
        """The greedy drafts at ``first ..``: up to ``budget`` tokens, cut after the first one whose
        confidence is below ``threshold`` (the confidence schedule's rule)."""
        assert self.table is not None
        tok, conf = self.table[row]
        out: list[int] = []
        for p in range(first, min(first + budget, len(tok))):
            out.append(tok[p])
            if conf[p] < threshold:
                break
        return out


__all__ = ["HypothesisReader", "nearest_anchor"]
