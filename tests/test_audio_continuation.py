"""Audio continuation (``AudioPipeline(..., audio_prompt=...)``) on tiny random components: the returned
codes start with the prompt's codes for the masked and AR samplers, greedy speculative equals greedy
ar with a prompt, the clip is ``duration`` long, bad prompts fail alone; and the masked engine never
writes or re-masks given cells (MAGNeT's codebook stages and spans, a revising policy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness_audio import tiny_audio_pipeline

from leapgen.errors import InputError
from leapgen.pipelines.audio import AudioPipeline
from leapgen.pipelines.audio_prompt import ar_plan
from leapgen.pipelines.speech_audio import load_audio
from leapgen.samplers import sampler_info
from leapgen.samplers.base import DecodeConfig, get_sampler

PROMPTS = ["calm piano melody in C major", "fast happy guitar chords", "slow sad strings in A minor"]
FAST = {"steps_per_stage": [3, 2, 1, 1]}
DURATION = 0.3  # 15 frames at 50 Hz


@pytest.fixture(scope="module")
def pipe() -> AudioPipeline:
    return tiny_audio_pipeline(PROMPTS + ["organ drums bass"])


def tone(seconds: float, rate: int = 16000, freq: float = 440.0, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.05, t.size)
    return (0.4 * np.sin(2 * np.pi * freq * t) + noise).astype(np.float32)


def expected_codes(pipe, wave, rate=16000) -> torch.Tensor:
    mono = load_audio(wave, rate, pipe.codec.sample_rate)
    p = mono.size // pipe.codec.hop_length
    return pipe.codec.encode(mono)[0, :, :p].cpu()


#: every sampler the audio pipeline runs (the registry's, by its contracts, every component present)
SAMPLERS = AudioPipeline.runnable_samplers(index={c: ["leapgen", c] for c in AudioPipeline.components})
#: magnet_hybrid's AR span (10 frames) reaches past the 5-frame prompt: its AR part continues it
PARAMS = {"magnet": FAST, "magnet_rescored": FAST, "magnet_hybrid": {**FAST, "ar_seconds": 0.2}}


def test_the_sampler_list_is_the_pipelines(pipe):
    assert sorted(SAMPLERS) == sorted(pipe.runnable_samplers())
    assert {"magnet", "magnet_rescored", "magnet_hybrid", "ar", "speculative", "cntp"} <= set(SAMPLERS)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_first_frames_are_the_prompt_and_length_is_duration(pipe, sampler):
    """Every audio sampler keeps the prompt's codes verbatim, returns ``duration`` and is reproducible
    by its seed (sampled where the sampler samples: cntp's trials, MAGNeT's spans, the hybrid's AR part)."""
    # 0.11 s: 5 whole frames + a partial one (dropped); stereo [N, 2] at 22.05 kHz is resampled and downmixed
    wave = np.stack([tone(0.11, 22050), tone(0.11, 22050, 300.0, seed=1)], 1)
    want = expected_codes(pipe, wave, 22050)
    assert want.shape == (4, 5)
    params = dict(PARAMS.get(sampler, {}))
    if sampler_info(sampler).guarantee == "greedy-exact":  # greedy-only (jacobi)
        params["temperature"] = 0.0
    run = lambda: pipe(PROMPTS[:2], sampler=sampler, duration=DURATION, seed=0, audio_prompt=wave,  # noqa: E731
                       sampling_rate=22050, **params)
    out = run()
    frames = round(DURATION * 50)
    for a, c in zip(out.audios, out.codes):
        assert a.shape == (frames * 320,) and np.isfinite(a).all() and tuple(c.shape) == (4, frames)
        assert torch.equal(c[:, :5], want), sampler
    assert out.stats.extra["prompt_frames"] == [5, 5]
    again = run()
    assert all(torch.equal(x, y) for x, y in zip(out.codes, again.codes)), sampler


def test_magnet_hybrid_continues_a_prompt(pipe):
    """The hybrid's AR part starts after each row's prompt (ragged prompts, a row without one) and
    writes up to its AR span; a prompt that covers the span goes straight to the masked stage."""
    waves = [tone(0.1, seed=1), None, tone(0.2, freq=220.0, seed=2)]  # 5, 0 and 10 frames
    kw = dict(sampler="magnet_hybrid", duration=DURATION, sampling_rate=16000, steps_per_stage=[3, 2, 1, 1])
    out = pipe(PROMPTS, seed=0, audio_prompt=waves, ar_seconds=0.24, **kw)  # AR span: 12 frames
    assert out.errors == [None] * 3 and all(tuple(c.shape) == (4, 15) for c in out.codes)
    assert torch.equal(out.codes[0][:, :5], expected_codes(pipe, waves[0]))
    assert torch.equal(out.codes[2][:, :10], expected_codes(pipe, waves[2]))
    st = out.stats.extra
    assert st["prompt_frames"] == [5, 0, 10] and st["ar_frames"] == 12
    # the AR part writes the stream after the common prefix (the row without a prompt: from BOS), one forward a cell
    assert st["ar_tokens"] == pipe.ar_model.config.stream_tokens(12) and st["ar_forwards"] == st["ar_tokens"]
    # prompts of 10 frames and an AR span of 6: no AR forward, the masked stage continues the prompt
    long = tone(0.2, freq=220.0, seed=2)
    direct = pipe(PROMPTS[:2], seed=0, audio_prompt=long, ar_seconds=0.12, **kw)
    assert direct.stats.extra["ar_forwards"] == 0 and direct.stats.other_forwards == 0
    assert all(torch.equal(c[:, :10], expected_codes(pipe, long)) for c in direct.codes)
    # without a prompt it is the hybrid as before: the AR model writes the first frames
    plain = pipe(PROMPTS[:1], sampler="magnet_hybrid", duration=DURATION, seed=0, ar_seconds=0.1, steps_per_stage=[3, 2, 1, 1])
    assert plain.stats.extra["ar_tokens"] == pipe.ar_model.config.stream_tokens(5) and "prompt_frames" not in plain.stats.extra


def test_magnet_hybrid_refuses_given_cells_that_are_no_prompt(pipe):
    """A grid whose given cells are not the first frames in every codebook (infilling) is refused
    with what to use instead; the new-token count leaves the prompt's cells out."""
    smp = get_sampler("magnet_hybrid", steps_per_stage=[2, 1, 1, 1], ar_seconds=0.1)
    mask_id = pipe.model.config.mask_id
    models = {"model": pipe._masked, "ar_model": pipe._ar}
    cfg = DecodeConfig(max_new_tokens=1, temperature=3.0, top_p=0.9, seed=0)
    cond = pipe.encode(PROMPTS[:1])
    grid = torch.full((1, 4, 15), mask_id, dtype=torch.long)
    grid[0, 0, 3] = 1  # one cell inside the clip
    with pytest.raises(InputError, match="first P frames"):
        smp.generate(models, grid, cfg, torch.Generator().manual_seed(0), cond=cond)
    grid = torch.full((1, 4, 15), mask_id, dtype=torch.long)
    grid[0, :, :3] = 2
    grid[0, :2, 3] = 2  # frame 3 only in two codebooks
    with pytest.raises(InputError, match="first P frames"):
        smp.generate(models, grid, cfg, torch.Generator().manual_seed(0), cond=cond)
    grid[0, 2:, 3] = 2  # now frames 0..3 whole
    res = smp.generate(models, grid, cfg, torch.Generator().manual_seed(0), cond=cond)
    assert bool((res.tokens[0, :, :4] == 2).all()) and not bool(res.generated[0, :, :4].any())
    assert bool(res.generated[0, :, 4:].all()) and res.stats.new_tokens == 4 * 11
    grid[0] = 2  # every frame given: nothing to generate
    with pytest.raises(InputError, match="nothing to generate"):
        smp.generate(models, grid, cfg, torch.Generator().manual_seed(0), cond=cond)


def test_one_prompt_per_description_and_none(pipe):
    waves = [tone(0.1, seed=1), None, tone(0.2, freq=220.0, seed=2)]
    for sampler, params in (("magnet", FAST), ("ar", {})):
        out = pipe(PROMPTS, sampler=sampler, duration=DURATION, seed=0, audio_prompt=waves, sampling_rate=16000, **params)
        assert out.errors == [None, None, None]
        assert torch.equal(out.codes[0][:, :5], expected_codes(pipe, waves[0]))
        assert torch.equal(out.codes[2][:, :10], expected_codes(pipe, waves[2]))
        assert out.stats.extra["prompt_frames"] == [5, 0, 10]


def test_greedy_speculative_equals_greedy_ar_with_a_prompt(pipe):
    waves = [tone(0.1, seed=1), tone(0.16, freq=330.0, seed=3)]  # 5 and 8 frames: ragged prompts, forced cells
    ref = pipe(PROMPTS[:2], sampler="ar", duration=DURATION, temperature=0.0, seed=0, audio_prompt=waves, sampling_rate=16000)
    got = pipe(PROMPTS[:2], sampler="speculative", duration=DURATION, temperature=0.0, seed=0, audio_prompt=waves, sampling_rate=16000)
    assert all(torch.equal(x, y) for x, y in zip(ref.codes, got.codes))
    # sampled too: the forced cells hold the prompt whatever the temperature
    hot = pipe(PROMPTS[:2], sampler="ar", duration=DURATION, temperature=5.0, seed=1, audio_prompt=waves, sampling_rate=16000)
    assert torch.equal(hot.codes[1][:, :8], expected_codes(pipe, waves[1]))


def test_ar_plan_delay_rule(pipe):
    c = pipe.ar_model.config  # K = 4, delay pattern
    codes = torch.arange(4 * 3).view(4, 3) % 16  # P = 3 frames
    rows, forced = ar_plan(c, [codes], 6)
    assert len(rows[0]) == 1 + 3 * 4  # BOS + steps 0..P-1
    # forced: codebook k of frames P-k..P-1 (k >= 1), at stream position step * K + k, step = t + k
    want = {(t + k) * 4 + k: int(codes[k, t]) for k in range(1, 4) for t in range(3 - k, 3) if t + k >= 3}
    got = {int(i): int(forced[0, i]) for i in (forced[0] >= 0).nonzero().flatten()}
    assert got == want and len(want) == 6


def test_bad_prompts_fail_alone(pipe, tmp_path):
    good = tone(0.1)
    items = [good, str(tmp_path / "missing.wav"), np.full(3200, np.nan, np.float32), np.zeros(3200, np.float32), tone(0.4)]
    out = pipe(PROMPTS[:1] * 5, sampler="magnet", duration=DURATION, seed=0, audio_prompt=items, sampling_rate=16000, **FAST)
    assert out.errors[0] is None and out.audios[0] is not None
    assert "audio_prompt 1" in out.errors[1] and "does not exist" in out.errors[1]
    assert "NaN" in out.errors[2] and "silent" in out.errors[3]
    assert "audio_prompt 4" in out.errors[4] and "longer duration" in out.errors[4]  # 20 frames >= 15
    assert all(out.audios[i] is None for i in range(1, 5))
    with pytest.raises(InputError, match="longer duration"):  # a shared prompt as long as the clip
        pipe(PROMPTS[:2], duration=DURATION, audio_prompt=tone(0.3), sampling_rate=16000, **FAST)
    with pytest.raises(InputError, match="shorter than one"):  # 240 samples at 16 kHz (load_audio's 25 ms minimum refuses it)
        pipe(PROMPTS[0], duration=DURATION, audio_prompt=tone(0.015, 48000), sampling_rate=48000, **FAST)
    with pytest.raises(InputError, match="3 items for 2"):
        pipe(PROMPTS[:2], duration=DURATION, audio_prompt=[good, good, good], sampling_rate=16000, **FAST)
    with pytest.raises(InputError, match="sampling_rate"):
        pipe(PROMPTS[0], duration=DURATION, audio_prompt=good, **FAST)
    hybrid = pipe(PROMPTS[:1] * 2, sampler="magnet_hybrid", duration=DURATION, audio_prompt=[good, np.zeros(3200, np.float32)],
                  sampling_rate=16000, **FAST)  # a bad prompt fails alone with magnet_hybrid too
    assert hybrid.errors[0] is None and "silent" in hybrid.errors[1] and hybrid.audios[1] is None


def test_path_prompt(pipe, tmp_path):
    import soundfile as sf

    path = tmp_path / "prompt.wav"
    sf.write(str(path), tone(0.1), 16000)
    out = pipe(PROMPTS[0], sampler="magnet", duration=DURATION, seed=0, audio_prompt=str(path), **FAST)
    assert torch.equal(out.codes[0][:, :5], expected_codes(pipe, *sf.read(str(path), dtype="float32")))


@pytest.mark.parametrize("params", [{"steps_per_stage": [3, 2, 1, 1]}, {"steps_per_stage": [2, 1, 1, 1], "span_len": 2},
                                    {"region": "full", "span_len": 1, "policy": "remask_lowest", "steps": 4}])
def test_masked_engine_never_writes_given_cells(pipe, params):
    """Given cells anywhere (not just a prefix; inside spans, on span edges) come back unchanged."""
    smp = get_sampler("magnet", **params)
    g = torch.Generator().manual_seed(0)
    mask_id = pipe.model.config.mask_id
    grid = torch.full((2, 4, 14), mask_id, dtype=torch.long)
    given = torch.rand(2, 4, 14, generator=g) < 0.4
    values = torch.randint(0, 16, (2, 4, 14), generator=g)
    grid[given] = values[given]
    cond = pipe.encode(PROMPTS[:2])
    res = smp.generate({"model": pipe._masked, "ar_model": None}, grid, DecodeConfig(max_new_tokens=1, temperature=3.0, top_p=0.9, seed=0),
                       torch.Generator().manual_seed(1), cond=cond)
    assert torch.equal(res.tokens[given], values[given])
    assert not bool((res.tokens == mask_id).any())
    assert not bool(res.generated[given].any())
