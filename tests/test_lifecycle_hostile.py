"""The pipeline lifecycle as a diffusers / transformers user tries it (a hostile sweep of every shipped
pipeline, 2026-11-29): ``from_pretrained`` with dtype names and bad names, ``save_pretrained`` then
``from_pretrained`` of the copy, damaged component folders. Each case failed before its fix: a raw
error from deep inside a library (or the process killed for memory), a silently re-initialised
weight, or a saved copy that ran differently from the pipeline it was saved from."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from leapgen.errors import AssetNotFoundError, ConfigError, InputError
from leapgen.pipelines import Pipeline

torch.set_num_threads(1)

PROMPT = "def add(a, b):"


def _saved(pipe: Pipeline, folder: Path) -> Path:
    pipe.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------------------------------ saved copies
def test_a_saved_text_pipeline_keeps_its_trained_heads(tmp_path):
    """``heads/`` (chimera, judge, first, superposed, hidden_transfer) was not saved: the copy refused them."""
    pipe = Pipeline.from_pretrained("leapgen/text-code", draft=None)
    again = Pipeline.from_pretrained(_saved(pipe, tmp_path / "copy"))
    assert again.runnable_samplers() == pipe.runnable_samplers()
    kw = {"sampler": "superposed", "max_new_tokens": 4, "seed": 0}
    assert again(PROMPT, **kw).token_ids == pipe(PROMPT, **kw).token_ids


def test_a_saved_diffusion_text_pipeline_keeps_its_learn2pd_filter(tmp_path):
    """``learn2pd_filter.safetensors`` was not saved: the copy's learn2pd ran without its trained filter."""
    pipe = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    again = Pipeline.from_pretrained(_saved(pipe, tmp_path / "copy"))
    kw = {"sampler": "learn2pd", "max_new_tokens": 8, "seed": 0}
    assert again(PROMPT, **kw).token_ids == pipe(PROMPT, **kw).token_ids


def test_a_saved_tts_pipeline_keeps_its_example_voice(tmp_path):
    """``examples/`` (the voice used when no prompt_audio is given) was not saved: the copy raised."""
    pipe = Pipeline.from_pretrained("leapgen/tts-en")
    again = Pipeline.from_pretrained(_saved(pipe, tmp_path / "copy"))
    a, b = pipe("hi.", seed=0).audios[0], again("hi.", seed=0).audios[0]
    assert np.array_equal(a, b)


def test_what_sits_beside_the_components_is_copied_but_never_into_itself(tmp_path):
    src = _saved(Pipeline.from_pretrained("leapgen/peptide"), tmp_path / "p")
    (src / "notes").mkdir()
    (src / "notes" / "a.txt").write_text("kept")
    pipe = Pipeline.from_pretrained(src)
    assert (_saved(pipe, tmp_path / "copy") / "notes" / "a.txt").read_text() == "kept"
    pipe.save_pretrained(src)  # in place: nothing is copied onto itself
    pipe.save_pretrained(src / "notes" / "inner")  # inside the source: the source is not copied into itself
    assert (src / "notes" / "inner" / "model_index.json").is_file()
    assert not (src / "notes" / "inner" / "notes").exists()


def test_saving_to_a_file_or_in_a_non_floating_dtype_is_refused(tmp_path):
    pipe = Pipeline.from_pretrained("leapgen/peptide")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="that path is a file"):
        pipe.save_pretrained(tmp_path / "f")
    with pytest.raises(ConfigError, match="floating point"):  # int8 weights were written without a word
        pipe.save_pretrained(tmp_path / "int8", dtype=torch.int8)
    pipe.save_pretrained(tmp_path / "half", dtype="float16")
    assert Pipeline.from_pretrained(tmp_path / "half").dtype == torch.float32


# ------------------------------------------------------------------------------------------ damaged folders
def test_a_transformers_model_without_its_config_is_not_built_at_the_default_size(pipe, tmp_path, monkeypatch):
    """Without ``config.json`` transformers built a default LlamaConfig (7B parameters, ~27 GB in
    float32): the process was killed for memory. The call is intercepted here so the old code fails fast."""
    from transformers import LlamaForCausalLM

    folder = _saved(pipe, tmp_path / "p")
    (folder / "model" / "config.json").unlink()
    real = LlamaForCausalLM.from_pretrained.__func__

    def guarded(cls, path, *args, **kwargs):
        if not (Path(path) / "config.json").is_file():
            raise RuntimeError("would build a default-sized model")
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "from_pretrained", classmethod(guarded))
    with pytest.raises(AssetNotFoundError, match=r"model/config.json is missing.*save_pretrained"):
        Pipeline.from_pretrained(folder)


@pytest.mark.parametrize("damage, error, match", [
    ("truncate", ConfigError, r"model/model.safetensors cannot be read"),
    ("empty_folder", AssetNotFoundError, r"model \(component 'model'\) is empty"),
    ("bad_tokenizer_json", ConfigError, r"tokenizer/tokenizer.json cannot be read"),
    ("missing_tensor", ConfigError, r"do not fit LlamaForCausalLM.*missing_keys.*up_proj"),
])
def test_a_damaged_transformers_component_names_the_file(pipe, tmp_path, damage, error, match):
    """Raw SafetensorError / JSONDecodeError; a tensor missing from the file was re-initialised at random."""
    folder = _saved(pipe, tmp_path / "p")
    weights = folder / "model" / "model.safetensors"
    if damage == "truncate":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "empty_folder":
        shutil.rmtree(folder / "model")
        (folder / "model").mkdir()
    elif damage == "bad_tokenizer_json":
        (folder / "tokenizer" / "tokenizer.json").write_text("{bad")
    else:
        state = load_file(str(weights))
        del state["model.layers.0.mlp.up_proj.weight"]
        save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(error, match=match):
        Pipeline.from_pretrained(folder)


