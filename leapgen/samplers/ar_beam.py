"""Beam search over an encoder-decoder model's KV-cached decoder (the attention-AR baseline's beam).

Paper: standard beam search for sequence-to-sequence models (e.g. Sutskever et al. 2014; as in
FunASR / ESPnet attention decoding). Guarantee: ``lossy`` (it maximises a length-normalised
sequence score, which is not greedy decoding's output).

Defaults: ``beam_size=4``, ``length_penalty=1.0`` (final score = log-prob / length ** penalty).
Every step scores all ``B * beam_size`` beams in one batched forward; beams are reordered with the
cache's ``select_rows`` (its cross-attention state and condition follow). A beam that emits EOS is
finished and kept with its score; decoding stops when every beam of every row is finished or at
``max_new_tokens``. Deterministic: a temperature or filter is refused (``Sampler.ignores``). Prompts must share one
length (decoder start ids).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ..errors import ConfigError
from .base import DecodeConfig, DecodeResult, Sampler, check_int, new_stats, register_sampler


@register_sampler("ar_beam", family="baseline", guarantee="lossy", needs=("model",), paper="beam search (Sutskever et al. 2014)",
                  contracts=("encoder-decoder",))
class ARBeam(Sampler):
    """Beam search with a KV cache: beam_size beams per row, length-normalised final score."""

    defaults = {"beam_size": 4, "length_penalty": 1.0}
    ignores = {
        "temperature": "beam search is deterministic; use ar with temperature for sampling",
        **dict.fromkeys(("top_k", "top_p", "min_p"), "beam search keeps the most likely beams of the whole distribution "
                        "and never samples, so there is nothing to filter; use ar with temperature and the filter"),
    }
    contracts = ("encoder-decoder",)

    def validate(self) -> None:
        check_int("beam_size", self.beam_size)
        lp = self.length_penalty
        if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp < 0:
            raise ConfigError(f"length_penalty must be a finite number >= 0 (1.0 divides a beam's score by its length), got {lp!r}.")

    @torch.inference_mode()
    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> DecodeResult:
        self.check_models(models)
        model = models["model"]
        t0 = time.perf_counter()
        b, k = len(prompts), int(self.beam_size)
        if len({len(p) for p in prompts}) != 1 or not prompts[0]:
            raise ConfigError("ar_beam needs non-empty prompts of one length (the decoder start ids)")
        stats = new_stats(self, b)
        start = model.forwards
        dev = model.device
        eos = torch.tensor(config.eos_ids or (-1,), device=dev)
        cache = model.new_cache(b, cond)
        logp = model(torch.tensor(prompts, device=dev), cache)[:, -1].log_softmax(-1)  # [B, V]
        v = logp.shape[-1]
        kk = min(k, v)
        scores, tok = logp.topk(kk, -1)  # [B, kk]
        cache.select_rows(torch.arange(b, device=dev).repeat_interleave(kk))
        seqs = tok.reshape(b * kk, 1)
        done = torch.isin(seqs[:, 0], eos)
        lengths = torch.ones(b * kk, device=dev)
        scores = scores.reshape(b * kk)
        for _ in range(config.max_new_tokens - 1):
            if bool(done.all()):
                break
            step = model(seqs[:, -1:], cache)[:, -1].log_softmax(-1)  # [B*kk, V]
            frozen = torch.full_like(step, float("-inf"))
            frozen[:, 0] = 0.0  # a finished beam continues once, with its score unchanged (a pad token)
            step = torch.where(done[:, None], frozen, step)
            cand = (scores[:, None] + step).view(b, kk * v)
            top, idx = cand.topk(kk, -1)
            parent = (idx // v + torch.arange(b, device=dev)[:, None] * kk).reshape(-1)
            new_tok = (idx % v).reshape(-1)
            cache.select_rows(parent)
            was_done = done[parent]
            seqs = torch.cat([seqs[parent], new_tok[:, None]], 1)
            lengths = lengths[parent] + (~was_done).float()
            done = was_done | torch.isin(new_tok, eos)
            scores = top.reshape(-1)
        final = (scores / lengths.pow(float(self.length_penalty))).view(b, kk)
        best = final.argmax(-1) + torch.arange(b, device=dev) * kk
        out = []
        for r in best.tolist():
            n = int(lengths[r])
            out.append(seqs[r, :n].tolist())
        stats.target_forwards = model.forwards - start
        longest = max((len(s) for s in out), default=0)
        # one step per target forward, as for every autoregressive sampler: each row's beams run in
        # every forward until all are done; a row commits its i-th token at forward i, and nothing
        # at the forwards that only advanced beams it did not keep
        stats.accepted_per_step = [[int(len(s) > i) for s in out] for i in range(stats.target_forwards)]
        stats.new_tokens = sum(len(s) for s in out)
        stats.baseline_steps = longest
        stats.extra["beam_size"] = kk
        stats.wall_time = time.perf_counter() - t0
        return DecodeResult(sequences=out, stats=stats, token_steps=[list(range(len(s))) for s in out])
