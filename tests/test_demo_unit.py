"""The demo without a browser: discovery from the shipped assets and the sampler registry, the
renderer registry and its generic fallback, argument checks, --share refused."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from PIL import Image

from leapgen.cli import main
from leapgen.demo import discover, register_renderer, render
from leapgen.demo.app import call_kwargs
from leapgen.demo.render import render_generic, renderer_for, stats_html
from leapgen.errors import ConfigError, InputError
from leapgen.pipelines.base import list_shipped
from leapgen.samplers.base import DecodeStats, samplers_for


def test_discovery_finds_every_shipped_pipeline_and_its_samplers():
    specs = {s.name: s for s in discover()}
    assert set(specs) <= set(list_shipped()) and {"leapgen/text-code", "leapgen/molecule-safe"} <= set(specs)
    for s in specs.values():
        assert set(s.samplers) <= set(samplers_for(*s.cls.folder_contracts(s.folder))) and s.baseline in s.samplers
    # draft-needing samplers only where the asset ships a draft or the pipeline builds one
    for name, offered in (("text-code", True), ("image-emoji", True), ("tts-en", True), ("asr-en", True),
                          ("ocr-en", True), ("peptide", False), ("s2st-en-de", False), ("molecule-safe", False),
                          ("image-emoji-nar", False)):
        assert ("speculative" in specs[f"leapgen/{name}"].samplers) == offered, name
    text, mol, img = specs["leapgen/text-code"], specs["leapgen/molecule-safe"], specs["leapgen/image-emoji"]
    assert (text.input_kind, text.baseline, text.size_param) == ("text", "ar", "max_new_tokens")
    assert "speculative" in text.samplers and "maskgit" not in text.samplers
    assert (mol.input_kind, mol.input_param) == ("number", "num_samples")
    assert img.input_kind == "text" and img.example  # a class name read from the asset


def test_call_kwargs_checks_what_the_user_typed():
    text = next(s for s in discover(["leapgen/text-code"]))
    kw = call_kwargs(text, "def f():", "speculative", 8, '{"num_draft_tokens": 3}', '{"temperature": 0.5}', 7)
    assert kw["sampler"] == "speculative" and kw["num_draft_tokens"] == 3 and kw["seed"] == 7
    assert kw["max_new_tokens"] == 8 and kw["temperature"] == 0.5 and kw["prompt"] == "def f():"
    for args, msg in [(("  ", "ar", 8, "", "", 0), "empty"), (("x", "maskgit", 8, "", "", 0), "does not run"),
                      (("x", "ar", 10**6, "", "", 0), "max_new_tokens"), (("x", "ar", 8, "{", "", 0), "JSON"),
                      (("x", "ar", 8, '{"bogus": 1}', "", 0), "no parameter")]:
        with pytest.raises(InputError, match=msg):
            call_kwargs(text, *args)


def test_a_pipeline_that_hands_its_call_on_gets_the_seed_and_size():
    """image-nar's ``__call__(prompt, sampler="nar", **kwargs)`` hands the rest to ImageARPipeline's:
    the tab must still pass the seed and the number of images (a plain signature saw neither)."""
    nar = next(s for s in discover(["leapgen/image-emoji-nar"]))
    assert nar.accepts("seed") and nar.size_param == "num_images_per_prompt" and nar.baseline == "nar"
    kw = call_kwargs(nar, "red apple", "nar", 2, "", '{"cfg_scale": 2.0}', 5)
    assert kw["seed"] == 5 and kw["num_images_per_prompt"] == 2 and kw["cfg_scale"] == 2.0


@dataclass
class _NewFamilyOutput:  # an output class no renderer knows
    pictures: list
    waves: list
    sample_rate: int
    words: list[str]
    stats: DecodeStats = field(default_factory=DecodeStats)


def test_generic_fallback_renders_an_unknown_output():
    out = _NewFamilyOutput([Image.new("RGB", (8, 8))], [np.zeros(4000, np.float32)], 8000, ["a", "b"])
    assert renderer_for(out) is render_generic
    r = render(out)
    assert len(r.images) == 2 and r.audio[0] == 8000 and "words" in r.html and "stats" not in r.html


def test_renderer_registry_and_pipeline_override():
    @register_renderer("_NewFamilyOutput")
    def mine(out, pipe):
        from leapgen.demo import Rendered

        return Rendered(html="mine")

    out = _NewFamilyOutput([], [], 1, [])
    assert render(out).html == "mine"

    class Pipe:
        @staticmethod
        def demo_render(out, pipe):
            from leapgen.demo import Rendered

            return Rendered(html="the pipeline's own")

    assert render(out, Pipe()).html == "the pipeline's own"
    s = stats_html(DecodeStats(sampler="ar", new_tokens=4, target_forwards=4, baseline_steps=4, wall_time=0.5), 0.6)
    assert "step compression" in s and "1.00x" in s and "8.0" in s


def test_share_refused_and_bad_port(capsys):
    assert main(["demo", "--share"]) == 2
    assert "--share is refused" in capsys.readouterr().err
    from leapgen.demo.app import launch

    with pytest.raises(ConfigError, match="port"):
        launch(port=0)
