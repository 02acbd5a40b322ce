"""Image families that decode many tokens per step (issue #13): NAR next-neighbour, VAR next-scale,
NFIG next-frequency, CTF coarse-to-fine -- orders, masks, tokenizers, the pipelines on tiny random
models (conditioning, guidance, seeds, save/load, bad input) and the shipped assets.

The guarantees of ``nar`` / ``var`` / ``nfig`` / ``ctf`` (greedy == uncached reference, enumeration
exactness), seeded reproducibility and their bad-parameter tests run in the registry harness
(``tests/harness_image_families.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness_image_families import TINY, randomise
from test_image_models import TINY_VQ

from leapgen.errors import ConfigError, InputError, ModelMismatchError
from leapgen.models.condition import ClassCondition, Guidance
from leapgen.models.ctf import CTFFineConfig, CTFFineGPT, kmeans_codebook
from leapgen.models.image_orders import (
    block_causal_mask,
    diagonal_order,
    proximity_mask,
    raster_order,
    scale_slices,
)
from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
from leapgen.models.llamagen_lm import LlamaGenLM
from leapgen.models.nar import NARGPT, NARLM, NARConfig
from leapgen.models.var import ScaleGPT, ScaleGPTConfig
from leapgen.pipelines import (
    ImageARPipeline,
    ImageCTFPipeline,
    ImageNARPipeline,
    ImageScalePipeline,
    Pipeline,
)
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.samplers.logits import LogitsProcessor
from leapgen.samplers.scale.var import level_scale
from leapgen.tokenizers.multiscale_vq import MultiScaleVQ, MultiScaleVQConfig
from leapgen.tokenizers.vq_image import VQConfig, VQModel

ASSETS = Path(__file__).resolve().parents[1] / "assets"
NAMES = ("faces", "animals", "flags")


# ------------------------------------------------------------------------------------------ orders


@pytest.mark.parametrize("h,w", [(4, 4), (16, 16), (3, 5)])
def test_orders_decode_every_cell_once(h, w):
    for order in (diagonal_order(h, w), raster_order(h, w)):
        cells = torch.cat(order)
        assert sorted(cells.tolist()) == list(range(h * w))
    diag = diagonal_order(h, w)
    assert len(diag) == h + w - 1  # 31 for 16x16, prefill included
    for d, cells in enumerate(diag):
        assert all(int(c) // w + int(c) % w == d for c in cells)


def test_scale_order_counts():
    slices = scale_slices((1, 2, 3, 4, 6, 8, 10, 13, 16))
    assert len(slices) == 9 and slices[-1].stop == 655
    with pytest.raises(ConfigError):
        scale_slices((2, 1))


def test_proximity_mask_matches_its_definition_on_4x4():
    p = 2
    m = proximity_mask(4, 4, prefix=p)
    assert m.shape == (18, 18)
    for q in range(18):
        for k in range(18):
            if q < p:  # the condition prefix is causal and sees no image token
                want = k <= q
            elif k < p:  # every image token sees the whole prefix
                want = True
            else:
                dq, dk = (q - p) // 4 + (q - p) % 4, (k - p) // 4 + (k - p) % 4
                want = dk <= dq  # its own anti-diagonal included
            assert bool(m[q, k]) == want, (q, k)


def test_block_causal_mask():
    m = block_causal_mask((1, 2, 3), prefix=1)  # inputs of scales 1 (4 tokens) and 2 (9 tokens)
    assert m.shape == (14, 14)
    assert m[1:5, 1:5].all() and not m[1:5, 5:].any() and m[5:, 1:].all() and m[:, 0].all()


# ------------------------------------------------------------------------------------------ NAR


def tiny_nar(seed: int = 3) -> NARGPT:
    return randomise(NARGPT(NARConfig(vocab_size=32, grid_size=4, class_names=NAMES, **TINY)), seed=seed)


@pytest.mark.parametrize("batch", [1, 4])
def test_nar_without_second_head_is_raster_decoding_of_the_right_head(batch):
    """order='raster' (below head disabled) == ar on the same network's causal adapter, token for token."""
    g = tiny_nar()
    cond = ClassCondition(labels=torch.arange(batch) % 3, guidance=Guidance(3.0))
    for temperature in (1.0, 0.0):
        cfg = DecodeConfig(max_new_tokens=16, temperature=temperature, top_k=8)
        a = get_sampler("nar", order="raster").generate({"model": NARLM(g)}, [[]] * batch, cfg, torch.Generator().manual_seed(7), cond=cond)
        b = get_sampler("ar").generate({"model": LlamaGenLM(g)}, [[]] * batch, cfg, torch.Generator().manual_seed(7), cond=cond)
        assert a.sequences == b.sequences
        assert a.stats.target_forwards == b.stats.target_forwards == 16


