"""No registered sampler silently ignores ``repetition_penalty``: for every sampler of the registry,
a config with ``repetition_penalty=1.3`` is either refused by ``check_config`` (a ``ConfigError``
naming the samplers that take it: ``Sampler.honours_repetition_penalty``), or the sampler is one that
demonstrably applies it: on the tiny causal bench of tests/registry_harness.py, greedy, a lossless
one gives greedy ``ar``'s output under the penalty (which differs from ``ar``'s without it), a lossy
one's output moves with the penalty. The ones that run on other model families (text heads,
peptide) are loop samplers, which hand every distribution its context."""

from __future__ import annotations

import pytest
import torch
from registry_harness import bench

from leapgen.errors import ConfigError
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers, sampler_info
from leapgen.samplers.loops.common import LoopSampler
from leapgen.samplers.refusals import OFF

PENALTY = 1.3
TAKES = [s.name for s in list_samplers() if s.cls.honours_repetition_penalty]
REFUSES = [s.name for s in list_samplers() if not s.cls.honours_repetition_penalty]


def test_the_registry_splits_as_expected():
    assert {"ar", "speculative", "jacobi", "lookahead", "spec_tree"} <= set(TAKES)
    assert {"ar_beam", "superposed", "var", "nar", "ctf", "mar", "dd", "cspd", "ctc_greedy", "paraformer", "cppd",
            "dag_greedy", "dag_viterbi", "llada", "maskgit"} <= set(REFUSES)


@pytest.mark.parametrize("name", REFUSES)
def test_samplers_that_ignore_the_repetition_penalty_refuse_it(name):
    smp = get_sampler(name)
    smp.check_config(DecodeConfig(max_new_tokens=4))  # the default (1) passes
    cfg = DecodeConfig(max_new_tokens=4, repetition_penalty=PENALTY)
    with pytest.raises(ConfigError, match=f"repetition_penalty={PENALTY}") as err:
        smp.check_config(cfg)
    assert "'ar'" not in str(err.value) and "ar, " in str(err.value) and "speculative" in str(err.value)
    with pytest.raises(ConfigError, match="repetition_penalty"):  # generate refuses it before anything runs
        smp.generate({}, [[1, 2]], cfg, torch.Generator().manual_seed(0))


def _greedy(name: str, penalty: float) -> list[list[int]]:
    b = bench("causal", "cpu")
    inputs, cond = b.inputs(4)
    cfg = DecodeConfig(max_new_tokens=b.max_new_tokens, temperature=0.0, pad_token_id=0, repetition_penalty=penalty)
    return get_sampler(name).generate(b.models(), inputs, cfg, torch.Generator().manual_seed(0), cond=cond).sequences


def _on_bench(name: str) -> bool:
    info = sampler_info(name)
    return "causal" in info.contracts and set(info.needs) <= {"model", "draft"}


ON_BENCH = [n for n in TAKES if _on_bench(n)]
OFF_BENCH = [n for n in TAKES if not _on_bench(n)]  # text-heads / peptide models: loop samplers, checked below


@pytest.mark.parametrize("name", TAKES)
def test_samplers_that_take_the_repetition_penalty_are_loop_samplers(name):
    assert issubclass(sampler_info(name).cls, LoopSampler), (
        f"{name}: only the loop samplers are known to apply the penalty")


def test_the_bench_covers_most_samplers_that_take_it():
    assert len(ON_BENCH) >= 15 and set(OFF_BENCH) <= {"first", "judge", "chimera", "hidden_transfer", "ar_bidirectional"}


@pytest.mark.parametrize("name", ON_BENCH)
def test_samplers_that_take_the_repetition_penalty_apply_it(name):
    info = sampler_info(name)
    ar_plain, ar_pen = _greedy("ar", 1.0), _greedy("ar", PENALTY)
    assert ar_plain != ar_pen, "the penalty must change greedy ar on the bench for this check to have power"
    got = _greedy(name, PENALTY)
    if info.guarantee in ("greedy-exact", "distribution-exact"):
        assert got == ar_pen, f"{name}: differs from greedy ar under repetition_penalty={PENALTY}"
    else:
        assert got != _greedy(name, 1.0), f"{name}: its greedy output does not move with repetition_penalty={PENALTY}"


