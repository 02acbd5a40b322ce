"""Draft-model tree samplers: ``spec_tree`` (SpecInfer / EAGLE-2), ``rsd`` (RSD-C / RSD-S), ``spectr``.

* greedy identity with ``ar`` (fp32, tiny random Llamas, batch 1 and 4 with different prompt
  lengths, EOS stopping rows independently), and high acceptance when the draft is the target;
* distribution exactness against the target's exact distribution computed by enumeration;
* exact enumeration of the one-node acceptance rules the samplers use (K-SEQ, and V3 with
  deterministic / without-replacement candidates): output distribution == p;
* tree attention: target logits at the accepted path (and after keeping it in the cache), and the
  draft's level-by-level tree logits, equal plain forwards of the same sequences.

Statistical bound (``tv_bound``): for N i.i.d. samples over K outcomes with empirical distribution
p_hat, E[TV(p_hat, p)] <= 1/2 sum_k sqrt(p_k (1-p_k) / N) <= 1/2 sqrt(K / N) (Jensen, then
Cauchy-Schwarz); TV changes by at most 1/N when one sample changes, so by McDiarmid
P(TV >= E[TV] + t) <= exp(-2 N t^2) with t = sqrt(ln(1/delta) / (2N)). With K = 6^3 outcomes,
N = 20,000 samples and delta = 1e-6 the bound is 0.5*sqrt(216/20000) + sqrt(ln(1e6)/40000) = 0.070;
a correct sampler fails with probability <= 1e-6, and the runs are seeded.
"""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from conftest import hf_lm, make_llama, perturbed_copy

from leapgen.errors import ConfigError
from leapgen.samplers import DecodeConfig, get_sampler, sampler_info
from leapgen.samplers.base import new_stats
from leapgen.samplers.logits import LogitsProcessor
from leapgen.samplers.rows import Rows
from leapgen.samplers.runtime import Runner
from leapgen.samplers.spec_tree import SpecTree
from leapgen.samplers.tree_draft import TreeDraft, cumulative_logprob, expand_best_first
from leapgen.samplers.trees import DraftTree
from leapgen.samplers.verify import candidate_plan, kseq_plan, kseq_rho, kseq_step, verify_tree

TREE_CONFIGS = [
    ("spec_tree", {}),
    ("spec_tree", {"expansion": "topk", "widths": (3, 2, 1), "num_nodes": 10, "depth": 4}),
    ("spec_tree", {"schedule": "heuristic", "depth": 2}),
    ("rsd", {}),
    ("rsd", {"variant": "sbs", "beam_width": 3}),
    ("spectr", {}),
    ("spectr", {"num_candidates": 2, "depth": 3}),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in TREE_CONFIGS]
SAME_CONFIGS = [c for c in TREE_CONFIGS if c[0] != "spec_tree" or not c[1]]
SAME_IDS = [i for c, i in zip(TREE_CONFIGS, IDS) if c in SAME_CONFIGS]
PROMPTS4 = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13]]


