"""A robustness sweep of the sampler registry's parameters.

Every registered sampler, every parameter it declares (``sampler_info(name).defaults``): a value of
the wrong kind is refused at construction with a ConfigError that names the parameter, never a bare
TypeError or a silent coercion (a bool taken as the count 1, ``suppress_ids=0`` read as "none").
Values that construction accepts but that used to break the decode (a huge window allocating
gigabytes, a huge n-gram length or lookahead level looping for minutes, a huge length-normalisation
exponent overflowing) now run, or are refused before any forward, naming the parameter.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from registry_harness import BENCHES, bench, temperature_for

from leapgen.errors import ConfigError
from leapgen.samplers import get_sampler, list_samplers, sampler_info
from leapgen.samplers.cost_model import verify_cost
from leapgen.samplers.lookahead import window_slots

torch.set_num_threads(1)

HUGE = 10**9


def _is_number(default: Any) -> bool:
    return isinstance(default, (int, float)) and not isinstance(default, bool)


#: values no numeric parameter takes: wrong types (a bool included), NaN, a negative number
NOT_NUMBERS = [("str", "x"), ("list", [1]), ("dict", {"a": 1}), ("True", True), ("False", False),
               ("nan", float("nan")), ("neg", -1), ("-inf", float("-inf"))]


def numeric_cases() -> list[Any]:
    return [pytest.param(s.name, p, v, id=f"{s.name}-{p}-{label}")
            for s in list_samplers() for p, d in s.defaults.items() if _is_number(d) for label, v in NOT_NUMBERS]


@pytest.mark.parametrize("name,param,value", numeric_cases())
def test_numeric_parameters_refuse_other_kinds(name, param, value):
    with pytest.raises(ConfigError, match=param):
        get_sampler(name, **{param: value})


@pytest.mark.parametrize("name", [s.name for s in list_samplers() if s.defaults])
def test_near_miss_parameter_names_are_refused_with_the_valid_ones(name):
    info = sampler_info(name)
    for param in info.defaults:
        for typo in (param + "s", param[:-1], param.upper()):
            if typo in info.defaults:
                continue
            with pytest.raises(ConfigError) as err:
                get_sampler(name, **{typo: info.defaults[param]})
            msg = str(err.value)
            assert repr(typo) in msg and all(p in msg for p in info.defaults), msg


# ------------------------------------------------------------------------------------------ token-id lists

ID_LIST_PARAMS = [(s.name, p) for s in list_samplers() for p in ("stop_ids", "suppress_ids") if p in s.defaults]
NOT_ID_LISTS = [0, 5, 2.5, "x", (-1,), (2.5,), (True,), ("x",)]


@pytest.mark.parametrize("name,param", ID_LIST_PARAMS)
def test_token_id_lists_refuse_a_bare_id_and_bad_entries(name, param):
    """``suppress_ids=0`` used to mean "suppress nothing" (0 is falsy) while ``suppress_ids=5`` was an
    error, ``(2.5,)`` became token 2 and ``(-1,)`` was dropped without a word; ``stop_ids=0`` was a
    bare TypeError."""
    for value in NOT_ID_LISTS:
        with pytest.raises(ConfigError, match=param):
            get_sampler(name, **{param: value})
    assert get_sampler(name, **{param: (0, 3)}).params[param] == (0, 3)


def test_masked_suppress_ids_none_is_none():
    assert get_sampler("llada", suppress_ids=None).parts.proposer.suppress_ids == ()
    assert get_sampler("llada", suppress_ids=[3, 1]).parts.proposer.suppress_ids == (3, 1)


def test_a_bad_hook_names_the_hooks_parameter():
    for value in (0, None, (1,), ("no_such_hook",)):
        with pytest.raises(ConfigError, match="hooks"):
            get_sampler("llada", hooks=value)


def test_verify_cost_refusals_name_it():
    for value in (-1, float("inf"), [float("inf")], [1.0, -1.0]):
        with pytest.raises(ConfigError, match="verify_cost"):
            get_sampler("prompt_lookup", verify_cost=value)
    with pytest.raises(ConfigError, match="verify_cost"):
        verify_cost(None, 1, [1.0, float("inf")])
    assert verify_cost(None, 1, 0.5)(3) == pytest.approx(2.0)


# ------------------------------------------------------------------------------------------ huge values


def _run(name: str, params: dict[str, Any], batch: int = 1, seed: int = 0, temperature: float | None = None):
    info = sampler_info(name)
    contract = next(c for c in info.contracts if c in BENCHES)
    t = temperature_for(info) if temperature is None else temperature
    return bench(contract, "cpu").run(name, batch, temperature=t, seed=seed, params=params)


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s result, failing (not hanging) when it takes longer than ``seconds``."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_gsd_rank_window_past_the_vocabulary_is_the_whole_vocabulary():
    """rank_window=10**9 used to allocate a [B, g, 2 * 10**9] tensor (a raw RuntimeError)."""
    vocab = bench("causal", "cpu").vocab
    huge = _run("gsd", {"rank_window": HUGE}, batch=4, seed=3)
    whole = _run("gsd", {"rank_window": vocab}, batch=4, seed=3)
    assert huge.sequences == whole.sequences
    assert huge.stats.accepted_per_step == whole.stats.accepted_per_step


def test_jacobi_window_past_the_budget_runs_and_stays_greedy():
    """window=10**9 used to draw and store 10**9 filler guesses per row (a raw RuntimeError)."""
    huge = _run("jacobi", {"window": HUGE}, batch=4)
    assert huge.sequences == _run("ar", {}, batch=4, temperature=0.0).sequences


def test_lookahead_window_slots_is_closed_form():
    """level=10**9 used to loop 10**9 times in the context-window check (minutes), before refusing."""
    def loop(level: int, width: int) -> int:
        n, widest = level - 1, 0
        for k in range(1, n + 1):
            w0 = width + n - 1 - k
            widest = max(widest, w0 + (k - 1) * (w0 + 1))
        return widest

    assert all(window_slots(lv, w) == loop(lv, w) for lv in range(1, 30) for w in range(1, 30))
    assert _within(5, lambda: window_slots(HUGE, 7)) > 10**17
    with pytest.raises(ConfigError, match="level"):
        _run("lookahead", {"level": HUGE})


def test_prompt_lookup_huge_max_ngram_runs(monkeypatch):
    """max_ngram=10**9 used to build an acceptance table of 10**9 + 1 classes (minutes and tens of
    GB); a matched n-gram is never longer than the text, so the table needs no more classes."""
    from leapgen.samplers import prompt_lookup

    sizes: list[int] = []
    real = prompt_lookup.AcceptanceModel

    def recording(classes: int, *args: Any, **kwargs: Any):
        sizes.append(classes)
        assert classes <= 10**4, f"an acceptance table of {classes} classes"  # fails before allocating it
        return real(classes, *args, **kwargs)

    monkeypatch.setattr(prompt_lookup, "AcceptanceModel", recording)
    res = _run("prompt_lookup", {"max_ngram": HUGE}, batch=4)
    assert sizes and res.sequences == _run("prompt_lookup", {"max_ngram": 64}, batch=4).sequences


@pytest.mark.parametrize("name", ["mar", "cspd"])
def test_head_steps_past_the_heads_training_steps_is_refused(name):
    """head_steps=10**9 used to allocate a [B, N, 10**9 + 1, D] noise bank (a raw RuntimeError)."""
    with pytest.raises(ConfigError, match="head_steps"):
        _run(name, {"head_steps": HUGE})


def test_dag_viterbi_huge_beta_runs():
    """beta=1e300 used to raise a bare OverflowError from ``(m - 1) ** beta``."""
    from leapgen.samplers.dag.common import length_normalised

    assert length_normalised(-3.0, 2, 1.0) == -1.5
    assert length_normalised(-3.0, 5, 1e300) == 0.0 and math.copysign(1, length_normalised(-3.0, 5, 1e300)) < 0
    for beta in (1e300, float(HUGE)):
        res = _run("dag_viterbi", {"beta": beta}, batch=3)
        assert len(res.sequences) == 3
