"""Peptide family: spectrum simulation invariants, precise mass control against brute force,
gradient blocking, pipeline inputs and bad items (tiny random models)."""

from __future__ import annotations

import itertools
import logging
import random
import re

import numpy as np
import pytest
import torch
from peptide_tiny import tiny_inputs, tiny_net

from leapgen.data import peptide as corpus
from leapgen.errors import ConfigError, InputError
from leapgen.pipelines import Pipeline
from leapgen.pipelines.peptide import PeptidePipeline
from leapgen.samplers import get_sampler
from leapgen.samplers.nar import ctc_pmc
from leapgen.samplers.nar.ctc_pmc import pmc_decode


@pytest.mark.parametrize("seq", ["PEPTLDEK", "GASPVTCLNDQKEMHFRYW", "AK"])
def test_b_plus_y_is_precursor_plus_constants(seq):
    m = corpus.peptide_mass(seq)
    b, y = corpus.b_ions(seq), corpus.y_ions(seq)
    assert len(b) == len(y) == len(seq) - 1
    np.testing.assert_allclose(b + y[::-1], m + 2 * corpus.PROTON, atol=1e-9)
    b2, y2 = corpus.b_ions(seq, 2), corpus.y_ions(seq, 2)
    np.testing.assert_allclose(2 * b2 + 2 * y2[::-1], m + 4 * corpus.PROTON, atol=1e-9)
    for z in (1, 2, 3):
        assert abs(corpus.precursor_mz(seq, z) * z - z * corpus.PROTON - m) < 1e-9


def test_simulation_is_seeded_and_realistic():
    s1 = corpus.simulate("PEPTLDEK", 2, random.Random(1))
    s2 = corpus.simulate("PEPTLDEK", 2, random.Random(1))
    s3 = corpus.simulate("PEPTLDEK", 2, random.Random(2))
    assert np.array_equal(s1["mz"], s2["mz"]) and not np.array_equal(s1["mz"], s3["mz"])
    assert np.all(np.diff(s1["mz"]) >= 0) and s1["intensity"].max() == pytest.approx(1.0)
    # most y ions are there within the mass noise (some are missing by design)
    y = corpus.y_ions("PEPTLDEK")
    rate = np.mean([[np.abs(corpus.simulate("PEPTLDEK", 2, random.Random(k))["mz"] - v).min() < 0.05 for v in y]
                    for k in range(40)])
    assert 0.55 <= rate <= 0.9, rate  # missing-peak probability 0.15-0.4
    assert s1["precursor_mz"] == pytest.approx(corpus.precursor_mz("PEPTLDEK", 2))


def test_plan_holds_out_peptides():
    p = corpus.plan(0, 300, 40)
    train, test = {s for s, _ in p["train"]}, {s for s, _ in p["test"]}
    assert len(p["test"]) == 40 and not train & test
    assert all(corpus.is_held_out(s) for s in test) and all(6 <= len(s) <= 14 for s in train)
    assert corpus.plan(0, 300, 40) == p


def _collapse(path):
    out, prev = [], None
    for t in path:
        if t != prev and t != 0:
            out.append(t)
        prev = t
    return out


@pytest.mark.parametrize("seed", range(6))
def test_mass_control_dp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    masses = [0.0, 0.0, 57.02146, 71.03711, 87.03203, 128.05858]  # blank, </s>, G, A, S, Q
    t_len = 5
    logp = np.log(rng.dirichlet(np.ones(6), size=t_len)).astype(np.float32)
    logp[:, 1] = -1e4
    seq = rng.integers(2, 6, size=rng.integers(1, 4)).tolist()
    target = sum(masses[a] for a in seq) + rng.uniform(-0.05, 0.05)
    best, best_lp = None, -np.inf
    for path in itertools.product([0, 2, 3, 4, 5], repeat=t_len):
        lab = _collapse(path)
        if abs(sum(masses[a] for a in lab) - target) <= 0.1:
            lp = float(sum(logp[t, a] for t, a in enumerate(path)))
            if lp > best_lp:
                best, best_lp = lab, lp
    labels, score = pmc_decode(logp, masses, target, tolerance=0.1, resolution=0.01)
    assert best is not None and labels is not None
    assert score == pytest.approx(best_lp, abs=1e-4)
    assert abs(sum(masses[a] for a in labels) - target) <= 0.1
    assert labels == best or score == pytest.approx(best_lp, abs=1e-4)


def test_mass_control_dp_reports_no_solution():
    logp = np.log(np.full((3, 4), 0.25, dtype=np.float32))
    labels, score = pmc_decode(logp, [0.0, 0.0, 100.0, 150.0], target=1000.0)  # 3 slots cannot reach 1000
    assert labels is None and score == -np.inf