def test_nar_forwards_and_token_steps():
    g = tiny_nar()
    res = get_sampler("nar").generate({"model": NARLM(g)}, [[]] * 2, DecodeConfig(max_new_tokens=16, temperature=1.0),
                                      torch.Generator().manual_seed(0), cond=ClassCondition(labels=torch.tensor([0, 1])))
    assert res.stats.target_forwards == 7 and res.stats.step_compression == pytest.approx(16 / 7)
    assert res.token_steps[0] == [i + j for i in range(4) for j in range(4)]  # forward d made diagonal d


def test_nar_cached_steps_match_the_uncached_forward():
    g = tiny_nar()
    lm = NARLM(g)
    codes = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(1))
    state, r0, b0 = lm.start(2, ClassCondition(labels=torch.tensor([1, 2])))
    right, below = g.teacher_heads(torch.tensor([[1], [2]]), codes)
    assert torch.allclose(r0, right[:, 0], atol=1e-5) and torch.allclose(b0, below[:, 0], atol=1e-5)
    for cells in diagonal_order(4, 4):
        r, b = lm.step(state, codes[:, cells], cells)
        assert torch.allclose(r, right[:, 1 + cells], atol=1e-4) and torch.allclose(b, below[:, 1 + cells], atol=1e-4)


# ------------------------------------------------------------------------------------------ VAR / NFIG


def tiny_msvq(band: str, scales=(1, 2, 4)) -> MultiScaleVQ:
    torch.manual_seed(0)
    cfg = dict(TINY_VQ, ch_mult=(1, 2, 2), image_size=16, scales=scales, band=band)
    return randomise(MultiScaleVQ(MultiScaleVQConfig(**cfg)), seed=5, std=0.5)


@pytest.mark.parametrize("band", ["spatial", "frequency"])
def test_residual_sum_reconstructs_the_latents(band):
    """Without quantisation the residual sum over all scales is the single-scale latent (the last scale
    is full resolution); with the codebook fitted to the residuals, the error shrinks scale after scale."""
    tok = tiny_msvq(band)
    f = torch.nn.functional.normalize(torch.randn(3, 4, 4, 4), dim=1)
    _, f_hat, _ = tok.encode_scales(f, quantize=False)
    assert torch.allclose(f_hat, f, atol=1e-5)
    # codebook = the exact residuals of these latents -> quantised round trip is (near) exact too
    _, _, targets = tok.encode_scales(f, quantize=False)
    vecs = torch.cat([t.permute(0, 2, 3, 1).reshape(-1, 4) for t in targets])[: tok.codebook_size]
    with torch.no_grad():
        tok.quantize.embedding.weight[: vecs.shape[0]] = vecs
    codes, f_hat, _ = tok.encode_scales(f[:1])
    assert (f_hat - f[:1]).norm() / f[:1].norm() < 0.05
    flat = torch.cat([c.flatten(1) for c in codes], 1)
    assert torch.allclose(tok.codes_to_latents(flat), f_hat, atol=1e-5)


def test_frequency_bands_are_low_pass_and_exact_on_their_grid():
    tok = tiny_msvq("frequency")
    x = torch.randn(2, 4, 2, 2)
    assert torch.allclose(tok.down(tok.up(x), 2), x, atol=1e-5)
    f = torch.randn(2, 4, 4, 4)
    assert torch.allclose(tok.down(f, 1)[..., 0, 0], f.mean((-1, -2)), atol=1e-5)  # band 1 = DC = the mean


def test_guidance_grows_linearly_over_scales():
    assert [level_scale(3.0, k, 5, "linear") for k in range(5)] == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert level_scale(3.0, 0, 5, "constant") == 3.0


# ------------------------------------------------------------------------------------------ CTF


