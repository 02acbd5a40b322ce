"""What the NAR samplers share: the two model contracts, the encoder step and the result.

Contracts (declared here with :func:`~leapgen.samplers.base.register_contract`):
``"paraformer"`` — a :class:`~leapgen.models.asr_lm.ParaformerLM` (``propose(state)``: CIF + one
non-causal decoder pass); ``"ctc"`` — a :class:`~leapgen.models.asr_lm.CTCLM`
(``frame_logprobs(state)``). Both encode ``EncoderInputs`` themselves or take an
:class:`~leapgen.models.condition.EncoderState` of the same network (the pipeline encodes once).

Statistics: a NAR decode is one target forward for the whole output, so ``accepted_per_step``
holds one entry per row (its length) and ``step_compression`` = longest output / 1.
``stats.extra`` has ``encoder_time`` and ``decoder_time`` (seconds); :class:`NARDecodeResult`
adds ``alignment`` (Paraformer: the CIF fire frame of every token).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ...models.asr_lm import CTCLM, ParaformerLM
from ...models.condition import EncoderInputs
from ..base import DecodeConfig, DecodeResult, Sampler, new_stats, register_contract

register_contract("paraformer", lambda m: isinstance(m, ParaformerLM))
register_contract("ctc", lambda m: isinstance(m, CTCLM))


@dataclass
class NARDecodeResult(DecodeResult):
    """:class:`DecodeResult` plus per-token alignment (CIF fire frames; empty for CTC)."""

    alignment: list[list[int]] = field(default_factory=list)


class NARSampler(Sampler):
    """Base of the NAR samplers: encode (or check) the condition, decode, fill the statistics."""

    contracts = ("paraformer",)

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None
               ) -> tuple[list[list[int]], list[list[int]]]:
        """``(token ids per row, alignment per row)``."""
        raise NotImplementedError

    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> NARDecodeResult:
        self.check_models(models)
        model = models["model"]
        stats = new_stats(self, len(prompts))
        t0 = time.perf_counter()
        state = model.state_of(cond, len(prompts))
        t1 = time.perf_counter()
        seqs, align = self.decode(model, state, config, generator)
        t2 = time.perf_counter()
        eos = set(config.eos_ids)
        out = []
        for s in seqs:
            s = s[: config.max_new_tokens]
            cut = next((i + 1 for i, t in enumerate(s) if t in eos), len(s))
            out.append(s[:cut])
        stats.target_forwards = 1
        stats.other_forwards = int(isinstance(cond, EncoderInputs))
        stats.accepted_per_step = [[len(s) for s in out]]
        stats.new_tokens = sum(len(s) for s in out)
        stats.baseline_steps = max((len(s) for s in out), default=0)
        stats.extra.update(encoder_time=t1 - t0, decoder_time=t2 - t1)
        stats.wall_time = time.perf_counter() - t0
        steps = [[0] * len(s) for s in out]
        return NARDecodeResult(sequences=out, stats=stats, token_steps=steps,
                               alignment=[a[: len(s)] for a, s in zip(align, out)])