def test_a_damaged_leapgen_component_names_the_file(tmp_path):
    folder = _saved(Pipeline.from_pretrained("leapgen/peptide"), tmp_path / "p")
    weights = folder / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ConfigError, match=r"model/model.safetensors cannot be read.*save it again"):
        Pipeline.from_pretrained(folder)
    shutil.copy(Path(__file__).resolve().parents[1] / "assets" / "ocr-en" / "model" / "model.safetensors", weights)
    with pytest.raises(ConfigError, match=r"PeptideModel.from_pretrained could not load component 'model'.*Missing key"):
        Pipeline.from_pretrained(folder)


# ------------------------------------------------------------------------------------------ names and keywords
def test_a_close_name_is_suggested(monkeypatch):
    import huggingface_hub.constants as hf_constants

    with pytest.raises(AssetNotFoundError, match=r"Did you mean 'leapgen/text-code'\?"):
        Pipeline.from_pretrained("leapgen/text-cod")
    with pytest.raises(AssetNotFoundError, match=r"Did you mean 'leapgen/ocr-en'\?"):
        Pipeline.from_pretrained("leapgen/OCR-en")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(AssetNotFoundError, match=r"Did you mean 'leapgen/peptide'\?"):
        Pipeline.from_pretrained("peptide")  # tried on the Hub, then the shipped name is offered


def test_a_file_or_a_non_name_is_not_taken_for_a_hub_id(tmp_path):
    folder = _saved(Pipeline.from_pretrained("leapgen/peptide"), tmp_path / "p")
    with pytest.raises(AssetNotFoundError, match=r"is a file, not a pipeline folder; pass its folder"):
        Pipeline.from_pretrained(folder / "model_index.json")
    for bad in (None, 3, ""):
        with pytest.raises(InputError, match="takes a shipped pipeline name"):
            Pipeline.from_pretrained(bad)


def test_an_unknown_keyword_is_refused_before_any_weights_load(monkeypatch):
    from leapgen.models.peptide import PeptideModel

    def no_load(*args, **kwargs):
        raise AssertionError("weights loaded before the keywords were checked")

    monkeypatch.setattr(PeptideModel, "from_pretrained", no_load)
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['revision'\].*settings \(max_peaks, tolerance\)"):
        Pipeline.from_pretrained("leapgen/peptide", revision="main")


def test_dtype_names_are_taken_like_transformers_torch_dtype():
    assert Pipeline.from_pretrained("leapgen/peptide", torch_dtype="bfloat16").dtype == torch.bfloat16
    pipe = Pipeline.from_pretrained("leapgen/peptide", dtype="float16")
    assert pipe.dtype == torch.float16 and pipe.to("float32").dtype == torch.float32
    with pytest.raises(ConfigError, match="'auto' is not supported"):
        Pipeline.from_pretrained("leapgen/peptide", torch_dtype="auto")
    with pytest.raises(InputError, match="pass one"):  # torch_dtype silently won over dtype
        Pipeline.from_pretrained("leapgen/peptide", dtype=torch.float16, torch_dtype=torch.bfloat16)
    with pytest.raises(InputError, match=r"or its name, e.g. 'float16'"):
        Pipeline.from_pretrained("leapgen/peptide", dtype="f16")



def test_half_precision_on_the_cpu_says_what_it_costs(caplog):
    """float16 / bfloat16 on the CPU gave sane outputs but a text decode ran 35x slower than float32
    (no fast half-precision matrix product on this AVX2 CPU), without a word."""
    import logging

    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.loading"):
        pipe = Pipeline.from_pretrained("leapgen/peptide")
        assert not caplog.records
        Pipeline.from_pretrained("leapgen/peptide", torch_dtype=torch.float16)
        pipe.to(torch.bfloat16)
    assert [r.getMessage().split(" weights")[0] for r in caplog.records] == ["torch.float16", "torch.bfloat16"]
    assert "use float32 on the CPU" in caplog.records[0].getMessage()

# ------------------------------------------------------------------------------------------ components changed
def test_a_component_changed_in_place_or_replaced_is_what_the_next_call_decodes(pipe):
    """The lean runtime decodes a copy of the target's weights, rebuilt only by ``pipe.to()``: after
    ``pipe.model.load_state_dict(...)`` (or a training step, or ``pipe.model = other``) the pipeline
    went on decoding with the weights of load time, without a word."""
    from conftest import perturbed_copy

    from leapgen import TextPipeline

    model = copy.deepcopy(pipe.model)
    mine = TextPipeline(model=model, tokenizer=pipe.tokenizer)
    before = mine(PROMPT, max_new_tokens=8).token_ids
    other = perturbed_copy(model, noise=1.0, seed=5)
    expect = TextPipeline(model=other, tokenizer=pipe.tokenizer)(PROMPT, max_new_tokens=8).token_ids
    assert expect != before  # the change matters
    model.load_state_dict(other.state_dict())
    assert mine(PROMPT, max_new_tokens=8).token_ids == expect
    mine.model = copy.deepcopy(pipe.model)  # replaced outright
    assert mine(PROMPT, max_new_tokens=8).token_ids == before
    twin = TextPipeline(model=mine.model, tokenizer=pipe.tokenizer)  # shared, cast by the other's to()
    twin.to(torch.float64)
    mine(PROMPT, max_new_tokens=2)
    assert mine._lms["model"].dtype == torch.float64
