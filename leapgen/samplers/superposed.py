"""Superposed decoding: ``k`` drafts advanced by one forward through superposed input embeddings.

Paper: Shen et al., "Superposed Decoding: Multiple Generations from a Single Autoregressive
Inference Pass", NeurIPS 2024 (arXiv 2405.18400); code ``RAIVNLab/SuperposedDecoding``.

Each row keeps ``k`` drafts ``d_1..d_k`` with weights ``gamma_i`` proportional to their
probabilities. A step feeds ONE input embedding ``sum_i gamma_i * E[last token of d_i]`` (one
sequence, one KV cache), takes the ``k`` most likely tokens of the resulting distribution ``p``,
scores the ``k^2`` extensions ``d_i + t_j`` by ``log P(d_i) + log((1 - w) p(t_j) + w P_ng(t_j | last
token of d_i))`` (the corpus bigram table of ``<pipeline>/heads/ngram.safetensors``, weight
``ngram_weight``) and keeps the best ``k``. So ``k`` completions cost about one autoregressive
completion's forwards.

Output: ``sequences`` holds each row's best completion (at T > 0: one drawn by ``gamma`` with the
caller's generator); ``stats.extra["completions"]`` holds all ``k`` per row, best first.
Guarantee: ``lossy`` (no verification). ``k=1`` is greedy ``ar`` at T=0. Runs on the
``text-heads`` contract (the lean target fed embeddings directly, with its n-gram table).
Defaults: ``k=3``, ``ngram_weight=0.3``.
"""

from __future__ import annotations

import time

import torch

from ..errors import ConfigError
from .base import DecodeResult, Sampler, check_int, make_generator, new_stats, register_sampler
from .lossy_common import check_float, headed
from .rows import Rows


@register_sampler(
    "superposed",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model",),
    paper="Shen et al. 2024 (Superposed Decoding), arXiv 2405.18400",
    contracts=("text-heads",),
)
class SuperposedDecoding(Sampler):
    """``k`` completions per prompt from one forward per token (superposed embeddings + n-gram smoothing)."""

    defaults = {"k": 3, "ngram_weight": 0.3}
    ignores = dict.fromkeys(("top_k", "top_p", "min_p"), "its k drafts are the top-k paths of the superposed "
                            "distribution and temperature only picks among them, so no draw is filtered; use ar "
                            "(or another loop sampler) with the filter")

    def validate(self) -> None:
        check_int("k", self.k, hint=" (the number of drafts)")
        check_float("ngram_weight", self.ngram_weight, 0.0, 1.0)

    def generate(self, models, prompts, config, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        lm = models["model"]
        if self.ngram_weight > 0:
            headed(models, "ngram", self.name)
        ngram = lm.heads.ngram
        if cond is not None:
            raise ConfigError("superposed decoding takes no condition (decoder-only text).")
        if self.k > lm.vocab_size:  # k drafts of distinct first tokens; k=10**6 asked for a 32 GB buffer
            raise ConfigError(f"k={self.k} drafts exceed the vocabulary ({lm.vocab_size} tokens); use k <= {lm.vocab_size}.")
        t0 = time.perf_counter()
        f0 = lm.forwards
        stats = new_stats(self, len(prompts))
        rows = Rows(prompts, config, stats)
        gen = generator if generator is not None else make_generator(config, lm.device)
        completions = []
        for r, prompt in enumerate(prompts):
            drafts, scores = self._row(lm, ngram, prompt, config.max_new_tokens)
            eos = set(config.eos_ids)
            cut = []
            for d in drafts:
                end = next((i + 1 for i, t in enumerate(d) if t in eos), len(d))
                cut.append(d[:end])
            completions.append(cut)
            pick = 0
            if not config.temperature == 0 and len(cut) > 1:
                w = torch.softmax(torch.tensor(scores, dtype=torch.float32, device=lm.device), 0)
                pick = int(torch.multinomial(w, 1, generator=gen))
            for t in cut[pick]:  # one forward made each token: one step of one committed token (row r alone)
                if not rows.commit(r, [t]):
                    break
                stats.accepted_per_step.append([1])
                if config.step_callback is not None:  # as ar: once per one-token step
                    config.step_callback(len(stats.accepted_per_step), stats)
        res = rows.result(t0)
        res.stats.target_forwards = lm.forwards - f0
        res.stats.extra["completions"] = completions
        res.stats.extra["k"] = self.k
        return res

    @torch.inference_mode()
    def _row(self, lm, ngram, prompt: list[int], max_new: int) -> tuple[list[list[int]], list[float]]:
        """The row's ``k`` drafts (best first) and their log scores."""
        k, w = self.k, self.ngram_weight
        emb = lm.net.embed.weight
        dev = lm.device
        cache = lm.new_cache(1)
        if not prompt:
            raise ConfigError("superposed decoding needs a non-empty prompt.")
        logits = lm(torch.tensor([prompt], device=dev), cache)[0, -1].float()
        logp = logits.log_softmax(-1)
        top = logp.topk(min(k, logp.numel()))
        drafts = [[int(t)] for t in top.indices.tolist()]
        scores = top.values.clone()  # log P(d_i)
        for _ in range(max_new - 1):
            gamma = torch.softmax(scores, 0)
            last = torch.tensor([d[-1] for d in drafts], device=dev)
            lm.next_embeds = (gamma[:, None].to(emb.dtype) * emb[last]).sum(0)[None, None]
            p = lm(torch.zeros(1, 1, dtype=torch.long, device=dev), cache)[0, -1].float().softmax(-1)
            cand = p.topk(min(k, p.numel()))
            c_tok, c_p = cand.indices, cand.values  # [k]
            if w > 0:
                ng = ngram.prob(last[:, None].expand(-1, c_tok.numel()), c_tok[None].expand(last.numel(), -1))
                mixed = (1 - w) * c_p[None] + w * ng.float()
            else:
                mixed = c_p[None].expand(last.numel(), -1)
            ext = scores[:, None] + mixed.clamp_min(1e-30).log()  # [k_drafts, k_cands]
            best = ext.flatten().topk(min(k, ext.numel()))
            i_d = (best.indices // ext.shape[1]).tolist()
            i_c = (best.indices % ext.shape[1]).tolist()
            drafts = [drafts[a] + [int(c_tok[b])] for a, b in zip(i_d, i_c)]
            scores = best.values
        order = scores.argsort(descending=True).tolist()
        return [drafts[i] for i in order], [float(scores[i]) for i in order]
