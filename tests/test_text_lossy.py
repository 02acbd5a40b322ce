"""Quality-for-speed text samplers (#19): no-op settings equal ``ar`` token for token, the model
options (layered forward, FiRST routing, GEAR) behave, trained heads load from the pipeline folder,
and missing or foreign heads and bad settings give clear errors.

Tiny random Llamas from conftest on the lean runtime (fast); a few checks on the shipped
``text-code`` pipeline (its heads when ``assets/text-code/heads`` exists)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, make_llama, perturbed_copy
from harness_text_heads import random_heads

from leapgen.errors import AssetNotFoundError, ConfigError, ModelMismatchError
from leapgen.models import HFCausalLM
from leapgen.models.lean import LeanCausalLM
from leapgen.models.text_heads import HeadedLM, TextHeads, load_heads
from leapgen.models.text_variants import Gear, VariantLM, cache_bytes
from leapgen.samplers import DecodeConfig, get_sampler

PROMPTS = [[5, 17, 3, 17, 5, 9], [1, 2, 3], [40, 41, 40, 41, 7, 8, 9, 10]]
ASSET = Path(__file__).resolve().parents[1] / "assets" / "text-code"


@pytest.fixture(scope="module")
def tiny():
    target = make_llama(VOCAB, seed=1, layers=3, max_pos=256)
    draft = perturbed_copy(target, noise=0.1, seed=2)
    lean = LeanCausalLM.from_hf(target)
    return target, draft, lean, random_heads(lean)


def _run(name, models, temperature=0.0, new=24, prompts=PROMPTS, seed=0, **params):
    cfg = DecodeConfig(max_new_tokens=new, temperature=temperature)
    with torch.inference_mode():
        return get_sampler(name, **params).generate(models, prompts, cfg, torch.Generator().manual_seed(seed))


def test_layered_forward_equals_the_lean_runtime(tiny):
    _, _, lean, _ = tiny
    ref = _run("ar", {"model": lean})
    for temperature in (0.0, 1.0):
        a = _run("ar", {"model": lean}, temperature)
        b = _run("ar", {"model": VariantLM(lean, capture=True)}, temperature)
        assert a.sequences == b.sequences
    assert ref.sequences == _run("ar", {"model": VariantLM(lean)}).sequences


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_no_op_settings_equal_ar(tiny, temperature):
    """fallback threshold 1, judge disabled, all layers kept, no compression, one trial: ar (or
    speculative for judge) token for token, at T=0 and T=1, batch 3."""
    target, draft, lean, heads = tiny
    plain = {"model": lean, "draft": LeanCausalLM.from_hf(draft)}
    ar = _run("ar", {"model": lean}, temperature)
    assert _run("bild", plain, temperature, fallback_threshold=1.0).sequences == ar.sequences
    assert _run("gear", {"model": lean}, temperature, bits=0).sequences == ar.sequences
    assert _run("cntp", {"model": lean}, temperature, max_trials=1).sequences == ar.sequences
    assert _run("first", {"model": HeadedLM(lean, heads)}, temperature, threshold=1.0).sequences == ar.sequences
    spec = _run("speculative", plain, temperature, schedule="constant", num_draft_tokens=8)
    judge = _run("judge", {"model": HeadedLM(lean, heads), "draft": plain["draft"]}, temperature, threshold=1.0)
    assert judge.sequences == spec.sequences
    assert judge.stats.accepted_per_step == spec.stats.accepted_per_step


def test_greedy_special_cases(tiny):
    """cntp at T=0 is greedy ar; superposed with k=1 is greedy ar; bild with rollback 0 keeps only
    the target's argmax (greedy-identical)."""
    target, draft, lean, heads = tiny
    ar = _run("ar", {"model": lean})
    assert _run("cntp", {"model": lean}).sequences == ar.sequences
    assert _run("superposed", {"model": HeadedLM(lean, heads)}, k=1).sequences == ar.sequences
    bild = _run("bild", {"model": lean, "draft": LeanCausalLM.from_hf(draft)}, rollback_threshold=0.0,
                fallback_threshold=0.0)
    assert bild.sequences == ar.sequences and bild.stats.accepted_draft_tokens > 0


