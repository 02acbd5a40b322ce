"""The audio bench's metrics: attribute classifier shapes and training, Frechet distance, paired KL, accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from leapgen.bench.audio import kl_pairs, label_scores
from leapgen.bench.fid import fid as frechet_distance
from leapgen.data.audio_classifier import HEADS, AttributeClassifier, load_or_train


def test_classifier_shapes_training_and_cache(tmp_path):
    rng = np.random.default_rng(0)
    clips = [rng.uniform(-0.3, 0.3, int(16000 * d)).astype(np.float32) for d in (2.0, 6.0, 3.5, 5.0)]
    labels = {"family": np.array([0, 1, 2, 3]), "tempo": np.array([0, 1, 2, 0]), "mode": np.array([0, 1, 0, 1])}
    path = tmp_path / "clf.safetensors"
    clf = load_or_train(path, clips, labels, steps=3, minutes=1.0, batch_size=4)
    emb, probs = clf.predict(clips)
    assert emb.shape == (4, 64) and set(probs) == set(HEADS)
    assert all(probs[k].shape == (4, n) and np.allclose(probs[k].sum(1), 1.0, atol=1e-5) for k, n in HEADS.items())
    again = load_or_train(path)  # cached
    assert np.allclose(again.predict(clips)[0], emb, atol=1e-5)
    assert isinstance(again, AttributeClassifier)


def test_frechet_kl_and_accuracy():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(200, 8))
    assert abs(frechet_distance(a, a)) < 1e-6
    assert frechet_distance(a, a + 3.0) > 8 * 9 - 1  # mean shift of 3 in 8 dims: 72
    p = {k: rng.dirichlet(np.ones(n), size=10) for k, n in HEADS.items()}
    assert abs(kl_pairs(p, p)) < 1e-6
    q = {k: np.roll(v, 1, axis=1) for k, v in p.items()}
    assert kl_pairs(p, q) > 0
    labels = {k: v.argmax(1) for k, v in p.items()}
    acc = label_scores(p, labels)
    assert acc["mean"] == 1.0 and set(acc) == set(HEADS) | {"mean"}


def test_bench_entries_parse_names_and_json_parameters():
    from leapgen.bench.common import parse_entry

    assert parse_entry("magnet") == ("magnet", {})
    assert parse_entry("magnet[cfg_batch=false]") == ("magnet", {"cfg_batch": False})
    assert parse_entry('maskgct[steps=8;cfg_scale=0;s2a_params={"cfg_batch":false}]') == (
        "maskgct", {"steps": 8, "cfg_scale": 0, "s2a_params": {"cfg_batch": False}})
    with pytest.raises(ValueError, match="key=value"):
        parse_entry("magnet[cfg_batch]")
    with pytest.raises(ValueError, match="closing"):
        parse_entry("magnet[cfg_batch=false")
    # a ';' or ',' inside a JSON value stays in the value
    assert parse_entry('x[a="p;q";b={"c":1,"d":[2,3]}]') == ("x", {"a": "p;q", "b": {"c": 1, "d": [2, 3]}})


def test_bench_entry_lists_split_outside_brackets_and_strings():
    from leapgen.bench.common import split_entries

    multi = 'maskgct[s2a_params={"cfg_batch":false,"steps":[4,2]}]'
    assert split_entries(f"ar, {multi},,magnet[x=\"a,b\\\"]\"]") == ["ar", multi, 'magnet[x="a,b\\"]"]']
    assert split_entries(["a ", " ", "b"]) == ["a", "b"]
    assert split_entries("") == []
    for bad in ("a]", "a[b", 'a["b]'):
        with pytest.raises(ValueError):
            split_entries(bad)


def test_quality_entries_pass_their_parameters_to_the_pipeline():
    from types import SimpleNamespace

    from leapgen.bench.audio import generate_all

    calls = []

    def pipe(prompts, **kw):
        calls.append(kw)
        return SimpleNamespace(audios=[np.zeros(4, np.float32) for _ in prompts], stats=len(prompts), codes=list(prompts))

    audios, stats, codes = generate_all(pipe, "magnet[steps_per_stage=[8,3,3,3];cfg_scale=5.0]", ["a"] * 10, 2.0, seed=7, batch=8)
    assert len(audios) == 10 and stats == [8, 2] and len(codes) == 10
    assert [c["seed"] for c in calls] == [7, 15]
    assert all(c["sampler"] == "magnet" and c["steps_per_stage"] == [8, 3, 3, 3] and c["cfg_scale"] == 5.0 for c in calls)


def test_ar_code_nll_ranks_the_ar_models_own_greedy_codes_above_random_ones():
    import torch

    from leapgen import Pipeline
    from leapgen.bench.audio import ar_code_nll

    pipe = Pipeline.from_pretrained("leapgen/audio-music")
    prompts = ["calm piano melody in C major", "fast loud drums with brass chords"]
    out = pipe(prompts, sampler="ar", duration=0.4, temperature=0.0, cfg_scale=1.0, seed=0)
    greedy = ar_code_nll(pipe, prompts, out.codes)
    g = torch.Generator().manual_seed(0)
    noise = [torch.randint(0, pipe.codec.codebook_size, c.shape, generator=g) for c in out.codes]
    random_nll = ar_code_nll(pipe, prompts, noise)
    assert 0.0 < greedy < random_nll
    assert random_nll > 0.5 * np.log(pipe.codec.codebook_size)  # random codes are improbable to a trained model


def test_bench_refuses_a_bad_entry_before_reading_the_corpus(tmp_path):
    from leapgen.bench.audio import run_audio_bench
    from leapgen.errors import ConfigError

    missing = tmp_path / "no-corpus"  # never read: the entries are checked first
    with pytest.raises(ConfigError, match=r"magnet\[stpes_per_stage=\[6,2,2,2\]\].*stpes_per_stage"):
        run_audio_bench(out_dir=str(tmp_path), corpus_dir=str(missing), samplers="ar,magnet[stpes_per_stage=[6,2,2,2]]")
    with pytest.raises(ConfigError, match="not_a_sampler"):
        run_audio_bench(out_dir=str(tmp_path), corpus_dir=str(missing), samplers="ar", speed_only="not_a_sampler")
    assert not any(tmp_path.iterdir())  # nothing written
