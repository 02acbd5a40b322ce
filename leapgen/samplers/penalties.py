"""OpenAI / vLLM presence and frequency penalties: the settings' checks and the *coded context* that
carries the generated-token counts.

vLLM's maths, applied after the repetition penalty and before temperature (greedy decoding too)::

    logits -= frequency_penalty * count + presence_penalty * (count > 0)

``count`` is how often the token occurs in the row's *generated* tokens (the prompt does not
count), drafted tokens included position by position: a token drafted at position i counts for
every position after it, along a chain (:func:`~leapgen.samplers.logits.chain_seen`) or down a
tree (:func:`~leapgen.samplers.logits.tree_seen`).

The context tensor a sampler hands to :class:`~leapgen.samplers.logits.LogitsProcessor` stays the
bool ``seen`` mask while only the repetition penalty needs context (no extra work, nothing changes
for it). With a presence or frequency penalty on it is the coded context instead: int32
``2 * count + in_prompt`` (``in_prompt`` 1 when the prompt holds the token), so ``!= 0`` is the
repetition penalty's mask (prompt or generated) and ``>> 1`` the generated counts. One tensor, so
every sampler that slices, gathers and passes ``seen`` along carries the counts unchanged; the
kernels (:func:`leapgen.kernels.reference.penalize`, the fused Triton sampler) read both.

Samplers whose decode does not pass that context to every processed distribution (masked,
non-autoregressive, DAG, scale-wise, continuous, beam search, superposed ...) refuse these
penalties, and a repetition penalty other than 1, by name (:mod:`.refusals`, from
``Sampler.check_config``); the loop samplers (:class:`~leapgen.samplers.loops.common.LoopSampler`)
take them, keeping their guarantee.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError

#: the DecodeConfig fields, in [-2, 2] (OpenAI's and vLLM's range); 0 disables each
PENALTIES = ("presence_penalty", "frequency_penalty")


def check_penalty_values(config: Any) -> None:
    """ConfigError unless ``presence_penalty`` and ``frequency_penalty`` are numbers in [-2, 2]."""
    for name in PENALTIES:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
        if not (math.isfinite(value) and -2.0 <= value <= 2.0):
            raise ConfigError(
                f"{name} must be a number in [-2, 2] (0 disables it; OpenAI / vLLM's range, e.g. 0.5 discourages "
                f"repeating generated tokens), got {value!r}."
            )
        setattr(config, name, float(value))


def penalties_on(config: Any) -> bool:
    return any(getattr(config, name) != 0.0 for name in PENALTIES)


def coded_context(rows: list[list[int]], prompt_lens: list[int], vocab_size: int,
                  device: torch.device | str = "cpu") -> Tensor:  # fmt: skip
    """``[B, V]`` int32 ``2 * count + in_prompt`` of each row's tokens (``rows[i][:prompt_lens[i]]``
    the prompt, the rest generated); built from host ids on ``device`` (no sync)."""
    out = torch.zeros(len(rows), vocab_size, dtype=torch.int32, device=device)
    for i, (toks, n) in enumerate(zip(rows, prompt_lens)):
        if n:
            out[i, torch.tensor(toks[:n], device=device)] = 1
        if len(toks) > n:
            gen = torch.tensor(toks[n:], device=device)
            out[i].index_add_(0, gen, torch.full(gen.shape, 2, dtype=torch.int32, device=device))
    return out


def coded_chain(base: Tensor, chain: Tensor) -> Tensor:
    """:func:`~leapgen.samplers.logits.chain_seen` for a coded context: ``[B, n+1, V]``, position i
    counts base's tokens plus ``chain[:, :i]`` as generated."""
    b, n = chain.shape
    add = torch.zeros(b, n + 1, base.shape[-1], dtype=torch.int32, device=base.device)
    if n:
        add[:, 1:].scatter_add_(-1, chain[:, :, None], torch.full((b, n, 1), 2, dtype=torch.int32, device=base.device))
    return base[:, None, :] + add.cumsum(1, dtype=torch.int32)


def coded_tree(base: Tensor, tokens: Tensor, anc: Tensor) -> Tensor:
    """:func:`~leapgen.samplers.logits.tree_seen` for a coded context: node i counts base's tokens plus
    those of its ancestors-or-self except the root as generated."""
    b, n = tokens.shape
    if n <= 1:
        return base[:, None, :].expand(b, n, base.shape[-1]).clone()
    onehot = torch.zeros(b, n - 1, base.shape[-1], device=base.device)
    onehot.scatter_(-1, tokens[:, 1:, None].to(base.device), 1.0)
    on_path = torch.bmm(anc[:, :, 1:].float().to(base.device), onehot)  # exact small integers
    return base[:, None, :] + 2 * on_path.round().to(torch.int32)


__all__ = ["PENALTIES", "check_penalty_values", "coded_chain", "coded_context", "coded_tree", "penalties_on"]
