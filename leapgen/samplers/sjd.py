"""Speculative Jacobi Decoding (SJD): Jacobi iteration with a probabilistic acceptance test.

Paper: Teng et al., "Accelerating Auto-regressive Text-to-Image Generation with Training-free
Speculative Jacobi Decoding", ICLR 2025 (tyshiwo1/Accelerating-T2I-AR-with-SJD,
``scheduler/jacobi_iteration_lumina_mgpt.py``).

Each row keeps a window of up to ``window - 1`` draft tokens after its committed text, each with
the distribution ``q`` it was drawn from. One target forward over ``[pending, drafts]`` gives the
processed target distributions ``p`` at every window position (the :class:`LogitsProcessor`
is applied exactly once). The drafts are verified left to right with ``min(1, p/q)``
(:func:`verify.rejection_sample`); at the first rejection a token is drawn from
``norm(max(0, p - q))`` and the step stops; when every draft is accepted the next position's
sample is a free bonus token. The KV of the unaccepted positions is rolled back per row
(``Runner.keep``: rows of a batch advance by their own accepted counts, not the batch minimum).

Jacobi update: the positions after the rejection keep a fresh sample ``y_j ~ p_j`` of this
iteration together with ``p_j`` itself as next iteration's draft and ``q`` (the probabilistic
convergence criterion). The window is then refilled with the ``init`` scheme:

* ``"random"``: a uniform random token, ``q`` one-hot on it (so it is accepted with
  probability ``p(y)``; a draft outside top-k has ``p = 0``, is always rejected and the residual
  is ``p`` itself: SJD issue #7 cannot produce an all-``-inf`` row here because the residual is
  formed from probabilities, never re-processed);
* ``"repeat_horizon"``: copy the left neighbour ``(h, w-1)`` on ``model.grid`` (committed or
  draft), one-hot ``q``. Grid coordinates count from the row's prompt length; column 0 copies the
  token above ``(h-1, 0)`` and the first cell ``(0, 0)`` gets a random token. A model without a
  grid repeats the previous token (the 1-D left neighbour; a random token when the row has no
  token yet).

Why it is exact: every draft ``y_j`` is drawn from ``q_j``, a function of the *previous*
iterate only, independently of the other drafts and of the coin flips that decide the new
prefix, so each verification is a valid speculative-sampling step against the target's
processed distribution. At temperature 0 the test is deterministic Jacobi acceptance
(``y == argmax``, :func:`verify.greedy_match`), so the output is greedy AR token for token.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults: ``window=16`` (the reference's ``max_num_new_tokens``: up to 15 drafts + 1 token per
step), ``init="random"``.

Proposer: :class:`JacobiIterate` (the window with its q); acceptance:
:class:`~leapgen.samplers.acceptance.ExactChain`; loop: the chain loop. Relaxed variants swap the
rule only: GSD's group test (:mod:`leapgen.samplers.gsd`), or LANTERN's latent relaxation
(:class:`leapgen.samplers.lantern.Relaxed`, tested as an SJD composition).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from .base import check_choice, check_int, register_sampler
from .logits import sample
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer, Verdict
from .rows import Rows

INITS = ("random", "repeat_horizon")


def horizon_token(rows: Rows, r: int, window: list[int], slot: int, grid: tuple[int, int] | None) -> int | None:
    """The ``repeat_horizon`` guess for window ``slot`` of row ``r``: the token at its left grid
    neighbour (committed or already in ``window``), the one above for column 0, None for the
    first cell. Without a grid: the previous token (prompt included; None when there is none)."""
    gen = rows.generated(r)
    j = len(gen) + slot  # generated index of the slot
    if grid is None:
        src = j - 1
        if src < 0:
            return rows.tokens[r][-1] if rows.tokens[r] else None
    else:
        cols = int(grid[1])
        src = j - 1 if j % cols else j - cols
        if src < 0:
            return None
    return gen[src] if src < len(gen) else window[src - len(gen)]


class JacobiIterate(Proposer):
    """SJD's window: per row, draft tokens after the committed text with the distributions q they
    were drawn from (the previous iterate's p for carried drafts, one-hot for ``init`` guesses)."""

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        n = len(run.rows.tokens)
        self.win: list[list[int]] = [[] for _ in range(n)]
        # where the q of the first c drafts of a row lies in ``prev`` ([B', g'+1, V]): (row k', first, c)
        self.carried: list[tuple[int, int, int] | None] = [None] * n
        self.prev: Tensor | None = None

    @classmethod
    def check(cls, sampler, models, config) -> None:
        grid = models["model"].grid
        if grid is not None and (len(grid) != 2 or min(int(x) for x in grid) < 1):
            raise ConfigError(f"model.grid must be (rows, cols) with positive sizes, got {grid!r}.")

    def _refill(self, r: int, win: list[int], size: int) -> None:
        """Append ``init`` guesses (one-hot q) to row r's window until it holds ``size`` drafts."""
        rows, grid, gen = self.run.rows, self.run.target.lm.grid, self.generator
        if self.sampler.init == "random":  # one draw for the whole refill (the same stream as one by one)
            if size > len(win):
                win += torch.randint(self.vocab_size, (size - len(win),), generator=gen, device=gen.device).tolist()
            return
        while len(win) < size:
            tok = horizon_token(rows, r, win, len(win), grid)
            if tok is None:  # nothing to copy
                tok = int(torch.randint(self.vocab_size, (1,), generator=gen, device=gen.device))
            win.append(int(tok))

    def propose(self) -> ChainProposal:
        rows, act = self.run.rows, self.run.target.active
        drafts = []
        for r in act:
            size = max(0, min(self.sampler.window - 1, rows.remaining(r) - 1))  # drafts past the budget never commit
            del self.win[r][size:]
            self._refill(r, self.win[r], size)
            drafts.append(self.win[r])
        self.drafts = drafts
        g = max(len(d) for d in drafts)
        q = None
        if not self.run.proc.greedy and g:
            dev = self.run.target.lm.device
            chain = torch.tensor([d + [0] * (g - len(d)) for d in drafts], dtype=torch.long, device=dev)
            q = torch.nn.functional.one_hot(chain, self.vocab_size).to(torch.float32)
            src = [(k, *self.carried[r]) for k, r in enumerate(act) if self.carried[r] is not None]
            if src and self.prev is not None:
                cols = list(zip(*src))
                cols[3] = [min(c, len(drafts[k])) for k, c in zip(cols[0], cols[3])]
                k, kp, first, c = (torch.tensor(col, dtype=torch.long, device=dev) for col in cols)
                j = torch.arange(g, device=dev)[None]
                pos = (first[:, None] + j).clamp_max(self.prev.shape[1] - 1)
                q[k] = torch.where((j < c[:, None])[..., None], self.prev[kp[:, None], pos], q[k])
        return ChainProposal(tokens=drafts, q=q)

    def iterate(self, y: Tensor, n: Tensor) -> Tensor:
        # Jacobi update: greedy: the argmax; else one fresh sample per position (after verification's draws)
        self.y = y
        return y if self.run.proc.greedy else sample(y, self.generator)

    def update(self, verdict: Verdict) -> None:
        greedy = self.run.proc.greedy
        for k, r in enumerate(self.run.target.active):
            nk, lk = verdict.n[k], len(self.drafts[k])
            self.win[r] = verdict.iterate[k][nk + 1 : lk + 1]
            self.carried[r] = None if greedy or nk >= lk else (k, nk + 1, lk - nk)
        self.prev = None if greedy else self.y


@register_sampler(
    "sjd",
    family="ar-parallel",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Teng et al. 2025 (SJD, ICLR)",
)
class SJD(ChainSampler):
    """Speculative Jacobi Decoding: a window of Jacobi drafts verified by rejection sampling."""

    defaults = {"window": 16, "init": "random"}
    proposer = JacobiIterate

    def validate(self) -> None:
        check_int("window", self.window, hint=" (tokens per step: window - 1 drafts + 1)")
        check_choice("init", self.init, INITS)
