"""ImageARPipeline: the unchanged ``ar`` / ``speculative`` samplers on LlamaGen models with
classifier-free guidance, prompts, acceptance maps, save/load, bad input, the shipped assets."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from test_distribution import tv, tv_bound
from test_image_models import TINY_VQ, tiny_gpt

from leapgen.errors import ConfigError, InputError, ModelMismatchError, UnknownSamplerError
from leapgen.models.condition import ClassCondition, Guidance
from leapgen.models.llamagen_lm import LlamaGenLM
from leapgen.pipelines import ImageARPipeline, Pipeline
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers
from leapgen.samplers.logits import LogitsProcessor
from leapgen.tokenizers.vq_image import VQConfig, VQModel
from leapgen.tokenizers.word_vocab import WordVocab

NAMES = ("faces", "animals", "flags")
ASSETS = Path(__file__).resolve().parents[1] / "assets" / "image-emoji"


def make_pipe(draft_noise: float = 0.005) -> ImageARPipeline:
    torch.manual_seed(0)
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    vocab = WordVocab(["red", "apple", "grinning", "face", "flag", ":", "fr", "dog", "cat"], max_len=3)
    model = tiny_gpt(text=True, seed=1, text_vocab_size=len(vocab), class_names=NAMES)
    draft = tiny_gpt(text=True, seed=1, text_vocab_size=len(vocab), class_names=NAMES)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * draft_noise)
    return ImageARPipeline(vq=vq, model=model, draft=draft, text_tokenizer=vocab)


@pytest.fixture(scope="module")
def pipe():
    return make_pipe()


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_speculative_greedy_equals_ar(pipe, cfg_scale):
    prompts = ["animals", "red apple", 0, "Flags"]
    a = pipe(prompts, sampler="ar", cfg_scale=cfg_scale, temperature=0.0)
    s = pipe(prompts, sampler="speculative", cfg_scale=cfg_scale, temperature=0.0, num_draft_tokens=3)
    assert a.token_ids.shape == (4, 4, 4)
    assert torch.equal(a.token_ids, s.token_ids)
    assert a.stats.target_forwards == 16 and s.stats.target_forwards < 16
    assert s.stats.step_compression > 1.0
    assert [im.size for im in a.images] == [(16, 16)] * 4
    guided_vs_plain = pipe(prompts, sampler="ar", cfg_scale=1.0 if cfg_scale != 1.0 else 3.0, temperature=0.0)
    assert not torch.equal(guided_vs_plain.token_ids, a.token_ids)  # guidance changes the images


AR_FAMILY_EXACT = [
    s.name for s in list_samplers()
    if s.guarantee in ("greedy-exact", "distribution-exact") and set(s.needs) <= {"model", "draft"} and s.name != "ar"
    and "causal" in s.contracts  # the raster model is a causal LM; other families have their own pipelines
]


@pytest.mark.parametrize("name", AR_FAMILY_EXACT)
def test_every_exact_ar_family_sampler_runs_on_images(pipe, name):
    """Every exact AR-family sampler of the registry runs on the image pipeline unchanged and, at
    T=0 under guidance, reproduces ``ar`` token for token. The class and text reach the model as
    a typed condition and the sampled prompts are empty: samplers that draft from the context
    (n-gram pools, tri-gram tables, Jacobi fillers, prompt lookup) start with nothing to copy."""
    prompts = ["animals", "red apple", 0]
    a = pipe(prompts, sampler="ar", cfg_scale=3.0, temperature=0.0)
    s = pipe(prompts, sampler=name, cfg_scale=3.0, temperature=0.0)
    assert torch.equal(a.token_ids, s.token_ids)
    assert s.stats.target_forwards <= a.stats.target_forwards


def test_sampling_seeds_images_and_acceptance_map(pipe):
    o1 = pipe(["faces", "dog"], sampler="speculative", seed=3, num_images_per_prompt=2, top_k=20)
    o2 = pipe(["faces", "dog"], sampler="speculative", seed=3, num_images_per_prompt=2, top_k=20)
    assert torch.equal(o1.token_ids, o2.token_ids)  # seeded
    assert o1.prompts == ["faces", "faces", "dog", "dog"] and len(o1.images) == 4
    assert len(o1.token_steps) == 4 and all(len(s) == 16 for s in o1.token_steps)
    m = o1.acceptance_map(1)
    assert m.size == (16 + 4 + 16, 16)
    grid_only = np.asarray(o1.acceptance_map(1, with_image=False, scale=2))
    assert grid_only.shape == (8, 8, 3)
    steps = np.asarray(o1.token_steps[1]).reshape(4, 4)
    colours = grid_only[::2, ::2].reshape(16, 3)
    for a, b in itertools.combinations(range(16), 2):  # same forward (of a run > 1) <=> same colour
        if steps.flat[a] == steps.flat[b]:
            assert (colours[a] == colours[b]).all()
    with pytest.raises(InputError):
        o1.acceptance_map(9)


def test_distribution_exact_under_guidance():
    """Speculative sampling on a 2x2 grid (V=4, 256 images) with CFG matches the exact distribution
    of the guided, top-k processed target, computed by enumeration (see test_distribution)."""
    torch.manual_seed(0)
    kw = dict(vocab_size=4, grid_size=2, text=False)
    target = LlamaGenLM(tiny_gpt(seed=3, **kw))
    dg = tiny_gpt(seed=3, **kw)
    with torch.no_grad():
        for p in dg.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    draft = LlamaGenLM(dg)
    cond = ClassCondition(labels=torch.tensor([1]), guidance=Guidance(2.0))
    p = target.condition_slots(cond)
    config = DecodeConfig(max_new_tokens=4, temperature=1.0, top_k=3)
    proc = LogitsProcessor(config)
    seqs = list(itertools.product(range(4), repeat=4))
    with torch.no_grad():
        big = cond.repeat_interleave(len(seqs))
        logits = target(torch.tensor([[0] * p + list(s[:3]) for s in seqs]), target.new_cache(len(seqs), big))
    probs = proc.probs(logits[:, p - 1 :])
    idx = torch.tensor(seqs)
    exact = probs.gather(-1, idx[..., None]).squeeze(-1).prod(-1).numpy().astype(np.float64)
    assert abs(exact.sum() - 1) < 1e-5
    n, batch = 20000, 5000
    counts = np.zeros(len(seqs))
    gen = torch.Generator().manual_seed(0)
    smp = get_sampler("speculative", num_draft_tokens=2)
    for _ in range(n // batch):
        res = smp.generate({"model": target, "draft": draft}, [[]] * batch, config, gen,
                           cond=cond.repeat_interleave(batch))
        for s in res.sequences:
            counts[((s[0] * 4 + s[1]) * 4 + s[2]) * 4 + s[3]] += 1
    assert tv(counts / n, exact) < tv_bound(exact, n)


def test_bad_input(pipe):
    with pytest.raises(InputError, match="faces"):
        pipe("")
    with pytest.raises(InputError, match="no prompt"):
        pipe([])
    with pytest.raises(InputError, match="valid ids are 0..2"):
        pipe(5)
    with pytest.raises(InputError, match="no word the model knows"):
        pipe("zebra crossing")
    with pytest.raises(InputError, match="cfg_scale"):
        pipe("faces", cfg_scale=-1.0)
    with pytest.raises(InputError, match="cfg_interval"):
        pipe("faces", cfg_interval=-2)
    with pytest.raises(InputError):
        pipe(True)
    with pytest.raises(InputError, match="num_images_per_prompt"):
        pipe("faces", num_images_per_prompt=0)
    with pytest.raises(UnknownSamplerError):
        pipe("faces", sampler="nope")
    nodraft = ImageARPipeline(vq=pipe.vq, model=pipe.model, draft=None, text_tokenizer=pipe.text_tokenizer)
    with pytest.raises(ConfigError, match="draft"):
        nodraft("faces", sampler="speculative")
    other = tiny_gpt(text=True, seed=1, vocab_size=64, text_vocab_size=len(pipe.text_tokenizer), class_names=NAMES)
    with pytest.raises(ModelMismatchError):
        ImageARPipeline(vq=pipe.vq, model=pipe.model, draft=other, text_tokenizer=pipe.text_tokenizer)


def test_save_and_load(pipe, tmp_path):
    pipe.save_pretrained(tmp_path / "p")
    again = Pipeline.from_pretrained(tmp_path / "p")
    assert isinstance(again, ImageARPipeline) and again.class_names == NAMES
    a = pipe(["animals", "red apple"], temperature=0.0, cfg_scale=2.0)
    b = again(["animals", "red apple"], temperature=0.0, cfg_scale=2.0)
    assert torch.equal(a.token_ids, b.token_ids)
    pipe.save_pretrained(tmp_path / "half", dtype=torch.float16)
    half = Path(tmp_path / "half" / "model" / "model.safetensors").stat().st_size
    full = Path(tmp_path / "p" / "model" / "model.safetensors").stat().st_size
    assert half < 0.6 * full


def test_shipped_assets():
    pipe = Pipeline.from_pretrained("leapgen/image-emoji")
    assert isinstance(pipe, ImageARPipeline) and pipe.grid == (16, 16)
    assert pipe.class_names == ("faces", "people", "animals", "food", "travel", "objects", "symbols", "flags")
    a = pipe(["food", "red apple"], sampler="ar", temperature=0.0, cfg_scale=3.0)
    s = pipe(["food", "red apple"], sampler="speculative", temperature=0.0, cfg_scale=3.0)
    assert torch.equal(a.token_ids, s.token_ids)
    assert a.images[0].size == (64, 64)
    assert s.stats.step_compression > 1.0