def test_gradient_blocking_and_loss_weights():
    net = tiny_net().train()
    x = tiny_inputs(2)
    batch = {"mz": x.input_features[:, 0], "intensity": x.input_features[:, 1], "mask": x.attention_mask.bool(),
             "precursor_mass": x.extra["precursor_mass"], "charge": x.extra["charge"]}
    parts = net.losses(batch, [[2, 2, 3], [2, 3, 4, 5]], weights={"ctc": 0.0, "ar": 0.0, "bi": 1.0})
    parts["loss"].backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in net.nar.parameters())  # blocked
    assert net.bi.out.weight.grad.abs().sum() > 0 and net.encoder.layers[0].linear1.weight.grad.abs().sum() > 0
    net.zero_grad()
    net.losses(batch, [[2, 2, 3], [2, 3, 4, 5]], weights={"ctc": 1.0, "ar": 0.0, "bi": 0.0})["loss"].backward()
    assert sum(p.grad.abs().sum() for p in net.nar.parameters() if p.grad is not None) > 0


@pytest.fixture(scope="module")
def tiny_pipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peptide")
    PeptidePipeline(model=tiny_net(1)).save_pretrained(folder)
    return Pipeline.from_pretrained(folder)


def test_pipeline_bad_items_fail_alone_and_pmc_meets_the_precursor(tiny_pipe):
    seq = "GASPK"
    s = corpus.simulate(seq, 2, random.Random(0))
    good = {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}
    bad = [{"mz": [], "intensity": [], "precursor_mz": 500.0, "charge": 2},
           {"mz": [100.0], "intensity": [1.0], "precursor_mz": 0.0, "charge": 2},
           {"mz": [100.0], "intensity": [1.0], "precursor_mz": 400.0, "charge": 7},
           "not a spectrum"]
    out = tiny_pipe([good, *bad, (s["mz"], s["intensity"], s["precursor_mz"], 2)], sampler="ctc_pmc")
    assert out.errors[0] is None and out.errors[5] is None and all(out.errors[1:5])
    assert "no peaks" in out.errors[1] and "positive" in out.errors[2] and "charge" in out.errors[3]
    assert out.sequences[0] == out.sequences[5] and out.precursor_ok[0] is True
    assert abs(out.mass_error[0]) <= 0.1
    for name in ("ar", "ar_bidirectional"):
        o = tiny_pipe([good, bad[0]], sampler=name, max_new_tokens=6)
        assert o.sequences[0] is not None and o.sequences[1] is None and o.scores[0] <= 0
        assert o.stats.sampler == name


@pytest.mark.parametrize("kwargs", [dict(batch_size=0), dict(batch_size=-1), dict(max_new_tokens=0),
                                    dict(sampler=get_sampler("ar_beam"), beam_size=1)])
def test_bad_call_arguments_are_refused_not_ignored(tiny_pipe, kwargs):
    """batch_size=-1 used to return every sequence None with no error, 0 a raw ValueError;
    max_new_tokens=0 fell back to the default and keywords beside a Sampler object were dropped."""
    s = corpus.simulate("GASPK", 2, random.Random(0))
    good = {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}
    with pytest.raises(InputError):
        tiny_pipe([good, good], **kwargs)
    with pytest.raises(InputError):
        tiny_pipe([])
    for not_spectra in (None, 3.5, "spectrum.mgf"):
        with pytest.raises(InputError, match="spectra must be"):
            tiny_pipe(not_spectra)


def test_more_bad_spectra_fail_alone(tiny_pipe):
    s = corpus.simulate("GASPK", 2, random.Random(0))
    good = {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}
    bad = [{**good, "precursor_mz": -300.0}, {**good, "charge": 0}, {**good, "charge": True},
           {**good, "intensity": list(s["intensity"])[:-1]}]
    out = tiny_pipe([*bad, good], sampler="ctc_pmc")
    assert all(out.errors[:4]) and out.errors[4] is None and out.sequences[4] is not None
    assert "positive" in out.errors[0] and "charge" in out.errors[1] and "charge" in out.errors[2]
    assert "intensit" in out.errors[3] or "same length" in out.errors[3], out.errors[3]


