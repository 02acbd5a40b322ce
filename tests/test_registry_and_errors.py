"""Registry rows, clear errors for bad input, pipeline save/load, dtype changes and statistics."""

from __future__ import annotations

import copy
import json
import math
import signal
import time
from contextlib import contextmanager

import pytest
import torch
from conftest import make_llama

from leapgen import (
    AssetNotFoundError,
    ConfigError,
    InputError,
    ModelMismatchError,
    NumericalError,
    Pipeline,
    TextPipeline,
    UnknownSamplerError,
)
from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers, sampler_info
from leapgen.samplers.base import GUARANTEES


def text_samplers():
    """Samplers over causal LMs (the families these fixtures can drive)."""
    return [
        s.name for s in list_samplers()
        if (s.family == "baseline" or s.family.startswith("ar-")) and "causal" in s.contracts
    ]


@contextmanager
def time_limit(seconds: int):
    """Fail instead of hanging (SIGALRM interrupts Python-level loops)."""

    def handler(signum, frame):
        raise TimeoutError(f"did not finish within {seconds}s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------------
# registry


def test_list_samplers_rows():
    infos = list_samplers()
    names = [s.name for s in infos]
    assert len(names) == len(set(names))
    assert {"ar", "speculative", "prompt_lookup"} <= set(names)
    assert [(s.family, s.name) for s in infos] == sorted((s.family, s.name) for s in infos)
    for s in infos:
        row = s.as_row()
        assert set(row) == {"name", "family", "guarantee", "needs", "paper"}
        assert row["name"] == s.name and row["guarantee"] in GUARANTEES
        assert row["family"] and row["paper"] and "model" in s.needs
        assert row["needs"] == ", ".join(s.needs)
        assert sampler_info(s.name) is s
        smp = get_sampler(s.name)  # defaults are valid
        assert smp.name == s.name and smp.guarantee == s.guarantee and smp.params == s.defaults


def test_a_sampler_registered_later_is_listed(monkeypatch):
    """list_samplers() keeps its sorted answer between calls; a later registration must show."""
    from leapgen.samplers import base
    from leapgen.samplers.ar import AutoRegressive

    before = [s.name for s in list_samplers()]
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_SORTED", list(base._SORTED))

    @base.register_sampler("zz_plugin_ar", family="baseline", guarantee="distribution-exact", paper="test")
    class Plugin(AutoRegressive):
        """A plugin sampler."""

    names = [s.name for s in list_samplers()]
    assert "zz_plugin_ar" in names and len(names) == len(before) + 1
    assert "zz_plugin_ar" in base.samplers_for("causal")


def test_unknown_sampler_lists_the_registered_names(pipe):
    with pytest.raises(UnknownSamplerError) as err:
        get_sampler("no-such-sampler")
    for s in list_samplers():
        assert s.name in str(err.value)
    with pytest.raises(UnknownSamplerError):
        pipe("def f", sampler="no-such-sampler", max_new_tokens=2)
    assert issubclass(UnknownSamplerError, ConfigError)


def test_unknown_and_bad_sampler_parameters(pipe):
    with pytest.raises(ConfigError, match="num_draft_tokens"):
        get_sampler("speculative", num_draft_token=3)  # typo: the message lists the valid names
    with pytest.raises(ConfigError):
        pipe("def f", sampler="ar", max_new_tokens=2, num_draft_tokens=3)
    with pytest.raises(ConfigError):
        get_sampler("speculative", num_draft_tokens=0)
    with pytest.raises(ConfigError):
        get_sampler("speculative", schedule="sometimes")
    with pytest.raises(ConfigError):
        get_sampler("speculative", schedule="confidence", confidence_threshold=1.5)
    with pytest.raises(ConfigError):
        get_sampler("prompt_lookup", min_ngram=3, max_ngram=2)
    with pytest.raises(ConfigError):
        get_sampler("prompt_lookup", match="middle")
    with pytest.raises(InputError):
        pipe("def f", sampler=get_sampler("ar"), max_new_tokens=2, num_draft_tokens=3)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_new_tokens=0),
        dict(max_new_tokens=-1),
        dict(max_new_tokens=2.5),
        dict(max_new_tokens=True),
        dict(temperature=-1.0),
        dict(temperature=float("nan")),
        dict(temperature=float("inf")),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(repetition_penalty=0.0),
        dict(repetition_penalty=float("nan")),
        dict(temperature="1"),
        dict(top_p="0.5"),
        dict(repetition_penalty=None),
        dict(seed="abc"),
        dict(seed=1.5),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_bad_decode_config_values(kwargs, pipe):
    with pytest.raises(ConfigError):
        DecodeConfig(**kwargs)
    with pytest.raises(ConfigError):
        pipe("def f", **{"max_new_tokens": 2, **kwargs})


