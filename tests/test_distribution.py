"""Distribution-exactness by enumeration.

A tiny random target (vocabulary 6) generates 3 new tokens from a fixed 2-token prompt. Its exact
joint distribution over the 6^3 = 216 continuations is computed by enumeration: one full forward
(no KV cache) over every continuation, processed by ``LogitsProcessor`` exactly as the samplers
process it. Each sampler then draws N = 20,000 continuations (in batches of 5,000 rows, one seeded
generator) and the total-variation distance between the empirical and the exact distribution
must stay below a bound derived from N:

    E[TV] = 1/2 sum_k E|p_hat_k - p_k| <= 1/2 sum_k sqrt(p_k (1 - p_k) / N)     (Jensen)
                                         <= 1/2 sqrt(K / N)                     (Cauchy-Schwarz)
    P(TV >= E[TV] + t) <= exp(-2 N t^2)   (McDiarmid: one sample moves TV by <= 1/N)

so ``bound = 1/2 sum_k sqrt(p_k (1 - p_k) / N) + sqrt(log(1/delta) / (2 N))`` with delta = 1e-6
(for K = 216, N = 20,000 the looser form gives 0.052 + 0.019). A correct sampler fails with
probability <= 1e-6. Runs are seeded, so results are reproducible.

The test is shown to have power: ``ar`` (the reference) passes, and a deliberately broken
speculative sampler (after a rejection it resamples from p instead of the residual
norm(max(0, p - q)), a classic bug) and a broken prompt-lookup sampler must FAIL the same check.
(Note: passing q=None while drafting from q is *not* a broken variant: accepting a draft with
probability p(x) and otherwise sampling p without x is exact for drafts from any source; it only
accepts less. The test checks that too.)

With 3 new tokens a draft step verifies at most one draft (the first token comes from the
prefill, the last step's bonus token is the third). A second model (vocabulary 4, 4 new
tokens, 256 outcomes) covers chains of two drafts, partial acceptance and rows finishing at
different steps.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from conftest import make_llama, perturbed_copy

import leapgen.kernels.reference as kernel_reference
import leapgen.samplers.verify as verify
from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.samplers.logits import LogitsProcessor, seen_mask
from leapgen.samplers.prompt_lookup import ngram_draft

N_SAMPLES = 20000
BATCH = 5000
DELTA = 1e-6


PROCESSING = {
    "plain": dict(temperature=1.0),
    "topk_topp": dict(temperature=1.0, top_k=4, top_p=0.9),
    "reppen": dict(temperature=1.0, repetition_penalty=1.3),
}



def exact_joint(model, prompt: list[int], new: int, vocab: int, config: DecodeConfig) -> np.ndarray:
    """Exact joint distribution of the ``new``-token continuation of ``prompt`` under ``model``'s
    processed distributions (enumerating all ``vocab ** new`` sequences), indexed by base-V number."""
    L = len(prompt)
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=new)))
    inp = torch.cat([torch.tensor(prompt).expand(len(seqs), L), seqs], 1)
    with torch.no_grad():
        logits = model(inp).logits.float()
    # presence / frequency penalties, written out here (vLLM: after the repetition penalty, before
    # temperature; the counts are of the generated tokens only): the processor then runs without them
    pres, freq = config.presence_penalty, config.frequency_penalty
    config = dataclasses.replace(config, presence_penalty=0.0, frequency_penalty=0.0)
    proc = LogitsProcessor(config)
    joint = torch.ones(len(seqs), dtype=torch.float64)
    for i in range(new):
        seen = seen_mask(inp[:, : L + i].tolist(), vocab) if proc.uses_context else None
        step = logits[:, L + i - 1]
        if i < config.min_new_tokens and config.eos_ids:  # min_new_tokens: no EOS before the bound
            step = step.clone()
            step[:, list(config.eos_ids)] = float("-inf")
        if pres or freq:
            step = proc.penalize(step, seen)
            count = torch.nn.functional.one_hot(seqs[:, :i], vocab).sum(1).to(step.dtype)  # [N, V]
            step = step - freq * count - pres * (count > 0).to(step.dtype)
            seen = None  # the repetition penalty is applied
        joint *= proc.probs(step, seen).double().gather(1, seqs[:, i : i + 1]).squeeze(1)
    joint = joint.numpy()
    assert abs(joint.sum() - 1) < 1e-5
    return joint / joint.sum()

class Setup:
    def __init__(self, vocab: int, new: int, seed: int, noise: float) -> None:
        self.vocab, self.new = vocab, new
        self.target = make_llama(
            vocab,
            hidden=16,
            layers=2,
            heads=2,
            kv_heads=1,
            intermediate=32,
            max_pos=8,
            seed=seed,
            logit_scale=1.5,
        )
        self.draft = perturbed_copy(self.target, noise=noise, seed=seed + 1)
        # prompt: the 2-token prompt under which a prompt-lookup draft (made when the first new
        # token repeats a prompt token) has the most uncertain verification, p(draft) (1 - p(draft)),
        # under every logits processing used below: both branches of verification are exercised
        # and the rejection branch matters (so that a broken residual is visible)
        best, best_mass = None, -1.0
        with torch.no_grad():
            for prompt in itertools.product(range(vocab), repeat=2):
                masses = []
                for kw in PROCESSING.values():
                    proc = LogitsProcessor(DecodeConfig(**kw))
                    ctx = list(prompt)
                    seen = seen_mask([ctx], vocab)
                    p1 = proc.probs(self.target(torch.tensor([ctx])).logits[:, -1], seen)[0]
                    mass = 0.0
                    for t1 in range(vocab):
                        d = ngram_draft(ctx + [t1], 3, 1, 1)
                        if d:
                            seen = seen_mask([ctx + [t1]], vocab)
                            p2 = proc.probs(self.target(torch.tensor([ctx + [t1]])).logits[:, -1], seen)[0]
                            mass += float(p1[t1] * p2[d[0]] * (1 - p2[d[0]]))
                    masses.append(mass)
                if min(masses) > best_mass:
                    best, best_mass = list(prompt), min(masses)
        self.prompt = best

    def exact(self, config: DecodeConfig) -> np.ndarray:
        return exact_joint(self.target, self.prompt, self.new, self.vocab, config)

    def sample(self, name: str, params: dict, config: DecodeConfig, seed: int):
        smp = get_sampler(name, **params)
        gen = torch.Generator().manual_seed(seed)
        counts = np.zeros(self.vocab**self.new, dtype=np.int64)
        stats = []
        weights = self.vocab ** np.arange(self.new - 1, -1, -1)
        for _ in range(N_SAMPLES // BATCH):
            models = {"model": HFCausalLM(self.target), "draft": HFCausalLM(self.draft)}
            res = smp.generate(models, [list(self.prompt)] * BATCH, config, gen)
            seqs = np.array(res.sequences)
            assert seqs.shape == (BATCH, self.new), "every row must generate exactly max_new_tokens"
            counts += np.bincount(seqs @ weights, minlength=len(counts))
            stats.append(res.stats)
        return counts / N_SAMPLES, stats


def tv_bound(p: np.ndarray, n: int) -> float:
    return 0.5 * float(np.sqrt(p * (1 - p) / n).sum()) + math.sqrt(math.log(1 / DELTA) / (2 * n))


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


@pytest.fixture(scope="module")
def small():
    """Vocabulary 6, 3 new tokens (216 outcomes)."""
    return Setup(vocab=6, new=3, seed=21, noise=0.7)


@pytest.fixture(scope="module")
def chains():
    """Vocabulary 4, 4 new tokens (256 outcomes): drafts of two tokens get verified."""
    return Setup(vocab=4, new=4, seed=31, noise=0.5)


#: the plain (temperature 1) case of every distribution-exact sampler, these included, runs in the
#: registry-driven harness (tests/registry_harness.py: causal_enumeration, on this module's Setup and
#: sample sizes); here: the logits-processing variants
CASES = [
    ("speculative", {"num_draft_tokens": 3}, "topk_topp"),
    ("prompt_lookup", {}, "topk_topp"),
    ("speculative", {"num_draft_tokens": 3}, "reppen"),
    ("prompt_lookup", {}, "reppen"),
]


def _check_stats(name, stats):
    if name == "ar":
        return
    drafted = sum(s.drafted_tokens for s in stats)
    accepted = sum(s.accepted_draft_tokens for s in stats)
    # both branches of verification were exercised
    assert 0 < accepted < drafted, (name, accepted, drafted)


@pytest.mark.parametrize("name,params,proc", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_sampler_matches_exact_distribution(small, name, params, proc):
    config = DecodeConfig(max_new_tokens=small.new, **PROCESSING[proc])
    exact = small.exact(config)
    if proc == "topk_topp":
        assert (exact == 0).any(), "filtering must remove some continuations"
    emp, stats = small.sample(name, params, config, seed=1000 + len(name) + len(proc))
    dist, bound = tv(emp, exact), tv_bound(exact, N_SAMPLES)
    assert bound < 0.5 * math.sqrt(len(exact) / N_SAMPLES) + math.sqrt(math.log(1 / DELTA) / (2 * N_SAMPLES))
    assert dist < bound, f"{name}/{proc}: TV {dist:.4f} >= bound {bound:.4f}"
    if proc == "topk_topp":
        assert emp[exact == 0].sum() == 0, "a continuation with probability 0 was generated"
    _check_stats(name, stats)


@pytest.mark.parametrize("name", ["speculative", "prompt_lookup"])
def test_chains_of_drafts_match_exact_distribution(chains, name):
    config = DecodeConfig(max_new_tokens=chains.new, temperature=1.0)
    exact = chains.exact(config)
    # constant schedule: every step verifies two drafts (prompt_lookup's default cost schedule may
    # draft fewer; it is checked by the other parametrisations of this module)
    emp, stats = chains.sample(name, {"num_draft_tokens": 2, "schedule": "constant"}, config, seed=7)
    dist, bound = tv(emp, exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"{name}: TV {dist:.4f} >= bound {bound:.4f}"
    _check_stats(name, stats)
    # some step verified two drafts and accepted both
    assert any(n >= 3 for s in stats for step in s.accepted_per_step for n in step)


def _residual_is_p(p, q):
    """Broken residual: resample from the target distribution itself after a rejection."""
    return p


@pytest.mark.parametrize("name", ["speculative", "prompt_lookup"])
def test_the_check_detects_a_broken_sampler(small, name, monkeypatch):
    monkeypatch.setattr(verify, "residual", _residual_is_p)
    # chain acceptance runs leapgen.kernels.chain_accept, whose CPU path is the kernels' reference
    monkeypatch.setattr(kernel_reference, "residual", _residual_is_p)
    config = DecodeConfig(max_new_tokens=small.new, temperature=1.0)
    exact = small.exact(config)
    emp, stats = small.sample(name, {"num_draft_tokens": 3}, config, seed=99)
    dist, bound = tv(emp, exact), tv_bound(exact, N_SAMPLES)
    assert dist > bound, f"broken {name} was not detected: TV {dist:.4f} <= bound {bound:.4f}"


def test_deterministic_verification_of_sampled_drafts_is_still_exact(small, monkeypatch):
    """Drafts sampled from q but verified as one-hot (accept with p(x), else p without x):
    exact too (it only accepts less often)."""
    import leapgen.samplers.acceptance as spec  # the chain loop's exact rule

    orig = spec.rejection_sample

    def one_hot_verify(draft, p, q, generator=None, draft_len=None):
        return orig(draft, p, None, generator, draft_len)

    monkeypatch.setattr(spec, "rejection_sample", one_hot_verify)
    config = DecodeConfig(max_new_tokens=small.new, temperature=1.0)
    exact = small.exact(config)
    emp, stats = small.sample("speculative", {"num_draft_tokens": 3}, config, seed=5)
    assert tv(emp, exact) < tv_bound(exact, N_SAMPLES)
    _check_stats("speculative", stats)
