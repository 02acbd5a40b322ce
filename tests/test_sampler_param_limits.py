"""Huge values of every registered sampler's parameters: refused at construction, or decoded with
bounded work.

Driven by the registry, so a new sampler is covered on registration: every numeric parameter
(``sampler_info(name).defaults``) set to 10**12 (an integer default) or to 1e300 and inf (a float
default) is either refused by ``get_sampler`` with a ConfigError that names it, or decodes on its
contract's tiny bench (``tests/registry_harness.py``) within a few seconds and with at most a few
times the forwards of the defaults. Before these checks ``mask_predict(steps=10**9)``,
``aded(num_simulations=10**9)``, ``ctc_prefix_beam(beam_size=10**9)`` and ``cntp(max_trials=10**9)``
hung, ``cspd(max_residual_tries=10**9)`` asked for 80 GB, and a guidance scale of 1e300 on
``magnet`` / ``maskgct`` ended in a bare RuntimeError from ``torch.multinomial``.

A limit a sampler declares (``Sampler.limits``) is enforced at construction, names the range, and
the value at the limit is accepted.
"""

from __future__ import annotations

import functools
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from registry_harness import BENCHES, bench, temperature_for

from leapgen.errors import ConfigError, InputError
from leapgen.samplers import get_sampler, list_samplers, sampler_info
from leapgen.samplers.masked.parts import MAX_GUIDANCE_SCALE
from leapgen.samplers.masked.sampler import MAX_REVISING_STEPS

torch.set_num_threads(1)

HUGE_INT = 10**12
HUGE_FLOATS = (1e300, math.inf)
#: one huge-value decode may take this long (each takes well under a second today): past it the
#: test fails with the case named instead of hanging the suite
SECONDS = 10


def _is_number(default: Any) -> bool:
    return isinstance(default, (int, float)) and not isinstance(default, bool)


class _TooSlow(Exception):
    pass


