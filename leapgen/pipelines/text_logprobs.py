"""Log-probabilities of the generated tokens for :class:`~leapgen.pipelines.text.TextPipeline`
(vLLM's ``logprobs=k``).

``pipe(prompt, logprobs=k)`` fills ``TextOutput.logprobs[i]`` (one float per token of
``token_ids[i]``: its log-probability) and ``TextOutput.top_logprobs[i]`` (per token, the ``k``
most likely tokens at that position as ``{token_id: logprob}``, most likely first; empty for
``k = 0``). Values are under the model's **raw** distribution: ``log_softmax`` of the target's
logits before repetition penalty, temperature and filters (vLLM's default ``raw_logprobs``).

They are computed once, after decoding, by ONE teacher-forced forward of the causal target (its
transformers module) over every row's prompt + generated tokens (right-padded: a causal model's
real positions are unchanged by padding after them; a model that takes ``position_ids`` gets the
prompts left-padded to one end column instead, with each row's own positions, so that the generated
tokens of every row sit in the same last columns whatever the mix of prompt lengths), keeping only
the logits of the positions that predict generated tokens when the model takes ``logits_to_keep``. The decode loop is not involved, so every
sampler gets the same numbers for the same tokens, however it drafted or verified them.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import ConfigError

#: the most alternatives one call may ask for per token (vLLM's default ``max_logprobs``)
MAX_LOGPROBS = 20


def check_logprobs(value: Any) -> int | None:
    """``logprobs``: None (off) or an integer in [0, MAX_LOGPROBS]; ConfigError naming the range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_LOGPROBS:
        raise ConfigError(
            f"logprobs must be None (off) or an integer in [0, {MAX_LOGPROBS}] (the number of most likely "
            f"alternatives returned per token, vLLM's logprobs), got {value!r}."
        )
    return int(value)


def accepts_keyword(model: Any, name: str) -> bool:
    """Whether ``model.forward`` takes the keyword ``name`` (transformers' ``logits_to_keep``: the last n
    positions' logits only; ``position_ids``)."""
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


@torch.inference_mode()
def token_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], k: int, pad_id: int = 0
) -> tuple[list[list[float]], list[list[dict[int, float]]]]:
    """``(logprobs, top_logprobs)`` of ``outputs[i]`` after ``prompts[i]`` under the raw distribution
    of ``model`` (a transformers causal LM), from one batched teacher-forced forward.

    ``logprobs[i][t]``: log p(outputs[i][t] | prompts[i] + outputs[i][:t]); ``top_logprobs[i][t]``: the
    ``k`` most likely tokens at that position, ``{id: logprob}`` in descending order."""
    rows = [(list(p), list(o)) for p, o in zip(prompts, outputs)]
    if not rows or all(not o for _, o in rows):
        return [[] for _ in rows], [[] for _ in rows]
    device = next(model.parameters()).device
    n = max(len(o) for _, o in rows)
    # a model that takes position ids gets the prompts left-padded to one end column (explicit ids keep
    # every row's positions 0..len-1), so every row's generated tokens are predicted in the same last
    # n + 1 columns whatever the mix of prompt lengths; otherwise right-padded (a causal model's real
    # positions are unchanged by padding after them)
    left = accepts_keyword(model, "position_ids")
    plen = max(len(p) for p, _ in rows)
    width = plen + n if left else max(len(p) + len(o) for p, o in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    positions = torch.zeros(len(rows), width, dtype=torch.long)
    begins = []  # column of each row's first generated token
    for i, (p, o) in enumerate(rows):
        a = plen - len(p) if left else 0
        b = a + len(p) + len(o)
        ids[i, a:b] = torch.tensor(p + o, dtype=torch.long)
        mask[i, a:b] = 1
        positions[i, a:b] = torch.arange(b - a)
        begins.append(a + len(p))
    extra: dict[str, Any] = {"position_ids": positions.to(device)} if left else {}
    # only the positions that predict generated tokens need logits: [B, T, V] over a long prompt and a
    # large vocabulary is gigabytes (vLLM computes none over the prompt either)
    keep = width - min(begins) + 1
    if accepts_keyword(model, "logits_to_keep"):
        extra["logits_to_keep"] = keep
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), **extra).logits  # [B, <=T, V]
    offset = width - logits.shape[1]  # position of logits[:, 0]
    # the logits that predict generated token t of row i sit at column begins[i] - 1 + t
    start = torch.tensor([b - 1 - offset for b in begins], device=logits.device)
    pos = (start[:, None] + torch.arange(n, device=logits.device)[None]).clamp_max(logits.shape[1] - 1)
    picked = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1])).float().log_softmax(-1)
    chosen = torch.tensor([o + [0] * (n - len(o)) for _, o in rows], dtype=torch.long, device=logits.device)
    lp = picked.gather(-1, chosen[..., None]).squeeze(-1)
    k = min(k, picked.shape[-1])  # a vocabulary smaller than k has only that many alternatives
    top = picked.topk(k, dim=-1) if k else None
    # one transfer: the chosen tokens' values, then the top-k values and ids
    parts = [lp] + ([top.values, top.indices.to(lp.dtype)] if top is not None else [])
    flat = torch.cat([x.reshape(len(rows), n, -1) for x in parts], -1).tolist()
    logprobs, tops = [], []
    for (_, o), row in zip(rows, flat):
        logprobs.append([row[t][0] for t in range(len(o))])
        tops.append([{int(i): v for v, i in zip(row[t][1 : 1 + k], row[t][1 + k :])} for t in range(len(o))])
    return logprobs, tops


def refuse_logprobs(value: Any, pipeline: str) -> None:
    """A pipeline whose model is not causal (a diffusion LM) cannot teacher-force its output: refuse."""
    if value is not None:
        raise ConfigError(
            f"logprobs: {pipeline} decodes with a masked diffusion LM, which gives no left-to-right "
            "log-probability of its output; leave logprobs=None (a causal-LM text pipeline returns them)."
        )


__all__ = ["MAX_LOGPROBS", "check_logprobs", "refuse_logprobs", "token_logprobs"]
