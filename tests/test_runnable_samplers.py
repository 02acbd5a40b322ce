"""What a shipped pipeline offers is what it runs: ``pipe.runnable_samplers()`` names exactly the
registered samplers that get through the pipeline's own checks, from the registry.

For every shipped pipeline and every registered sampler, the pipeline is called on a tiny input with
each sampler's ``generate`` replaced by a dry run: it checks the models the pipeline hands it
(:meth:`Sampler.check_models`: a draft for ``speculative``, the right contract) and stops, so the
pipeline's argument checks, sampler checks and model assembly all run but nothing is decoded. The
samplers that reach that point must be exactly ``runnable_samplers()``; the others must be refused
with a leapgen error, and :meth:`Pipeline.check_sampler`'s refusal must list ``runnable_samplers()``.
The class-level listing from the folder (what the demo offers, no weights loaded) must agree.

The dry run includes the model features a sampler needs with its settings (``check_features``:
``gsd``'s embedding table, ``lantern``'s token latents, ``gear``'s lean cache), and every feature a
pipeline declares its models lack (``model_lacks``) is checked on the target it hands ``ar``.

(It used to disagree: ``image-emoji-mar`` listed ``mar`` only though ``cspd`` runs; ``image-emoji-var``
and ``-nfig`` both listed ``nfig`` and ``var``; the NAR, molecule and S2ST pipelines listed
``speculative``, ``lantern``, ``bild``, ``gad`` ..., which then failed for want of a draft; and until
2026-11-28 the recognition pipelines offered ``gsd`` / ``lantern`` and the LlamaGen and MusicGen ones
``gear``, which failed once decoding began for want of those model features.)
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from leapgen.data import peptide as peptide_corpus
from leapgen.errors import LeapgenError
from leapgen.pipelines import Pipeline
from leapgen.pipelines.base import list_shipped, read_model_index, resolve_pretrained
from leapgen.samplers import list_samplers
from leapgen.samplers.features import missing_feature

ASSETS = Path(__file__).resolve().parents[1] / "assets"


class _Reached(Exception):
    """The dry run got to the sampler's decode."""


