"""Image-family samplers: ``sjd`` (exact), ``gsd`` (lossy), ``lantern`` (bounded).

* SJD distribution exactness by enumeration: a tiny random model over 6 tokens with a 2x2 token
  grid generates 4 tokens after a 1-token prompt; the exact joint over 6^4 = 1296 continuations
  is computed from the model and 20,000 SJD samples must stay within the TV bound from N
  (``tests/test_distribution.py``), with temperature 1 and with top-k, for both init schemes.
  A deliberately broken SJD (no residual after a rejection) must fail the same check.
* GSD with the grouping off equals SJD token for token; with it on it compresses more on a flat
  model; the vectorised group test equals a per-token reference loop.
* LANTERN: the relaxed distribution never leaves the TV ball of radius delta (pure function over
  random inputs, and instrumented inside real runs), LANTERN++'s ``p~(x) <= lam p(x)``, and
  ``delta = 0`` equals ``speculative`` token for token.
* Per-row progress in a batch, and clear errors for bad parameters.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from conftest import make_llama
from test_distribution import N_SAMPLES, exact_joint, tv, tv_bound

import leapgen.kernels.reference as kernel_reference
import leapgen.samplers.acceptance as acceptance
import leapgen.samplers.lantern as lantern_mod
import leapgen.samplers.verify as verify
from leapgen.errors import ConfigError
from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler, sampler_info
from leapgen.samplers.gsd import group_acceptance
from leapgen.samplers.lantern import latent_neighbours, relax
from leapgen.samplers.sjd import horizon_token

BATCH = 5000


@pytest.fixture(scope="module", autouse=True)
def _frozen_gc():
    """The enumeration runs allocate many small lists per row; freezing the objects that exist
    already (torch, transformers) keeps Python's full collections cheap (about 2x faster)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def grid_lm(model, grid):
    lm = HFCausalLM(model)
    lm.grid = grid
    return lm


# ------------------------------------------------------------------------------------------
# SJD: exact distribution by enumeration