def run(name, models, prompts, seed=0, **cfg_kw):
    sampler, params = name if isinstance(name, tuple) else (name, {})
    cfg = DecodeConfig(**cfg_kw)
    return get_sampler(sampler, **params).generate(models, prompts, cfg, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models(target_model, draft_close):
    return {"model": hf_lm(target_model), "draft": hf_lm(draft_close)}


# ------------------------------------------------------------------------------------------ greedy


@pytest.mark.parametrize("cfg", TREE_CONFIGS, ids=IDS)
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_identical_to_ar(models, cfg, batch):
    prompts = PROMPTS4[:batch]
    ref = run("ar", models, prompts, max_new_tokens=24)
    out = run(cfg, models, prompts, seed=3, max_new_tokens=24)
    assert out.sequences == ref.sequences
    st = out.stats
    assert sampler_info(cfg[0]).guarantee == "distribution-exact"
    assert st.target_forwards == len(st.accepted_per_step) >= 2
    assert st.draft_forwards >= st.target_forwards - 1
    assert st.drafted_tokens > 0 and 0 <= st.accepted_draft_tokens <= st.drafted_tokens
    assert st.new_tokens == sum(len(s) for s in out.sequences) == 24 * batch
    assert st.step_compression >= 1.0


@pytest.mark.parametrize("cfg", TREE_CONFIGS[::2] + [TREE_CONFIGS[4]], ids=IDS[::2] + [IDS[4]])
def test_greedy_eos_rows_finish_independently(models, cfg):
    ref_free = run("ar", models, PROMPTS4, max_new_tokens=20)
    eos = ref_free.sequences[1][6]  # row 1 stops at its 7th token, the others wherever eos occurs
    ref = run("ar", models, PROMPTS4, max_new_tokens=20, eos_token_id=eos)
    out = run(cfg, models, PROMPTS4, seed=1, max_new_tokens=20, eos_token_id=eos)
    assert out.sequences == ref.sequences
    assert len(out.sequences[1]) <= 7 and out.sequences[1][-1] == eos
    assert any(len(s) == 20 for s in out.sequences) or all(s[-1] == eos for s in out.sequences)


@pytest.mark.parametrize(
    "cfg", [TREE_CONFIGS[0], TREE_CONFIGS[4], TREE_CONFIGS[5]], ids=["spec_tree", "rsd", "spectr"]
)
def test_greedy_with_repetition_penalty(models, cfg):
    """The penalty's context differs per tree node (its path); greedy output still equals ar's."""
    ref = run("ar", models, PROMPTS4, max_new_tokens=20, repetition_penalty=1.5)
    assert ref.sequences != run("ar", models, PROMPTS4, max_new_tokens=20).sequences
    out = run(cfg, models, PROMPTS4, seed=4, max_new_tokens=20, repetition_penalty=1.5)
    assert out.sequences == ref.sequences


@pytest.mark.parametrize("cfg", SAME_CONFIGS, ids=SAME_IDS)
def test_draft_equal_to_target_accepts_a_lot(target_model, cfg):
    models = {"model": hf_lm(target_model), "draft": hf_lm(copy.deepcopy(target_model))}
    out = run(cfg, models, PROMPTS4, max_new_tokens=30)
    assert out.sequences == run("ar", models, PROMPTS4, max_new_tokens=30).sequences
    name = cfg[0]
    # T=0: top-k trees (spec_tree, RSD without its vanishing noise) and SpecTr's greedy chain all
    # contain the draft's argmax path, which here is the target's
    assert out.stats.step_compression >= 3.5
    # sampling with draft == target: RSD / SpecTr accept a full-depth path at every step
    samp = run(cfg, models, PROMPTS4, seed=2, max_new_tokens=30, temperature=1.0)
    if name == "spec_tree":
        assert samp.stats.step_compression >= 2.0
    else:
        full = cfg[1].get("depth", 5 if name == "rsd" else 4) + 1
        assert all(n == full for step in samp.stats.accepted_per_step[1:-1] for n in step)


def test_parameters_are_validated():
    with pytest.raises(ConfigError, match="expansion"):
        get_sampler("spec_tree", expansion="wide")
    with pytest.raises(ConfigError, match="schedule"):
        get_sampler("spec_tree", schedule="confidence")
    with pytest.raises(ConfigError, match="num_nodes"):
        get_sampler("rsd", num_nodes=0)
    with pytest.raises(ConfigError, match="variant"):
        get_sampler("rsd", variant="beam")
    with pytest.raises(ConfigError, match="branches"):
        get_sampler("rsd", branches=())
    with pytest.raises(ConfigError, match="num_candidates"):
        get_sampler("spectr", num_candidates=0)
    with pytest.raises(ConfigError, match="unknown parameter"):
        get_sampler("spectr", beam_width=2)
    for name in ("spec_tree", "rsd", "spectr"):
        info = sampler_info(name)
        assert info.family == "ar-tree" and info.needs == ("model", "draft") and info.paper


# ------------------------------------------------------------------------------------------ exactness

V_SMALL = 6
N_SAMPLES = 20_000
DELTA = 1e-6


def tv_bound(k: int, n: int, delta: float = DELTA) -> float:
    return 0.5 * math.sqrt(k / n) + math.sqrt(math.log(1 / delta) / (2 * n))


@pytest.fixture(scope="module")
def small_models():
    """Vocabulary 6: a one-layer target and a noisy copy as draft (accepts often, not always)."""
    target = make_llama(
        V_SMALL, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, seed=5, logit_scale=2.5
    )
    draft = perturbed_copy(target, noise=0.6, seed=6)
    return {"model": hf_lm(target), "draft": hf_lm(draft)}, target


@pytest.fixture(scope="module")
def exact_joint(small_models):
    """P(x1, x2, x3 | prompt) under the target at temperature 0.8, by enumerating all 6^3 continuations."""
    _, target = small_models
    prompt = [1, 4]
    conts = torch.tensor(list(itertools.product(range(V_SMALL), repeat=3)))
    seqs = torch.cat([torch.tensor(prompt).expand(len(conts), 2), conts], 1)
    with torch.no_grad():
        logp = (target(seqs).logits.float() / 0.8).log_softmax(-1)
    lp = sum(logp[torch.arange(len(seqs)), 1 + i, seqs[:, 2 + i]] for i in range(3))
    return prompt, lp.exp().double()


DIST_CONFIGS = [
    ("spec_tree", {"num_nodes": 6, "depth": 3, "top_k": 3}),
    ("rsd", {"num_nodes": 6, "depth": 3, "branches": (2, 2, 1)}),
    ("rsd", {"variant": "sbs", "num_nodes": 6, "depth": 3, "beam_width": 3}),
    ("spectr", {"num_candidates": 3, "depth": 2, "num_nodes": 6}),
]


@pytest.mark.parametrize("cfg", DIST_CONFIGS, ids=["spec_tree", "rsd-constant", "rsd-sbs", "spectr"])
def test_distribution_matches_enumeration(small_models, exact_joint, cfg):
    models, _ = small_models
    prompt, exact = exact_joint
    out = run(cfg, models, [prompt] * N_SAMPLES, seed=11, max_new_tokens=3, temperature=0.8)
    idx = torch.tensor([a * 36 + b * 6 + c for a, b, c in out.sequences])
    emp = torch.bincount(idx, minlength=V_SMALL**3).double() / N_SAMPLES
    tv = 0.5 * float((emp - exact).abs().sum())
    assert tv <= tv_bound(V_SMALL**3, N_SAMPLES), f"TV {tv:.4f} > bound {tv_bound(V_SMALL**3, N_SAMPLES):.4f}"
    # the trees were used: some steps accepted drafted tokens
    assert out.stats.accepted_draft_tokens > N_SAMPLES // 10


def _random_dist(g, v, zeros=0):
    x = torch.rand(v, generator=g, dtype=torch.float64) ** 2
    if zeros:
        x[torch.randperm(v, generator=g)[:zeros]] = 0
    return x / x.sum()


def _pairs():
    g = torch.Generator().manual_seed(0)
    out = []
    for v in (3, 4):
        for zeros in (0, 1):
            out.append((_random_dist(g, v, zeros), _random_dist(g, v, zeros)))
    p = _random_dist(g, 4)
    out.append((p, p.clone()))  # p == q
    out.append(
        (
            torch.tensor([0.5, 0.5, 0, 0], dtype=torch.float64),
            torch.tensor([0, 0, 0.3, 0.7], dtype=torch.float64),
        )
    )
    out.append(
        (torch.tensor([1.0, 0, 0, 0], dtype=torch.float64), torch.tensor([0.25] * 4, dtype=torch.float64))
    )
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_kseq_exact_enumeration(k):
    """Sum over every k-tuple of i.i.d. candidates: P(output = x) equals p(x)."""
    for p, q in _pairs():
        v = p.numel()
        accept, p_res, rho = kseq_plan(p, q, k)
        c = (1 - (1 - torch.minimum(q, p / rho).sum()) ** k) / max(
            float(torch.minimum(q, p / rho).sum()), 1e-300
        )
        assert 1.0 <= float(rho) <= k and (
            float(c) <= float(rho) + 1e-9 or float(torch.minimum(q, p).sum()) == 0
        )
        assert float(p_res.min()) >= 0 and abs(float(p_res.sum()) - 1) < 1e-9
        out = torch.zeros(v, dtype=torch.float64)
        for tup in itertools.product(range(v), repeat=k):
            pr = float(torch.prod(q[list(tup)]))
            if pr == 0:
                continue
            rejected = 1.0
            for x in tup:
                out[x] += pr * rejected * float(accept[x])
                rejected *= 1 - float(accept[x])
            out += pr * rejected * p_res
        assert torch.allclose(out, p, atol=1e-10), (p, q, out)
    # k = 1 is speculative sampling: rho = 1, residual norm(max(0, p - q))
    p, q = _pairs()[0]
    accept, p_res, rho = kseq_plan(p, q, 1)
    r = (p - q).clamp_min(0)
    assert float(rho) == 1.0 and torch.allclose(p_res, r / r.sum())


def test_kseq_rho_is_valid_and_batched():
    g = torch.Generator().manual_seed(1)
    p = torch.stack([_random_dist(g, 5) for _ in range(6)])
    q = torch.stack([_random_dist(g, 5) for _ in range(6)])
    k = torch.tensor([1, 2, 3, 4, 6, 8])
    rho = kseq_rho(p, q, k)
    for i in range(6):
        beta = float(torch.minimum(q[i], p[i] / rho[i]).sum())
        c = (1 - (1 - beta) ** int(k[i])) / beta
        assert 1.0 <= float(rho[i]) <= int(k[i]) and c <= float(rho[i]) * (1 + 1e-9)
        # smaller rho (by more than the search resolution) would be invalid, unless rho = 1
        if float(rho[i]) > 1.0:
            r2 = float(rho[i]) - 0.02 * (int(k[i]) - 1)
            b2 = float(torch.minimum(q[i], p[i] / r2).sum())
            assert (1 - (1 - b2) ** int(k[i])) / b2 > r2 or r2 < 1
        single = kseq_plan(p[i], q[i], int(k[i]))
        batched = kseq_plan(p, q, k)
        assert torch.allclose(single[1], batched[1][i]) and torch.allclose(single[0], batched[0][i])


def test_kseq_step_monte_carlo():
    """kseq_step itself (coin flips included) over 40k draws matches p."""
    g = torch.Generator().manual_seed(2)
    p, q = _pairs()[2]
    p, q = p.float(), q.float()
    k, n = 3, 40_000
    plan = kseq_plan(p, q, k)[:2]
    counts = torch.zeros(p.numel())
    for _ in range(n):
        cands = torch.multinomial(q, k, replacement=True, generator=g).tolist()
        i, p_res = kseq_step(p, cands, q, g, plan=plan)
        x = cands[i] if i is not None else int(torch.multinomial(p_res, 1, generator=g))
        counts[x] += 1
    tv = 0.5 * float((counts / n - p).abs().sum())
    assert tv <= tv_bound(p.numel(), n)


@pytest.mark.parametrize("kind", ["deterministic", "without_replacement", "iid"])
def test_multi_candidate_exact_enumeration(kind):
    """V3 as the tree samplers use it: deterministic distinct top-m children (spec_tree), a
    without-replacement sample (rsd), i.i.d. draws; enumerated exactly."""
    for p, q in _pairs():
        v = p.numel()
        for m in (1, 2, 3):
            out = torch.zeros(v, dtype=torch.float64)
            if kind == "deterministic":
                tuples = [(tuple(q.argsort(descending=True)[:m].tolist()), 1.0)]
            elif kind == "iid":
                tuples = [(t, float(torch.prod(q[list(t)]))) for t in itertools.product(range(v), repeat=m)]
            else:
                tuples = []
                for t in itertools.permutations(range(v), min(m, int((q > 0).sum()))):
                    pr, left = 1.0, 1.0
                    for x in t:
                        pr *= float(q[x]) / left
                        left -= float(q[x])
                    tuples.append((t, pr))
            for t, pr in tuples:
                if pr == 0:
                    continue
                accept, p_res = candidate_plan(p, list(t), None if kind == "deterministic" else q, kind)
                rejected = 1.0
                for x, a in zip(t, accept):
                    out[x] += pr * rejected * a
                    rejected *= 1 - a
                out += pr * rejected * p_res
            assert torch.allclose(out, p, atol=1e-10), (kind, m, p, q, out)


# ------------------------------------------------------------------------------------------ tree attention


def _plain_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0].float()


