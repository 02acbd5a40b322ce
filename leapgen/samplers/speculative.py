"""Speculative decoding with a draft model (a chain of drafts per step).

Paper: Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023; Chen et al., "Accelerating LLM Decoding with Speculative Sampling", 2023.

Each step the draft model proposes up to ``num_draft_tokens`` tokens autoregressively, the target
scores ``[last token, drafts]`` in one forward, and :mod:`leapgen.samplers.verify` accepts a
prefix: :func:`greedy_match` at temperature 0 (output identical to greedy ``ar``),
:func:`rejection_sample` above it (output distributed exactly as the target's processed
distribution). Both models see identical logits processing.

Guarantee: ``distribution-exact`` (and greedy-exact at temperature 0).
Defaults: ``num_draft_tokens=5``, ``schedule="constant"`` (or ``"heuristic"``: transformers'
+2/-1 rule; ``"confidence"``: stop a row's draft below ``confidence_threshold=0.4``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ModelMismatchError
from ..models.base import CausalLM
from .base import DecodeConfig, DecodeResult, Sampler, register_sampler
from .controllers import DraftLengthController
from .logits import LogitsProcessor, chain_seen, sample, seen_mask
from .runtime import DecodeRun, gather_positions
from .verify import greedy_match, rejection_sample


def check_same_vocab(target, draft) -> None:
    if target.vocab_size != draft.vocab_size:
        raise ModelMismatchError(
            f"the draft model's vocabulary ({draft.vocab_size} logits) differs from the target's "
            f"({target.vocab_size}); speculative decoding needs a draft trained with the same tokenizer."
        )


@register_sampler(
    "speculative",
    family="ar-speculative",
    guarantee="distribution-exact",
    needs=("model", "draft"),
    paper="Leviathan et al. 2023; Chen et al. 2023",
)
class Speculative(Sampler):
    """Draft-model speculative decoding (chain), greedy-exact at T=0, distribution-exact above."""

    defaults = {"num_draft_tokens": 5, "schedule": "constant", "confidence_threshold": 0.4}

    def validate(self) -> None:
        self.controller()  # raises on bad values

    def prepare(self, target: CausalLM) -> None:
        """Called once per ``generate`` with the target model (subclasses fetch what they need)."""

    def controller(self) -> DraftLengthController:
        return DraftLengthController(self.schedule, self.num_draft_tokens, self.confidence_threshold)

    def verify(
        self,
        proc: LogitsProcessor,
        drafts: Tensor,
        p_log: Tensor,
        seen: Tensor | None,
        q: Tensor | None,
        dlen: Tensor,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor]:
        """The acceptance step: ``(n_accepted [B], next_token [B])`` for ``drafts [B, g]`` (row b
        drafted ``dlen[b]``) from the target's raw logits ``p_log [B, g+1, V]`` and the draft
        distributions ``q [B, g, V]`` (None when greedy). Relaxed variants (``lantern``) override it."""
        if proc.greedy:
            return greedy_match(drafts, proc.argmax(p_log, seen), dlen)
        return rejection_sample(drafts, proc.probs(p_log, seen), q, generator, dlen)

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        check_same_vocab(models["model"], models["draft"])
        self.prepare(models["model"])
        run = DecodeRun(self, models, prompts, config, draft=True, cond=cond)
        rows, proc, target, draft, stats, bar = run.rows, run.proc, run.target, run.draft, run.stats, run.bar
        ctrl = self.controller()

        # prefill: the target's first token, as in ar
        run.plain_step(generator)
        target.drop_finished()
        draft.drop_finished()

        while target.active:
            b = len(target.active)
            act = target.active
            budget = [min(ctrl.budget(), rows.remaining(r) - 1) for r in act]
            g = max(budget)
            drafts = torch.zeros(b, g, dtype=torch.long)
            qs = [] if not proc.greedy else None
            dlen = torch.tensor(budget, dtype=torch.long)
            base_seen = seen_mask([rows.tokens[r] for r in act], target.lm.vocab_size) if proc.uses_context else None

            # ---- draft g tokens (rows whose budget is smaller ignore the extra ones)
            start_x = None
            for i in range(g):
                if i == 0:
                    dlog = draft.feed_pending()
                else:
                    if i == 1:
                        start_x = len(draft.cache)
                    # rows whose budget is spent draft junk past it; keep its positions in the window
                    dlog, _, _ = draft.forward(drafts[:, i - 1 : i].tolist(), clamp_positions=True)
                    dlog = dlog[:, 0]
                seen_i = None if base_seen is None else chain_seen(base_seen, drafts[:, :i])[:, -1]
                if proc.greedy:
                    x = proc.argmax(dlog, seen_i)
                    conf = dlog.softmax(-1).gather(-1, x[:, None]).squeeze(-1) if ctrl.threshold else None
                else:
                    q = proc.probs(dlog, seen_i)
                    x = sample(q, generator)
                    qs.append(q)
                    conf = q.gather(-1, x[:, None]).squeeze(-1) if ctrl.threshold else None
                drafts[:, i] = x
                if conf is not None:
                    stop = (conf < ctrl.threshold) & (dlen > i + 1)
                    dlen = torch.where(stop, torch.full_like(dlen, i + 1), dlen)
                    if bool((dlen <= i + 1).all()):
                        g = i + 1
                        drafts = drafts[:, :g]
                        break
            stats.drafted_tokens += int(dlen.sum())

            # ---- one target forward over [pending, drafts]
            pend = [target.pending(k) for k in range(b)]
            seqs = [pend[k] + drafts[k, : int(dlen[k])].tolist() for k in range(b)]
            tlog, start_t, _ = target.forward(seqs)
            offs = torch.tensor([len(p) - 1 for p in pend])
            p_log = gather_positions(tlog, offs, g + 1)
            seen_t = None if base_seen is None else chain_seen(base_seen, drafts)
            q = torch.stack(qs, 1)[:, :g] if qs else None
            n, nxt = self.verify(proc, drafts, p_log, seen_t, q, dlen, generator)

            # ---- commit and roll caches back to what was accepted
            committed = []
            for k, r in enumerate(act):
                nk = int(n[k])
                committed.append(rows.commit(r, drafts[k, :nk].tolist() + [int(nxt[k])]))
            stats.accepted_per_step.append(committed)
            stats.accepted_draft_tokens += int(n.sum())
            target.keep(start_t, torch.tensor([len(p) for p in pend]) + n)
            if start_x is not None:
                draft.keep(start_x, n.clamp_max(g - 1))  # drafts x_1..x_{g-1} were fed
            ctrl.observe(bool((n >= dlen).all()))
            run.step_done(max(committed))
            target.drop_finished()
            draft.drop_finished()
        return run.finish()