class GridSetup:
    """Vocabulary 6, a 2x2 grid (4 new tokens), a 1-token prompt: 1296 outcomes."""

    vocab, new, prompt, grid = 6, 4, [0], (2, 2)

    def __init__(self) -> None:
        self.model = make_llama(
            self.vocab, hidden=16, layers=2, heads=2, kv_heads=1, intermediate=32, max_pos=8, seed=5, logit_scale=2.0
        )

    def exact(self, config: DecodeConfig) -> np.ndarray:
        return exact_joint(self.model, self.prompt, self.new, self.vocab, config)

    def sample(self, name: str, params: dict, config: DecodeConfig, seed: int):
        smp = get_sampler(name, **params)
        gen = torch.Generator().manual_seed(seed)
        counts = np.zeros(self.vocab**self.new, dtype=np.int64)
        weights = self.vocab ** np.arange(self.new - 1, -1, -1)
        stats = []
        for _ in range(N_SAMPLES // BATCH):
            res = smp.generate({"model": grid_lm(self.model, self.grid)}, [list(self.prompt)] * BATCH, config, gen)
            seqs = np.array(res.sequences)
            assert seqs.shape == (BATCH, self.new)
            counts += np.bincount(seqs @ weights, minlength=len(counts))
            stats.append(res.stats)
        return counts / N_SAMPLES, stats


@pytest.fixture(scope="module")
def grid_setup():
    return GridSetup()


@pytest.fixture()
def jacobi_q_seen(monkeypatch):
    """Record whether verification saw carried Jacobi drafts (q not one-hot) and rejections."""
    seen = {"soft_q": 0, "steps": 0}
    orig = acceptance.rejection_sample

    def spy(draft, p, q, generator=None, draft_len=None, **kw):
        seen["steps"] += 1
        if q is not None and q.numel():
            seen["soft_q"] += int(((q > 0) & (q < 1)).any(-1).sum())
        return orig(draft, p, q, generator, draft_len, **kw)

    monkeypatch.setattr(acceptance, "rejection_sample", spy)
    return seen


SJD_CASES = [
    ("random", dict(temperature=1.0)),
    ("repeat_horizon", dict(temperature=1.0)),
    ("random", dict(temperature=1.0, top_k=3)),
    ("repeat_horizon", dict(temperature=1.0, top_k=3)),
]


@pytest.mark.parametrize("init,proc", SJD_CASES, ids=[f"{i}-{'topk' if 'top_k' in p else 'T1'}" for i, p in SJD_CASES])
def test_sjd_matches_exact_distribution(grid_setup, jacobi_q_seen, init, proc):
    config = DecodeConfig(max_new_tokens=grid_setup.new, **proc)
    exact = grid_setup.exact(config)
    if "top_k" in proc:
        assert (exact == 0).any()
    emp, stats = grid_setup.sample("sjd", {"init": init}, config, seed=11 + len(init) + len(proc))
    dist, bound = tv(emp, exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"sjd/{init}/{proc}: TV {dist:.4f} >= bound {bound:.4f}"
    if "top_k" in proc:
        assert emp[exact == 0].sum() == 0, "a continuation outside top-k was generated"
    drafted = sum(s.drafted_tokens for s in stats)
    accepted = sum(s.accepted_draft_tokens for s in stats)
    assert 0 < accepted < drafted  # both branches of verification ran
    assert jacobi_q_seen["soft_q"] > 0, "carried Jacobi drafts (q = previous p) must have been verified"
    assert any(n >= 2 for s in stats for step in s.accepted_per_step for n in step)


def _residual_is_p(p, q):
    return p


def test_sjd_check_detects_a_broken_residual(grid_setup, monkeypatch):
    """Broken SJD: after a rejection it resamples from p instead of norm(max(0, p - q))."""
    monkeypatch.setattr(verify, "residual", _residual_is_p)
    # chain acceptance runs leapgen.kernels.chain_accept, whose CPU path is the kernels' reference
    monkeypatch.setattr(kernel_reference, "residual", _residual_is_p)
    config = DecodeConfig(max_new_tokens=grid_setup.new, temperature=1.0)
    exact = grid_setup.exact(config)
    emp, _ = grid_setup.sample("sjd", {"init": "repeat_horizon"}, config, seed=3)
    dist, bound = tv(emp, exact), tv_bound(exact, N_SAMPLES)
    assert dist > bound, f"broken sjd was not detected: TV {dist:.4f} <= bound {bound:.4f}"


def test_horizon_init_reads_the_left_neighbour():
    from leapgen.samplers.base import DecodeStats
    from leapgen.samplers.rows import Rows

    rows = Rows([[99, 98]], DecodeConfig(max_new_tokens=12), DecodeStats())
    rows.commit(0, [10, 11, 12, 13])  # generated: row 0 = 10 11 12 | row 1 = 13 ...
    win: list[int] = [20]  # slot 0 = cell (1, 1)
    grid = (4, 3)
    assert horizon_token(rows, 0, win, 1, grid) == 20  # slot 1 = (1, 2): left is the draft at (1, 1)
    assert horizon_token(rows, 0, [], 0, grid) == 13  # (1, 1): left is committed (1, 0)
    assert horizon_token(rows, 0, win + [21], 2, grid) == 13  # slot 2 = (2, 0): column 0 copies (1, 0) above
    fresh = Rows([[99]], DecodeConfig(max_new_tokens=4), DecodeStats())
    assert horizon_token(fresh, 0, [], 0, grid) is None  # (0, 0): random
    assert horizon_token(fresh, 0, [], 0, None) == 99  # no grid: the previous token
    assert horizon_token(fresh, 0, [5], 1, None) == 5


# ------------------------------------------------------------------------------------------
# GSD


def run(name, models, prompts, params=None, seed=0, cond=None, **cfg):
    config = DecodeConfig(max_new_tokens=cfg.pop("max_new_tokens", 24), **cfg)
    return get_sampler(name, **(params or {})).generate(
        models, prompts, config, torch.Generator().manual_seed(seed), cond=cond
    )


PROMPTS = [[5, 17, 3], [1, 2], [40, 40, 7, 8], [33]]


@pytest.mark.parametrize("cfg", [dict(temperature=1.0), dict(temperature=1.0, top_k=8), dict(temperature=0.0)])
@pytest.mark.parametrize("init", ["random", "repeat_horizon"])
def test_gsd_without_grouping_is_sjd(target_model, cfg, init):
    for grid in (None, (4, 6)):
        sjd = run("sjd", {"model": grid_lm(target_model, grid)}, PROMPTS, {"init": init}, **cfg)
        gsd = run("gsd", {"model": grid_lm(target_model, grid)}, PROMPTS, {"init": init, "rank_window": 0}, **cfg)
        assert gsd.sequences == sjd.sequences
        assert gsd.token_steps == sjd.token_steps
        assert gsd.stats.accepted_per_step == sjd.stats.accepted_per_step


def test_group_acceptance_matches_a_per_token_loop():
    g = torch.Generator().manual_seed(0)
    B, G, V, D, w = 3, 5, 40, 4, 3
    p = torch.softmax(torch.randn(B, G + 1, V, generator=g) * 0.5, -1)
    p[0, 0, :10] = 0  # a filtered region
    p = p / p.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(B, G, V, generator=g), -1)
    x = torch.randint(V, (B, G), generator=g)
    x[0, 0] = 3  # a draft with p(x) = 0
    emb = torch.randn(V, D, generator=g) * 0.4
    num, den = group_acceptance(p, q, x, w, 0.02, emb, 1.0)
    for b in range(B):
        for i in range(G):
            pi, xi = p[b, i], int(x[b, i])
            order = sorted(range(V), key=lambda v: (-float(pi[v]), v))
            r = order.index(xi)
            group = {xi}
            for v in order[max(0, r - w) : r + w]:
                if abs(float(pi[v] - pi[xi])) < 0.02 and float(((emb[v] - emb[xi]) ** 2).sum()) < 1.0:
                    group.add(v)
            pg = sum(float(pi[v]) for v in group) if float(pi[xi]) > 0 else 0.0
            qg = sum(float(q[b, i, v]) for v in group)
            assert num[b, i].item() == pytest.approx(pg, abs=1e-6)
            assert den[b, i].item() == pytest.approx(qg, abs=1e-6)
    assert num[0, 0] == 0  # a filtered draft is never accepted
    n0, d0 = group_acceptance(p, q, x, 0, 0.15, emb, 0.5)
    assert torch.equal(n0, p[:, :G].gather(-1, x[..., None]).squeeze(-1))
    assert torch.equal(d0, q.gather(-1, x[..., None]).squeeze(-1))


def test_gsd_compresses_more_than_sjd_on_a_flat_model():
    """On a flat target (top-1 probability ~0.1 over 64 tokens, like image tokens) grouping
    accepts more drafts and needs fewer target forwards for the same number of tokens."""
    flat = make_llama(64, hidden=16, layers=2, heads=2, kv_heads=1, intermediate=32, seed=8, logit_scale=1.0)
    prompts = [[i] for i in range(8)]
    cfg = dict(temperature=1.0, max_new_tokens=48)
    totals = {"sjd": [0, 0], "gsd": [0, 0]}
    for seed in range(3):
        for name, params in (("sjd", {}), ("gsd", {"dist_threshold": None})):
            st = run(name, {"model": grid_lm(flat, (6, 8))}, prompts, params, seed=seed, **cfg).stats
            totals[name][0] += st.baseline_steps
            totals[name][1] += st.target_forwards
    sc = {k: b / f for k, (b, f) in totals.items()}
    assert sc["gsd"] >= 1.15 * sc["sjd"], sc
    # the embedding filter: an infinite radius keeps every candidate, a tiny one none (= sjd)
    base = run("gsd", {"model": grid_lm(flat, (6, 8))}, prompts, {"dist_threshold": None}, seed=1, **cfg)
    wide = run("gsd", {"model": grid_lm(flat, (6, 8))}, prompts, {"dist_threshold": float("inf")}, seed=1, **cfg)
    tight = run("gsd", {"model": grid_lm(flat, (6, 8))}, prompts, {"dist_threshold": 1e-9}, seed=1, **cfg)
    sjd = run("sjd", {"model": grid_lm(flat, (6, 8))}, prompts, seed=1, **cfg)
    assert wide.sequences == base.sequences
    assert tight.sequences == sjd.sequences
    assert base.sequences != sjd.sequences


# ------------------------------------------------------------------------------------------
# LANTERN


def test_latent_neighbours_match_brute_force():
    g = torch.Generator().manual_seed(1)
    lat = torch.randn(50, 3, generator=g)
    nb = latent_neighbours(lat, 7, chunk=16)
    d = torch.cdist(lat.double(), lat.double())
    d.fill_diagonal_(float("inf"))
    ref = d.argsort(-1)[:, :7]
    assert nb.shape == (50, 7)
    assert (nb != torch.arange(50)[:, None]).all()
    assert torch.allclose(d.gather(1, nb.long()), d.gather(1, ref))  # same distances (ties aside)


@pytest.mark.parametrize("rule,delta,lam", [("lantern", 0.1, 5.0), ("lantern", 0.3, 5.0), ("lantern++", 0.1, 3.0)])
def test_relax_bounds_over_random_inputs(rule, delta, lam):
    g = torch.Generator().manual_seed(2)
    V, k = 30, 12
    merged_any = False
    for trial in range(40):
        lat = torch.randn(V, 2, generator=g)
        nb = latent_neighbours(lat, k)
        p = torch.softmax(torch.randn(8, V, generator=g) * (0.5 + trial / 10), -1)
        if trial % 3 == 0:  # a top-k filtered target
            p = p.masked_fill(p < p.topk(10, -1).values[:, -1:], 0)
            p = p / p.sum(-1, keepdim=True)
        x = torch.randint(V, (8,), generator=g)
        pt, relaxed = relax(p, x, nb, delta, rule, lam)
        px = p.gather(-1, x[:, None]).squeeze(-1)
        assert torch.allclose(relaxed.sum(-1), torch.ones(8), atol=1e-5)
        assert (relaxed >= 0).all()
        assert torch.allclose(relaxed.gather(-1, x[:, None]).squeeze(-1), pt)
        tvd = 0.5 * (relaxed - p).abs().sum(-1)
        assert torch.allclose(tvd, pt - px, atol=1e-6)  # the moved mass c_m
        c = p.gather(-1, nb[x].long()).cumsum(-1)
        m = ((relaxed == 0) & (p > 0)).sum(-1)  # merged neighbours with mass
        if rule == "lantern":
            assert (tvd <= delta + 1e-6).all()
            bound = torch.full_like(px, delta)
        else:
            assert (pt <= lam * px + 1e-6).all()
            bound = (lam - 1) * px
        # maximality: the next neighbour would cross the bound
        full = pt - px
        nxt = c.gather(-1, (c <= bound[:, None]).long().cumprod(-1).sum(-1, keepdim=True).clamp_max(k - 1)).squeeze(-1)
        last = (c <= bound[:, None]).all(-1)
        assert ((nxt > bound) | last).all()
        assert (full <= bound + 1e-6).all()
        merged_any |= bool((m > 0).any())
    assert merged_any


@pytest.fixture()
def relax_log(monkeypatch):
    calls = []
    orig = lantern_mod.relax

    def spy(p, x, neighbours, delta, rule="lantern", lam=5.0):
        pt, relaxed = orig(p, x, neighbours, delta, rule, lam)
        calls.append((p.clone(), x.clone(), pt.clone(), relaxed.clone(), delta, rule, lam))
        return pt, relaxed

    monkeypatch.setattr(lantern_mod, "relax", spy)
    return calls


@pytest.mark.parametrize("delta", [0.05, 0.2])
def test_lantern_tv_bound_at_every_verification(target_model, draft_far, relax_log, delta):
    lms = {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}
    res = run("lantern", lms, PROMPTS, {"delta": delta, "k": 20}, temperature=1.0, top_k=20)
    spec = run("speculative", {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}, PROMPTS,
               temperature=1.0, top_k=20)
    assert relax_log, "the relaxation must run at every verification"
    moved = 0.0
    for p, _x, _pt, relaxed, d, _, _ in relax_log:
        tvd = 0.5 * (relaxed - p).abs().sum(-1)
        assert float(tvd.max()) <= d + 1e-6
        moved = max(moved, float(tvd.max()))
    assert moved > 0, "some draft must have borrowed neighbour mass"
    assert res.stats.acceptance_rate > spec.stats.acceptance_rate


def test_lantern_plus_plus_bound(target_model, draft_far, relax_log):
    lms = {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}
    run("lantern", lms, PROMPTS, {"rule": "lantern++", "lam": 3.0, "k": 10}, temperature=1.0)
    assert relax_log
    grew = False
    for p, x, pt, _relaxed, _, rule, lam in relax_log:
        assert rule == "lantern++"
        px = p.gather(-1, x[..., None]).squeeze(-1)
        assert (pt <= lam * px + 1e-6).all()
        grew |= bool((pt > px).any())
    assert grew


@pytest.mark.parametrize("cfg", [dict(temperature=1.0), dict(temperature=1.0, top_k=6), dict(temperature=0.0)])
def test_lantern_delta_zero_is_speculative(target_model, draft_close, cfg):
    # the same draft schedule on both (lantern's default is constant, speculative's auto)
    spec = run("speculative", {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_close)}, PROMPTS,
               {"schedule": "constant"}, **cfg)
    lan = run("lantern", {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_close)}, PROMPTS,
              {"delta": 0.0}, **cfg)
    assert lan.sequences == spec.sequences
    assert lan.stats.accepted_per_step == spec.stats.accepted_per_step


