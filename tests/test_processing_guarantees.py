"""Registry-driven: the decode settings added after the harness's plain case keep every sampler's
guarantee.

``tests/registry_harness.py`` checks each distribution-exact sampler by enumeration at temperature
1 with no filter. Here the same enumeration (``causal_enumeration``: 20,000 samples of the tiny
vocabulary-6 model, TV bound with delta = 1e-6) runs under

* ``min_p``, for every sampler the registry lists as distribution-exact on the causal contract: a
  sampler whose draft or target path skipped min-p (or applied it differently from
  ``LogitsProcessor``) would sample continuations the exact joint gives probability 0. The power
  of the check is shown on ``ar`` with min-p dropped from the decode loops' logits processor;
* ``min_new_tokens`` (EOS held back, position by position): the same enumeration for the
  distribution-exact samplers, greedy identity with ``ar`` under the same bound for every sampler
  that honours it (on the causal and the encoder-decoder benches, whose greedy rows hit EOS early),
  and a clear refusal from every sampler that does not;
* ``presence_penalty`` / ``frequency_penalty`` (generated tokens counted position by position along
  drafted chains and trees): the same enumeration for every distribution-exact causal sampler, with
  ``speculative`` and ``spec_tree`` shown to fail when their drafted tokens are left out of the
  counts; greedy identity with ``ar`` for every greedy- or distribution-exact sampler that takes
  them (causal and encoder-decoder benches); a clear refusal from every sampler that does not.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from registry_harness import bench, causal_enumeration

from leapgen.errors import ConfigError
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers, sampler_info
from leapgen.samplers.logits import LogitsProcessor

torch.set_num_threads(1)

EXACT = [s.name for s in list_samplers() if s.guarantee == "distribution-exact" and "causal" in s.contracts]
MIN_P = 0.2


def test_the_registry_has_distribution_exact_causal_samplers():
    assert {"ar", "speculative", "prompt_lookup", "spec_tree"} <= set(EXACT)


@pytest.mark.parametrize("name", EXACT)
def test_min_p_keeps_the_sampler_distribution_exact(name):
    emp, exact = causal_enumeration(sampler_info(name), bench("causal", "cpu"), min_p=MIN_P)
    assert (exact == 0).any(), "min-p must remove some continuations of the tiny model"
    assert emp[exact == 0].sum() == 0, f"{name}: a continuation min-p removes was generated"


def test_a_sampler_that_ignores_min_p_fails_the_check(monkeypatch):
    """Broken on purpose: the decode loops' logits processor ignores min-p (the exact joint, built
    with ``leapgen.samplers.logits.LogitsProcessor``, still applies it)."""
    import leapgen.samplers.runtime as runtime

    class NoMinP(LogitsProcessor):
        def __init__(self, config):
            super().__init__(config)
            self.min_p = 0.0

    monkeypatch.setattr(runtime, "LogitsProcessor", NoMinP)
    with pytest.raises(AssertionError, match="TV"):
        causal_enumeration(sampler_info("ar"), bench("causal", "cpu"), min_p=MIN_P)


# ------------------------------------------------------------------------------------------ min_new_tokens

HONOURS = [s.name for s in list_samplers() if s.cls.honours_min_new_tokens() and "causal" in s.contracts]
REFUSES = [s.name for s in list_samplers() if not s.cls.honours_min_new_tokens()]
#: ids the causal bench's greedy rows produce early (rows 0 and 1 at positions 1-2, row 2 at 1, row 3 at 7)
EOS = (20, 13, 7)
MIN_NEW = 12


def _greedy(name: str, min_new: int):
    b = bench("causal", "cpu")
    inputs, _ = b.inputs(4)
    cfg = DecodeConfig(max_new_tokens=b.max_new_tokens, eos_token_id=EOS, min_new_tokens=min_new)
    return get_sampler(name).generate(b.models(), inputs, cfg, torch.Generator().manual_seed(0))


def test_the_lossless_loop_samplers_honour_min_new_tokens():
    assert {"ar", "speculative", "prompt_lookup", "jacobi", "lookahead", "spec_tree", "sjd"} <= set(HONOURS)
    assert all(sampler_info(n).guarantee in ("greedy-exact", "distribution-exact") for n in HONOURS)


@pytest.mark.parametrize("name", HONOURS)
def test_min_new_tokens_greedy_identity_with_ar(name):
    free = _greedy("ar", 0).sequences
    assert min(len(s) for s in free) < 4, "the bench must hit EOS early without min_new_tokens"
    ref = _greedy("ar", MIN_NEW)
    got = _greedy(name, MIN_NEW)
    for i, (x, y) in enumerate(zip(got.sequences, ref.sequences)):
        assert x == y, f"{name}: row {i} differs from greedy ar with min_new_tokens={MIN_NEW}:\n  got {x}\n  ar  {y}"
        assert len(x) >= MIN_NEW and not set(x[:MIN_NEW]) & set(EOS), f"{name}: row {i} ended before {MIN_NEW}"
    assert any(s[-1] in EOS and len(s) < 32 for s in ref.sequences)  # EOS is allowed again after the bound


ENCDEC_HONOURS = [s.name for s in list_samplers() if s.cls.honours_min_new_tokens() and "encoder-decoder" in s.contracts]


@pytest.mark.parametrize("name", ENCDEC_HONOURS)
def test_min_new_tokens_greedy_identity_with_ar_on_encoder_decoders(name):
    """The same on the encoder-decoder bench (tiny Bart; greedy rows repeat token 28 from position 1)."""
    b = bench("encoder-decoder", "cpu")
    inputs, cond = b.inputs(3)

    def run(sampler: str, min_new: int):
        cfg = DecodeConfig(max_new_tokens=b.max_new_tokens, eos_token_id=28, min_new_tokens=min_new)
        return get_sampler(sampler).generate(b.models(), inputs, cfg, torch.Generator().manual_seed(0), cond=cond)

    assert max(len(s) for s in run("ar", 0).sequences) <= 2, "the bench must hit EOS early without min_new_tokens"
    ref, got = run("ar", 6).sequences, run(name, 6).sequences
    assert got == ref, f"{name}: differs from greedy ar with min_new_tokens=6:\n  got {got}\n  ar  {ref}"
    assert all(len(s) >= 6 and 28 not in s[:6] for s in ref)


@pytest.mark.parametrize("name", [n for n in HONOURS if sampler_info(n).guarantee == "distribution-exact"])
def test_min_new_tokens_keeps_the_sampler_distribution_exact(name):
    """EOS banned at the first two of three positions: the token outside the prompt (a prompt token
    is what prompt lookup drafts) that the unbanned model most often puts there."""
    from registry_harness import dist_setup

    setup, _, _, plain = dist_setup("cpu")
    first_two = np.arange(len(plain)) // setup.vocab

    def early(tok: int) -> np.ndarray:
        return (first_two // setup.vocab == tok) | (first_two % setup.vocab == tok)

    eos = max((t for t in range(setup.vocab) if t not in setup.prompt), key=lambda t: plain[early(t)].sum())
    emp, exact = causal_enumeration(sampler_info(name), bench("causal", "cpu"), eos_token_id=eos, min_new_tokens=2)
    assert plain[early(eos)].sum() > 0.2 and exact[early(eos)].sum() == 0 and emp[early(eos)].sum() == 0


@pytest.mark.parametrize("name", REFUSES)
def test_samplers_that_cannot_honour_min_new_tokens_refuse_it(name):
    cfg = DecodeConfig(max_new_tokens=4, eos_token_id=2, min_new_tokens=3)
    with pytest.raises(ConfigError, match="min_new_tokens=3") as err:
        get_sampler(name).generate({}, [[1, 2]], cfg, torch.Generator().manual_seed(0))
    assert "ar" in str(err.value) and "speculative" in str(err.value)  # names the samplers that can


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_min_new_tokens_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="min_new_tokens"):
        DecodeConfig(min_new_tokens=bad)


# ------------------------------------------------------------------------------ presence / frequency penalties

#: strong enough that counting a drafted token or not moves the joint far past the TV bound
PENALTIES = dict(presence_penalty=1.5, frequency_penalty=1.0)
COUNTS = [s.name for s in list_samplers() if s.cls.honours_penalties]
NO_COUNTS = [s.name for s in list_samplers() if not s.cls.honours_penalties]


def test_the_loop_samplers_take_presence_and_frequency_penalties():
    assert set(EXACT) <= set(COUNTS) and {"jacobi", "gad", "lookahead", "sjd"} <= set(COUNTS)
    assert {"llada", "mask_predict", "ctc_greedy", "var", "ar_beam", "superposed"} <= set(NO_COUNTS)


def test_the_penalties_change_the_exact_joint():
    """The enumeration below has power: the penalised joint (generated tokens counted position by
    position, tests/test_distribution.py's ``exact_joint``) is far from the plain one."""
    from registry_harness import dist_setup

    setup, _, _, plain = dist_setup("cpu")
    pen = setup.exact(DecodeConfig(max_new_tokens=setup.new, temperature=1.0, **PENALTIES))
    repeats = np.array([len(set(np.unravel_index(i, (setup.vocab,) * setup.new))) < setup.new for i in range(len(pen))])
    assert 0.5 * np.abs(pen - plain).sum() > 0.1
    assert pen[repeats].sum() < 0.5 * plain[repeats].sum()  # repeating a generated token got rarer


@pytest.mark.parametrize("name", EXACT)
def test_presence_and_frequency_penalties_keep_the_sampler_distribution_exact(name):
    causal_enumeration(sampler_info(name), bench("causal", "cpu"), **PENALTIES)


def _stale_chain(base, chain):
    """Broken on purpose: every position of a chain gets the committed context only, so a token
    drafted at position i does not count for the positions after it."""
    b, n = chain.shape
    return base[:, None, :].expand(b, n + 1, base.shape[-1]).clone()


def test_a_sampler_that_ignores_the_counts_along_the_chain_fails_the_check(monkeypatch):
    """The power of the enumeration on ``speculative``: with the drafted tokens left out of the counts
    (draft and target alike, so the rule still runs) the joint is off by more than the TV bound."""
    import leapgen.samplers.loops.chain as chain_loop
    import leapgen.samplers.speculative as speculative

    monkeypatch.setattr(chain_loop, "chain_seen", _stale_chain)
    monkeypatch.setattr(speculative, "chain_seen", _stale_chain)
    with pytest.raises(AssertionError, match="TV"):
        causal_enumeration(sampler_info("speculative"), bench("causal", "cpu"), **PENALTIES)


def _stale_tree(base, tokens, anc):
    """Broken on purpose: every node of a draft tree gets the committed context only."""
    b, n = tokens.shape
    return base[:, None, :].expand(b, n, base.shape[-1]).clone()


def test_a_tree_sampler_that_ignores_the_counts_down_the_tree_fails_the_check(monkeypatch):
    """The same power on the tree loop (``spec_tree``): drafted nodes left out of the counts of their
    descendants, in the drafts and in the verified target distributions."""
    import leapgen.samplers.loops.tree as tree_loop
    import leapgen.samplers.tree_draft as tree_draft

    monkeypatch.setattr(tree_loop, "tree_seen", _stale_tree)
    monkeypatch.setattr(tree_draft, "tree_seen", _stale_tree)
    with pytest.raises(AssertionError, match="TV"):
        causal_enumeration(sampler_info("spec_tree"), bench("causal", "cpu"), **PENALTIES)


ENCDEC_COUNTS = [n for n in COUNTS if sampler_info(n).guarantee in ("greedy-exact", "distribution-exact")
                 and "encoder-decoder" in sampler_info(n).contracts]


@pytest.mark.parametrize("name", ENCDEC_COUNTS)
def test_presence_and_frequency_penalties_greedy_identity_with_ar_on_encoder_decoders(name):
    """The same on the encoder-decoder bench (tiny Bart, whose greedy rows repeat one token)."""
    b = bench("encoder-decoder", "cpu")
    inputs, cond = b.inputs(3)

    def run(sampler: str, **pen):
        cfg = DecodeConfig(max_new_tokens=b.max_new_tokens, **pen)
        return get_sampler(sampler).generate(b.models(), inputs, cfg, torch.Generator().manual_seed(0), cond=cond)

    ref = run("ar", **PENALTIES).sequences
    assert ref != run("ar").sequences, "the penalties must change greedy ar's output on the bench"
    got = run(name, **PENALTIES).sequences
    assert got == ref, f"{name}: differs from greedy ar with {PENALTIES}:\n  got {got}\n  ar  {ref}"


def _greedy_pen(name: str, **pen):
    b = bench("causal", "cpu")
    inputs, _ = b.inputs(4)
    cfg = DecodeConfig(max_new_tokens=b.max_new_tokens, **pen)
    return get_sampler(name).generate(b.models(), inputs, cfg, torch.Generator().manual_seed(0)).sequences


GREEDY_EXACT = [n for n in COUNTS if sampler_info(n).guarantee in ("greedy-exact", "distribution-exact")
                and "causal" in sampler_info(n).contracts]


@pytest.mark.parametrize("pen", [PENALTIES, dict(frequency_penalty=-0.7), dict(presence_penalty=2.0)])
@pytest.mark.parametrize("name", GREEDY_EXACT)
def test_presence_and_frequency_penalties_greedy_identity_with_ar(name, pen):
    ref = _greedy_pen("ar", **pen)
    assert ref != _greedy_pen("ar"), "the penalties must change greedy ar's output on the bench"
    got = _greedy_pen(name, **pen)
    for i, (x, y) in enumerate(zip(got, ref)):
        assert x == y, f"{name}: row {i} differs from greedy ar with {pen}:\n  got {x}\n  ar  {y}"


@pytest.mark.parametrize("name", NO_COUNTS)
def test_samplers_that_cannot_count_generated_tokens_refuse_the_penalties(name):
    for pen in (dict(presence_penalty=0.5), dict(frequency_penalty=-1.0)):
        cfg = DecodeConfig(max_new_tokens=4, **pen)
        with pytest.raises(ConfigError, match="presence_penalty|frequency_penalty") as err:
            get_sampler(name).generate({}, [[1, 2]], cfg, torch.Generator().manual_seed(0))
        assert "speculative" in str(err.value)  # names the samplers that can


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("bad", [-2.5, 2.01, float("nan"), float("inf"), True, "1"])
def test_bad_presence_or_frequency_penalty_is_a_config_error(field, bad):
    with pytest.raises(ConfigError, match=field):
        DecodeConfig(**{field: bad})
    assert getattr(DecodeConfig(**{field: -2}), field) == -2.0  # the bounds are allowed
