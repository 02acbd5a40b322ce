"""Token constraints: tokens a masked sampler may not propose at this step, per row.

A constraint returns a bool ``[A, V]`` (or ``[A, K, L, V]``) of ids ruled out for the active
rows; the proposer samples among the others and scores the pick by its probability under the
*unconstrained* distribution (so where a position is forced, the loop still prefers positions
where the model itself wanted the token).

| name | rule | source |
|---|---|---|
| ``none`` | nothing ruled out | |
| ``balanced`` | keep every id of ``pair_ids`` at an even count and every ``bracket_pairs`` (open, close) balanced by the end: a token is ruled out when, after committing it, the row's odd-count pair ids plus its unbalanced brackets would outnumber the masks left | SMILES / SAFE ring-closure digits and branches (GenMol strict validity) |

A constraint is applied twice per step. ``disallowed`` rules ids out of every position's
proposal against the counts *before* the step; then, once the policy has chosen the step's
commits, ``filter_commits`` walks them in descending confidence and keeps masked every commit that
would break the rule given the ones kept before it in the same step (a position kept masked is
proposed again, against the new counts, at a later step). On a row's last scheduled step, where
everything left must be committed, a rejected position is instead re-drawn from the same step's
distribution among the ids the rule then allows. Neither costs a forward or a step, so
``balanced`` is exact for multi-token steps too: after every step a row's unmet pairs / brackets
are at most its masks left, provided that held at the start. (The step's most confident commit is
kept unchecked, so every step still commits >= 1 unit; it keeps the rule unless top-k / top-p
filtered out every allowed id at its position, where the unconstrained draw is kept, or it is a
span of several positions.) With one commit per step nothing changes. It checks counts, not
positions: it cannot stop ``c11`` or a digit after ``.``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from ..logits import sample
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
        self.pair_ids = tuple(dict.fromkeys(_ids(pair_ids, "pair_ids")))  # a repeated id counts once
        pairs = []
        for bp in bracket_pairs or ():
            ids = _ids(bp, "bracket_pairs")
            if len(ids) != 2:
                raise ConfigError(f"bracket_pairs entries must be (open_id, close_id), got {bp!r}.")
            pairs.append(ids)
        self.bracket_pairs = tuple(pairs)
        if not self.pair_ids and not self.bracket_pairs:
            raise ConfigError("constraint 'balanced' needs pair_ids and/or bracket_pairs (token ids).")
        # filter_commits counts only these ids, each in its slot (0 .. R-1; R: every other id)
        self._counted = tuple(sorted({*self.pair_ids, *(t for bp in self.bracket_pairs for t in bp)}))
        self._slot = {t: i for i, t in enumerate(self._counted)}
        self._slot_cache: dict[torch.device, tuple[Tensor, Tensor]] = {}

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

    # ---------------------------------------------------------------- the step's joint check
    def _slots(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """``(lut, pair_slots)`` on ``device`` (built once per device: no transfer per step).
        The counted ids (pair and bracket ids) get slots ``0 .. R-1`` in id order; ``lut[id]`` is
        an id's slot, ``R`` for any other id up to ``len(lut) - 1`` (ids are clamped there)."""
        if device not in self._slot_cache:
            ids = self._counted
            lut = torch.full((ids[-1] + 2,), len(ids), dtype=torch.long)
            lut[list(ids)] = torch.arange(len(ids))
            self._slot_cache[device] = (lut.to(device), lut[list(self.pair_ids)].to(device))
        return self._slot_cache[device]

    def _need(self, cnt: Tensor, pair_slots: Tensor) -> Tensor:
        """Long ``[A]``: odd-count pair ids plus unbalanced brackets, from slot counts ``[A, R+1]``."""
        need = (cnt[:, pair_slots] % 2).sum(1)
        for op, cl in self.bracket_pairs:
            need = need + (cnt[:, self._slot[op]] - cnt[:, self._slot[cl]]).abs()
        return need

    def _delta(self, cnt: Tensor, lut: Tensor, pair_slots: Tensor, vocab: int) -> Tensor:
        """Long ``[A, V]``: how committing each id changes the unmet count, from slot counts."""
        d_slot = torch.zeros_like(cnt)
        if self.pair_ids:
            d_slot[:, pair_slots] = 1 - 2 * (cnt[:, pair_slots] % 2)
        for op, cl in self.bracket_pairs:
            so, sc = self._slot[op], self._slot[cl]
            d = cnt[:, so] - cnt[:, sc]
            d_slot[:, so] += (d + 1).abs() - d.abs()
            d_slot[:, sc] += (d - 1).abs() - d.abs()
        ids = torch.arange(vocab, device=cnt.device).clamp(max=lut.shape[0] - 1)
        return d_slot[:, lut[ids]]

    def filter_commits(
        self,
        state: MaskedDecodeState,
        proposal: Tensor,
        commit: Tensor,
        unit_of: Tensor,
        unit_score: Tensor,
        remask: Tensor | None = None,
        final: Tensor | None = None,
        log_probs: Callable[[], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``(commit, proposal)``: the chosen commits ``[A, P]`` that keep the rule, checked one
        unit at a time, and the proposals (re-drawn where a final row needed it).

        ``proposal [A, K, L]``: the step's proposals; ``commit [A, P]``: the positions the policy
        commits; ``unit_of [A, P]`` / ``unit_score [A, N]``: each position's unit and the units'
        scores (the policy's order); ``remask [A, P]``: positions a revising policy re-masks this
        step (their tokens leave the counts and they count as masks); ``final [A]``: rows whose
        step must commit every masked unit (their last scheduled step); ``log_probs()``: the
        ``[A, K, L, V]`` log-probabilities the proposals were drawn from (called only when needed).

        Committed units are walked in descending score (ties: lower unit id), vectorised over
        rows; a unit is kept when, with the units kept before it, its row's unmet pairs / brackets
        stay <= the masks left after it. Otherwise it stays masked for a later step, except on a
        final row: there a single position is re-drawn among the ids the rule allows at that point
        (from ``log_probs()``; argmax at temperature 0, else one ``state.generator`` draw per walk
        step), so the step budget holds and the rule is kept to the end (a span, or a position
        whose distribution gives every allowed id zero probability, is committed as proposed).
        The first unit is always kept, unchecked: for a single position the proposer drew it among
        ids allowed against the counts before the step, which is the same check (re-masking only
        adds slack: one token less changes the unmet count by at most one), and keeping it is what
        guarantees >= 1 commit per step. One host sync (the most units any row commits, and
        whether a row is final); all maths on ``commit``'s device.
        """
        a = commit.shape[0]
        dev = commit.device
        n_units = unit_score.shape[1]
        cu = torch.zeros(a, n_units, dtype=torch.long, device=dev).scatter_reduce(
            1, unit_of, commit.long(), reduce="amax"
        ).bool()  # committed units [A, N]
        n = cu.sum(1)
        final = torch.zeros(a, dtype=torch.bool, device=dev) if final is None or log_probs is None else final
        steps, any_final = (int(v) for v in torch.stack([n.max(), final.any().long()]).tolist())  # the one host sync
        if steps <= 1:
            return commit, proposal  # one unit per row: the proposer's check was already exact
        lut, pair_slots = self._slots(dev)
        top, r = lut.shape[0] - 1, len(self._counted)
        masked = state.active(state.masked)  # [A, K, L], before this step's commit
        known = ~masked
        if state.attention_mask is not None:
            known = known & state.active(state.attention_mask)[:, None]
        masked, known = masked.reshape(a, -1), known.reshape(a, -1)
        left = masked.sum(1)
        if remask is not None:
            known = known & ~remask
            left = left + remask.sum(1)
        vals = lut[state.active(state.tokens).reshape(a, -1).clamp(0, top)]
        cnt = torch.zeros(a, r + 1, dtype=torch.long, device=dev).scatter_add_(1, vals, known.long())
        prop_ids = proposal.reshape(a, -1).clone()
        prop = lut[prop_ids.clamp(0, top)]
        big = torch.finfo(unit_score.dtype).max
        key = torch.where(cu, unit_score.nan_to_num(nan=-big, posinf=big, neginf=-big), float("-inf"))
        order = torch.sort(key, dim=1, descending=True, stable=True).indices  # committed units first
        lp = log_probs().reshape(a, prop_ids.shape[1], -1) if any_final else None
        greedy = lp is None or state.config.temperature == 0.0
        kept = torch.zeros_like(commit)
        for j in range(steps):
            mem = commit & (unit_of == order[:, j : j + 1])  # the row's j-th unit's positions [A, P]
            size = mem.sum(1)
            trial = cnt.scatter_add(1, prop, mem.long())
            valid = j < n
            check = valid & (self._need(trial, pair_slots) <= left - size)
            ok = valid if j == 0 else check  # the first is always kept (see above): >= 1 commit per step
            if lp is not None:
                # a final row commits everything: re-draw a rejected single position among the ids
                # allowed with the units kept before it and one mask fewer
                pos = mem.long().argmax(1)  # the unit's position (its only one where size == 1)
                allowed = self._need(cnt, pair_slots)[:, None] + self._delta(cnt, lut, pair_slots, lp.shape[-1])
                allowed = allowed <= (left - 1)[:, None]
                row_lp = lp.gather(1, pos[:, None, None].expand(-1, 1, lp.shape[-1])).squeeze(1)
                row_lp = row_lp.masked_fill(~allowed, float("-inf"))
                has = ~torch.isneginf(row_lp).all(1)
                if greedy:
                    new = row_lp.argmax(1)
                else:
                    new = sample(torch.where(has[:, None], row_lp.exp(), torch.ones_like(row_lp)), state.generator)
                fix = final & valid & ~check & (size == 1) & has
                prop_ids = prop_ids.scatter(1, pos[:, None], torch.where(fix, new, prop_ids.gather(1, pos[:, None])[:, 0])[:, None])
                prop = lut[prop_ids.clamp(0, top)]
                trial = cnt.scatter_add(1, prop, mem.long())
                ok = ok | (final & valid)  # a final row commits every unit (re-drawn or as proposed)
            cnt = torch.where(ok[:, None], trial, cnt)
            left = left - torch.where(ok, size, torch.zeros_like(size))
            kept = kept | (mem & ok[:, None])
        return kept, prop_ids.reshape(proposal.shape)