def test_lossy_settings_change_something(tiny):
    target, draft, lean, heads = tiny
    ar = _run("ar", {"model": lean}, new=32)
    far = LeanCausalLM.from_hf(make_llama(VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, seed=3))
    bild = _run("bild", {"model": lean, "draft": far}, new=32, fallback_threshold=0.0, rollback_threshold=50.0)
    assert bild.sequences != ar.sequences  # everything the little model writes is kept
    first = _run("first", {"model": HeadedLM(lean, heads)}, new=32, threshold=0.0, max_skip=2)
    assert first.stats.extra["layers_run_per_forward"] < 3
    sup = _run("superposed", {"model": HeadedLM(lean, heads)}, new=16, k=3)
    assert all(len(c) == 3 for c in sup.stats.extra["completions"])
    assert sup.stats.target_forwards == 16 * len(PROMPTS)  # one forward per token for all k completions
    # the statistics count those forwards as steps of one token, like ar's (not one step per completion)
    assert sup.stats.mean_accepted == 1.0
    assert sum(map(sum, sup.stats.accepted_per_step)) == sup.stats.new_tokens
    assert [len(s) for s in sup.token_steps] == [len(s) for s in sup.sequences]
    assert all(len(set(s)) == len(s) for s in sup.token_steps)  # each token its own forward
    calls = []  # the pipelines' progress bar and callback_on_step_end: once per one-token step, as ar
    cfg = DecodeConfig(max_new_tokens=16, step_callback=lambda step, stats: calls.append((step, stats.accepted_per_step[-1])))
    with torch.inference_mode():
        res = get_sampler("superposed", k=3).generate({"model": HeadedLM(lean, heads)}, PROMPTS, cfg)
    assert [c[0] for c in calls] == list(range(1, res.stats.new_tokens + 1)) and all(c[1] == [1] for c in calls)


def _skip_layer_1(layer: int, h: torch.Tensor) -> torch.Tensor:
    """A fixed FiRST decision (skip layer 1 for every row), so cached and uncached runs route alike."""
    return torch.full((h.shape[0],), layer == 1, dtype=torch.bool)


def test_first_routing_is_kv_cache_compatible_and_any_sampler_runs_on_it(tiny):
    """FiRST as a model option: (1) a cached greedy decode over a routed model equals recomputing
    the routed model over the whole sequence at every step (the skipped layer's cache is never
    read); (2) speculative and lookahead, which roll the cache back, equal ar on the same routed
    model; (3) the routing really changes the output."""
    target, draft, lean, _ = tiny
    routed = VariantLM(lean, router=_skip_layer_1)
    ar = _run("ar", {"model": routed}, new=16, prompts=PROMPTS[:2])
    with torch.inference_mode():
        for prompt, got in zip(PROMPTS[:2], ar.sequences):
            seq = list(prompt)
            for _ in range(16):
                logits = routed(torch.tensor([seq]), routed.new_cache(1))
                seq.append(int(logits[0, -1].argmax()))
            assert seq[len(prompt):] == got
    spec = _run("speculative", {"model": routed, "draft": LeanCausalLM.from_hf(draft)}, new=16, prompts=PROMPTS[:2])
    assert spec.sequences == ar.sequences and spec.stats.accepted_draft_tokens > 0
    assert _run("lookahead", {"model": routed}, new=16, prompts=PROMPTS[:2]).sequences == ar.sequences
    assert ar.sequences != _run("ar", {"model": lean}, new=16, prompts=PROMPTS[:2]).sequences


