"""Cautious Next Token Prediction (CNTP): when the model is unsure, try several continuations and
keep the one it scores best.

Paper: Wang et al., "Cautious Next Token Prediction", Findings of ACL 2025 (arXiv 2507.03038);
reference code ``wyzjack/CNTP`` (``_sample_reflect_perplexity``).

After each step the entropy ``H`` of the target's distribution for the token just committed
decides the number of trials ``N = int(1 + (max_trials - 1) * clamp((H - entropy_low) /
(entropy_high - entropy_low), 0, 1))``. With ``N > 1`` the next step first samples ``N``
continuations from the target itself (a batch of ``N`` copies of the row's KV cache), each until
a stop token (punctuation, given as ``stop_ids``; see :func:`punctuation_ids`) or
``trial_tokens`` tokens, keeps the one with the lowest perplexity ``exp(-mean log p)`` and commits
it; the target's token follows. With ``N = 1`` the step is an ordinary sampled step.

Guarantee: ``lossy`` and intentionally distribution-changing (for quality). It costs more target
forwards than ``ar`` (every trial token is one, batched over the trials): a quality method with
a known cost, both reported by ``leapgen bench text-lossy``. At temperature 0 the trials would all
be the greedy continuation, so it is plain greedy ``ar``; ``max_trials=1`` is ``ar`` at any
temperature. Defaults (the reference code's): ``max_trials=10``, ``entropy_low=0.01``,
``entropy_high=1.5``; ``trial_tokens=8``, ``stop_ids=()``; ``max_trials`` is at most :data:`MAX_TRIALS`.

Statistics: the trial forwards are target forwards (``target_forwards`` counts them) that commit
nothing yet, so each one is a step of ``accepted_per_step`` with 0 for every row it ran (the
catch-up forward of the trials' cache: every active row; a trial forward: the one row whose ``N``
copies it advanced); the committed trial and the target's token count at the forward that commits
them. ``mean_accepted`` is then tokens per row per target forward as for every sampler (about 1,
never the trial's length), and equals ``step_compression`` at batch 1.
"""

from __future__ import annotations

import copy

import torch

from .acceptance import ExactChain
from .base import check_int, check_token_ids, register_sampler
from .loops.chain import ChainSampler
from .lossy_common import check_float
from .proposers.base import ChainProposal, Proposer, Verdict
from .runtime import Runner
from .verify import rejection_sample

#: the most trials of one step (the reference's default is 10): each trial is a copy of the row's KV cache
MAX_TRIALS = 256
#: the reference code's stop characters
PUNCTUATION = (".", ",", "\n", "?", "!", ":", ";", ")", "]", "}")


def punctuation_ids(tokenizer, vocab_size: int) -> tuple[int, ...]:
    """Token ids whose text ends with one of :data:`PUNCTUATION` (trailing spaces ignored)."""
    out = []
    for i in range(vocab_size):
        s = tokenizer.decode([i]).rstrip(" ")
        if s and s[-1] in PUNCTUATION:
            out.append(i)
    return tuple(out)