def test_valid_decode_config_edge_values():
    cfg = DecodeConfig(max_new_tokens=1, temperature=0.0, top_k=0, top_p=1.0, eos_token_id=[3, 4])
    assert cfg.greedy and cfg.eos_ids == (3, 4)
    assert DecodeConfig(eos_token_id=7).eos_ids == (7,)


# ------------------------------------------------------------------------------------------
# pipeline input errors


def test_bad_prompts(pipe):
    with pytest.raises(InputError, match="empty"):
        pipe("", max_new_tokens=2)
    with pytest.raises(InputError):
        pipe([], max_new_tokens=2)
    out = pipe(["ok", 3], max_new_tokens=2)  # a bad prompt in a batch fails alone
    assert out.texts[1] is None and "prompt 1 is an int" in out.errors[1] and isinstance(out.texts[0], str)
    with pytest.raises(InputError, match="no prompt could be used"):
        pipe([None, 3], max_new_tokens=2)
    with pytest.raises(InputError):
        pipe(None, max_new_tokens=2)


def test_prompt_and_budget_must_fit_the_context_window(pipe):
    window = pipe.context_window
    assert window == 64
    long_prompt = "the quick brown fox jumps over the lazy dog. " * 20
    assert len(pipe.tokenizer(long_prompt)["input_ids"]) > window
    with pytest.raises(InputError, match="context window"):
        pipe(long_prompt, max_new_tokens=4)
    with pytest.raises(InputError, match="context window"):
        pipe("def f", max_new_tokens=window)
    with pytest.raises(InputError, match="context window"):
        pipe("def f", max_new_tokens=window - 1)  # prompt + budget exceeds the window
    out = pipe("def f", max_new_tokens=8)  # fits
    assert len(out.token_ids[0]) <= 8


def test_draft_with_another_vocabulary(tokenizer, pipe_models, target_model):
    target, _ = pipe_models
    other = make_llama(len(tokenizer) + 3, seed=5, max_pos=64)
    with pytest.raises(ModelMismatchError, match="vocabulary|logits"):
        TextPipeline(model=target, tokenizer=tokenizer, draft=other)
    pipe = TextPipeline(model=target, tokenizer=tokenizer)
    with pytest.raises(ModelMismatchError):
        pipe.set_draft(other)
    # the sampler checks too, for models passed without a pipeline
    for name in text_samplers():
        if "draft" not in sampler_info(name).needs:
            continue
        with pytest.raises(ModelMismatchError):
            get_sampler(name).generate(
                {"model": HFCausalLM(target_model), "draft": HFCausalLM(other)},
                [[1, 2, 3]],
                DecodeConfig(max_new_tokens=4),
            )


def test_missing_draft_is_a_config_error(tokenizer, pipe_models):
    pipe = TextPipeline(model=pipe_models[0], tokenizer=tokenizer)
    with pytest.raises(ConfigError, match="draft"):
        pipe("def f", sampler="speculative", max_new_tokens=4)


def nan_copy(model):
    bad = copy.deepcopy(model)
    with torch.no_grad():
        bad.model.layers[0].mlp.down_proj.weight.fill_(float("nan"))
    return bad


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_nan_logits_raise_numerical_error(target_model, draft_close, temperature):
    bad_target, bad_draft = nan_copy(target_model), nan_copy(draft_close)
    for name in text_samplers():
        for models in (
            {"model": bad_target, "draft": draft_close},
            {"model": target_model, "draft": bad_draft},
        ):
            if models["model"] is target_model and "draft" not in sampler_info(name).needs:
                continue
            lms = {k: HFCausalLM(m) for k, m in models.items()}
            try:
                smp = get_sampler(name)
                config = DecodeConfig(max_new_tokens=16, temperature=temperature, seed=0)
                with time_limit(60), pytest.raises(NumericalError):
                    smp.generate(lms, [[1, 2, 3], [4, 5]], config, torch.Generator().manual_seed(0))
            except ConfigError:
                # samplers that only decode greedily reject temperature > 0 up front
                assert temperature > 0 and sampler_info(name).guarantee == "greedy-exact", name


def test_nan_pipeline_raises_quickly(tokenizer, pipe_models):
    pipe = TextPipeline(model=nan_copy(pipe_models[0]), tokenizer=tokenizer)
    t0 = time.perf_counter()
    with time_limit(60), pytest.raises(NumericalError, match="NaN"):
        pipe("def f", max_new_tokens=8)
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------------------
# loading


def test_missing_shipped_asset():
    with pytest.raises(AssetNotFoundError, match="leapgen train"):
        Pipeline.from_pretrained("leapgen/no-such-asset")


