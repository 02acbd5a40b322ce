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

Guarantee: ``greedy-exact``. Temperature > 0 is rejected: use ``lookahead`` (Jacobi trajectory
plus exact multi-candidate sampling) or ``speculative`` for sampling.
Defaults: ``window=16`` (CLLM's ``n_token_seq_size``), ``init="prompt"`` (pad with tokens drawn
at random from the row's text, as the CLLM reference initialises its Jacobi block; ``"repeat"``
repeats the row's last token).
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .base import DecodeConfig, DecodeResult, Sampler, register_sampler
from .runtime import DecodeRun

INITS = ("prompt", "repeat")


def pad_tokens(
    text: list[int], k: int, init: str, generator: torch.Generator, vocab_size: int | None = None
) -> list[int]:
    """``k`` filler guesses for a Jacobi window: random tokens of ``text`` or its last token.

    Ids ``>= vocab_size`` (condition prefixes, e.g. an image model's class and text tokens) can
    never be generated, so they are never guessed; when ``text`` has no other token the guesses
    are uniform over the vocabulary."""
    if k <= 0:
        return []
    if vocab_size is not None and any(t >= vocab_size for t in text):
        text = [t for t in text if t < vocab_size]
        if not text:
            return torch.randint(vocab_size, (k,), generator=generator).tolist()
    if init == "repeat":
        return [text[-1]] * k
    idx = torch.randint(len(text), (k,), generator=generator)
    return [text[i] for i in idx.tolist()]


@register_sampler(
    "jacobi",
    family="ar-parallel",
    guarantee="greedy-exact",
    needs=("model",),
    paper="Santilli et al. 2023; Kou et al. 2024 (CLLMs)",
)
class Jacobi(Sampler):
    """Jacobi fixed-point decoding of a window of future tokens; greedy-exact."""

    defaults = {"window": 16, "init": "prompt"}

    def validate(self) -> None:
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ConfigError(f"window must be an integer >= 1, got {self.window!r}.")
        if self.init not in INITS:
            raise ConfigError(f"init must be one of {INITS}, got {self.init!r}.")

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        if not config.greedy:
            raise ConfigError(
                "jacobi is greedy-only (its fixed point is the greedy output); for sampling use "
                "sampler='lookahead' (Jacobi trajectory + exact verification) or 'speculative'."
            )
        run = DecodeRun(self, models, prompts, config, cond=cond)
        rows, target = run.rows, run.target
        gen = torch.Generator().manual_seed(0 if config.seed is None else int(config.seed))
        v = target.lm.vocab_size
        guess = {r: pad_tokens(rows.tokens[r], self.window, self.init, gen, v) for r in rows.active}

        while target.active:
            act = target.active
            # guesses past the token budget can never be committed
            dr = [guess[r][: max(0, min(self.window, rows.remaining(r) - 1))] for r in act]
            n, y = run.chain_step(dr, generator)
            for k, r in enumerate(act):
                nk, lk = int(n[k]), len(dr[k])
                rest = y[k, nk + 1 : lk + 1].tolist()  # iterate beyond the committed tokens
                guess[r] = rest + pad_tokens(rows.tokens[r], self.window - len(rest), self.init, gen, v)
            target.drop_finished()
        return run.finish()
