"""`leapgen train` / `leapgen data` check each option's value against the recipe's signature before
anything loads (leapgen.train.option_values).

Before: ``--target-tokens abc`` reached the recipe as a string and failed inside it with a TypeError
traceback; ``--minutes nan`` trained for ever (a NaN budget never runs out); ``--target-tokens -5``,
``--masked-minutes -1`` or ``--vae-minutes -3`` started runs that could not be meant."""

from __future__ import annotations

import math

import pytest

from leapgen.errors import ConfigError
from leapgen.train.option_values import check_option_values


def _recipe(out_dir: str = "x", seed: int = 0, tokens: int = 100, minutes: float = 5.0, lr: float = 1e-3,
            warmup_frac: float = 0.05, dropout: float = 0.1, max_steps: int | None = None, resume: bool = True,
            corpus: str | None = None, crop: tuple[float, float] = (1.0, 3.0)) -> None:
    pass


@pytest.mark.parametrize("options,message", [
    ({"tokens": "abc"}, "--tokens takes an integer, got 'abc'"),
    ({"tokens": 1.5}, "--tokens takes an integer, got 1.5"),
    ({"tokens": True}, "--tokens takes an integer"),
    ({"tokens": -5}, "--tokens must be above 0, got -5 (default 100)"),
    ({"tokens": 0}, "--tokens must be above 0"),
    ({"minutes": math.nan}, "--minutes must be a finite number"),
    ({"minutes": math.inf}, "--minutes must be a finite number"),
    ({"minutes": "x"}, "--minutes takes a number, got 'x'"),
    ({"lr": 0}, "--lr must be above 0"),
    ({"warmup_frac": -0.1}, "--warmup-frac must be 0 or more"),
    ({"max_steps": -1}, "--max-steps must be above 0"),
    ({"resume": "maybe"}, "--resume takes true or false"),
    ({"minutes": None}, "--minutes cannot be none"),
    ({"seed": -1}, "--seed must be 0 or more"),
])
def test_bad_values_are_refused_with_the_option_named(options, message):
    with pytest.raises(ConfigError) as err:
        check_option_values("toy", _recipe, options)
    assert message in str(err.value) and str(err.value).startswith("recipe 'toy': ")


def test_good_values_pass_and_integral_floats_become_ints():
    out = check_option_values("toy", _recipe, {"tokens": 2e4, "minutes": 1, "warmup_frac": 0, "dropout": 0.0,
                                               "max_steps": None, "resume": False, "corpus": "a/b", "crop": "1,2",
                                               "seed": 0, "out_dir": "/tmp/x"})
    assert out["tokens"] == 20000 and isinstance(out["tokens"], int) and out["minutes"] == 1


def test_every_shipped_recipe_default_passes_its_own_check():
    import inspect

    from leapgen.data import get_dataset_builder, list_datasets
    from leapgen.train import get_recipe, list_recipes

    fns = [(n, get_recipe(n)) for n in list_recipes()] + [(n, get_dataset_builder(n)) for n in list_datasets()]
    for name, fn in fns:
        defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        assert check_option_values(name, fn, defaults) == defaults, name


@pytest.mark.parametrize("argv,message", [
    (["train", "text-code", "--target-tokens", "abc"], "error: recipe 'text-code': --target-tokens takes an integer"),
    (["train", "audio-codec", "--minutes", "nan"], "error: recipe 'audio-codec': --minutes must be a finite number"),
    (["train", "image-mar", "--vae-minutes", "-3"], "error: recipe 'image-mar': --vae-minutes must be above 0"),
    (["train", "asr-de", "--max-steps", "-1"], "error: recipe 'asr-de': --max-steps must be above 0"),
    (["data", "tts-en", "--per-speaker", "-1"], "error: dataset 'tts-en': --per-speaker must be above 0"),
])
def test_the_cli_refuses_before_anything_runs(argv, message, tmp_path, capsys):
    from leapgen.cli import main

    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert not (tmp_path / "x").exists()



@pytest.mark.parametrize("argv,message", [
    (["bench", "audio", "--num-prompts", "0"], "--num-prompts must be >= 1, got 0"),
    (["bench", "asr", "--repeats", "-2"], "--repeats must be >= 1, got -2"),
    (["generate", "audio", "x", "--duration", "nan"], "--duration must be a finite number of seconds above 0"),
    (["generate", "text", "x", "--num-return-sequences", "0"], "--num-return-sequences must be >= 1"),
    (["demo", "--port", "0"], "--port must be >= 1"),
])
def test_counts_and_durations_are_checked_for_every_command(argv, message, capsys):
    # before: `bench audio --num-prompts 0` died in numpy ("need at least one array to concatenate")
    from leapgen.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_no_count_check_on_an_option_whose_zero_means_skip():
    # the shared count check first refused `bench dllm --long-prompts 0` and `bench text-lossy --long-tokens 0`,
    # whose help says 0 skips that part
    import argparse
    import re

    from leapgen.cli import COUNTS, build_parser

    def actions(parser):
        for a in parser._actions:
            yield a
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from actions(sub)

    zero_means_off = {a.dest for a in actions(build_parser())
                      if a.help and re.search(r"\b0\b[^.;]*\b(skip|skips|disables|off)\b", a.help)}
    assert {"long_prompts", "long_tokens"} <= zero_means_off
    assert not zero_means_off & COUNTS