def test_tree_logits_match_plain_forwards(target_model, draft_close):
    """One spec_tree step by hand: the draft's level-by-level logits, the target's logits at the
    accepted path, and the target's logits after keeping that path in its cache all equal plain
    forwards of the same token sequences (batch 2, different prompt lengths)."""
    target, draft = hf_lm(target_model), hf_lm(draft_close)
    prompts = [[3, 1, 4, 1, 5, 9, 2], [6, 5]]
    cfg = DecodeConfig(max_new_tokens=30, temperature=1.0)
    rows = Rows(prompts, cfg, new_stats(SpecTree(), 2))
    proc = LogitsProcessor(cfg)
    g = torch.Generator().manual_seed(0)
    tr, dr = Runner(target, rows), Runner(draft, rows)
    first = tr.feed_pending().argmax(-1)
    for r, t in enumerate(first.tolist()):
        rows.commit(r, [t])

    drafter = TreeDraft(dr)
    fed = []
    feed = drafter.feed

    def spy(nodes, tokens, parent, depth):
        logits = feed(nodes, tokens, parent, depth)
        fed.append((nodes.clone(), tokens.clone(), parent.clone(), logits))
        return logits

    drafter.feed = spy
    root_logits = drafter.begin()
    roots = torch.tensor([rows.tokens[r][-1] for r in range(2)])
    tree = expand_best_first(
        drafter,
        proc,
        roots,
        root_logits,
        depth=4,
        num_nodes=12,
        per_node=lambda d: 3,
        beam=None,
        scorer=cumulative_logprob,
    )
    dr.keep(drafter.base, [0, 0])  # what the tree loop does after the step: forget the drafted nodes
    assert len(fed) == 3 and len(dr.cache) == drafter.base
    for nodes, tokens, parent, logits in fed:  # draft tree attention == plain forward of each path
        for b in range(2):
            for j, n in enumerate(nodes[b].tolist()):
                if n < 0:
                    continue
                path, x = [], n
                while x > 0:
                    path.append(int(tokens[b, x]))
                    x = int(parent[b, x])
                seq = rows.tokens[b] + path[::-1]
                assert torch.allclose(logits[b, j], _plain_logits(draft_close, seq)[-1], atol=1e-4)

    logits, start = tr.forward_tree(DraftTree(tree.tokens, tree.parent))
    p = proc.probs(logits)
    paths = []
    for b in range(2):
        n = int(tree.n_nodes[b]) + 1
        path, nxt = verify_tree(
            tree.tokens[b, :n].tolist(),
            tree.parent[b, :n].tolist(),
            p[b, :n],
            None,
            "deterministic",
            False,
            g,
        )
        path = path or [int(i) for i in (tree.parent[b] == 0).nonzero()[:1, 0]]  # force a non-trivial path
        toks = [int(tree.tokens[b, i]) for i in path]
        plain = _plain_logits(target_model, rows.tokens[b] + toks)
        want = plain[len(rows.tokens[b]) - 1 :]
        got = logits[b, [0] + path]
        assert torch.allclose(got, want, atol=1e-4)
        paths.append([0] + path)
        rows.commit(b, toks + [int(nxt)])
    tr.keep_path(start, paths)
    after = tr.feed_pending()
    for b in range(2):
        assert torch.allclose(after[b], _plain_logits(target_model, rows.tokens[b])[-1], atol=1e-4)
