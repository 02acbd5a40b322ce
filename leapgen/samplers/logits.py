"""Logits processing applied identically to draft and target distributions.

Exactness of speculative sampling depends on p and q being the *processed* distributions that
are actually sampled from (vLLM ``compute_probs``, transformers' logits processors), so every
sampler goes through :class:`LogitsProcessor` for both models.

Order: repetition penalty, then frequency and presence penalties (vLLM's order; they read the
generated-token counts of the coded context, :mod:`.penalties`), temperature, top-k, top-p (as
transformers), then min-p (as vLLM, which applies min-p after top-k / top-p): min-p keeps the
tokens whose probability, after the earlier steps, is at least ``min_p`` times the top token's.
Greedy decoding (temperature 0) applies the penalties only; the filters never change an argmax.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import kernels
from ..models.guidance import cfg_logits, guidance_mix  # noqa: F401  (re-exported: the maths lives on the models layer)
from .base import DecodeConfig
from .penalties import coded_chain, coded_context, coded_tree


class LogitsProcessor:
    """Turns raw logits ``[..., V]`` into processed logits, probabilities or greedy tokens."""

    def __init__(self, config: DecodeConfig) -> None:
        self.temperature = config.temperature
        self.top_k = config.top_k
        self.top_p = config.top_p
        self.repetition_penalty = config.repetition_penalty
        self.min_p = config.min_p
        self.presence_penalty = config.presence_penalty
        self.frequency_penalty = config.frequency_penalty

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_context(self) -> bool:
        """Whether processing depends on previous tokens (then callers pass ``seen``)."""
        return self.repetition_penalty != 1.0 or self.counts_tokens

    @property
    def counts_tokens(self) -> bool:
        """Whether the presence / frequency penalties are on: ``seen`` must then be the coded
        context with the generated counts (:func:`context` builds the right one)."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def penalize(self, logits: Tensor, seen: Tensor | None) -> Tensor:
        """CTRL repetition penalty (divide positive / multiply negative logits of seen tokens), then
        the frequency and presence penalties.

        ``seen``: ``[..., V]`` (broadcastable to logits), each position's context (prompt, generated
        text and the draft tokens before it): the bool mask, or the coded context of :mod:`.penalties`.
        """
        return kernels.reference.penalize(
            logits, seen, self.repetition_penalty, self.presence_penalty, self.frequency_penalty
        )

    def process(self, logits: Tensor, seen: Tensor | None = None) -> Tensor:
        """Processed logits (temperature-scaled and filtered with -inf); greedy: penalty only.
        The maths is :func:`leapgen.kernels.process_logits`, the reference of the fused kernel."""
        return kernels.process_logits(
            logits, self.temperature, self.top_k, self.top_p, seen, self.repetition_penalty, self.min_p,
            self.presence_penalty, self.frequency_penalty,
        )  # fmt: skip

    def probs(self, logits: Tensor, seen: Tensor | None = None) -> Tensor:
        """The distribution sampled from; one-hot on the argmax when greedy."""
        processed = self.process(logits, seen)
        if self.greedy:
            return torch.nn.functional.one_hot(processed.argmax(-1), processed.shape[-1]).to(processed.dtype)
        return processed.softmax(-1)

    def argmax(self, logits: Tensor, seen: Tensor | None = None) -> Tensor:
        return self.penalize(logits, seen).argmax(-1)

    def sample(self, logits: Tensor, seen: Tensor | None, generator: torch.Generator | None) -> Tensor:
        """The next token of every row of raw ``logits [..., V]``: :meth:`argmax` when greedy, else
        a draw from :meth:`probs`, in one fused kernel (:func:`leapgen.kernels.sample_logits`, Triton
        on CUDA). Same tokens and the same generator draws as ``sample(self.probs(logits, seen),
        generator)``."""
        return kernels.sample_logits(
            logits,
            self.temperature,
            self.top_k or 0,
            self.top_p,
            generator=generator,
            seen=seen,
            repetition_penalty=self.repetition_penalty,
            min_p=self.min_p,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
        )


def sample(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """One sample per row of ``probs [..., V]`` (shape ``[...]``)."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])


def seen_mask(rows: list[list[int]], vocab_size: int, device: torch.device | str = "cpu") -> Tensor:
    """``[B, V]`` bool: which tokens each row's context contains (for the repetition penalty)."""
    seen = torch.zeros(len(rows), vocab_size, dtype=torch.bool, device=device)
    for i, toks in enumerate(rows):
        if toks:
            seen[i, torch.tensor(toks, device=device)] = True
    return seen


def context(proc: LogitsProcessor, rows: Any, active: list[int], vocab_size: int,
            device: torch.device | str) -> Tensor | None:  # fmt: skip
    """The context ``seen [B, V]`` of the ``active`` rows of ``rows`` (a :class:`~.rows.Rows`) that
    ``proc`` needs: None when processing ignores context, the bool mask for the repetition penalty
    alone, the coded context (generated counts) when a presence / frequency penalty is on."""
    if not proc.uses_context:
        return None
    toks = [rows.tokens[r] for r in active]
    if proc.counts_tokens:
        return coded_context(toks, [rows.prompt_len[r] for r in active], vocab_size, device)
    return seen_mask(toks, vocab_size, device)


def chain_seen(base: Tensor, chain: Tensor) -> Tensor:
    """Context masks for each position of a chain: ``[B, n+1, V]`` from ``base [B, V]`` and
    the chain tokens ``[B, n]`` (position i sees base plus chain[:i]; a coded context counts them)."""
    if base.dtype != torch.bool:
        return coded_chain(base, chain)
    b, n = chain.shape
    onehot = torch.zeros(b, n + 1, base.shape[-1], dtype=torch.bool, device=base.device)
    if n:
        onehot[:, 1:].scatter_(-1, chain[:, :, None], True)
    return base[:, None, :] | (onehot.cumsum(1) > 0)


def tree_seen(base: Tensor, tokens: Tensor, anc: Tensor) -> Tensor:
    """Context masks for every node of a batch of draft trees: ``[B, N, V]`` from ``base [B, V]``
    (the committed context, root included), the node tokens ``[B, N]`` and the ancestor mask
    ``[B, N, N]`` (node i's context adds the tokens of its ancestors-or-self except the root; a coded
    context counts them)."""
    if base.dtype != torch.bool:
        return coded_tree(base, tokens, anc)
    b, n = tokens.shape
    if n <= 1:
        return base[:, None, :].expand(b, n, base.shape[-1]).clone()
    onehot = torch.zeros(b, n - 1, base.shape[-1], device=base.device)
    onehot.scatter_(-1, tokens[:, 1:, None].to(base.device), 1.0)
    on_path = torch.bmm(anc[:, :, 1:].float().to(base.device), onehot) > 0
    return base[:, None, :] | on_path