# No sampler silently ignores temperature / top_k / top_p / min_p: those a sampler never reads are
# declared in ``Sampler.ignores`` and a value other than the off one is refused (leapgen.samplers.refusals).
NON_DEFAULT = {"temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.05}
IGNORED = [(s.name, key) for s in list_samplers() for key in s.cls.ignores]


def test_the_samplers_known_to_ignore_the_filters_refuse_them():
    declared = {s.name: set(s.cls.ignores) for s in list_samplers() if s.cls.ignores}
    for name in ("ar_beam", "superposed", "mar", "dd", "cspd", "ctc_prefix_beam", "ctc_pmc"):
        assert {"top_k", "top_p", "min_p"} <= declared.get(name, set()), name
    assert {n for n, keys in declared.items() if "temperature" in keys} >= {"ar_beam", "ctc_prefix_beam", "ctc_pmc", "dd"}
    assert set().union(*declared.values()) <= set(OFF) and set(NON_DEFAULT) == set(OFF)


@pytest.mark.parametrize("name", sorted({n for n, _ in IGNORED}))
def test_the_off_values_pass(name):
    get_sampler(name).check_config(DecodeConfig(max_new_tokens=4, **OFF))  # what pipelines pass by default


@pytest.mark.parametrize(("name", "key"), IGNORED)
def test_a_setting_a_sampler_ignores_is_refused(name, key):
    smp = get_sampler(name)
    cfg = DecodeConfig(max_new_tokens=4, **{key: NON_DEFAULT[key]})
    with pytest.raises(ConfigError, match=f"ignores {key}={NON_DEFAULT[key]}") as err:
        smp.check_config(cfg)
    assert f"accept {key}: " in str(err.value) and name not in str(err.value).split(f"accept {key}: ")[1].split(", ")
    with pytest.raises(ConfigError, match=f"ignores {key}"):  # generate refuses it before anything runs
        smp.generate({}, [[1, 2]], cfg, torch.Generator().manual_seed(0))


def test_ar_beam_points_to_ar_for_sampling():
    with pytest.raises(ConfigError, match="beam search is deterministic; use ar with temperature for sampling"):
        get_sampler("ar_beam").check_config(DecodeConfig(max_new_tokens=4, temperature=0.7))


def test_dd_refuses_a_temperature_and_points_to_the_samplers_that_read_one():
    """dd's generator maps noise to tokens deterministically (its teacher's temperature is distilled in):
    a temperature is refused, and the image-emoji-dd pipeline passes none (tests/test_image_continuous.py)."""
    with pytest.raises(ConfigError, match=r"'dd' \(lossy\) ignores temperature=1.0: the distilled generator .*"
                                          r"use the raster model \(ar on leapgen/image-emoji\) or mar\. "
                                          r"The samplers that accept temperature: .*\bmar\b"):
        get_sampler("dd").check_config(DecodeConfig(max_new_tokens=4, temperature=1.0))


def test_the_refusals_fire_in_table_order():
    """One table (leapgen.samplers.refusals.REFUSALS): min_new_tokens, repetition_penalty, the presence /
    frequency penalties, then temperature, top_k, top_p, min_p; with all of them set, ar_beam (which
    honours none) names the first, and dropping it the next."""
    settings = {"min_new_tokens": 2, "repetition_penalty": PENALTY, "presence_penalty": 0.5, **NON_DEFAULT}
    expect = ["min_new_tokens=2", f"repetition_penalty={PENALTY}", "presence_penalty=0.5", "ignores temperature=0.7",
              "ignores top_k=5", "ignores top_p=0.9", "ignores min_p=0.05"]
    smp = get_sampler("ar_beam")
    for key, text in zip(list(settings), expect):
        with pytest.raises(ConfigError) as err:
            smp.check_config(DecodeConfig(max_new_tokens=4, eos_token_id=2, **settings))
        assert text in str(err.value), (key, str(err.value))
        del settings[key]
    smp.check_config(DecodeConfig(max_new_tokens=4, eos_token_id=2))
