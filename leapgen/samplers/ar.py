"""Plain autoregressive decoding: the baseline every other sampler is measured against.

Paper: none (the standard KV-cached decode loop). Guarantee: it *is* the reference, so it is
trivially ``distribution-exact`` (sampling) and defines greedy decoding at temperature 0.
Defaults: no parameters. One target forward per new token; batch rows finish independently.
"""

from __future__ import annotations

from .base import DecodeConfig, DecodeResult, Sampler, register_sampler
from .runtime import DecodeRun


@register_sampler("ar", family="baseline", guarantee="distribution-exact", needs=("model",), paper="-")
class AutoRegressive(Sampler):
    """KV-cached autoregressive decoding, greedy or sampled: one target forward per token."""

    defaults: dict = {}

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        run = DecodeRun(self, models, prompts, config, cond=cond)
        while run.target.active:
            run.plain_step(generator)
            run.target.drop_finished()
        return run.finish()