def test_unknown_hub_id_offline_fails_fast(monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # read at import time
    t0 = time.perf_counter()
    with time_limit(60), pytest.raises(AssetNotFoundError, match="HF_HUB_OFFLINE|offline"):
        Pipeline.from_pretrained("leapgen-tests/no-such-repo")
    assert time.perf_counter() - t0 < 20


def test_folder_without_model_index(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(AssetNotFoundError, match="model_index.json"):
        Pipeline.from_pretrained(tmp_path)
    with pytest.raises(AssetNotFoundError):
        Pipeline.from_pretrained(tmp_path / "does" / "not" / "exist")


def test_save_and_load_round_trip(pipe, tmp_path):
    pipe.save_pretrained(tmp_path / "p")
    files = [p for p in (tmp_path / "p").rglob("*") if p.is_file()]
    index = json.loads((tmp_path / "p" / "model_index.json").read_text())
    assert index["_class_name"] == "TextPipeline"
    weights = [
        p
        for p in files
        if p.suffix in (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5", ".msgpack")
    ]
    assert weights and all(p.suffix == ".safetensors" for p in weights), [p.name for p in weights]
    assert {p.parent.name for p in weights} == {"model", "draft"}

    loaded = Pipeline.from_pretrained(tmp_path / "p")
    assert type(loaded) is TextPipeline and loaded.draft is not None
    prompts = ["def add(a, b):", "import os\n"]
    for name in ("ar", "speculative", "prompt_lookup"):
        a = pipe(prompts, sampler=name, max_new_tokens=12)
        b = loaded(prompts, sampler=name, max_new_tokens=12)
        assert a.token_ids == b.token_ids and a.texts == b.texts
    assert loaded.tokenizer.eos_token_id == pipe.tokenizer.eos_token_id
    # overriding a component at load time
    no_draft = Pipeline.from_pretrained(tmp_path / "p", draft=None)
    assert no_draft.draft is None


def test_to_float64(tokenizer, pipe_models):
    target, draft = (copy.deepcopy(m) for m in pipe_models)
    pipe = TextPipeline(model=target, tokenizer=tokenizer, draft=draft)
    ref = pipe("def add(a, b):", max_new_tokens=10)
    assert pipe.to(dtype=torch.float64) is pipe
    assert pipe.dtype == torch.float64
    assert all(p.dtype == torch.float64 for m in (pipe.model, pipe.draft) for p in m.parameters())
    lm = pipe._lms["model"]
    cache = lm.new_cache(1)
    logits = lm(torch.tensor([[1, 2, 3]]), cache)
    assert logits.dtype == torch.float32  # the contract: float32 logits whatever the weights
    ar = pipe("def add(a, b):", max_new_tokens=10)
    spec = pipe("def add(a, b):", sampler="speculative", max_new_tokens=10)
    assert ar.token_ids == spec.token_ids and len(ar.token_ids[0]) >= 1
    assert len(ref.token_ids[0]) >= 1


# ------------------------------------------------------------------------------------------
# statistics


@pytest.mark.parametrize("name", text_samplers())
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stats_are_consistent(name, temperature, target_model, draft_close):
    info = sampler_info(name)
    if temperature > 0 and info.guarantee == "greedy-exact":
        with pytest.raises(ConfigError):
            get_sampler(name).generate(
                {"model": HFCausalLM(target_model)}, [[1, 2]], DecodeConfig(max_new_tokens=4, temperature=1.0)
            )
        return
    lms = {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_close)}
    prompts = [[5, 17, 3, 17, 5, 9], [1, 2], [40, 40, 40, 7, 8, 9, 10], [33]]
    config = DecodeConfig(max_new_tokens=20, temperature=temperature, eos_token_id=7, seed=0)
    res = get_sampler(name).generate(lms, prompts, config, torch.Generator().manual_seed(0))
    st = res.stats
    lengths = [len(s) for s in res.sequences]
    assert st.sampler == name and st.batch_size == len(prompts)
    assert all(1 <= n <= 20 for n in lengths)
    assert all(n == 20 or s[-1] == 7 for n, s in zip(lengths, res.sequences))
    assert st.new_tokens == sum(lengths)
    assert st.baseline_steps == max(lengths)
    assert st.target_forwards == lms["model"].forwards
    if "draft" in info.needs:
        assert st.draft_forwards == lms["draft"].forwards
    else:
        assert lms["draft"].forwards == 0 and st.draft_forwards == 0
    flat = [n for step in st.accepted_per_step for n in step]
    assert sum(flat) == st.new_tokens, "accepted_per_step must account for every committed token"
    assert len(st.accepted_per_step) <= st.target_forwards
    # a target forward commits >= 1 token per row, except cntp's trial forwards (steps of 0, by design)
    assert st.mean_accepted >= 1 or (name == "cntp" and temperature > 0)
    assert 0 <= st.accepted_draft_tokens <= st.drafted_tokens
    assert math.isclose(st.step_compression, st.baseline_steps / st.target_forwards)
    if name == "ar":
        assert st.step_compression == 1.0 and st.mean_accepted == 1.0
    assert st.wall_time > 0 and st.tokens_per_second > 0
    d = st.as_dict()
    assert d["new_tokens"] == st.new_tokens and "step_compression" in d
    assert name in st.summary()
