"""Jacobi decoding: solve for a block of future tokens by fixed-point iteration.

Papers: Santilli et al., "Accelerating Transformer Inference for Translation via Parallel
Decoding", ACL 2023; Kou et al., "CLLMs: Consistency Large Language Models", ICML 2024
(hao-ai-lab/Consistency_LLM, ``jacobi_forward``). Plain Jacobi works with any causal LM; CLLMs
are models fine-tuned so that it converges in few iterations.

Each row keeps a guess ``g_0..g_{n-1}`` for its next n tokens. One target forward over
``[pending token(s), g]`` (causal mask) yields the next iterate ``y``: ``y_0`` is the target's
token after the committed text (always correct) and ``y_{j+1}`` its argmax after ``g_j``. The
longest prefix with ``g_j == y_j`` is accepted plus one token (``verify.greedy_match``), so
every iteration commits at least one token and the result is the greedy AR output of the same
model. The cache keeps only the accepted prefix (``Runner.keep``); the rest of the new iterate,
``y`` after the committed tokens, is the next guess, padded back to n tokens (``init``).

Proposer: :class:`JacobiGuess` (the window, refreshed from the target's iterate); acceptance:
:class:`~leapgen.samplers.acceptance.ExactChain` (greedy match); loop: the chain loop. Random
fillers come from the caller's generator.

Guarantee: ``greedy-exact``. Temperature > 0 is rejected: use ``lookahead`` (Jacobi trajectory
plus exact multi-candidate sampling) or ``speculative`` for sampling.
Defaults: ``window=16`` (CLLM's ``n_token_seq_size``), ``init="prompt"`` (pad with tokens drawn
at random from the row's text, as the CLLM reference initialises its Jacobi block; ``"repeat"``
repeats the row's last token).
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .base import check_choice, check_int, register_sampler
from .loops.chain import ChainSampler
from .proposers.base import ChainProposal, Proposer, Verdict

INITS = ("prompt", "repeat")


def pad_tokens(text: list[int], k: int, init: str, generator: torch.Generator, vocab_size: int) -> list[int]:
    """``k`` filler guesses for a Jacobi window: random tokens of ``text`` or its last token;
    uniform over the vocabulary when ``text`` is empty (a prompt made only of condition slots).
    Guesses that are not output ids are cut by the loops' valid-id rule."""
    if k <= 0:
        return []
    dev = generator.device
    if not text:
        return torch.randint(vocab_size, (k,), generator=generator, device=dev).tolist()
    if init == "repeat":
        return [text[-1]] * k
    idx = torch.randint(len(text), (k,), generator=generator, device=dev)
    return [text[i] for i in idx.tolist()]


class JacobiGuess(Proposer):
    """Each row's guess for its next ``window`` tokens; after a step, the target's iterate beyond
    the committed tokens, padded back with :func:`pad_tokens`."""

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        rows = run.rows
        # a guess never needs more than the token budget (a window=10**9 would otherwise be drawn and stored)
        self.width = min(sampler.window, rows.config.max_new_tokens)
        self.guess = {r: pad_tokens(rows.tokens[r], self.width, sampler.init, generator, self.vocab_size)
                      for r in rows.active}

    def propose(self) -> ChainProposal:
        rows, w = self.run.rows, self.sampler.window
        # guesses past the token budget can never be committed
        self.drafts = [self.guess[r][: max(0, min(w, rows.remaining(r) - 1))] for r in self.run.target.active]
        return ChainProposal(tokens=self.drafts)

    def iterate(self, y, n):
        return y  # greedy: the target's argmax at every window position

    def update(self, verdict: Verdict) -> None:
        rows, sm = self.run.rows, self.sampler
        for k, r in enumerate(self.run.target.active):
            nk, lk = verdict.n[k], len(self.drafts[k])
            rest = verdict.iterate[k][nk + 1 : lk + 1]  # iterate beyond the committed tokens
            self.guess[r] = rest + pad_tokens(rows.tokens[r], self.width - len(rest), sm.init, self.generator,
                                              self.vocab_size)

    @classmethod
    def check(cls, sampler, models, config) -> None:
        if not config.greedy:
            raise ConfigError(
                "jacobi is greedy-only (its fixed point is the greedy output); for sampling use "
                "sampler='lookahead' (Jacobi trajectory + exact verification) or 'speculative'."
            )


@register_sampler(
    "jacobi",
    family="ar-parallel",
    guarantee="greedy-exact",
    needs=("model",),
    paper="Santilli et al. 2023; Kou et al. 2024 (CLLMs)",
)
class Jacobi(ChainSampler):
    """Jacobi fixed-point decoding of a window of future tokens; greedy-exact."""

    defaults = {"window": 16, "init": "prompt"}
    proposer = JacobiGuess

    def validate(self) -> None:
        check_int("window", self.window)
        check_choice("init", self.init, INITS)
