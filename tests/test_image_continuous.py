"""Continuous-token images (issue #14): KL-VAE tokenizer, MAR, CSpD and Distilled Decoding.

Tiny random models (seconds) plus a few checks on the shipped assets. The registry-driven
guarantee tests of ``mar``/``cspd``/``dd`` live in tests/harness_image_continuous.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from harness_image_continuous import tiny_mar

from leapgen.errors import ConfigError, InputError, ModelMismatchError
from leapgen.models.condition import ClassCondition, Guidance
from leapgen.models.dd import DDConfig, DDGenerator, DDModel, flow_map
from leapgen.models.mar import MARModel
from leapgen.pipelines.base import shipped_assets_dir
from leapgen.samplers import get_sampler
from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.continuous.common import cfg_per_step, cosine_counts, step_of_position
from leapgen.samplers.continuous.cspd import log_ratio, sample_residual
from leapgen.tokenizers.kl_image import KL_PRESETS, KLConfig, KLImageTokenizer

torch.set_num_threads(1)
MAR_ASSET = shipped_assets_dir() / "image-emoji-mar"
DD_ASSET = shipped_assets_dir() / "image-emoji-dd"


# ------------------------------------------------------------------------------------------ schedule
def test_cosine_schedule_counts():
    # MAR's loop by hand for 256 tokens / 64 steps: first step commits N - floor(N cos(pi/2/64)) = 1
    counts = cosine_counts(256, 64)
    assert len(counts) == 64 and sum(counts) == 256 and counts[0] == 1 and min(counts) >= 1
    masked, want = 256, []
    for s in range(64):
        m = max(1, min(masked - 1, math.floor(256 * math.cos(math.pi / 2 * (s + 1) / 64)))) if s < 63 else 0
        want.append(masked - m)
        masked = m
    assert counts == want
    assert cosine_counts(64, 16) == [1, 1, 1, 2, 3, 3, 4, 4, 5, 5, 5, 6, 6, 6, 6, 6]  # the shipped default (by hand)
    assert cosine_counts(8, 8) == [1] * 8 and cosine_counts(8, 1) == [8]
    with pytest.raises(ConfigError, match="num_iter"):
        cosine_counts(8, 9)
    # linear CFG ramps to the full scale with the known fraction; step_of_position follows the order
    cfgs = cfg_per_step([1, 3, 4], 3.0, "linear")
    assert cfgs == pytest.approx([1.25, 2.0, 3.0]) and cfg_per_step([1, 3, 4], 3.0, "constant") == [3.0] * 3
    order = torch.tensor([[3, 0, 2, 1]])
    assert step_of_position(order, [1, 1, 2]).tolist() == [[1, 2, 2, 0]]


# ------------------------------------------------------------------------------------------ acceptance maths
def test_log_ratio_is_the_gaussian_density_ratio():
    g = torch.Generator().manual_seed(0)
    x, mp, mq = (torch.randn(50, 3, generator=g) for _ in range(3))
    sp, sq = torch.rand(50, generator=g) + 0.2, torch.rand(50, generator=g) + 0.2
    n = torch.distributions.Normal
    want = n(mp, sp[:, None]).log_prob(x).sum(-1) - n(mq, sq[:, None]).log_prob(x).sum(-1)
    assert torch.allclose(log_ratio(x, mp, sp, mq, sq), want, atol=1e-4)


def _cdf_gap(samples: np.ndarray, grid: np.ndarray, cdf: np.ndarray) -> float:
    emp = np.searchsorted(np.sort(samples), grid, side="right") / len(samples)
    return float(np.abs(emp - cdf).max())


def test_residual_sampling_matches_the_closed_form_in_1d():
    """norm(max(0, p - q)) for p = N(0, 1), q = N(0.8, 0.6): rejection draws vs numerical CDF, and
    the full speculative step (draft from q, accept p/q, else residual) vs p's CDF."""
    n, g = 40000, torch.Generator().manual_seed(3)
    mp, sp, mq, sq = (torch.full((n, 1), v) for v in (0.0, 1.0, 0.8, 0.6))
    res, fell = sample_residual(mp, sp[:, 0], mq, sq[:, 0], g, 100)
    assert not bool(fell.any())
    grid = np.linspace(-5, 5, 4001)
    p = np.exp(-grid**2 / 2) / math.sqrt(2 * math.pi)
    q = np.exp(-((grid - 0.8) ** 2) / (2 * 0.36)) / (0.6 * math.sqrt(2 * math.pi))
    r = np.clip(p - q, 0, None)
    cdf = np.cumsum(r) / r.sum()
    gap_res = _cdf_gap(res[:, 0].numpy(), grid, cdf)
    # full step
    x = mq + sq * torch.randn((n, 1), generator=g)
    acc = torch.log(torch.rand(n, generator=g)) < log_ratio(x, mp, sp[:, 0], mq, sq[:, 0])
    out = torch.where(acc[:, None], x, res)
    from math import erf
    cdf_p = np.array([0.5 * (1 + erf(v / math.sqrt(2))) for v in grid])
    gap_full = _cdf_gap(out[:, 0].numpy(), grid, cdf_p)
    bound = 1.95 / math.sqrt(n)  # KS 0.1 % critical value
    assert gap_res < bound and gap_full < bound, (gap_res, gap_full, bound)
    # a residual that is (nearly) empty falls back to p after the bounded tries, and says so
    _, fell = sample_residual(mp[:50], sp[:50, 0], mp[:50] + 1e-9, sp[:50, 0], g, 3)
    assert bool(fell.all())


