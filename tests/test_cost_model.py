"""The verify-cost curve, the acceptance model and the cost-aware draft width (prompt_lookup's
``schedule="cost"``)."""

from __future__ import annotations

import pytest
import torch
from conftest import hf_lm

from leapgen.errors import ConfigError
from leapgen.samplers import get_sampler
from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.controllers import AcceptanceModel, best_width
from leapgen.samplers.cost_model import DEVICE_CURVES, VerifyCost, isotonic, measure_verify_cost, verify_cost


def test_curve_interpolates_and_extrapolates() -> None:
    c = VerifyCost({1: 2.0, 2: 3.0, 4: 4.0})  # normalised by t(1)
    assert c(1) == 1.0 and c(2) == 1.5 and c(3) == pytest.approx(1.75) and c(4) == 2.0
    assert c(6) == pytest.approx(2.5)  # the last segment's slope (0.25 per token)
    assert VerifyCost.linear(0.5)(5) == pytest.approx(3.0)
    assert VerifyCost({1: 1.0, 8: 0.5})(8) == 0.5  # as given; the measured path makes it monotone


def test_isotonic_pools_violators() -> None:
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([1.0, 1.5, 2.0]) == [1.0, 1.5, 2.0]
    out = isotonic([1.0, 1.54, 2.1, 2.25, 1.26, 2.34])
    assert all(a <= b for a, b in zip(out, out[1:])) and sum(out) == pytest.approx(1.0 + 1.54 + 2.1 + 2.25 + 1.26 + 2.34)


@pytest.mark.parametrize("spec", ["fast", -0.1, True, [], ["a"], {1: 1.0}])
def test_bad_curves_are_refused(spec) -> None:
    with pytest.raises(ConfigError, match="verify_cost must be|verify-cost"):
        verify_cost(None, 1, spec)


def test_curve_sources() -> None:
    assert verify_cost(None, 1, "flat")(9) == 1.0
    assert verify_cost(None, 1, 0.25)(5) == pytest.approx(2.0)
    assert verify_cost(None, 1, [1.0, 1.2, 1.3])(3) == pytest.approx(1.3)
    cpu = verify_cost(torch.nn.Linear(1, 1), 1, "auto", greedy=False)  # sampling: the fixed device curve
    assert cpu(6) == pytest.approx(DEVICE_CURVES["cpu"][6])


def test_measured_curve_leaves_the_forward_counter_alone(target_model) -> None:
    lm = hf_lm(target_model)
    before = lm.forwards
    c = measure_verify_cost(lm, batch=2, sizes=(1, 2, 4), runs=2, context=8)
    assert lm.forwards == before
    assert c(1) == 1.0 and c(1) <= c(2) <= c(4)
    # cached per model and batch size
    assert verify_cost(lm, 3, "measured") is verify_cost(lm, 3, "measured")


def test_acceptance_model_counts() -> None:
    m = AcceptanceModel(2, first_prior=(1.0, 1.0), next_prior=(1.0, 1.0))
    m.observe(1, drafted=5, accepted=2)  # first accepted; 2nd accepted, 3rd rejected
    assert m.first[1] == [2.0, 1.0] and m.next[1] == [2.0, 2.0]
    m.observe(1, drafted=3, accepted=0)
    assert m.first[1] == [2.0, 2.0] and m.next[1] == [2.0, 2.0]
    m.observe(1, drafted=3, accepted=3)  # all accepted: the 2nd and 3rd were tested and accepted
    assert m.first[1] == [3.0, 2.0] and m.next[1] == [4.0, 2.0]
    m.observe(0, drafted=0, accepted=0)  # no draft: nothing learnt
    assert m.first[0] == [1.0, 1.0]
    s = m.survival(1, 3)
    assert s == pytest.approx([0.6, 0.6 * 4 / 6, 0.6 * (4 / 6) ** 2])


def test_best_width() -> None:
    flat = VerifyCost.linear(0.0)
    steep = VerifyCost.linear(1.0)
    assert best_width([[0.9, 0.8, 0.7]], flat) == 3  # drafting is free: draft everything
    assert best_width([[0.9, 0.8, 0.7]], steep) == 0  # each token costs a whole forward: never worth it
    assert best_width([[0.9, 0.8, 0.7]], VerifyCost.linear(0.3)) == 3
    assert best_width([[0.2, 0.1]], VerifyCost.linear(0.3)) == 0
    assert best_width([], flat) == 0
    # batch: the row with the long likely copy sets the width, the short one rides along
    assert best_width([[0.95, 0.9, 0.85, 0.8], [0.1]], VerifyCost.linear(0.2)) == 4
    # a plateau makes the wider block as cheap as the narrower one
    plateau = VerifyCost({1: 1.0, 2: 1.3, 3: 1.6, 6: 1.6})
    assert best_width([[0.6, 0.5, 0.4, 0.3, 0.2]], plateau) == 5


def _decode(lm, sampler, prompts, **cfg):
    return sampler.generate({"model": lm}, prompts, DecodeConfig(max_new_tokens=24, **cfg))


def test_cost_schedule_is_exact_and_steers_width(target_model) -> None:
    prompts = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8]]
    ar = _decode(hf_lm(target_model), get_sampler("ar"), prompts)
    const = _decode(hf_lm(target_model), get_sampler("prompt_lookup", schedule="constant"), prompts)
    flat = _decode(hf_lm(target_model), get_sampler("prompt_lookup", verify_cost="flat"), prompts)
    never = _decode(hf_lm(target_model), get_sampler("prompt_lookup", verify_cost=[1.0, 50.0]), prompts)
    auto = _decode(hf_lm(target_model), get_sampler("prompt_lookup"), prompts)
    for r in (const, flat, never, auto):
        assert r.sequences == ar.sequences
    # free verification drafts every match in full, like the constant schedule
    assert flat.stats.target_forwards == const.stats.target_forwards
    assert flat.stats.drafted_tokens == const.stats.drafted_tokens
    # a prohibitive verify cost never drafts: ar's forwards
    assert never.stats.drafted_tokens == 0 and never.stats.target_forwards == ar.stats.target_forwards


def test_cost_schedule_reproduces_a_seed_when_sampling(target_model) -> None:
    prompts = [[1, 2, 3, 4, 1, 2, 3]] * 2
    runs = [
        _decode(hf_lm(target_model), get_sampler("prompt_lookup"), prompts, temperature=0.8, seed=3).sequences
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("kw", [dict(schedule="heuristic"), dict(verify_cost="fast"), dict(verify_cost=-1)])
def test_bad_schedule_settings(kw) -> None:
    with pytest.raises(ConfigError):
        get_sampler("prompt_lookup", **kw)