def test_lantern_greedy_relaxation_accepts_more(target_model, draft_far):
    kw = dict(temperature=0.0, max_new_tokens=32)
    spec = run("speculative", {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}, PROMPTS, **kw)
    lan = run("lantern", {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}, PROMPTS,
              {"delta": 0.5, "k": 47}, **kw)
    assert lan.stats.accepted_draft_tokens > spec.stats.accepted_draft_tokens
    assert lan.sequences != spec.sequences  # lossy at delta > 0 (bounded, not exact)


# ------------------------------------------------------------------------------------------
# per-row progress


@pytest.mark.parametrize("name", ["sjd", "gsd"])
def test_rows_progress_independently(target_model, name):
    params = {"init": "repeat_horizon"}  # deterministic drafts without a grid: rows are comparable alone
    batch = run(name, {"model": HFCausalLM(target_model)}, PROMPTS, params, temperature=0.0, max_new_tokens=32)
    ar = run("ar", {"model": HFCausalLM(target_model)}, PROMPTS, temperature=0.0, max_new_tokens=32)
    assert batch.sequences == ar.sequences
    assert len({tuple(s) for s in batch.token_steps}) > 1, "rows must advance by different amounts"
    for i, p in enumerate(PROMPTS):
        alone = run(name, {"model": HFCausalLM(target_model)}, [p], params, temperature=0.0, max_new_tokens=32)
        assert alone.sequences[0] == batch.sequences[i]
        # a row's steps in the batch are its steps alone: no row waits for the slowest one
        assert alone.token_steps[0] == batch.token_steps[i]
    assert any(n > 1 for step in batch.stats.accepted_per_step for n in step)
    assert len({s[-1] for s in batch.token_steps}) > 1, "rows finish after different numbers of forwards"


