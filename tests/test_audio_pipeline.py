"""AudioPipeline on tiny random components (save / load, every sampler, duration -> length, seeded
reproducibility at batch 1 and 4, bad input), the corpus builder, and the shipped asset when present."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from harness_audio import tiny_audio_pipeline

from leapgen import Pipeline
from leapgen.errors import InputError, ModelMismatchError, UnknownSamplerError
from leapgen.pipelines.audio import AudioPipeline
from leapgen.pipelines.base import shipped_assets_dir

PROMPTS = ["calm piano melody in C major", "fast happy guitar chords", "slow sad strings in A minor", "lively brass arpeggios"]
SAMPLERS = ["magnet", "magnet_rescored", "magnet_hybrid", "ar", "speculative"]
FAST = {"magnet": {"steps_per_stage": [3, 2, 1, 1]}, "magnet_rescored": {"steps_per_stage": [3, 2, 1, 1]},
        "magnet_hybrid": {"steps_per_stage": [3, 2, 1, 1], "ar_seconds": 0.1}}


@pytest.fixture(scope="module")
def tiny_pipe(tmp_path_factory) -> AudioPipeline:
    pipe = tiny_audio_pipeline(PROMPTS + ["organ woodwind drums bass bright dark"])
    folder = tmp_path_factory.mktemp("audio") / "tiny-audio"
    pipe.save_pretrained(folder)
    loaded = Pipeline.from_pretrained(folder)
    assert isinstance(loaded, AudioPipeline) and loaded.max_duration == 2.0
    return loaded


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_duration_gives_the_length(tiny_pipe, sampler):
    out = tiny_pipe(PROMPTS[:2], sampler=sampler, duration=0.3, seed=0, **FAST.get(sampler, {}))
    frames = round(0.3 * 50)
    assert out.sample_rate == 16000 and len(out.audios) == 2
    for a, c in zip(out.audios, out.codes):
        assert a.dtype == np.float32 and a.shape == (frames * 320,) and np.isfinite(a).all()
        assert tuple(c.shape) == (4, frames)
    assert out.stats.extra["frames"] == frames and out.stats.target_forwards > 0


@pytest.mark.parametrize("sampler", ["magnet", "ar"])
def test_seeded_reproducibility_batch_1_and_4(tiny_pipe, sampler):
    for batch in (1, 4):
        a = tiny_pipe(PROMPTS[:batch], sampler=sampler, duration=0.2, seed=11, **FAST.get(sampler, {}))
        b = tiny_pipe(PROMPTS[:batch], sampler=sampler, duration=0.2, seed=11, **FAST.get(sampler, {}))
        c = tiny_pipe(PROMPTS[:batch], sampler=sampler, duration=0.2, seed=12, **FAST.get(sampler, {}))
        assert all(np.array_equal(x, y) for x, y in zip(a.audios, b.audios))
        assert any(not torch.equal(x, y) for x, y in zip(a.codes, c.codes))


def test_speculative_equals_ar_at_temperature_zero_through_the_pipeline(tiny_pipe):
    for batch in (1, 4):
        ref = tiny_pipe(PROMPTS[:batch], sampler="ar", duration=0.2, temperature=0.0, seed=0)
        got = tiny_pipe(PROMPTS[:batch], sampler="speculative", duration=0.2, temperature=0.0, seed=0)
        assert all(torch.equal(x, y) for x, y in zip(ref.codes, got.codes))


def test_bad_input(tiny_pipe, tmp_path):
    with pytest.raises(InputError, match="duration"):
        tiny_pipe(PROMPTS[0], duration=0.0)
    with pytest.raises(InputError, match="maximum"):
        tiny_pipe(PROMPTS[0], duration=2.5)
    with pytest.raises(InputError, match="duration"):
        tiny_pipe(PROMPTS[0], duration="5")
    with pytest.raises(InputError, match="text description"):
        tiny_pipe(42, duration=0.2)
    with pytest.raises(InputError, match="no word the model knows"):
        tiny_pipe("zzz qqq", duration=0.2)
    with pytest.raises(ModelMismatchError, match="magnet"):
        tiny_pipe(PROMPTS[0], sampler="maskgit", duration=0.2)
    with pytest.raises(UnknownSamplerError):
        tiny_pipe(PROMPTS[0], sampler="no_such_sampler", duration=0.2)
    # one bad prompt in a batch fails alone
    out = tiny_pipe([PROMPTS[0], 7, PROMPTS[1]], sampler="magnet", duration=0.2, seed=0, **FAST["magnet"])
    assert out.audios[1] is None and "prompt 1" in out.errors[1]
    assert out.errors[0] is None and out.errors[2] is None and len(out.errors) == 3  # one entry per prompt, as elsewhere
    with pytest.raises(InputError, match="prompt 1"):
        out.save(1, tmp_path / "failed.wav")
    assert out.audios[0] is not None and out.audios[2] is not None
    path = out.save(0, tmp_path / "clip.wav")
    import soundfile as sf

    wav, sr = sf.read(str(path), dtype="float32")
    assert sr == 16000 and wav.shape == out.audios[0].shape
    with pytest.raises(InputError, match="no audio at index 1"):
        out.save(1, tmp_path / "bad.wav")


def test_corpus_builder_held_out_combinations(tmp_path):
    from leapgen.data.audio_music import LABELS, build, held_out_combos, load_corpus

    summary = build(tmp_path / "corpus", seed=3, hours=0.004, test_fraction=0.5)
    assert summary["train"]["clips"] >= 2 and summary["test"]["clips"] >= 1
    held = held_out_combos()
    train, test = load_corpus(tmp_path / "corpus", "train"), load_corpus(tmp_path / "corpus", "test")
    combo = lambda m: tuple(m["params"][k] for k in ("family", "tempo", "mode", "texture"))  # noqa: E731
    assert all(combo(m) not in held for m in train.meta) and all(combo(m) in held for m in test.meta)
    for a, m in zip(train.audio, train.meta):
        assert a.dtype == np.float32 and abs(a.size / 16000 - m["params"]["duration"]) < 1e-3 and 2 <= m["params"]["duration"] <= 10
        assert float(np.abs(a).max()) > 0.01, "a rendered clip must not be silent"
        assert len(m["descriptions"]) >= 2 and all(m["params"]["mode"] in d or "minor" in d or "major" in d or "key" in d
                                                   for d in m["descriptions"])
        assert set(m["labels"]) == set(LABELS)
    again = build(tmp_path / "corpus", seed=3, hours=0.004, test_fraction=0.5)  # cached, same options
    assert again == json.loads((tmp_path / "corpus" / "summary.json").read_text())


SHIPPED = shipped_assets_dir() / "audio-music"


@pytest.mark.skipif(not (SHIPPED / "model_index.json").is_file(), reason="assets/audio-music not built (leapgen train audio-music)")
def test_shipped_audio_music_asset():
    pipe = Pipeline.from_pretrained("leapgen/audio-music")
    out = pipe(["calm piano melody in C major"], sampler="magnet", duration=1.0, seed=0)
    assert out.audios[0].shape == (16000,) and out.sample_rate == 16000 and np.isfinite(out.audios[0]).all()
    assert float(np.abs(out.audios[0]).max()) > 1e-3
    size = sum(p.stat().st_size for p in SHIPPED.rglob("*") if p.is_file())
    assert size <= 30e6


def test_step_callback_and_progress_bar(tiny_pipe):
    for sampler in ("magnet", "ar"):
        seen = []
        tiny_pipe(PROMPTS[0], sampler=sampler, duration=0.2, seed=0, progress=True,
                  callback_on_step_end=lambda pipe, step, info, seen=seen: seen.append(step), **FAST.get(sampler, {}))
        assert seen and seen == sorted(seen) and len(set(seen)) == len(seen), sampler
    with pytest.raises(InputError, match="callable"):
        tiny_pipe(PROMPTS[0], sampler="magnet", duration=0.2, callback_on_step_end=3)
