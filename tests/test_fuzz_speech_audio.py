"""Regression tests for bad input found by fuzzing the speech and audio pipelines (music, ASR, TTS,
S2ST, OCR) and their CLI commands: each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leapgen.cli import main as cli_main
from leapgen.errors import InputError
from leapgen.pipelines.audio_output import AudioOutput, audio_file_format
from leapgen.samplers.base import DecodeStats

ASSETS = Path(__file__).resolve().parents[1] / "assets"
S2ST_CLIP = ASSETS / "s2st-en-de" / "examples" / "clip0.wav"


@pytest.fixture(scope="module")
def s2st():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/s2st-en-de")


def _audio_output() -> AudioOutput:
    wave = (0.3 * np.sin(np.linspace(0, 200, 1600))).astype(np.float32)
    return AudioOutput(audios=[wave, None], sample_rate=16000, stats=DecodeStats(), errors=[None, "prompt 1 is empty"])


@pytest.mark.parametrize("name", ["clip.ogg", "clip.mp3", "clip.flac", "clip.WAV", "new/sub/dir/clip.wav"])
def test_audio_output_save_writes_every_extension_and_creates_folders(tmp_path, name):
    out = _audio_output()
    path = out.save(0, tmp_path / name)  # .ogg / .mp3: ValueError (PCM_16); missing folder: LibsndfileError
    wave, rate = sf.read(str(path), dtype="float32")
    assert rate == 16000 and abs(wave.size - 1600) < 1600  # mp3 pads a little


@pytest.mark.parametrize("name", ["clip.xyz", "clip", "."])
def test_audio_output_save_refuses_a_path_that_is_no_audio_file(tmp_path, name):
    with pytest.raises(InputError, match="cannot write audio|is a folder"):  # was TypeError from soundfile
        _audio_output().save(0, tmp_path / name)
    with pytest.raises(InputError, match="index must be an integer"):
        _audio_output().save("0", tmp_path / "a.wav")  # was TypeError: '<=' not supported
    assert _audio_output().save(np.int64(0), tmp_path / "b.wav").is_file()


def test_audio_output_save_under_a_file_is_an_input_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="cannot write audio"):
        _audio_output().save(0, tmp_path / "afile" / "clip.wav")


def test_cli_generate_audio_refuses_a_bad_extension_before_generating(tmp_path, capsys):
    # before: the clip was generated, then soundfile's TypeError came out as a traceback
    rc = cli_main(["generate", "audio", "calm piano", "--duration", "0.1", "--out", str(tmp_path / "clip.xyz"),
                   "--pipeline", str(tmp_path / "no-such-pipeline")])
    assert rc == 2 and "names no audio format" in capsys.readouterr().err
    with pytest.raises(InputError):
        audio_file_format(tmp_path / "clip.txt")


def test_a_constant_dc_clip_is_silent_not_transcribed_as_nothing():
    """A constant signal (a DC offset with no sound on it) passed the peak check and the ASR returned
    texts[0] = '' with no error; all zeros got 'silent'."""
    from leapgen.pipelines.speech_audio import load_audio

    for level in (0.5, -0.2, 1e-3):
        with pytest.raises(InputError, match="silent"):
            load_audio(np.full(16000, level, np.float32), 16000)
    wave = (0.3 * np.sin(np.linspace(0, 2000, 16000)) + 0.5).astype(np.float32)  # speech on an offset is kept
    assert load_audio(wave, 16000).size == 16000


def test_sampling_rate_that_disagrees_with_a_file_is_logged(tmp_path, caplog):
    from leapgen.pipelines.speech_audio import load_audio

    path = tmp_path / "a.wav"
    sf.write(str(path), (0.3 * np.sin(np.linspace(0, 2000, 8000))).astype(np.float32), 8000)
    with caplog.at_level("WARNING"):
        assert load_audio(path, 16000).size == 16000  # the file's own 8 kHz, resampled
    assert "8000 Hz by its header" in caplog.text


@pytest.fixture(scope="module")
def tts():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/tts-en")


@pytest.mark.parametrize("kwargs", [{"s2a_params": {"steps_per_stge": [1, 1, 1, 1]}},
                                    {"s2a_params": {"steps_per_stage": [0, 1, 1, 1]}},
                                    {"s2a_temperature": -1.0}, {"s2a_temperature": "hot"}, {"temperature": float("nan")}])
def test_tts_refuses_bad_stage_settings_before_any_prompt_is_encoded(tts, monkeypatch, kwargs):
    """A misspelt s2a_params key or a bad temperature raised only after every prompt was encoded and
    the whole T2S stage had run (the work of a batch thrown away)."""
    from leapgen.errors import ConfigError

    def not_reached(*a, **k):
        raise AssertionError("the prompts were prepared before the call's settings were checked")

    monkeypatch.setattr(tts, "_prepare", not_reached)
    with pytest.raises(ConfigError):
        tts(["hello world", "the value is returned"], **kwargs)
    monkeypatch.setattr(tts, "_prompt_tokens", not_reached)
    if "temperature" not in kwargs:
        with pytest.raises(ConfigError):
            tts.speak_semantic([1, 2, 3], **kwargs)


def test_a_dc_offset_is_removed_before_the_silences_are_found():
    """An offset of 0.2 hid the silences speech_segments trims: S2ST translated a padded clip into
    'ɛ tf ɪeːn baʊə ʃlysəl' instead of 'voː ɪst dɛɾ blaʊə ʃlysəl', ASR lost 24 of 180 words of a minute."""
    from leapgen.pipelines.speech_audio import normalize_level, speech_segments

    wave = np.zeros(48000, np.float32)
    wave[16000:32000] = 0.6 * np.sin(np.linspace(0, 3000, 16000))
    for dc in (0.2, -0.05):
        fixed = normalize_level(wave + dc)
        assert abs(float(fixed.mean())) < 1e-3
        (start, seg), = speech_segments(fixed, 7.5, trim=True)
        assert 15000 <= start <= 16000 and seg.size < 26000  # leading silence cut, trailing silence cut to 0.5 s
    clean = wave + 0.003  # below DC_OFFSET (espeak clips' own |mean| reaches 0.0036): left as it is
    assert normalize_level(clean) is clean


def test_s2st_translates_a_padded_clip_with_a_dc_offset_as_without(s2st):
    w, rate = sf.read(str(S2ST_CLIP), dtype="float32")
    padded = np.concatenate([np.zeros(8000, np.float32), w, np.zeros(16000, np.float32)])
    plain = s2st(padded, sampling_rate=rate, vocode=False).texts
    assert s2st(padded + 0.2, sampling_rate=rate, vocode=False).texts == plain
    # an offset too small for normalize_level to remove (it keeps means up to 0.01) is no energy to the
    # silence trimming either: 0.005 used to keep the padding and translate it ('ɛ ...')
    for dc in (0.003, 0.005, 0.009):
        assert s2st(padded + dc, sampling_rate=rate, vocode=False).texts == plain, dc


def test_frame_energy_ignores_a_dc_offset():
    from leapgen.pipelines.speech_audio import _frame_db, speech_segments

    w, rate = sf.read(str(S2ST_CLIP), dtype="float32")
    padded = np.concatenate([np.zeros(16000, np.float32), w, np.zeros(16000, np.float32)])
    assert np.allclose(_frame_db(padded + 0.005, rate), _frame_db(padded, rate), atol=0.01)
    plain = [(a, len(x)) for a, x in speech_segments(padded, 6.0, rate, trim=True)]
    assert plain[0][0] > 8000  # the leading second of silence is trimmed
    assert [(a, len(x)) for a, x in speech_segments(padded + 0.005, rate=rate, max_seconds=6.0, trim=True)] == plain


def test_s2st_long_clip_segments_are_joined_by_a_space(s2st):
    """A clip longer than max_segment_seconds is translated segment by segment; the segments' phoneme ids
    were concatenated, so one segment's last word and the next one's first read as one word
    ('ʃlysəlvoː'), against the documented join by a space."""
    w, rate = sf.read(str(S2ST_CLIP), dtype="float32")
    long = np.tile(np.concatenate([w, np.zeros(int(0.4 * rate), np.float32)]), 6)  # ~ 9 s: two or more segments
    out = s2st(long, sampling_rate=rate, vocode=False)
    assert out.stats.extra["segments"] >= 2
    one = s2st(w, sampling_rate=rate, vocode=False).texts[0]
    words = out.texts[0].split()
    assert len(words) == out.stats.extra["segments"] * len(one.split())  # no two words run together


@pytest.fixture(scope="module")
def music():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/audio-music")


def test_music_cfg_scale_reaches_the_masked_samplers(music):
    """pipe(p, sampler='magnet', cfg_scale=x): the call's keyword shadowed the sampler's, and the masked
    samplers ran with their default guidance (10) whatever x was (the bench's 'magnet[cfg_scale=5]' too)."""
    from leapgen.samplers import get_sampler

    fast = {"duration": 0.3, "seed": 0, "steps_per_stage": [3, 2, 1, 1]}
    weak = music("calm piano", cfg_scale=1.0, **fast).audios[0]
    strong = music("calm piano", cfg_scale=10.0, **fast).audios[0]
    assert not np.array_equal(weak, strong)
    assert np.array_equal(music("calm piano", **fast).audios[0], strong)  # the default is still MAGNeT's 10
    ar = {"duration": 0.2, "seed": 0, "sampler": "ar"}
    assert np.array_equal(music("calm piano", **ar).audios[0], music("calm piano", cfg_scale=3.0, **ar).audios[0])
    with pytest.raises(InputError, match="Sampler instance"):
        music("calm piano", sampler=get_sampler("magnet"), cfg_scale=3.0, duration=0.2)