def test_gear_cache_under_a_rolling_back_sampler(tiny):
    """GEAR as a cache option under speculative decoding: drafts and rollbacks stay inside the
    uncompressed buffer, so with no compression it is ar token for token, and over 4-bit blocks
    (compressed every 8 slots) it decodes valid tokens with drafts accepted."""
    _, draft, lean, _ = tiny
    d = LeanCausalLM.from_hf(draft)
    ar = _run("ar", {"model": lean}, new=40)
    plain = _run("speculative", {"model": VariantLM(lean, gear=Gear(bits=0)), "draft": d}, new=40)
    assert plain.sequences == ar.sequences
    gear = Gear(bits=4, buffer=8, block=8)
    lm = VariantLM(lean, gear=gear)
    res = _run("speculative", {"model": lm, "draft": d}, new=40, num_draft_tokens=4, schedule="constant")
    assert all(len(s) == 40 and all(0 <= t < VOCAB for t in s) for s in res.sequences)
    assert res.stats.accepted_draft_tokens > 0


def test_cntp_trials_cost_forwards_and_stay_valid(tiny):
    _, _, lean, _ = tiny
    res = _run("cntp", {"model": lean}, 1.0, new=24, entropy_low=0.0, entropy_high=0.01, max_trials=4, trial_tokens=4)
    assert res.stats.extra["cntp_triggers"] > 0
    assert res.stats.target_forwards > res.stats.baseline_steps
    assert all(len(s) == 24 and all(0 <= t < VOCAB for t in s) for s in res.sequences)


def test_gear_compresses_and_reports_memory(tiny):
    _, _, lean, _ = tiny
    gear = Gear(bits=4, rank=2, buffer=4, block=8)
    x = torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    approx = gear.compress(x)
    assert approx.shape == x.shape and 0 < float((approx - x).abs().max()) < float(x.abs().max())
    assert float((Gear(bits=8, rank=4).compress(x) - x).abs().max()) < 0.05
    sizes = cache_bytes(2048, 8, 6, 64, Gear(bits=4), full_bytes=4)
    assert sizes["full"] / sizes["compressed"] > 4  # long contexts: the fp32 streaming buffer matters less
    assert cache_bytes(64, 8, 6, 64, Gear(bits=0))["compressed"] == cache_bytes(64, 8, 6, 64, None)["full"]
    res = _run("gear", {"model": lean}, new=40, bits=2, rank=0, outlier=0.0, buffer=4, block=8)
    assert res.stats.extra["kv_bytes_full"] > res.stats.extra["kv_bytes_gear"]
    assert all(len(s) == 40 for s in res.sequences)


def test_bad_settings_are_refused(tiny):
    _, _, lean, heads = tiny
    for name, params in [("bild", {"fallback_threshold": 1.5}), ("bild", {"rollback_threshold": -1}),
                         ("judge", {"threshold": 2.0}), ("superposed", {"k": 0}), ("first", {"threshold": -0.1}),
                         ("gear", {"bits": 9}), ("cntp", {"entropy_low": 2.0, "entropy_high": 1.0})]:
        with pytest.raises(ConfigError):
            get_sampler(name, **params)
    with pytest.raises(ConfigError, match="head dimension"):
        _run("gear", {"model": lean}, rank=lean.net.c.head_dim + 1)


def test_missing_and_foreign_heads(tiny, tmp_path):
    target, _, lean, heads = tiny
    with pytest.raises(ModelMismatchError, match="text-heads"):
        _run("chimera", {"model": lean})
    with pytest.raises(AssetNotFoundError, match="leapgen train text-code-heads"):
        load_heads(lean, tmp_path / "nothing")
    partial = TextHeads(heads.dim, heads.n_layers, k=3, parts=("routers",), target=heads.target)
    with pytest.raises(AssetNotFoundError, match="leapgen train text-code-heads"):
        _run("chimera", {"model": HeadedLM(lean, partial)})
    other = LeanCausalLM.from_hf(make_llama(VOCAB, seed=7, layers=3, max_pos=256))
    with pytest.raises(ModelMismatchError, match="another target"):
        HeadedLM(other, heads)
    heads.save(tmp_path / "heads")
    again = TextHeads.load(tmp_path / "heads")
    assert again.parts == heads.parts
    got = _run("chimera", {"model": HeadedLM(lean, again)})
    assert got.sequences == _run("ar", {"model": lean}).sequences
    with pytest.raises(ConfigError):  # HF adapters are not on the lean runtime
        VariantLM(HFCausalLM(target))


