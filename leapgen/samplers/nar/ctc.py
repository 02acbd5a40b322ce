"""CTC decoding of an encoder's frame posteriors: greedy (best path) and prefix beam search.

Paper: Graves et al., "Connectionist Temporal Classification", ICML 2006; prefix beam search as
in Hannun et al., "First-Pass Large Vocabulary Continuous Speech Recognition using Bi-Directional
Recurrent DNNs", 2014 (no language model here).

* ``ctc_greedy``: argmax per frame (a draw per frame at ``temperature > 0``), merge repeats, drop
  blanks (id 0). One encoder pass plus a linear layer.
* ``ctc_prefix_beam``: keeps the ``beam_size`` (default 4) most probable label prefixes, summing
  the blank- and non-blank-ending path probabilities of each prefix; ``prune`` (default 8) limits
  the labels tried per frame to the most probable ones. Deterministic (a temperature or filter is refused).
  ``beam_size`` is at most :data:`MAX_BEAM` (ESPnet / WeNet decode with 10 to 100).

Guarantee: ``lossy`` (these are their own decoders, not stand-ins for an AR model).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...models.asr_lm import ctc_collapse
from ..base import DecodeConfig, check_int, register_sampler
from ..logits import LogitsProcessor, sample
from .common import NARSampler

#: the widest prefix beam: each frame ranks up to ``beam_size * prune`` prefixes in Python
MAX_BEAM = 1024


@register_sampler("ctc_greedy", family="nar", guarantee="lossy", needs=("model",), paper="Graves et al. 2006",
                  contracts=("ctc",))
class CTCGreedy(NARSampler):
    """CTC best path: argmax per frame, merge repeats, drop blanks."""

    defaults: dict = {}

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        logp, lengths = model.frame_logprobs(state)
        if config.greedy:
            best = logp.argmax(-1)
        else:
            b, t, v = logp.shape
            best = sample(LogitsProcessor(config).probs(logp.reshape(b * t, v)), generator).view(b, t)
        seqs, align = [], []
        for r in range(best.shape[0]):
            path = best[r, : int(lengths[r])].tolist()
            seqs.append(ctc_collapse(path))
            align.append(_spikes(path))
        return seqs, align


def _spikes(path: list[int]) -> list[int]:
    """Frame of every emitted label (first frame of each non-blank run)."""
    out, prev = [], None
    for i, t in enumerate(path):
        if t != prev and t != 0:
            out.append(i)
        prev = t
    return out


def _logadd(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


def prefix_beam(logp: torch.Tensor, beam_size: int, prune: int) -> list[int]:
    """CTC prefix beam search over ``logp [T, V]`` (blank = 0); returns the best label sequence."""
    ninf = -math.inf
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, ninf)}  # prefix -> (p_blank, p_nonblank)
    top_v, top_i = logp.topk(min(prune, logp.shape[1]), -1)
    lp_all, top_v, top_i = logp.tolist(), top_v.tolist(), top_i.tolist()
    for t in range(logp.shape[0]):
        nxt: dict[tuple[int, ...], list[float]] = {}
        blank = lp_all[t][0]
        for prefix, (pb, pnb) in beams.items():
            total = _logadd(pb, pnb)
            e = nxt.setdefault(prefix, [ninf, ninf])
            e[0] = _logadd(e[0], total + blank)
            last = prefix[-1] if prefix else None
            for lp, c in zip(top_v[t], top_i[t]):
                if c == 0:
                    continue
                new = prefix + (c,)
                en = nxt.setdefault(new, [ninf, ninf])
                if c == last:
                    en[1] = _logadd(en[1], pb + lp)  # a repeat needs a blank in between
                    e[1] = _logadd(e[1], pnb + lp)  # or it extends the same label
                else:
                    en[1] = _logadd(en[1], total + lp)
        ranked = sorted(nxt.items(), key=lambda kv: _logadd(*kv[1]), reverse=True)[:beam_size]
        beams = {k: (v[0], v[1]) for k, v in ranked}
    return list(max(beams.items(), key=lambda kv: _logadd(*kv[1]))[0])


@register_sampler("ctc_prefix_beam", family="nar", guarantee="lossy", needs=("model",), paper="Hannun et al. 2014",
                  contracts=("ctc",))
class CTCPrefixBeam(NARSampler):
    """CTC prefix beam search (no LM): beam_size prefixes, prune labels per frame."""

    defaults = {"beam_size": 4, "prune": 8}
    ignores = dict.fromkeys(("temperature", "top_k", "top_p", "min_p"), "CTC prefix beam search is deterministic "
                            "and never samples; use ctc_greedy with temperature (and the filter) for sampling")
    limits = {"beam_size": (MAX_BEAM, "each frame ranks beam_size x prune prefixes in Python, and the beam fills up "
                                      "exponentially in the frames: 10**9 hung the decode")}

    def validate(self) -> None:
        check_int("beam_size", self.beam_size)
        check_int("prune", self.prune)

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        logp, lengths = model.frame_logprobs(state)
        logp = logp.float().cpu()
        seqs = [prefix_beam(logp[r, : int(lengths[r])], self.beam_size, self.prune) for r in range(logp.shape[0])]
        return seqs, [[] for _ in seqs]