def test_loss_weights_anneal():
    """CrossNovo's importance annealing: CTC 1 -> ctc_final, bidirectional bi_start -> 1, AR 1;
    clamped outside [0, 1]."""
    from leapgen.train.peptide import loss_weights

    assert loss_weights(0.0, 0.3, 0.2) == {"ctc": 1.0, "ar": 1.0, "bi": 0.2}
    end = loss_weights(1.0, 0.3, 0.2)
    assert end["ctc"] == pytest.approx(0.3) and end["bi"] == pytest.approx(1.0) and end["ar"] == 1.0
    mid = loss_weights(0.5, 0.3, 0.2)
    assert mid["ctc"] == pytest.approx(0.65) and mid["bi"] == pytest.approx(0.6)
    assert loss_weights(2.0, 0.3, 0.2) == end and loss_weights(-1.0, 0.3, 0.2) == loss_weights(0.0, 0.3, 0.2)


def test_recipe_budget_counts_the_set_up():
    """``minutes`` is the whole recipe: training gets what the corpus build and set-up left, less
    the evaluation reserve; a budget already spent is refused with the budget to give."""
    import time

    from leapgen.errors import ConfigError
    from leapgen.train.loop import training_minutes

    t0 = time.perf_counter() - 30.0  # half a minute of "corpus build"
    assert training_minutes(90.0, t0, 2.0) == pytest.approx(87.5, abs=0.05)
    with pytest.raises(ConfigError, match="--minutes"):
        training_minutes(2.0, t0, 2.0)


def test_ar_bidirectional_counts_its_nar_pass(tiny_pipe):
    s = corpus.simulate("GASPK", 2, random.Random(0))
    good = {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}
    o = tiny_pipe([good, good], sampler="ar_bidirectional", max_new_tokens=4)
    assert o.stats.other_forwards == 1 and o.stats.target_forwards >= 1
    o2 = tiny_pipe([good, good], sampler="ar_bidirectional", max_new_tokens=4, seed=3)
    assert o.sequences == o2.sequences
    torch.manual_seed(0)


@pytest.mark.parametrize("view", ["ar", "bidirectional"])
def test_mass_inputs_cached_steps_match_teacher_forcing(view):
    """The prefix / suffix mass inputs: token-by-token decoding through the cache (prefix masses
    carried in its extra layer, one rollback on the way) gives the teacher-forced log-probabilities,
    and the cache holds the residue mass of every slot."""
    from leapgen.models.peptide_lm import peptide_views

    net = tiny_net(3)
    lm = peptide_views(net)[view]
    state = lm.encode(tiny_inputs(2))
    seqs = [[2, 5, 7, 3], [4, 4, 9, 6]]
    gold = lm.teacher_forced_logprobs(state, seqs)
    cache = lm.new_cache(2, state)
    ids = torch.tensor([[1] + s for s in seqs])
    steps = []
    for t in range(ids.shape[1]):
        if t == 2:  # a speculative-style excursion: two wrong tokens, then roll back to 2 slots
            lm(torch.tensor([[9, 9], [9, 9]]), cache)
            cache.crop(2)
        steps.append(lm(ids[:, t : t + 1], cache).log_softmax(-1))
    logp = torch.cat(steps, 1)
    for r, s in enumerate(seqs):
        target = torch.tensor(s + [1])
        assert torch.allclose(logp[r].gather(-1, target[:, None]).squeeze(-1), gold[r], atol=1e-4)
        masses = net.residue_masses()
        assert np.allclose(cache.extra_layers[0].keys[r, 0, :, 0].numpy(), [0.0] + [masses[i] for i in s])


def test_ion_lookup_finds_the_simulated_fragment_ions():
    """The ion lookup, fed the true prefixes of a simulated spectrum, scores the true next residue's
    b / y ions well above the other candidates' (whose ions mostly fall between peaks)."""
    from leapgen.models.peptide import IONS

    net = tiny_net()
    seq = "PEPTLDEKAGSW"
    spec = corpus.simulate(seq, 2, random.Random(0))
    ids = net.encode_peptide(seq)
    masses = net.residue_masses()
    prefix = torch.tensor([[sum(masses[i] for i in ids[:t]) for t in range(len(ids))]], dtype=torch.float64)
    prec = torch.tensor([corpus.peptide_mass(seq)], dtype=torch.float64)
    mz = torch.tensor(spec["mz"], dtype=torch.float32)[None]
    inten = torch.tensor(spec["intensity"], dtype=torch.float32)[None]
    matches = net.ar.ion_matches(prefix, prec, (mz, inten, torch.ones_like(mz)))[0]
    assert matches.shape == (len(ids), len(net.config.masses), len(IONS), 2)
    b, y = IONS.index(("b", False, 1, 0.0)), IONS.index(("y", True, 1, 0.0))
    feats = matches[:, :, [b, y], 0]  # the b / y matches
    best = feats.amax(-1)  # [positions, candidates]
    true = torch.tensor([i - 2 for i in ids])
    on_true = best[torch.arange(len(ids)), true]
    others = best.clone()
    others[torch.arange(len(ids)), true] = float("nan")
    assert on_true.mean() > 0.6 and on_true.mean() > 3 * others.nanmean()


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(sampler="gsd")])
def test_a_bad_call_raises_instead_of_failing_every_item(tiny_pipe, kwargs):
    """An error of the call itself used to come back as the same per-item error on every spectrum."""
    from leapgen.errors import ConfigError

    s = corpus.simulate("GASPK", 2, random.Random(0))
    good = {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}
    with pytest.raises(ConfigError):
        tiny_pipe([good, good], **kwargs)