# ------------------------------------------------------------------------------------------ samplers
def _cond(b: int, scale: float = 2.0) -> ClassCondition:
    return ClassCondition(labels=torch.arange(b) % 3, guidance=Guidance(scale))


def test_mar_and_cspd_seeded_and_counted():
    target, draft = tiny_mar(0), tiny_mar(1, perturb=0.05, base=tiny_mar(0))
    cfg = DecodeConfig(max_new_tokens=16, temperature=1.0)
    runs = []
    for _ in range(2):
        models = {"model": MARModel(target), "draft": MARModel(draft)}
        res = get_sampler("cspd", num_iter=6, num_draft=3).generate(models, [[]] * 3, cfg, torch.Generator().manual_seed(4), cond=_cond(3))
        runs.append(res)
        st = res.stats
        # target forwards: 1 prefill step (round(0.15 * 6)) + one per verification round
        assert st.target_forwards == 1 + (len(st.accepted_per_step) - 1)
        assert st.draft_forwards == models["draft"].forwards and st.target_forwards == models["model"].forwards
    assert torch.equal(runs[0].values, runs[1].values)
    other = get_sampler("cspd", num_iter=6, num_draft=3).generate(
        {"model": MARModel(target), "draft": MARModel(draft)}, [[]] * 3, cfg, torch.Generator().manual_seed(5), cond=_cond(3))
    assert not torch.equal(runs[0].values, other.values)
    mar = get_sampler("mar", num_iter=6).generate({"model": MARModel(target)}, [[]] * 3, cfg, torch.Generator().manual_seed(4), cond=_cond(3))
    assert mar.stats.target_forwards == 6 and mar.stats.step_compression == pytest.approx(16 / 6)


def test_cspd_refuses_a_mismatched_draft_and_bad_parameters():
    target = tiny_mar(0)
    other = tiny_mar(2, token_dim=3)
    cfg = DecodeConfig(max_new_tokens=16, temperature=1.0)
    with pytest.raises(ModelMismatchError, match="token dimension"):
        get_sampler("cspd").generate({"model": MARModel(target), "draft": MARModel(other)}, [[]], cfg, cond=_cond(1))
    with pytest.raises(ConfigError, match="inner_temperature"):
        get_sampler("cspd", inner_temperature=0.5)
    with pytest.raises(ConfigError, match="prefill_ratio"):
        get_sampler("cspd", prefill_ratio=1.5)
    with pytest.raises(ConfigError, match="num_iter"):
        get_sampler("mar", num_iter=99).generate({"model": MARModel(target)}, [[]], cfg, cond=_cond(1))


# ------------------------------------------------------------------------------------------ tokenizer
def test_vae_round_trip_and_bad_latents():
    tok = KLImageTokenizer(KLConfig(**KL_PRESETS["tiny"], image_size=16)).eval()
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    t = tok.encode_tokens(x)
    assert t.shape == (2, 16, 4) and tok.decode_tokens(t).shape == (2, 3, 16, 16)
    assert len(tok.decode(t)) == 2
    with pytest.raises(InputError, match=r"\[B, 16, 4\]"):
        tok.decode_tokens(torch.zeros(2, 16, 5))
    with pytest.raises(InputError, match="float"):
        tok.decode_tokens(torch.zeros(2, 16, 4, dtype=torch.long))
    with pytest.raises(InputError, match="NaN"):
        tok.decode_tokens(torch.full((1, 16, 4), float("nan")))
    with pytest.raises(InputError, match="images"):
        tok.encode_tokens(torch.zeros(2, 16, 16))