def test_kmeans_and_fine_tokens_lie_in_their_cluster():
    cb = torch.nn.functional.normalize(torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    labels, cent = kmeans_codebook(cb, 5, seed=0)
    assert labels.shape == (32,) and set(labels.tolist()) == set(range(5))
    fine = randomise(CTFFineGPT(CTFFineConfig(vocab_size=5, fine_vocab_size=32, grid_size=4, **TINY)), seed=2)
    fine.set_clusters(labels)
    coarse = torch.randint(0, 5, (6, 16), generator=torch.Generator().manual_seed(3))
    for t in (0.0, 1.0, 2.0):
        logits = fine.fine_logits(coarse, torch.zeros(6, dtype=torch.long), None)
        toks = LogitsProcessor(DecodeConfig(temperature=t)).sample(logits, None, torch.Generator().manual_seed(4))
        assert torch.equal(labels[toks], coarse)


# ------------------------------------------------------------------------------------------ pipelines


def tiny_pipes() -> dict[str, Pipeline]:
    torch.manual_seed(0)
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    nar = ImageNARPipeline(vq=vq, model=tiny_nar())
    tok_v, tok_f = tiny_msvq("spatial"), tiny_msvq("frequency")
    sg = randomise(ScaleGPT(ScaleGPTConfig(vocab_size=32, grid_size=4, scales=(1, 2, 4), latent_dim=4, class_names=NAMES, **TINY)), 6)
    var = ImageScalePipeline(vq=tok_v, model=sg)
    nfig = ImageScalePipeline(vq=tok_f, model=sg)
    labels, _ = kmeans_codebook(vq.codebook(), 4, seed=0)
    coarse = randomise(LlamaGenGPT(GPTConfig(vocab_size=4, grid_size=4, class_names=NAMES, **TINY)), 7)
    draft = randomise(LlamaGenGPT(GPTConfig(vocab_size=4, grid_size=4, class_names=NAMES, **TINY)), 8)
    fine = randomise(CTFFineGPT(CTFFineConfig(vocab_size=4, fine_vocab_size=32, grid_size=4, class_names=NAMES, **TINY)), 9)
    fine.set_clusters(labels)
    ctf = ImageCTFPipeline(vq=vq, model=coarse, fine=fine, draft=draft)
    return {"nar": nar, "var": var, "nfig": nfig, "ctf": ctf}


@pytest.fixture(scope="module")
def pipes():
    return tiny_pipes()


FORWARDS = {"nar": 7, "var": 3, "nfig": 3, "ctf": 16}


@pytest.mark.parametrize("family", ["nar", "var", "nfig", "ctf"])
def test_pipeline_generates_with_guidance_and_seeds(pipes, family):
    pipe = pipes[family]
    for batch in (1, 4):
        prompts = ["animals", 0, "flags", "faces"][:batch]
        a = pipe(prompts, sampler=family, cfg_scale=3.0, seed=11)
        b = pipe(prompts, sampler=family, cfg_scale=3.0, seed=11)
        assert len(a.images) == batch and a.images[0].size == (16, 16)
        assert torch.equal(a.token_ids, b.token_ids), "same seed, same images"
        assert a.stats.target_forwards == FORWARDS[family]
    c = pipe(["animals"] * 2, sampler=family, cfg_scale=1.0, seed=11, temperature=0.0)
    d = pipe(["animals"] * 2, sampler=family, cfg_scale=5.0, seed=11, temperature=0.0)
    assert torch.equal(c.token_ids[0], c.token_ids[1]) and not torch.equal(c.token_ids, d.token_ids)


def test_nar_pipeline_runs_raster_samplers_on_the_same_model(pipes):
    out = pipes["nar"](["animals"], sampler="ar", seed=0)
    assert out.stats.target_forwards == 16 and out.stats.sampler == "ar"


@pytest.mark.parametrize("coarse", ["speculative", "sjd", "lantern", "gsd"])
def test_ctf_coarse_stage_takes_speculative_samplers(pipes, coarse):
    out = pipes["ctf"](["animals", "flags"], sampler=coarse, seed=0, cfg_scale=2.0)
    assert out.stats.sampler == f"ctf+{coarse}" and out.stats.extra["coarse_sampler"] == coarse
    assert out.stats.other_forwards == 1
    lab = pipes["ctf"].fine.cluster_of
    assert torch.equal(lab[out.token_ids.flatten(1)], torch.tensor(out.stats.extra["coarse"]))


def test_ctf_stats_name_the_coarse_sampler_that_ran(pipes):
    """sampler="ar" on the CTF pipeline runs CTF with an ar coarse stage (the same images as "ctf");
    its stats used to say only "ctf", as did those of "sjd" and "speculative"."""
    ctf = pipes["ctf"](["animals"], sampler="ctf", seed=0)
    ar = pipes["ctf"](["animals"], sampler="ar", seed=0)
    assert torch.equal(ctf.token_ids, ar.token_ids)
    assert ctf.stats.sampler == ar.stats.sampler == "ctf+ar"
    assert pipes["ctf"](["animals"], sampler="ctf", coarse_sampler="sjd", seed=0).stats.sampler == "ctf+sjd"


def test_save_and_load(pipes, tmp_path):
    for name, pipe in pipes.items():
        pipe.save_pretrained(tmp_path / name)
        again = Pipeline.from_pretrained(tmp_path / name)
        assert type(again) is type(pipe)
        sampler = name
        a, b = pipe(["faces"], sampler=sampler, seed=3), again(["faces"], sampler=sampler, seed=3)
        assert torch.equal(a.token_ids, b.token_ids)


def test_wrong_sampler_names_the_families_that_can(pipes):
    with pytest.raises(ModelMismatchError, match="var.*leapgen/image-emoji"):
        pipes["var"](["faces"], sampler="sjd")
    with pytest.raises(ModelMismatchError, match="nfig"):
        pipes["nfig"](["faces"], sampler="var")
    with pytest.raises(ModelMismatchError, match="nar"):
        pipes["var"](["faces"], sampler="nar")
    raster = ImageARPipeline(vq=pipes["nar"].vq, model=LlamaGenGPT(GPTConfig(vocab_size=32, grid_size=4, **TINY)))
    with pytest.raises(ModelMismatchError) as err:
        raster(["class 0"], sampler="nar")
    assert "next-neighbour" in str(err.value) and "sjd" in str(err.value) and "leapgen/image-emoji-nar" in str(err.value)
    with pytest.raises(ConfigError, match="coarse_sampler"):
        get_sampler("ctf", coarse_sampler="var")


@pytest.mark.parametrize("family", ["nar", "var", "ctf"])
def test_bad_prompts_as_in_the_raster_pipeline(pipes, family):
    pipe = pipes[family]
    with pytest.raises(InputError, match="empty"):
        pipe([""], sampler=family)
    with pytest.raises(InputError, match="unknown class"):
        pipe(["no such class"], sampler=family)
    with pytest.raises(InputError, match="out of range"):
        pipe([7], sampler=family)
    with pytest.raises(InputError, match="cfg_scale"):
        pipe(["faces"], sampler=family, cfg_scale=-1)
    # refused before decoding (a huge scale used to decode whole images, then fail with a NumericalError)
    with pytest.raises(InputError, match="from 0 to 1000"):
        pipe(["faces"], sampler=family, cfg_scale=1e6)


# ------------------------------------------------------------------------------------------ shipped


@pytest.mark.parametrize("name,sampler,forwards", [("image-emoji-nar", "nar", 31), ("image-emoji-var", "var", 9),
                                                   ("image-emoji-nfig", "nfig", 9), ("image-emoji-ctf", "ctf", 256)])
def test_shipped_assets(name, sampler, forwards):
    if not (ASSETS / name / "model_index.json").is_file():
        pytest.fail(f"assets/{name} is missing; train it with `leapgen train {name.replace('-emoji', '')}`")
    pipe = Pipeline.from_pretrained(f"leapgen/{name}")
    prompts = ["red apple"] if sampler == "ctf" else ["red apple", "animals"]  # ctf: 256 coarse forwards, keep it short
    out = pipe(prompts, sampler=sampler, cfg_scale=3.0, seed=0)
    again = pipe(prompts, sampler=sampler, cfg_scale=3.0, seed=0)
    assert out.stats.target_forwards == forwards and torch.equal(out.token_ids, again.token_ids)
    assert out.images[0].size == (64, 64)
    assert sum(p.stat().st_size for p in (ASSETS / name).rglob("*") if p.is_file()) <= 30 * 2**20