def _spectrum(seq: str = "GASPK") -> dict:
    s = corpus.simulate(seq, 2, random.Random(0))
    return {"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2}


def test_peaks_must_be_one_spectrum_of_positive_mz_in_the_trained_range(tiny_pipe, caplog):
    """A 2-D mz used to be reported as "mz has 28 values but intensity has 14"; negative m/z and m/z
    x 1e6 decoded a sequence with no error; a ragged mz was a raw ValueError."""
    good = _spectrum()
    mz = np.asarray(good["mz"])
    bad = [{**good, "mz": np.stack([mz, mz])}, {**good, "mz": -mz}, {**good, "mz": mz * 1e6},
           {**good, "mz": [[1.0], [2.0, 3.0]]}, {**good, "precursor_mz": 1e5}]
    out = tiny_pipe([good, *bad], sampler="ctc_pmc")
    assert out.errors[0] is None and out.sequences[0] is not None
    assert all(out.sequences[i] is None for i in range(1, 6))
    assert "must be a 1-D array" in out.errors[1] and "(2, " in out.errors[1] and "values but" not in out.errors[1]
    assert "m/z values must be positive" in out.errors[2]
    assert f"beyond m/z {corpus.MAX_MZ:g}" in out.errors[3] and "trained" in out.errors[3]
    assert "1-D array of numbers" in out.errors[4]
    assert "heaviest peptide this model can output" in out.errors[5]
    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.peptide"):
        some = tiny_pipe({**good, "mz": np.append(mz, 3000.0), "intensity": np.append(good["intensity"], 0.1)},
                         sampler="ctc_pmc")
    assert some.errors == [None] and f"1 of {mz.size + 1} peaks lie beyond m/z" in caplog.text


def _finest(err: pytest.ExceptionInfo) -> float:
    return float(re.search(r"use resolution >= ([0-9.e+-]+) Da", str(err.value)).group(1))


def test_pmc_refuses_a_resolution_its_tables_cannot_hold(tiny_pipe, monkeypatch):
    """resolution=1e-6 used to ask numpy for tens of GiB (a MemoryError); it is refused up front with
    the finest resolution that fits, which then runs."""
    good = _spectrum()
    with pytest.raises(ConfigError, match="GiB of mass tables") as err:
        tiny_pipe(good, sampler="ctc_pmc", resolution=1e-6)
    assert 0 < _finest(err) <= 0.02
    monkeypatch.setattr(ctc_pmc, "MAX_TABLE_BYTES", 2**23)  # a small cap, so that the finest resolution runs here
    with pytest.raises(ConfigError, match="capped at 8 MiB") as err:
        tiny_pipe(good, sampler="ctc_pmc", resolution=1e-4)
    finest = _finest(err)
    assert tiny_pipe(good, sampler="ctc_pmc", resolution=finest).errors == [None]
    with pytest.raises(ConfigError):
        tiny_pipe(good, sampler="ctc_pmc", resolution=finest / 2)


def test_pipeline_reports_the_pmc_fallbacks_of_every_batch(tiny_pipe, monkeypatch):
    """ctc_pmc counts its greedy-CTC fallbacks in stats.extra["pmc_fallback"] (docs/peptides.md), but
    the pipeline's merged statistics used to drop every extra: out.stats.extra was empty."""
    good = _spectrum()
    out = tiny_pipe([good, good, good], sampler="ctc_pmc", batch_size=2)
    assert out.stats.extra["pmc_fallback"] == 0
    monkeypatch.setattr(ctc_pmc, "pmc_decode", lambda *a, **k: (None, 0.0))  # no alignment reaches the mass
    out = tiny_pipe([good, good, good], sampler="ctc_pmc", batch_size=2)
    assert out.stats.extra["pmc_fallback"] == 3 and all(s is not None for s in out.sequences)
    assert "pmc_fallback" not in tiny_pipe([good], sampler="ar", max_new_tokens=6).stats.extra
