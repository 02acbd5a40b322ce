"""Greedy identity: every sampler that promises exactness reproduces greedy ``ar`` token for token.

The samplers come from the registry (``list_samplers()``), so a newly registered greedy-exact or
distribution-exact sampler is covered without editing this file. ``ar`` itself is checked
against transformers' ``model.generate(do_sample=False)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers
from leapgen.samplers.controllers import SCHEDULES

ROOT = Path(__file__).resolve().parents[1]
EXACT = ("greedy-exact", "distribution-exact")
# the exact samplers of the causal contract (other contracts are tested on their own models by the harness)
EXACT_SAMPLERS = [s.name for s in list_samplers() if s.guarantee in EXACT and "causal" in s.contracts]
NEW = 32

PROMPTS_1 = [[5, 17, 3, 17, 5, 9]]
PROMPTS_4 = [[5, 17, 3, 17, 5, 9], [1, 2], [40, 40, 40, 7, 8, 9, 10, 11, 12, 13, 40, 40], [33]]


def models_for(name, target, draft):
    """The models a sampler needs, from the fixtures (fresh adapters: forward counters at 0)."""
    available = {"model": HFCausalLM(target), "draft": HFCausalLM(draft)}
    needs = get_sampler(name).needs
    missing = [n for n in needs if n not in available]
    if missing:
        pytest.fail(
            f"sampler {name!r} needs {missing}, which tests/test_greedy_identity.py cannot build yet; "
            "add a tiny fixture for it so that its exactness is tested."
        )
    return available


def run(name, target, draft, prompts, params=None, **cfg):
    config = DecodeConfig(max_new_tokens=cfg.pop("max_new_tokens", NEW), **cfg)
    smp = get_sampler(name, **(params or {}))
    return smp.generate(
        models_for(name, target, draft), [list(p) for p in prompts], config, torch.Generator().manual_seed(0)
    )


def assert_same(name, got, ref):
    for i, (a, b) in enumerate(zip(got.sequences, ref.sequences)):
        assert a == b, f"{name}: row {i} differs from greedy ar:\n  got {a}\n  ar  {b}"
    assert len(got.sequences) == len(ref.sequences)


def test_registry_has_exact_samplers():
    assert {"ar", "speculative", "prompt_lookup"} <= set(EXACT_SAMPLERS)


# ------------------------------------------------------------------------------------------
# ar == transformers greedy


@pytest.mark.parametrize("penalty", [1.0, 1.2])
def test_ar_matches_transformers_generate(target_model, penalty):
    prompt = PROMPTS_1[0]
    ref = run("ar", target_model, target_model, PROMPTS_1, repetition_penalty=penalty)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = target_model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            repetition_penalty=penalty,
            pad_token_id=0,
            eos_token_id=None,
        )
    assert out[0, len(prompt) :].tolist() == ref.sequences[0]


@pytest.mark.parametrize("model_fixture", ["target_model", "target_mha"])
def test_ar_batch_rows_equal_single_rows(request, model_fixture):
    """Right-padded rows of different lengths decode exactly as they do alone."""
    model = request.getfixturevalue(model_fixture)
    batch = run("ar", model, model, PROMPTS_4)
    for i, p in enumerate(PROMPTS_4):
        assert batch.sequences[i] == run("ar", model, model, [p]).sequences[0]


# ------------------------------------------------------------------------------------------
# every exact sampler == ar


# the plain check (every exact sampler == greedy ar at batch 1 and 4 on target_model / draft_close)
# runs in the registry-driven harness, on CPU and CUDA: tests/registry_harness.py::causal_greedy_identity


@pytest.mark.parametrize("name", EXACT_SAMPLERS)
def test_greedy_identity_other_target_and_unrelated_draft(name, target_mha, draft_far):
    """Second target configuration (MHA, 3 layers); for draft samplers an unrelated draft of
    another width (mostly rejected drafts)."""
    if draft_far.config.vocab_size != target_mha.config.vocab_size:  # pragma: no cover
        pytest.fail("fixtures must share the vocabulary")
    ref = run("ar", target_mha, draft_far, PROMPTS_4)
    got = run(name, target_mha, draft_far, PROMPTS_4)
    assert_same(name, got, ref)


def _pick_eos(ref_sequences, new):
    """A token that occurs in the greedy outputs and makes rows stop at different lengths."""
    best, best_score = None, -1
    for t in sorted({t for s in ref_sequences for t in s}):
        stops = [s.index(t) + 1 if t in s else new for s in ref_sequences]
        score = len(set(stops)) * 100 + sum(1 for x in stops if 1 < x < new)
        if score > best_score:
            best, best_score = t, score
    return best


@pytest.fixture(scope="module")
def eos_id(target_model):
    ref = run("ar", target_model, target_model, PROMPTS_4)
    return _pick_eos(ref.sequences, NEW)


@pytest.mark.parametrize("name", EXACT_SAMPLERS)
def test_greedy_identity_with_eos(name, target_model, draft_close, eos_id):
    ref = run("ar", target_model, draft_close, PROMPTS_4, eos_token_id=eos_id)
    lengths = [len(s) for s in ref.sequences]
    assert min(lengths) < NEW, "the chosen eos must stop some row early"
    assert len(set(lengths)) > 1, "rows must stop at different steps"
    for s in ref.sequences:
        assert eos_id not in s[:-1]
        assert len(s) == NEW or s[-1] == eos_id
    # ar with eos is ar without eos cut after the first eos
    full = run("ar", target_model, draft_close, PROMPTS_4)
    for s, f in zip(ref.sequences, full.sequences):
        assert s == (f[: f.index(eos_id) + 1] if eos_id in f else f)
    got = run(name, target_model, draft_close, PROMPTS_4, eos_token_id=eos_id)
    assert_same(name, got, ref)


@pytest.mark.parametrize("name", EXACT_SAMPLERS)
def test_greedy_identity_with_repetition_penalty(name, target_model, draft_close):
    ref = run("ar", target_model, draft_close, PROMPTS_4, repetition_penalty=1.2)
    plain = run("ar", target_model, draft_close, PROMPTS_4)
    assert ref.sequences != plain.sequences, "the penalty must change the greedy output"
    got = run(name, target_model, draft_close, PROMPTS_4, repetition_penalty=1.2)
    assert_same(name, got, ref)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("k", [1, 3])
def test_speculative_schedules(schedule, k, target_model, draft_close, eos_id):
    params = {"schedule": schedule, "num_draft_tokens": k}
    if schedule == "confidence":
        params["confidence_threshold"] = 0.6
    for cfg in ({}, {"eos_token_id": eos_id}, {"repetition_penalty": 1.2}):
        ref = run("ar", target_model, draft_close, PROMPTS_4, **cfg)
        got = run("speculative", target_model, draft_close, PROMPTS_4, params, **cfg)
        assert_same(f"speculative/{schedule}/{cfg}", got, ref)
        assert got.stats.accepted_draft_tokens > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_equal_to_target_accepts_everything(target_model, draft_same, temperature):
    res = run(
        "speculative",
        target_model,
        draft_same,
        PROMPTS_4,
        {"num_draft_tokens": 4},
        temperature=temperature,
        seed=0,
    )
    st = res.stats
    assert st.drafted_tokens > 0
    assert st.accepted_draft_tokens == st.drafted_tokens
    # every step after the prefill commits draft + bonus tokens (up to the token budget)
    assert st.target_forwards < NEW // 2
    if temperature == 0:
        assert_same("speculative(draft == target)", res, run("ar", target_model, draft_same, PROMPTS_4))


# ------------------------------------------------------------------------------------------
# shipped asset


@pytest.mark.slow
def test_greedy_identity_on_shipped_asset():
    index = ROOT / "assets" / "text-code" / "model_index.json"
    if not index.is_file():
        pytest.fail(
            "assets/text-code/model_index.json is missing: run `leapgen train text-code` to build the "
            "shipped pipeline (its greedy identity must be tested)."
        )
    from leapgen import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/text-code")
    prompts = ["def parse_args(argv):\n", "import os\n"]
    for batch in (prompts[:1], prompts * 2):
        ref = pipe(batch, sampler="ar", max_new_tokens=48)
        assert all(len(t) > 0 for t in ref.token_ids)
        for name in EXACT_SAMPLERS:
            if name == "ar":
                continue
            info_needs = get_sampler(name).needs
            if "draft" in info_needs and pipe.draft is None:
                pytest.fail(f"the shipped pipeline has no draft model, which {name!r} needs")
            out = pipe(batch, sampler=name, max_new_tokens=48)
            assert out.token_ids == ref.token_ids, f"{name} differs from ar on the shipped model"
            assert out.texts == ref.texts
