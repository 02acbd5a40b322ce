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
  grid repeats the previous token (the 1-D left neighbour); a copy that is not an output token
  (a condition-prefix id) is replaced by a random one.

Why it is exact: every draft ``y_j`` is drawn from ``q_j``, a function of the *previous*
iterate only, independently of the other drafts and of the coin flips that decide the new
prefix, so each verification is a valid speculative-sampling step against the target's
processed distribution. At temperature 0 the test is deterministic Jacobi acceptance
(``y == argmax``, :func:`verify.greedy_match`), so the output is greedy AR token for token.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).
Defaults: ``window=16`` (the reference's ``max_num_new_tokens``: up to 15 drafts + 1 token per
step), ``init="random"``.

:meth:`SJD.acceptance` is the hook that relaxed variants override (GSD's group test, see
:mod:`leapgen.samplers.gsd`); the loop exists once, here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from ..models.base import CausalLM
from .base import DecodeConfig, DecodeResult, Rows, Sampler, make_generator, register_sampler
from .logits import sample
from .runtime import DecodeRun

INITS = ("random", "repeat_horizon")


def horizon_token(rows: Rows, r: int, window: list[int], slot: int, grid: tuple[int, int] | None) -> int | None:
    """The ``repeat_horizon`` guess for window ``slot`` of row ``r``: the token at its left grid
    neighbour (committed or already in ``window``), the one above for column 0, None for the
    first cell. Without a grid: the previous token (prompt included)."""
    gen = rows.generated(r)
    j = len(gen) + slot  # generated index of the slot
    if grid is None:
        src = j - 1
        if src < 0:
            return rows.tokens[r][-1]
    else:
        cols = int(grid[1])
        src = j - 1 if j % cols else j - cols
        if src < 0:
            return None
    return gen[src] if src < len(gen) else window[src - len(gen)]


@register_sampler(
    "sjd",
    family="ar-parallel",
    guarantee="distribution-exact",
    needs=("model",),
    paper="Teng et al. 2025 (SJD, ICLR)",
)
class SJD(Sampler):
    """Speculative Jacobi Decoding: a window of Jacobi drafts verified by rejection sampling."""

    defaults = {"window": 16, "init": "random"}

    def validate(self) -> None:
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ConfigError(
                f"window must be an integer >= 1 (tokens per step: window - 1 drafts + 1), got {self.window!r}."
            )
        if self.init not in INITS:
            raise ConfigError(f"init must be one of {INITS}, got {self.init!r}.")

    # -------------------------------------------------------------------------------- hooks
    def prepare(self, lm: CausalLM) -> None:
        """Called once per ``generate`` with the target (subclasses fetch what they need)."""

    def acceptance(self, p: Tensor, q: Tensor | None, chain: Tensor, draft_len: Tensor) -> tuple[Tensor, Tensor] | None:
        """``(num, den) [B, g]`` of the test ``u * den < num`` for drafts ``chain [B, g]`` with
        target ``p [B, g+1, V]`` and draft distributions ``q [B, g, V]``; None = exact
        ``p(x) / q(x)``."""
        return None

    # -------------------------------------------------------------------------------- loop
    def _refill(self, rows: Rows, r: int, win: list[int], size: int, vocab: int,
                grid: tuple[int, int] | None, gen: torch.Generator) -> None:
        """Append ``init`` guesses (one-hot q) to row r's window until it holds ``size`` drafts."""
        while len(win) < size:
            tok = horizon_token(rows, r, win, len(win), grid) if self.init == "repeat_horizon" else None
            if tok is None or not 0 <= tok < vocab:  # nothing to copy, or a prompt token (e.g. a class id)
                tok = int(torch.randint(vocab, (1,), generator=gen))
            win.append(int(tok))

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        lm: CausalLM = models["model"]
        grid = lm.grid
        if grid is not None and (len(grid) != 2 or min(int(x) for x in grid) < 1):
            raise ConfigError(f"model.grid must be (rows, cols) with positive sizes, got {grid!r}.")
        self.prepare(lm)
        run = DecodeRun(self, models, prompts, config, cond=cond)
        rows, proc, target = run.rows, run.proc, run.target
        gen = generator if generator is not None else make_generator(config)
        vocab = lm.vocab_size
        # per row: the draft tokens after its committed text, and where the q of the first c of them
        # lies in the previous iterate's distributions ``prev`` ([B', g'+1, V]): (row k', first
        # position, c); the other drafts are init guesses with one-hot q
        win: list[list[int]] = [[] for _ in prompts]
        carried: list[tuple[int, int, int] | None] = [None] * len(prompts)
        prev: Tensor | None = None

        while target.active:
            act = target.active
            drafts = []
            for r in act:
                size = max(0, min(self.window - 1, rows.remaining(r) - 1))  # drafts past the budget never commit
                del win[r][size:]
                self._refill(rows, r, win[r], size, vocab, grid, gen)
                drafts.append(win[r])
            g = max(len(d) for d in drafts)
            q = None
            if not proc.greedy and g:
                chain = torch.tensor([d + [0] * (g - len(d)) for d in drafts], dtype=torch.long)
                q = torch.nn.functional.one_hot(chain, vocab).to(torch.float32)
                src = [(k, *carried[r]) for k, r in enumerate(act) if carried[r] is not None]
                if src and prev is not None:
                    k, kp, first, c = (torch.tensor(col, dtype=torch.long) for col in zip(*src))
                    c = torch.minimum(c, torch.tensor([len(drafts[i]) for i in k.tolist()]))
                    j = torch.arange(g)[None]
                    pos = (first[:, None] + j).clamp_max(prev.shape[1] - 1)
                    q[k] = torch.where((j < c[:, None])[..., None], prev[kp[:, None], pos], q[k])
            n, y = run.chain_step(drafts, gen, q=q, accept=self.acceptance)
            # Jacobi update: this iterate after the committed tokens becomes the next drafts
            nl = n.tolist()
            nxt = (y if proc.greedy else sample(y, gen)).tolist()  # greedy: argmax; else one sample per position
            for k, r in enumerate(act):
                nk, lk = nl[k], len(drafts[k])
                win[r] = nxt[k][nk + 1 : lk + 1]
                carried[r] = None if proc.greedy or nk >= lk else (k, nk + 1, lk - nk)
            prev = None if proc.greedy else y
            target.drop_finished()
        return run.finish()
