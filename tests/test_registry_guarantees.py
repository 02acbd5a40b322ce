"""Registry-driven tests: every registered sampler, on every model contract it declares, gets

* the test of its declared guarantee (``tests/registry_harness.py``: greedy identity, enumeration
  exactness, the measured per-step bound, or valid outputs), on the CPU and, with the ``gpu``
  marker, on CUDA (``pytest -m gpu``; skipped with a visible reason when there is no CUDA device);
* the no-op setting check where it declares one (``Sampler.reduces_to``, e.g. gsd without
  grouping is sjd token for token);
* seeded reproducibility at batch 1 and a larger batch;
* the bad-input tests: unknown parameter, out-of-range parameters, a missing model it needs, a
  model of a contract it does not declare;

and a meta-test fails when a registered sampler's guarantee, contract or model roles have no test
here. Nothing lists samplers by hand: the cases come from ``list_samplers()``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from registry_harness import (
    BENCHES,
    CHECKS,
    DEVICES,
    bad_values,
    bench,
    contract_cases,
    coverage_problems,
    guarantee_cases,
    temperature_for,
    wrong_contract_cases,
)

from leapgen.errors import ConfigError, ModelMismatchError
from leapgen.samplers import get_sampler, list_samplers, sampler_info
from leapgen.samplers.base import CONTRACTS, GUARANTEES
from leapgen.samplers.guarantees import StepBound

# ------------------------------------------------------------------------------------------ meta


@pytest.mark.parametrize("name", [s.name for s in list_samplers()])
def test_every_registered_sampler_has_its_tests(name):
    problems = coverage_problems(sampler_info(name))
    assert not problems, f"sampler {name!r} would go untested: " + "; ".join(problems)


def test_the_meta_test_catches_an_untested_sampler():
    """A sampler declaring a guarantee the harness cannot test on its contract, a model role no
    bench provides, or a bound it does not state, is reported (and so fails the test above)."""
    ar, lantern = sampler_info("ar"), sampler_info("lantern")
    assert not coverage_problems(ar) and not coverage_problems(lantern)
    assert any("no test on 'masked'" in p for p in coverage_problems(dataclasses.replace(ar, contracts=("masked",))))
    assert any("role" in p for p in coverage_problems(dataclasses.replace(ar, needs=("model", "reward_model"))))

    class Unstated(lantern.cls):  # a bounded sampler that forgot its bound
        def step_bound(self):
            return None

    assert any("states no bound" in p for p in coverage_problems(dataclasses.replace(lantern, cls=Unstated)))
    assert set(BENCHES) == set(CONTRACTS) and {g for g, _ in CHECKS} == set(GUARANTEES)


def test_step_bound_protocol():
    assert get_sampler("lantern").step_bound() == StepBound(tv=0.1)
    assert get_sampler("lantern", rule="lantern++", lam=3.0).step_bound() == StepBound(ratio=3.0)
    assert all(get_sampler(s.name).step_bound() is None for s in list_samplers() if s.guarantee != "bounded")
    with pytest.raises(ValueError):
        StepBound()


# ------------------------------------------------------------------------------------------ guarantees


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,contract,check", guarantee_cases())
def test_declared_guarantee(name, contract, check, device):
    check(sampler_info(name), bench(contract, device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,contract", contract_cases(lambda info: info.cls.reduces_to is not None))
def test_no_op_setting_is_the_other_sampler(name, contract, device):
    """With its no-op setting (``reduces_to``) the sampler is the other one token for token, same seed."""
    other, params = sampler_info(name).cls.reduces_to
    b = bench(contract, device)
    for temperature in (1.0, 0.0):
        a = b.run(name, b.batches[1], temperature=temperature, seed=3, params=params)
        ref = b.run(other, b.batches[1], temperature=temperature, seed=3)
        assert a.sequences == ref.sequences, (name, other, temperature)
        assert a.stats.accepted_per_step == ref.stats.accepted_per_step


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,contract", contract_cases())
def test_seeded_reproducibility(name, contract, device):
    info, b = sampler_info(name), bench(contract, device)
    temperature = temperature_for(info)
    for batch in b.batches:
        first = b.run(name, batch, temperature=temperature, seed=5)
        again = b.run(name, batch, temperature=temperature, seed=5)
        assert first.sequences == again.sequences, f"{name}: the same seed gave different outputs at batch {batch}"
        assert first.stats.accepted_per_step == again.stats.accepted_per_step


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("name", [s.name for s in list_samplers()])
def test_unknown_and_out_of_range_parameters(name):
    info = sampler_info(name)
    with pytest.raises(ConfigError, match="no_such_parameter") as err:
        get_sampler(name, no_such_parameter=1)
    for valid in info.defaults:
        assert valid in str(err.value), "the message must list the sampler's parameters"
    for param, default in info.defaults.items():
        for value in bad_values(default):
            with pytest.raises(ConfigError, match=param):
                get_sampler(name, **{param: value})


@pytest.mark.parametrize("name,contract", contract_cases())
def test_missing_model(name, contract):
    b = bench(contract, "cpu")
    for role in sampler_info(name).needs:
        models = {k: v for k, v in b.models().items() if k != role}
        with pytest.raises(ConfigError, match=role):
            b.run(name, 1, temperature=temperature_for(sampler_info(name)), models=models)


@pytest.mark.parametrize("name,contract", wrong_contract_cases())
def test_model_of_another_contract(name, contract):
    """A model of a contract the sampler does not declare is refused when the call starts, naming the
    contracts it runs on and the samplers that run on the model given."""
    info, b = sampler_info(name), bench(contract, "cpu")
    given = b.models()
    models = {role: given.get(role, given["model"]) for role in info.needs}  # every role filled from that bench
    with pytest.raises(ModelMismatchError) as err:
        b.run(name, 1, temperature=temperature_for(info), models=models)
    msg = str(err.value)
    assert all(c in msg for c in info.contracts) and f"({contract} model)" in msg
    assert all(s.name in msg for s in list_samplers() if contract in s.contracts)


def test_a_bare_module_is_refused():
    b = bench("causal", "cpu")
    for name in ("ar", "maskgit"):
        with pytest.raises(ModelMismatchError, match="bare LlamaForCausalLM"):
            get_sampler(name).generate({"model": b.target}, [[1, 2]], b.config(0.0), torch.Generator())