@contextmanager
def _deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise (in the test's own thread) when the block runs past ``seconds``: a hang fails, naming ``what``."""
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not POSIX: no guard, the forwards bound still holds
        yield
        return

    def alarm(*_: Any) -> None:
        raise _TooSlow(f"{what} still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _bench_of(name: str):
    info = sampler_info(name)
    return bench(next(c for c in info.contracts if c in BENCHES), "cpu")


def _forwards(stats) -> int:
    return stats.target_forwards + stats.draft_forwards + stats.other_forwards


def _run(name: str, params: dict[str, Any]):
    b = _bench_of(name)
    return b.run(name, b.batches[0], temperature=temperature_for(sampler_info(name)), seed=0, params=params)


@functools.cache
def _default_forwards(name: str) -> int:
    return _forwards(_run(name, {}).stats)


def huge_cases() -> list[Any]:
    cases = []
    for s in list_samplers():
        for p, d in s.defaults.items():
            if not _is_number(d):
                continue
            for v in ((HUGE_INT,) if isinstance(d, int) else HUGE_FLOATS):
                cases.append(pytest.param(s.name, p, v, id=f"{s.name}-{p}-{v:g}"))
    return cases


@pytest.mark.parametrize("name,param,value", huge_cases())
def test_a_huge_value_is_refused_or_decodes_with_bounded_work(name, param, value):
    try:
        get_sampler(name, **{param: value})
    except (ConfigError, InputError) as e:
        assert param in str(e), f"the refusal does not name {param!r}: {e}"
        return
    base = _default_forwards(name)
    t0 = time.perf_counter()
    with _deadline(SECONDS, f"{name}({param}={value!r})"):
        try:
            res = _run(name, {param: value})
        except (ConfigError, InputError) as e:  # refused once the inputs are known, before any work
            assert param in str(e), f"the refusal does not name {param!r}: {e}"
            return
    used = _forwards(res.stats)
    assert used <= 4 * base + 8, f"{name}({param}={value!r}) ran {used} forwards, the defaults {base}"
    assert time.perf_counter() - t0 < SECONDS


# ------------------------------------------------------------------------------------------ declared limits


LIMITS = [(s.name, p) for s in list_samplers() for p in s.cls.limits]


def test_the_samplers_that_hung_declare_limits():
    assert {("aded", "num_simulations"), ("ctc_prefix_beam", "beam_size"), ("cspd", "max_residual_tries"),
            ("cntp", "max_trials")} <= set(LIMITS)


@pytest.mark.parametrize("name,param", LIMITS)
def test_a_declared_limit_is_enforced_and_named(name, param):
    info = sampler_info(name)
    high, why = info.cls.limits[param]
    default = info.defaults[param]
    assert _is_number(default) and abs(default) <= high and why
    over = int(high) + 1 if isinstance(default, int) else high * 1.5
    with pytest.raises(ConfigError, match=rf"{param} must be .*{high:g}"):
        get_sampler(name, **{param: over})
    with pytest.raises(ConfigError, match=param):
        get_sampler(name, **{param: HUGE_INT if isinstance(default, int) else 1e300})
    assert get_sampler(name, **{param: int(high) if isinstance(default, int) else high}).params[param] == high


def test_ctc_prefix_beam_at_its_limit_decodes_validly():
    """beam_size=10**9 grew the beam exponentially in the frames (a hang); the limit itself runs."""
    from leapgen.samplers.nar.ctc import MAX_BEAM

    b = _bench_of("ctc_prefix_beam")
    models = b.models()
    with _deadline(SECONDS, "ctc_prefix_beam at its limit"):
        res = b.run("ctc_prefix_beam", 1, params={"beam_size": MAX_BEAM}, models=models)
    b.assert_valid(res, 1, models)


# ------------------------------------------------------------------------------------------ masked step budgets


MASKED_WITH_STEPS = [s.name for s in list_samplers() if "steps" in s.defaults]


@pytest.mark.parametrize("name", MASKED_WITH_STEPS)
def test_huge_steps_never_run_more_forwards_than_positions(name):
    """Commit-only schedules reveal >= 1 unit per step, so a huge ``steps`` costs at most one step per
    position (times the guidance passes); a revising policy (mask_predict) runs every scheduled step,
    so past MAX_REVISING_STEPS it is refused before any forward."""
    try:
        get_sampler(name, steps=HUGE_INT)
    except ConfigError as e:
        assert "steps" in str(e)
        return
    with _deadline(SECONDS, f"{name}(steps=10**12)"):
        res = _run(name, {"steps": HUGE_INT})
    assert 0 < res.stats.target_forwards <= 2 * res.stats.new_tokens


def test_mask_predict_steps_are_capped_with_the_limit_named():
    for params in ({"steps": MAX_REVISING_STEPS + 1}, {"steps": 10**9}):
        with pytest.raises(ConfigError, match=rf"steps must be <= {MAX_REVISING_STEPS} with a revising policy"):
            get_sampler("mask_predict", **params)
    with pytest.raises(ConfigError, match=r"steps_per_stage\[1\] must be <= 1000"):
        get_sampler("maskgit", policy="remask_lowest", region="codebook_stages", steps_per_stage=(4, 10**9))
    # commit-only policies are not limited: their step count never passes the masks
    assert get_sampler("maskgit", steps=10**9).params["steps"] == 10**9
    ok = _run("mask_predict", {"steps": 6})
    assert ok.stats.target_forwards == 6


# ------------------------------------------------------------------------------------------ guidance


GUIDANCE = sorted({(s.name, p) for s in list_samplers() for p in s.defaults
                   if _is_number(s.defaults[p]) and (p.endswith(("cfg_scale", "cfg_min_scale")) or p == "context_weight")})


def _with_its_guidance(name: str, param: str) -> dict[str, Any]:
    """The parameters under which ``param`` takes effect (a masked sampler refuses one that has none)."""
    default = sampler_info(name).defaults.get("guidance")
    if param == "context_weight" and default != "context":
        return {"guidance": "context"}
    if param in ("cfg_scale", "cfg_min_scale") and default not in ("cfg", "embedding_cfg"):
        return {"guidance": "cfg", **({"cfg_anneal": "mask_rate"} if param == "cfg_min_scale" else {})}
    return {}


@pytest.mark.parametrize("name,param", GUIDANCE)
def test_guidance_scales_refuse_non_finite_and_overflowing_values(name, param):
    extra = _with_its_guidance(name, param)
    for value in (math.inf, -math.inf, math.nan, 1e300, -1e300, MAX_GUIDANCE_SCALE * 1.01):
        with pytest.raises(ConfigError, match=param):
            get_sampler(name, **extra, **{param: value})
    get_sampler(name, **extra, **{param: MAX_GUIDANCE_SCALE})


@pytest.mark.parametrize("name", ["magnet", "maskgct_t2s", "maskgct_s2a"])
def test_the_largest_guidance_scale_decodes_valid_tokens(name):
    """cfg_scale=1e300 ended in "probability tensor contains inf / nan"; the largest allowed scale
    decodes every position with an id in range."""
    b = _bench_of(name)
    models = b.models()
    res = b.run(name, b.batches[1], temperature=1.0, seed=0, params={"cfg_scale": MAX_GUIDANCE_SCALE}, models=models)
    b.assert_valid(res, b.batches[1], models)


def test_magnet_hybrid_ar_temperature_is_bounded():
    """ar_temperature=1e30 flattened the AR model's finite -1e9 structure logits and drew BOS, refused
    downstream as "token id 17 is outside the vocabulary"."""
    from leapgen.samplers.masked.magnet import MAX_AR_TEMPERATURE

    with pytest.raises(ConfigError, match="ar_temperature"):
        get_sampler("magnet_hybrid", ar_temperature=1e30)
    b = _bench_of("magnet_hybrid")
    models = b.models()
    res = b.run("magnet_hybrid", 3, temperature=1.0, seed=0, params={"ar_temperature": MAX_AR_TEMPERATURE}, models=models)
    assert bool(((res.tokens >= 0) & (res.tokens < b.vocab)).all())


# ------------------------------------------------------------------------------------------ tuple parameters


def test_never_reached_early_exit_thresholds_are_plain_llada():
    """early_exit_thresholds=(1e300,) * 3 overflowed a float32 tensor (a bare RuntimeError); a gap
    never reaches them, so prophet is llada token for token, with no early commit."""
    never = _run("prophet", {"early_exit_thresholds": (1e300, 1e300, 1e300)})
    assert int(never.stats.extra["early_commits"]) == 0
    assert never.sequences == _run("llada", {}).sequences
    hooked = _run("llada", {"hooks": ("early_exit",), "early_exit_thresholds": (1e300,) * 3})
    assert int(hooked.stats.extra["early_exit_rows"]) == 0 and hooked.sequences == never.sequences


def test_maskgct_s2a_fits_its_stages_to_the_model_under_spans():
    """span_len > 1 wraps the codebook stages in spans, which hid steps_per_stage from the fitting to
    the model's codebooks: (25, 10, 1, 1) on a 3-codebook model was refused ("steps_per_stage has 4
    entries but the model has 3 codebooks")."""
    b = _bench_of("maskgct_s2a")
    models = b.models()
    res = b.run("maskgct_s2a", 1, temperature=1.0, seed=0, params={"span_len": 2}, models=models)
    b.assert_valid(res, 1, models)
    assert res.stats.extra["stages"] == 3


# ------------------------------------------------------------------------------------------ pipeline-level guidance and temperature


def test_an_overflowing_ar_guidance_is_named_in_the_refusal():
    """cfg_scale=1e300 on an AR image or audio model ended in "check the weights and dtype" alone;
    it is now refused before decoding by the one bound pipelines and samplers share."""
    from leapgen import Pipeline
    from leapgen.models import condition

    pipe = Pipeline.from_pretrained("leapgen/image-emoji")
    with pytest.raises(InputError, match=r"cfg_scale\) must be a number from 0 to 1000.*got 1e\+300"):
        pipe(["faces"], sampler="ar", cfg_scale=1e300, seed=0)
    assert condition.MAX_GUIDANCE_SCALE is MAX_GUIDANCE_SCALE  # one definition, imported by the samplers' check
    out = pipe(["faces"], sampler="ar", cfg_scale=MAX_GUIDANCE_SCALE, seed=0)  # the bound itself decodes
    assert out.errors == [None] and out.images[0] is not None


def test_audio_ar_temperature_past_the_models_structure_is_refused():
    """temperature=1e30 with an AR sampler flattened MusicGen's finite -1e9 structure logits and drew
    BOS / EMPTY inside the grid ("codes must lie in [0, 256)")."""
    from leapgen import Pipeline
    from leapgen.models.musicgen import MAX_TEMPERATURE

    pipe = Pipeline.from_pretrained("leapgen/audio-music")
    with pytest.raises(InputError, match=rf"temperature must be <= {MAX_TEMPERATURE:g}"):
        pipe("a calm piano melody", sampler="ar", temperature=1e30, duration=1.0, seed=0)
    out = pipe("a calm piano melody", sampler="ar", temperature=MAX_TEMPERATURE, duration=0.2, seed=0)
    assert out.errors == [None]


def test_lookahead_stops_at_the_context_window_as_ar():
    """Lookahead clamped every position of its forward past the context window, the committed
    tokens' included, so a budget past the window decoded on (300 tokens from a 128-token model)
    with wrong positions instead of refusing; only its window slots may be clamped now."""
    from leapgen.samplers import DecodeConfig

    b = bench("causal", "cpu")
    room = b.models()["model"].max_length - 2  # a 3-token prompt: the last token's position is never fed

    def run(name: str, new: int) -> list[int]:
        cfg = DecodeConfig(max_new_tokens=new)
        return get_sampler(name).generate(b.models(), [[5, 17, 3]], cfg, torch.Generator().manual_seed(0)).sequences[0]

    ar = run("ar", room)
    assert run("lookahead", room) == ar and len(ar) == room
    for name in ("ar", "lookahead"):
        with pytest.raises(InputError, match="context window"):
            run(name, room + 1)
        with pytest.raises(InputError, match="context window"):
            run(name, 300)