def test_pipeline_loads_without_heads_and_heads_load_from_its_folder(tmp_path):
    from leapgen import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/text-code")
    ids = pipe.encode(["def add(a, b):\n    return"])
    ar = _run("ar", {"model": pipe._lms["model"]}, new=12, prompts=ids)
    if not (ASSET / "heads").is_dir():
        pytest.fail("assets/text-code/heads is missing: run `leapgen train text-code-heads`")
    headed = HeadedLM(pipe._lms["model"])  # finds <pipeline>/heads
    assert set(headed.heads.parts) == {"chimera", "judge", "routers", "transfer"} and headed.heads.ngram is not None
    ch = _run("chimera", {"model": headed}, new=12, prompts=ids)
    assert ch.sequences == ar.sequences and ch.stats.accepted_draft_tokens > 0
    # a copy of the pipeline folder without heads still loads and decodes; heads-needing samplers say what to do
    copy = tmp_path / "text-code"
    shutil.copytree(ASSET, copy, ignore=shutil.ignore_patterns("heads"))
    bare = Pipeline.from_pretrained(copy)
    assert bare(["def add(a, b):\n    return"], max_new_tokens=4).token_ids
    with pytest.raises(AssetNotFoundError, match="leapgen train text-code-heads"):
        HeadedLM(bare._lms["model"])


def test_text_pipeline_offers_its_heads_to_heads_samplers(tmp_path):
    """The shipped pipeline offers the text-heads contract (its heads/ folder): chimera, judge, first
    and superposed run through the plain pipeline call; without heads they are refused with the recipe."""
    from leapgen import Pipeline
    from leapgen.errors import ModelMismatchError

    pipe = Pipeline.from_pretrained("leapgen/text-code")
    if not (ASSET / "heads").is_dir():
        pytest.fail("assets/text-code/heads is missing: run `leapgen train text-code-heads`")
    assert pipe.model_contracts() == ("causal", "text-heads")
    prompt = ["def add(a, b):\n    return", "import os\n"]
    ar = pipe(prompt, max_new_tokens=12)
    chimera = pipe(prompt, sampler="chimera", max_new_tokens=12)
    assert chimera.token_ids == ar.token_ids and chimera.stats.accepted_draft_tokens > 0
    assert pipe(prompt, sampler="first", threshold=1.0, max_new_tokens=12).token_ids == ar.token_ids
    assert pipe(prompt, sampler="superposed", k=1, max_new_tokens=12).token_ids == ar.token_ids
    assert pipe(prompt, sampler="judge", max_new_tokens=12).texts  # lossy: runs and writes text
    # the same folder without heads offers only the causal contract and names the recipe
    copy = tmp_path / "text-code"
    shutil.copytree(ASSET, copy, ignore=shutil.ignore_patterns("heads"))
    bare = Pipeline.from_pretrained(copy)
    assert bare.model_contracts() == ("causal",)
    with pytest.raises(ModelMismatchError, match="leapgen train text-code-heads"):
        bare(prompt, sampler="chimera", max_new_tokens=4)
    # the transformers runtime captures no hidden states: no heads either
    assert Pipeline.from_pretrained("leapgen/text-code", runtime="transformers").model_contracts() == ("causal",)


def test_bench_helpers():
    from leapgen.bench.text_lossy import body_parses

    assert body_parses("def f(x):\n    y = x\n", "    return y\nprint(1)\n")
    assert not body_parses("def f(x):\n    y = x\n", "    return (y\n")
    assert body_parses("def f(x):\n    y = x\n", "    return y\n    z = (")  # the unfinished line is dropped
