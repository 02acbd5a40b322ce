"""The proposer interface of the chain and tree loops, and the one rule every draft obeys.

A proposer is created by a loop for ONE ``generate`` call (samplers keep no state between calls)
and answers two questions:

* :meth:`Proposer.propose` - what to guess this step: a :class:`ChainProposal` (a chain of draft
  tokens per row, with the distributions ``q`` they were drawn from when they are random) or a
  :class:`TreeProposal` (a token tree per row, optionally with extra *side* slots the proposer
  wants in the same target forward, e.g. lookahead's Jacobi window, whose logits it receives back);
* :meth:`Proposer.update` - what it learns from the verdict (accepted counts, the target's
  iterate for Jacobi-style proposers, side logits).

Proposers never roll a cache back. A proposer that ran speculative tokens through a model of its
own (a draft model) lists the region in ``Proposal.rollback``; the loop keeps what was accepted.

**Valid ids.** A draft consists of output ids in ``[0, vocab_size)``. The loops apply
:func:`valid_prefix` / :func:`prune_invalid` to every proposal made of host token lists (n-gram
copies, Jacobi guesses, pools, tries), so no drafter filters ids by hand; a draft model samples
from the target's vocabulary (checked by :func:`check_same_vocab`), so its drafts are valid by
construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...errors import ModelMismatchError

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import DecodeRun, Runner


def valid_prefix(tokens: Sequence[int], vocab_size: int) -> list[int]:
    """The longest prefix of ``tokens`` made of output ids ``0 <= t < vocab_size``."""
    out = []
    for t in tokens:
        t = int(t)
        if not 0 <= t < vocab_size:
            break
        out.append(t)
    return out


def prune_invalid(tokens: Sequence[int], parent: Sequence[int], vocab_size: int) -> tuple[list[int], list[int]]:
    """Drop every non-root node of a tree whose token is not an output id, with its
    descendants; the kept nodes keep their (topological) order."""
    new = [0]
    out_t, out_p = [int(tokens[0])], [-1]
    for i in range(1, len(tokens)):
        par = int(parent[i])
        if par < 0 or new[par] < 0 or not 0 <= int(tokens[i]) < vocab_size:
            new.append(-1)
            continue
        new.append(len(out_t))
        out_t.append(int(tokens[i]))
        out_p.append(new[par])
    return out_t, out_p


def check_same_vocab(target, draft) -> None:
    """A draft model must score the target's vocabulary (its drafts are then valid ids)."""
    if target.vocab_size != draft.vocab_size:
        raise ModelMismatchError(
            f"the draft model's vocabulary ({draft.vocab_size} logits) differs from the target's "
            f"({target.vocab_size}); speculative decoding needs a draft trained with the same tokenizer."
        )


@dataclass
class Rollback:
    """Speculative slots a proposer wrote to its own model's cache from ``start`` on: after
    verification the loop keeps, per row, ``min(accepted, cap)`` of them (``cap=0``: forget all)."""

    runner: Runner
    start: int
    cap: int = 0


@dataclass
class ChainProposal:
    """One step's chains. Either ``tokens`` (host lists per active row; the loop applies the
    valid-id rule) or ``chain`` (``[B, g]`` on the logits' device, valid by construction) with
    ``lens`` (host draft lengths). ``q [B, g, V]``: the distributions the drafts were drawn from
    (None: deterministic drafts, one-hot q)."""

    tokens: list[list[int]] | None = None
    chain: Tensor | None = None
    lens: list[int] | None = None
    q: Tensor | None = None
    rollback: list[Rollback] = field(default_factory=list)


@dataclass
class TreeProposal:
    """One step's trees, root (the row's last committed token) first.

    ``tokens/parent``: host lists per row, or ``[B, N]`` tensors (padding parent -2). ``q
    [B, N, V]``: the draft distribution the children of each node were drawn from; ``draws``
    (K-SEQ): per row and node, the child of each i.i.d. draw in draw order. ``side``: per row
    ``(tokens, mask [m, m], offsets)`` of extra slots fed after the tree in the same forward
    (they see the row's pending tokens, not the tree; positions root + offsets); their logits go
    back to :meth:`Proposer.update` (``Verdict.side_logits[b]``: the root's logits, then one row
    per side slot). ``clamp``: clamp positions past the context window (only
    for side slots whose outputs need not be exact)."""

    tokens: Any
    parent: Any
    q: Tensor | None = None
    draws: list[list[list[int]]] | None = None
    side: list[tuple[list[int], Any, list[int]]] | None = None
    clamp: bool = False
    rollback: list[Rollback] = field(default_factory=list)


@dataclass
class Verdict:
    """What verification decided for the active rows, on the host: accepted drafts per row
    (``n``), the token committed after them (``next``), the accepted tree nodes (tree loop), the
    proposer's requested target iterate (``iterate``, chain loop) and the side-slot logits."""

    n: list[int]
    next: list[int]
    committed: list[int]
    paths: list[list[int]] | None = None
    iterate: list[list[int]] | None = None
    side_logits: list[Tensor] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Proposer:
    """Base of every proposer (see the module docstring). ``prefill``: the loop first runs one
    plain target step over the prompts (a draft model needs the target's first token as root); an
    instance may turn it off."""

    prefill: bool = False
    uses_draft: bool = False
    #: False only for the empty proposer of plain AR (nothing to roll back)
    drafts: bool = True

    def __init__(self, sampler, run: DecodeRun, generator: torch.Generator) -> None:
        self.sampler = sampler
        self.run = run
        self.generator = generator
        self.vocab_size = run.target.lm.vocab_size

    @classmethod
    def check(cls, sampler, models: dict[str, Any], config) -> None:
        """Refuse models or settings the proposer cannot use, before anything runs."""
        if cls.uses_draft:
            check_same_vocab(models["model"], models["draft"])

    def propose(self) -> ChainProposal | TreeProposal:
        raise NotImplementedError

    def iterate(self, y: Tensor, n: Tensor) -> Tensor | None:
        """Chain loop: tokens ``[B, g+1]`` derived from the target's verdict ``y`` (argmax or
        processed probabilities at every draft position) that :meth:`update` needs, brought to the
        host with the verdict in one transfer. None: nothing."""
        return None

    def update(self, verdict: Verdict) -> None:
        """Learn from the step's verdict (rows are ``run.target.active`` before finished rows
        are dropped)."""

    def finish(self) -> None:
        """End of the call: report proposer statistics into ``run.stats.extra``."""
