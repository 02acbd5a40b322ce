"""The Python API with inputs no other test names (a black-box sweep of every shipped pipeline and
the sampler registry, 2026-11-27): each case failed before its fix with a raw error from deep inside
torch, or ran and silently did something else than asked."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leapgen.errors import ConfigError, InputError
from leapgen.pipelines import Pipeline
from leapgen.samplers import get_sampler, list_samplers

torch.set_num_threads(1)

SPECTRUM = {"mz": np.sort(np.random.RandomState(0).uniform(100, 1000, 40)),
            "intensity": np.random.RandomState(1).lognormal(size=40), "precursor_mz": 523.77, "charge": 2}


# ------------------------------------------------------------------------------------------ loading
def test_a_device_the_machine_lacks_is_refused_at_load():
    with pytest.raises(ConfigError, match="'meta' device holds no weights"):
        Pipeline.from_pretrained("leapgen/text-code", device="meta")
    if torch.cuda.is_available():  # then the GPU path loads (the gpu tests use it)
        assert Pipeline.from_pretrained("leapgen/text-code", device="cuda").device.type == "cuda"
        with pytest.raises(ConfigError, match="CUDA device"):
            Pipeline.from_pretrained("leapgen/text-code", device=f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(ConfigError, match="CUDA is not available"):
            Pipeline.from_pretrained("leapgen/text-code", device="cuda")


@pytest.mark.parametrize("name, override, kind", [
    ("leapgen/text-code", {"draft": "x"}, "torch.nn.Module such as LlamaForCausalLM"),
    ("leapgen/image-emoji", {"draft": "x"}, "torch.nn.Module such as LlamaGenGPT"),
    ("leapgen/audio-music", {"draft": 3}, "torch.nn.Module"),
    ("leapgen/text-code", {"tokenizer": 3}, "a loaded object"),
])
def test_a_component_of_the_wrong_kind_is_refused_at_load(name, override, kind):
    with pytest.raises(ConfigError, match=kind):
        Pipeline.from_pretrained(name, **override)


def test_leaving_an_optional_component_out_still_loads():
    assert Pipeline.from_pretrained("leapgen/text-code", draft=None).draft is None


# ------------------------------------------------------------------------------------------ half precision
@pytest.mark.parametrize("name, call", [
    ("leapgen/peptide", lambda p: p(SPECTRUM, max_new_tokens=8, seed=0).sequences[0]),
    ("leapgen/audio-music", lambda p: p("a calm piano melody", duration=0.5, seed=0).audios[0]),
    ("leapgen/tts-en", lambda p: p("hi there.", seed=0, steps=4).audios[0]),
    ("leapgen/image-emoji-mar", lambda p: np.asarray(p("red apple", seed=0, num_iter=2).images[0])),
])
def test_pipelines_loaded_in_bfloat16_run(name, call):
    """Float32 features, positions and noise met bfloat16 weights (a raw dtype error in every call)."""
    out = call(Pipeline.from_pretrained(name, dtype=torch.bfloat16))
    assert len(out) > 0
    if isinstance(out, np.ndarray) and out.dtype.kind == "f":
        assert np.isfinite(out).all()


# ------------------------------------------------------------------------------------------ call arguments
def test_num_images_per_prompt_has_a_ceiling():
    pipe = Pipeline.from_pretrained("leapgen/image-emoji")
    with pytest.raises(InputError, match="num_images_per_prompt must be <= 256"):
        pipe("red apple", num_images_per_prompt=10**9)


def _float_params(info) -> list[str]:
    return [k for k, v in info.defaults.items() if isinstance(v, float) and not isinstance(v, bool)]


@pytest.mark.parametrize("info", [i for i in list_samplers() if _float_params(i)], ids=lambda i: i.name)
def test_no_sampler_takes_nan(info):
    """NaN passes every `x < low` range check; the registry refuses it for every float parameter."""
    for key in _float_params(info):
        with pytest.raises(ConfigError, match="NaN"):
            get_sampler(info.name, **{key: math.nan})


def test_beam_length_penalty_must_be_finite():
    with pytest.raises(ConfigError, match="finite"):
        get_sampler("ar_beam", length_penalty=math.inf)


def test_tts_takes_a_sampler_object_like_every_pipeline():
    tts = Pipeline.from_pretrained("leapgen/tts-en")
    by_object = tts("hi there.", sampler=get_sampler("maskgct_t2s", steps=4), seed=0)
    by_name = tts("hi there.", sampler="maskgct", steps=4, seed=0)
    assert by_object.stats.sampler == "maskgct_t2s" and np.array_equal(by_object.audios[0], by_name.audios[0])
    with pytest.raises(InputError, match="s2a_params must be a dict"):
        tts("hi there.", s2a_params=3)
    with pytest.raises(InputError, match="S2A stage"):
        tts("hi there.", sampler=get_sampler("maskgct_s2a"))


@pytest.mark.parametrize("name, first", [("leapgen/asr-en", np.zeros(8000, np.float32)), ("leapgen/peptide", SPECTRUM),
                                         ("leapgen/s2st-en-de", np.zeros(8000, np.float32))])
def test_an_option_the_call_does_not_take_is_named_as_the_pipelines(name, first):
    """The recognition pipelines built their samplers apart and blamed the sampler for any keyword."""
    pipe = Pipeline.from_pretrained(name)
    kwargs = {"sampling_rate": 16000} if isinstance(first, np.ndarray) else {}
    with pytest.raises(ConfigError, match=rf"{type(pipe).__name__}\(\) got unknown keyword\(s\) \['callback_on_step_end'\]"):
        pipe(first, callback_on_step_end=lambda *a: None, **kwargs)


def test_min_add_len_that_cannot_fit_is_refused_not_cut():
    pytest.importorskip("rdkit", reason="the molecule extra (RDKit) is not installed")
    mol = Pipeline.from_pretrained("leapgen/molecule-safe")
    assert len(mol(num_samples=1, min_add_len=126, seed=0).token_ids[0]) == 128
    with pytest.raises(InputError, match="min_add_len=127 does not fit"):
        mol(num_samples=1, min_add_len=127, seed=0)


def test_ctc_pmc_settings_that_no_longer_constrain_the_mass_are_refused():
    with pytest.raises(ConfigError, match="tolerance must be <= 50"):
        get_sampler("ctc_pmc", tolerance=1e9)
    with pytest.raises(ConfigError, match="resolution <= 1"):
        get_sampler("ctc_pmc", tolerance=10.0, resolution=5.0)