# ------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "name,params",
    [
        ("sjd", {"window": 0}),
        ("sjd", {"window": 2.5}),
        ("sjd", {"init": "diagonal"}),
        ("gsd", {"rank_window": -1}),
        ("gsd", {"prob_threshold": 1.5}),
        ("gsd", {"dist_threshold": 0}),
        ("lantern", {"delta": -0.1}),
        ("lantern", {"delta": 1.5}),
        ("lantern", {"k": 0}),
        ("lantern", {"rule": "lantern+++"}),
        ("lantern", {"lam": 0.5}),
    ],
)
def test_bad_parameters_are_config_errors(name, params):
    with pytest.raises(ConfigError):
        get_sampler(name, **params)


def test_missing_models_and_contracts(target_model):
    with pytest.raises(ConfigError, match="draft"):
        run("lantern", {"model": HFCausalLM(target_model)}, PROMPTS)

    class NoLatents(HFCausalLM):
        def embeddings(self):
            return None

    with pytest.raises(ConfigError, match="embeddings"):
        run("gsd", {"model": NoLatents(target_model)}, PROMPTS, temperature=1.0)
    # without the embedding filter gsd needs no embeddings
    run("gsd", {"model": NoLatents(target_model)}, PROMPTS, {"dist_threshold": None}, temperature=1.0, max_new_tokens=4)
    with pytest.raises(ConfigError, match="token_latents"):
        run("lantern", {"model": NoLatents(target_model), "draft": HFCausalLM(target_model)}, PROMPTS)
    bad_grid = grid_lm(target_model, (0, 4))
    with pytest.raises(ConfigError, match="grid"):
        run("sjd", {"model": bad_grid}, PROMPTS, {"init": "repeat_horizon"})