class CautiousTrials(Proposer):
    """Samples ``N`` trials from the target when the last distribution was uncertain; proposes the best."""

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.trials: dict[int, int] = {}
        self.ctx: Runner | None = None  # the proposer's own view of the target (its own cache)
        self.stop = set(int(i) for i in sampler.stop_ids)
        self.n_trials = self.triggered = 0

    def iterate(self, y: torch.Tensor, n: torch.Tensor):
        if self.run.proc.greedy or self.sampler.max_trials <= 1:
            return None
        p = y.gather(1, n[:, None, None].expand(-1, 1, y.shape[-1])).squeeze(1)
        ent = -(p * (p + 1e-10).log()).sum(-1)
        return (ent * 1e4).round().long()[:, None]

    def update(self, verdict: Verdict) -> None:
        if verdict.iterate is None:
            return
        s = self.sampler
        for r, it in zip(self.run.target.active, verdict.iterate):
            h = it[0] / 1e4
            frac = min(1.0, max(0.0, (h - s.entropy_low) / max(1e-9, s.entropy_high - s.entropy_low)))
            self.trials[r] = int(1 + (s.max_trials - 1) * frac)

    def propose(self) -> ChainProposal:
        run = self.run
        act = run.target.active
        want = {r: self.trials.pop(r, 1) for r in act}
        if all(n <= 1 or run.rows.remaining(r) <= 1 for r, n in want.items()):
            return ChainProposal(tokens=[[] for _ in act])
        if self.ctx is None:
            # the target's condition for its active rows (the cache holds it, rows that finished dropped): trials
            # are sampled from the same conditional distribution (text, class, an audio prompt's forced cells)
            self.ctx = Runner(run.target.lm, run.rows, run.config.pad_token_id, run.target.cache.cond)
        self.ctx.drop_finished()
        logits = self.ctx.feed_pending()  # catch the proposer's cache up: [B, V] after each row's last token
        self._no_commit(len(act))
        drafts = []
        for k, r in enumerate(act):
            n, room = want[r], run.rows.remaining(r) - 1
            drafts.append(self._best_trial(k, logits[k], n, min(room, self.sampler.trial_tokens)) if n > 1 and room > 0 else [])
        return ChainProposal(tokens=drafts)

    def _no_commit(self, rows: int) -> None:
        """Record a target forward of the trials (over ``rows`` rows) that committed nothing, so that
        ``accepted_per_step`` has one step per target forward as for every other sampler."""
        self.run.stats.accepted_per_step.append([0] * rows)

    def _best_trial(self, k: int, first: torch.Tensor, n: int, length: int) -> list[int]:
        lm, proc, gen = self.ctx.lm, self.run.proc, self.generator
        cache = copy.deepcopy(self.ctx.cache)
        cache.select_rows(torch.full((n,), k, dtype=torch.long, device=cache.device))
        toks = torch.zeros(n, length, dtype=torch.long, device=first.device)
        logp = torch.zeros(n, length, dtype=torch.float32, device=first.device)
        alive = torch.ones(n, dtype=torch.bool, device=first.device)
        lens = torch.zeros(n, dtype=torch.long, device=first.device)
        logits = first[None].expand(n, -1)
        stop = torch.tensor(sorted(self.stop), dtype=torch.long, device=first.device)
        for i in range(length):
            p = proc.probs(logits)
            x = torch.multinomial(p, 1, generator=gen).squeeze(1)
            toks[:, i] = x
            logp[:, i] = p.gather(1, x[:, None]).squeeze(1).clamp_min(1e-30).log()
            lens += alive.long()
            if stop.numel():
                alive &= ~torch.isin(x, stop)
            if i == length - 1 or not bool(alive.any()):
                break
            logits = lm(x[:, None], cache)[:, -1]
            self._no_commit(1)
        width = toks.shape[1]
        valid = torch.arange(width, device=toks.device)[None] < lens[:, None]
        mean = (logp * valid).sum(1) / lens.clamp_min(1)
        best = int(mean.argmax())
        self.n_trials += n
        self.triggered += 1
        return toks[best, : int(lens[best])].tolist()

    def finish(self) -> None:
        self.run.stats.extra["cntp_triggers"] = self.triggered
        self.run.stats.extra["cntp_trials"] = self.n_trials


class CommitTrial(ExactChain):
    """The chosen trial was sampled from the target itself: keep it whole; the target's token
    (argmax or a draw) follows."""

    def greedy(self, proc, chain, p_log, seen, dlen):
        y = proc.argmax(p_log, seen)
        return dlen, y.gather(1, dlen[:, None]).squeeze(1), y

    def sampled(self, chain, p, q, dlen, generator):
        if chain.shape[1] == 0:
            return rejection_sample(chain, p, q, generator, dlen)
        one = torch.ones(chain.shape, dtype=p.dtype, device=p.device)
        return rejection_sample(chain, p, q, generator, dlen, ratio=(one, one))


@register_sampler(
    "cntp",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model",),
    paper="Wang et al. 2025 (Cautious Next Token Prediction), arXiv 2507.03038",
    contracts=("causal",),
)
class CautiousNextToken(ChainSampler):
    """CNTP: entropy-triggered trials from the target, the lowest-perplexity one kept."""

    defaults = {"max_trials": 10, "entropy_low": 0.01, "entropy_high": 1.5, "trial_tokens": 8, "stop_ids": ()}
    limits = {"max_trials": (MAX_TRIALS, "each trial is a copy of the row's KV cache; 10**9 hung the decode or asked "
                                         "for terabytes")}
    proposer = CautiousTrials
    acceptance = CommitTrial
    reduces_to = ("ar", {"max_trials": 1})

    def validate(self) -> None:
        check_int("max_trials", self.max_trials)
        check_int("trial_tokens", self.trial_tokens)
        check_float("entropy_low", self.entropy_low, 0.0)
        check_float("entropy_high", self.entropy_high, 0.0)
        if self.entropy_high <= self.entropy_low:
            from ..errors import ConfigError

            raise ConfigError(f"entropy_high ({self.entropy_high}) must be larger than entropy_low ({self.entropy_low}).")
        self.stop_ids = check_token_ids("stop_ids", self.stop_ids, allow_none=False)