# ------------------------------------------------------------------------------------------ distilled decoding
def test_flow_map_is_deterministic_and_lands_on_codes():
    g = torch.Generator().manual_seed(0)
    codebook = torch.nn.functional.normalize(torch.randn(32, 8, generator=g), dim=-1)
    noise = torch.randn(20, 8, generator=g)
    ids = torch.randint(32, (20,), generator=g)
    onehot = torch.nn.functional.one_hot(ids, 32).float()
    for steps in (1, 4, 32):
        x, tok = flow_map(noise, onehot, codebook, steps)
        assert torch.equal(tok, ids) and torch.allclose(x, codebook[ids], atol=1e-6)
    probs = torch.softmax(torch.randn(20, 32, generator=g) * 3, -1)
    a, b = flow_map(noise, probs, codebook), flow_map(noise.clone(), probs, codebook)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # it lands (nearly) on a code vector and follows the categorical: the map of many noises hits
    # each of two codes about as often as its probability
    two = torch.zeros(4000, 32)
    two[:, 3], two[:, 7] = 0.25, 0.75
    _, tok = flow_map(torch.randn(4000, 8, generator=g), two, codebook, 32)
    assert set(tok.tolist()) <= {3, 7} and abs(float((tok == 7).float().mean()) - 0.75) < 0.03


def test_dd_generator_steps_and_errors():
    torch.manual_seed(0)
    net = DDGenerator(DDConfig(vocab_size=16, dim=32, n_layer=1, n_head=2, multiple_of=16, num_classes=3, grid_size=4,
                               noise_dim=4)).eval()
    m = DDModel(net)
    cfg = DecodeConfig(max_new_tokens=16)
    r1 = get_sampler("dd").generate({"model": m}, [[]] * 2, cfg, torch.Generator().manual_seed(0), cond=_cond(2, 1.0))
    r2 = get_sampler("dd", num_steps=2).generate({"model": m}, [[]] * 2, cfg, torch.Generator().manual_seed(0), cond=_cond(2, 1.0))
    assert r1.stats.target_forwards == 1 and r2.stats.target_forwards == 2 and len(r2.sequences[0]) == 16
    assert r2.sequences[0][:8] == r1.sequences[0][:8]  # step 2 keeps the first half of step 1
    with pytest.raises(ConfigError, match="num_steps must be one of"):
        get_sampler("dd", num_steps=3).generate({"model": m}, [[]], cfg, cond=_cond(1, 1.0))
    with pytest.raises(InputError, match="noise"):
        net.logits(torch.zeros(1, 16, 5), torch.zeros(1, dtype=torch.long), None)


# ------------------------------------------------------------------------------------------ shipped assets
@pytest.fixture(scope="module")
def mar_pipe():
    if not (MAR_ASSET / "model_index.json").is_file():
        pytest.fail("assets/image-emoji-mar is missing: run `make train-image-mar`")
    from leapgen import Pipeline

    return Pipeline.from_pretrained("leapgen/image-emoji-mar")


def test_shipped_mar_pipeline_cspd_and_bad_prompts(mar_pipe):
    out = mar_pipe(["red apple", "animals", "zzqx"], sampler="cspd", seed=0, num_iter=8)
    assert out.images[0].size == (64, 64) and out.images[2] is None and "no word" in out.errors[2]
    assert out.stats.target_forwards < 8 + 1 and out.stats.draft_forwards > 0
    again = mar_pipe(["red apple", "animals", "zzqx"], sampler="cspd", seed=0, num_iter=8)
    assert torch.equal(out.tokens[:2], again.tokens[:2]) and out.tokens[2].isnan().all()  # row i is image i
    with pytest.raises(InputError, match="no word the model knows"):
        mar_pipe(["zzqx"], sampler="mar")
    with pytest.raises(InputError, match="no prompt could be used: .*empty.*no word"):
        mar_pipe(["", "zzqx"], sampler="mar")
    with pytest.raises(ModelMismatchError, match="mar"):
        mar_pipe("red apple", sampler="ar")
    with pytest.raises(ConfigError, match=r"unknown keyword\(s\) \['num_steps'\].*cfg_scale.*of sampler 'mar' are"):
        mar_pipe("red apple", num_steps=1)


def test_shipped_dd_pipeline():
    if not (DD_ASSET / "model_index.json").is_file():
        pytest.fail("assets/image-emoji-dd is missing: run `make train-image-dd`")
    from leapgen import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/image-emoji-dd")
    one = pipe(["red apple", "flags"], num_steps=1, seed=1)
    two = pipe(["red apple", "flags"], num_steps=2, seed=1)
    assert one.stats.target_forwards == 1 and two.stats.target_forwards == 2 and one.images[1].size == (64, 64)
    assert torch.equal(one.tokens.flatten(1)[:, :128], two.tokens.flatten(1)[:, :128])
    with pytest.raises(ConfigError, match="num_steps"):
        pipe("red apple", num_steps=4)
    with pytest.raises(ModelMismatchError, match="cspd"):  # was "'cspd' got unknown parameter num_steps"
        pipe("red apple", sampler="cspd")
    for kw in ("temperature", "cfg_scale", "foo"):  # were a raw TypeError (unexpected keyword argument)
        with pytest.raises(ConfigError, match=rf"unknown keyword\(s\) \['{kw}'\]; the call's parameters are: prompt, "
                                              r"sampler, num_steps, seed.*of sampler 'dd' are: num_steps"):
            pipe("red apple", **{kw: 0})
