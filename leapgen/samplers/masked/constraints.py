"""Token constraints: tokens a masked sampler may not propose at this step, per row.

A constraint returns a bool ``[A, V]`` (or ``[A, K, L, V]``) of ids ruled out for the active
rows; the proposer samples among the others and scores the pick by its probability under the
*unconstrained* distribution (so where a position is forced, the loop still prefers positions
where the model itself wanted the token).

| name | rule | source |
|---|---|---|
| ``none`` | nothing ruled out | |
| ``balanced`` | keep every id of ``pair_ids`` at an even count and every ``bracket_pairs`` (open, close) balanced by the end: a token is ruled out when, after committing it, the row's odd-count pair ids plus its unbalanced brackets would outnumber the masks left | SMILES / SAFE ring-closure digits and branches (GenMol strict validity) |

``balanced`` is exact for one commit per step (GenMol's ``one_per_step``) and a heuristic when
a step commits several tokens (each proposal is checked against the counts before the step).
It checks counts, not positions: it cannot stop ``c11`` or a digit after ``.``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from .parts import CONSTRAINTS, Constraint
from .state import MaskedDecodeState


@CONSTRAINTS.register("none")
class NoConstraint(Constraint):
    """Nothing is ruled out."""

    def disallowed(self, state: MaskedDecodeState, vocab: int) -> Tensor | None:
        return None


def _ids(x: object, name: str) -> tuple[int, ...]:
    try:
        out = tuple(int(t) for t in (x or ()))  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a sequence of token ids, got {x!r}.") from None
    if any(t < 0 for t in out):
        raise ConfigError(f"{name} must hold non-negative token ids, got {x!r}.")
    return out


@CONSTRAINTS.register("balanced")
class Balanced(Constraint):
    """Even counts for ``pair_ids``, balanced ``bracket_pairs``, reachable with the masks left."""

    def __init__(self, pair_ids: Sequence[int] = (), bracket_pairs: Sequence[Sequence[int]] = ()) -> None:
        self.pair_ids = _ids(pair_ids, "pair_ids")
        pairs = []
        for bp in bracket_pairs or ():
            ids = _ids(bp, "bracket_pairs")
            if len(ids) != 2:
                raise ConfigError(f"bracket_pairs entries must be (open_id, close_id), got {bp!r}.")
            pairs.append(ids)
        self.bracket_pairs = tuple(pairs)
        if not self.pair_ids and not self.bracket_pairs:
            raise ConfigError("constraint 'balanced' needs pair_ids and/or bracket_pairs (token ids).")

    def disallowed(self, state: MaskedDecodeState, vocab: int) -> Tensor | None:
        vals = state.active(state.tokens)  # [A, K, L]
        masked = state.active(state.masked)
        a = vals.shape[0]
        dev = vals.device
        known = ~masked
        if state.attention_mask is not None:
            known = known & state.active(state.attention_mask)[:, None]
        flat = vals.reshape(a, -1).clamp(0, vocab - 1)
        cnt = torch.zeros(a, vocab, dtype=torch.long, device=dev).scatter_add_(1, flat, known.reshape(a, -1).long())
        left = masked.reshape(a, -1).sum(1)  # masks before this step's commit
        need_delta = torch.zeros(a, vocab, dtype=torch.long, device=dev)
        need = torch.zeros(a, dtype=torch.long, device=dev)
        if self.pair_ids:
            pid = torch.tensor(self.pair_ids, device=dev)
            odd = cnt[:, pid] % 2  # [A, P]
            need = need + odd.sum(1)
            need_delta[:, pid] = 1 - 2 * odd  # an even id becomes odd (+1), an odd one even (-1)
        for op, cl in self.bracket_pairs:
            d = cnt[:, op] - cnt[:, cl]
            base = d.abs()
            need = need + base
            for t, step in ((op, 1), (cl, -1)):
                need_delta[:, t] += (d + step).abs() - base
        after = need[:, None] + need_delta  # unmet pairs / brackets after committing each id
        return after > (left - 1)[:, None]
