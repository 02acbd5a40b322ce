"""Plain autoregressive decoding: the baseline every other sampler is measured against.

Paper: none (the standard KV-cached decode loop). Guarantee: it *is* the reference, so it is
trivially ``distribution-exact`` (sampling) and defines greedy decoding at temperature 0.
Defaults: no parameters. One target forward per new token; batch rows finish independently.
"""

from __future__ import annotations

from .base import DecodeConfig, DecodeResult, Sampler, register_sampler
from .logits import sample, seen_mask
from .runtime import DecodeRun


@register_sampler("ar", family="baseline", guarantee="distribution-exact", needs=("model",), paper="-")
class AutoRegressive(Sampler):
    """KV-cached autoregressive decoding, greedy or sampled: one target forward per token."""

    defaults: dict = {}

    def generate(self, models, prompts, config: DecodeConfig, generator=None) -> DecodeResult:
        self.check_models(models)
        run = DecodeRun(self, models, prompts, config)
        rows, proc, target, stats, bar = run.rows, run.proc, run.target, run.stats, run.bar
        while target.active:
            logits = target.feed_pending()
            seen = seen_mask([rows.tokens[r] for r in target.active], logits.shape[-1]) if proc.uses_context else None
            if proc.greedy:
                tok = proc.argmax(logits, seen)
            else:
                tok = sample(proc.probs(logits, seen), generator)
            stats.accepted_per_step.append([rows.commit(r, [t]) for r, t in zip(target.active, tok.tolist())])
            bar.update(1)
            target.drop_finished()
        return run.finish()