@pytest.fixture
def dry_run(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Every sampler's ``generate`` checks its models and stops; returns the models each got."""
    handed: dict[str, dict[str, Any]] = {}

    def stop(self: Any, models: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.check_models(models)  # contracts, needs and the model features of the sampler's settings
        handed[self.name] = models
        raise _Reached(self.name)

    for info in list_samplers():
        monkeypatch.setattr(info.cls, "generate", stop)
    return handed


def _text_image() -> Image.Image:
    img = Image.new("RGB", (96, 32), "white")
    ImageDraw.Draw(img).text((4, 10), "the cat", fill="black")
    return img


def _spectrum() -> dict[str, Any]:
    s = peptide_corpus.simulate("GASPK", 2, random.Random(0))
    return {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}


#: a tiny call per pipeline class: (positional arguments, keywords)
CALLS: dict[str, Any] = {
    "TextPipeline": lambda: (("def f():",), {"max_new_tokens": 4}),
    "DiffusionTextPipeline": lambda: (("def f():",), {"max_new_tokens": 4}),
    "ImageARPipeline": lambda: (("red apple",), {}),
    "ImageNARPipeline": lambda: (("red apple",), {}),
    "ImageCTFPipeline": lambda: (("red apple",), {}),
    "ImageScalePipeline": lambda: (("red apple",), {}),
    "ImageMARPipeline": lambda: (("red apple",), {}),
    "ImageDDPipeline": lambda: (("red apple",), {}),
    "AudioPipeline": lambda: (("a calm piano melody",), {"duration": 1.0}),
    "MoleculePipeline": lambda: ((1,), {}),
    "ASRPipeline": lambda: ((str(ASSETS / "asr-en" / "examples" / "clip.wav"),), {"max_new_tokens": 4}),
    "S2STPipeline": lambda: ((str(ASSETS / "s2st-en-de" / "examples" / "clip0.wav"),), {"max_new_tokens": 4}),
    "OCRPipeline": lambda: ((_text_image(),), {"max_new_tokens": 4}),
    "PeptidePipeline": lambda: ((_spectrum(),), {"max_new_tokens": 4}),
    "TTSPipeline": lambda: (("the value",), {}),
}

def _listed(message: str) -> list[str]:
    tail = message.split("samplers that can run on it: ")[1]
    return [n for n in tail.split(".")[0].split(", ") if n != "none"]


@pytest.mark.parametrize("name", list_shipped())
def test_runnable_samplers_are_exactly_those_the_pipeline_runs(name: str, dry_run: dict[str, dict[str, Any]]) -> None:
    pipe = Pipeline.from_pretrained(name)
    offered = pipe.runnable_samplers()
    folder = resolve_pretrained(name)
    assert type(pipe).runnable_samplers(index=read_model_index(folder), folder=folder) == offered, "the demo's listing"
    args, kwargs = CALLS[type(pipe).__name__]()
    reached, refused, raw = [], {}, {}
    for info in list_samplers():
        try:
            pipe(*args, sampler=info.name, seed=0, **kwargs)
        except _Reached:
            reached.append(info.name)
        except LeapgenError as err:
            refused[info.name] = f"{type(err).__name__}: {err}"
        except Exception as err:  # noqa: BLE001 - a raw exception is what this test looks for
            raw[info.name] = f"{type(err).__name__}: {err}"
        else:
            raw[info.name] = "returned without decoding"
    assert not raw, f"{name}: raw errors instead of leapgen errors: {raw}"
    assert sorted(reached) == sorted(offered), (
        f"{name}: offered but refused: { {n: refused.get(n) for n in offered if n not in reached} }; "
        f"runs but not offered: {sorted(set(reached) - set(offered))}"
    )
    for sampler in sorted(refused):
        with pytest.raises(LeapgenError) as err:
            pipe.check_sampler(sampler)
        assert _listed(str(err.value)) == offered, f"{name}: {sampler!r} refused with another list: {err.value}"
    # what the pipeline says its models lack (so gsd, lantern or gear is not offered) they do lack:
    # the target the pipeline hands its causal samplers (``ar``'s) is checked feature by feature
    for feature in type(pipe).model_lacks:
        assert "ar" in dry_run or "ctf" in dry_run, f"{name}: declares model_lacks but runs no causal sampler"
        target = dry_run["ar"]["model"] if "ar" in dry_run else dry_run["ctf"]["model"].coarse  # CTF: its coarse stage
        assert missing_feature(target, feature) is not None, f"{name}: its model has {feature!r}"


def test_a_sampler_needing_a_model_feature_the_pipeline_lacks_is_refused_before_decoding() -> None:
    """``gsd`` groups tokens by embedding distance, which the ASR decoder has no table for: it is not
    offered and is refused up front with the way out (``dist_threshold=None``), which then runs;
    ``gear`` needs the lean runtime's cache, which LlamaGen's GPT does not run on."""
    from leapgen.errors import ConfigError
    from leapgen.samplers import get_sampler

    asr = Pipeline.from_pretrained("leapgen/asr-en")
    clip = str(ASSETS / "asr-en" / "examples" / "clip.wav")
    assert "gsd" not in asr.runnable_samplers() and "lantern" not in asr.runnable_samplers()
    with pytest.raises(ConfigError, match="dist_threshold=None"):
        asr(clip, sampler="gsd")
    with pytest.raises(ConfigError, match="embedding table"):
        asr(clip, sampler=get_sampler("gsd"))
    out = asr(clip, sampler="gsd", dist_threshold=None, max_new_tokens=8)
    assert out.texts[0] is not None and out.stats.new_tokens > 0
    image = Pipeline.from_pretrained("leapgen/image-emoji")
    assert "gear" not in image.runnable_samplers()
    with pytest.raises(ConfigError, match="lean runtime"):
        image("red apple", sampler="gear")


def test_a_text_pipeline_offers_what_its_own_model_can_run() -> None:
    """The text pipeline takes any causal LM, so it reads what its model lacks from the model: over a
    GPT-2 it offers no ``gear`` (which compresses the lean Llama runtime's cache) and refuses it up
    front; over the shipped Llama, on either runtime, it offers and runs it."""
    import transformers

    from leapgen.errors import ConfigError
    from leapgen.pipelines import TextPipeline

    shipped = Pipeline.from_pretrained("leapgen/text-code", runtime="transformers")
    assert shipped.model_lacks == {} and "gear" in shipped.runnable_samplers()
    assert shipped("def f():", sampler="gear", max_new_tokens=2).texts[0] is not None
    cfg = transformers.GPT2Config(vocab_size=shipped.model.config.vocab_size, n_embd=32, n_layer=1, n_head=2)
    gpt2 = TextPipeline(transformers.GPT2LMHeadModel(cfg).eval(), shipped.tokenizer)
    assert set(gpt2.model_lacks) == {"lean_cache"} and "gear" not in gpt2.runnable_samplers()
    assert "gsd" in gpt2.runnable_samplers()  # its input embeddings are there
    with pytest.raises(ConfigError, match="lean runtime"):
        gpt2("def f():", sampler="gear", max_new_tokens=2)