def test_registry_rows():
    for name, guarantee in (("sjd", "distribution-exact"), ("gsd", "lossy"), ("lantern", "bounded")):
        info = sampler_info(name)
        assert info.guarantee == guarantee and info.paper
    assert sampler_info("lantern").needs == ("model", "draft")
    assert sampler_info("sjd").defaults == {"window": 16, "init": "random"}
    assert sampler_info("gsd").defaults["rank_window"] == 7
    assert sampler_info("lantern").defaults["k"] == 1000 and sampler_info("lantern").defaults["delta"] == 0.1


def test_sjd_stats_and_token_steps(target_model):
    res = run("sjd", {"model": grid_lm(target_model, (4, 8))}, PROMPTS, {"init": "repeat_horizon"}, temperature=1.0,
              max_new_tokens=32)
    st = res.stats
    assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens
    assert st.target_forwards == len(st.accepted_per_step)  # the first forward verifies drafts too
    assert st.drafted_tokens > 0
    for seq, steps in zip(res.sequences, res.token_steps):
        assert len(steps) == len(seq) and steps == sorted(steps) and steps[0] == 0


# ------------------------------------------------------------------------------------------
# the LlamaGen adapter: guided (doubled-batch) cache, class conditions with empty prompts, VQ latents


@pytest.fixture(scope="module")
def llamagen_lms():
    from leapgen.models.condition import ClassCondition, Guidance
    from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
    from leapgen.models.llamagen_lm import LlamaGenLM

    torch.manual_seed(0)
    kw = dict(vocab_size=32, n_head=2, multiple_of=16, num_classes=3, grid_size=4, token_dropout_p=0.0,
              resid_dropout_p=0.0, ffn_dropout_p=0.0)
    target = LlamaGenGPT(GPTConfig(dim=32, n_layer=2, **kw)).eval()
    draft = LlamaGenGPT(GPTConfig(dim=16, n_layer=1, **kw)).eval()
    with torch.no_grad():
        target.output.weight.normal_(0.0, 0.3)
        draft.output.weight.normal_(0.0, 0.3)
    latents = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))

    def make():
        lms = {"model": LlamaGenLM(target), "draft": LlamaGenLM(draft)}
        for lm in lms.values():
            lm.set_token_latents(latents)
        return lms

    return make, ClassCondition(labels=torch.tensor([0, 1, 2]), guidance=Guidance(3.0))


def test_image_samplers_on_the_llamagen_adapter(llamagen_lms):
    make, cond = llamagen_lms
    prompts = [[], [], []]  # the class condition fills the model's condition slots
    assert make()["model"].grid == (4, 4)
    ar = run("ar", make(), prompts, cond=cond, temperature=0.0, max_new_tokens=16)
    for init in ("random", "repeat_horizon"):
        assert run("sjd", make(), prompts, {"init": init}, cond=cond, temperature=0.0, max_new_tokens=16).sequences == ar.sequences
    spec = run("speculative", make(), prompts, {"schedule": "constant"}, cond=cond, temperature=1.0, top_k=8,
               max_new_tokens=16)
    lan0 = run("lantern", make(), prompts, {"delta": 0.0}, cond=cond, temperature=1.0, top_k=8, max_new_tokens=16)
    assert lan0.sequences == spec.sequences
    for name in ("sjd", "gsd", "lantern"):
        res = run(name, make(), prompts, cond=cond, temperature=1.0, top_k=8, max_new_tokens=16)
        assert all(len(s) == 16 and all(0 <= t < 32 for t in s) for s in res.sequences)
        assert res.stats.target_forwards <= 16
