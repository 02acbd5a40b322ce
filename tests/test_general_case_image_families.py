"""General-case checks of the shipped image families that decode many tokens per step (NAR, VAR,
NFIG, CTF, MAR / CSpD, DD), with inputs a user tries first: per-image errors with
``num_images_per_prompt``, ``temperature`` of the wrong type, guidance or temperature that push the
logits out of float range (which used to come back as all-token-0 images), and the MAR call's
float32 limits."""

from __future__ import annotations

import pytest
import torch

from leapgen import Pipeline
from leapgen.errors import ConfigError, InputError, NumericalError
from leapgen.samplers import DecodeConfig
from leapgen.samplers.logits import LogitsProcessor
from leapgen.samplers.scale.common import sample_finite

FAMILIES = ("nar", "var", "nfig", "ctf")
_PIPES: dict[str, Pipeline] = {}


def pipe(name: str) -> Pipeline:
    if name not in _PIPES:
        _PIPES[name] = Pipeline.from_pretrained(f"leapgen/image-emoji-{name}")
    return _PIPES[name]


# ---------------------------------------------------------------------- a bad prompt among several images each
@pytest.mark.parametrize("name, kwargs", [("mar", {"num_iter": 2, "cfg_scale": 1.0}), ("dd", {})])
def test_error_names_the_callers_prompt_index_with_several_images_per_prompt(name: str, kwargs: dict) -> None:
    out = pipe(name)(["animals", "", "faces"], num_images_per_prompt=2, seed=0, **kwargs)
    assert out.prompts == ["animals", "animals", "", "", "faces", "faces"]
    assert [im is None for im in out.images] == [False, False, True, True, False, False]
    # the empty prompt is prompt 1 of the caller's list (not 2 and 3 of the list repeated per image)
    assert out.errors[2] == out.errors[3] and out.errors[2].startswith("prompt 1 is empty")
    assert out.errors[0] is None and out.errors[4] is None


# ---------------------------------------------------------------------- temperature of the wrong type
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("temperature", [None, "1", True])
def test_temperature_must_be_a_number(name: str, temperature: object) -> None:
    with pytest.raises(InputError, match="temperature must be a number"):
        pipe(name)("animals", cfg_scale=1.0, temperature=temperature, seed=0)


# ---------------------------------------------------------------------- logits out of float range
@pytest.mark.parametrize("name", ["nar", "var", "nfig"])
def test_overflowing_guidance_is_refused_instead_of_token_zero(name: str) -> None:
    # 1.7e308 decoded token 0 everywhere, then a NumericalError after the decode; now refused up front
    with pytest.raises(InputError, match=r"cfg_scale\) must be a number from 0 to 1000"):
        pipe(name)("animals", cfg_scale=1.7e308, seed=0)


@pytest.mark.parametrize("name", FAMILIES)
def test_temperature_out_of_float_range_raises_instead_of_token_zero(name: str) -> None:
    # ctf: the fine pass's out-of-cluster codes are -inf; /inf made them NaN and every fine code 0
    with pytest.raises(NumericalError, match="temperature"):
        pipe(name)("animals", cfg_scale=1.0, temperature=1e300, seed=0)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_vanishing_temperature_decodes_greedily(name: str) -> None:
    """Below MIN_SAMPLING_TEMPERATURE (1e-5, vLLM's convention) a temperature decodes greedily:
    1e-300 used to overflow the scaled logits (token 0 everywhere, or NumericalError here)."""
    greedy = pipe(name)("animals", cfg_scale=1.0, temperature=0.0, seed=0).token_ids
    tiny = pipe(name)("animals", cfg_scale=1.0, temperature=1e-300, seed=1).token_ids
    assert torch.equal(tiny, greedy) and int(greedy.max()) > 0


def test_sample_finite_is_the_plain_draw_on_finite_logits() -> None:
    logits = torch.randn(3, 5, 17, generator=torch.Generator().manual_seed(0))
    logits[0, 0, :4] = float("-inf")  # masked codes (CTF's out-of-cluster ones) are fine
    for temperature in (0.0, 0.7):
        proc = LogitsProcessor(DecodeConfig(max_new_tokens=1, temperature=temperature, top_k=5))
        got = sample_finite(proc, logits, torch.Generator().manual_seed(1))
        assert torch.equal(got, proc.sample(logits, None, torch.Generator().manual_seed(1)))
    proc = LogitsProcessor(DecodeConfig(max_new_tokens=1, temperature=0.0))
    for bad in (float("nan"), float("inf")):
        broken = logits.clone()
        broken[1, 2, 3] = bad
        with pytest.raises(NumericalError):
            sample_finite(proc, broken, None)
    empty = logits.clone()
    empty[2, 1] = float("-inf")
    with pytest.raises(NumericalError):
        sample_finite(proc, empty, None)


def test_the_families_still_decode_at_ordinary_settings() -> None:
    for name in ("nar", "var", "nfig"):
        for temperature in (0, 1e-6, 1.0, 50.0):
            out = pipe(name)(["animals", "red apple"], cfg_scale=3.0, temperature=temperature, top_k=20, seed=0)
            assert [im.size for im in out.images] == [(64, 64), (64, 64)]
            assert 0 <= int(out.token_ids.min()) and int(out.token_ids.max()) < 1024


def test_ctf_fine_codes_stay_in_their_clusters_with_top_k() -> None:
    p = pipe("ctf")
    out = p("animals", cfg_scale=1.0, temperature=2.0, top_k=3, seed=0)
    coarse = torch.tensor(out.stats.extra["coarse"])
    assert torch.equal(p.fine.cluster_of.cpu()[out.token_ids.view(1, -1)], coarse)


# ---------------------------------------------------------------------- MAR: float32 limits, use_draft with cspd
@pytest.mark.parametrize("kwargs,match", [({"temperature": 1e300}, "float32"),
                                          ({"cfg_scale": 1.7e308}, "from 0 to 1000")])
def test_mar_values_beyond_float32_are_input_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        pipe("mar")("animals", seed=0, **kwargs)


def test_cspd_with_use_draft_says_what_to_change() -> None:
    with pytest.raises(ConfigError, match="leave use_draft out"):
        pipe("mar")("animals", sampler="cspd", use_draft=True, seed=0)
