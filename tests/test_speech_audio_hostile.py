"""Regression tests for the inputs a user brings to the speech and audio pipelines that no other test
names (a hostile, realistic-user sweep of asr-en, tts-en, s2st-en-de and audio-music): each test
failed before its fix."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from leapgen.errors import InputError

ASSETS = Path(__file__).resolve().parents[1] / "assets"
ASR_CLIP = ASSETS / "asr-en" / "examples" / "clip.wav"
TTS_PROMPT = ASSETS / "tts-en" / "examples" / "prompt.wav"
TTS_PROMPT_TEXT = json.loads((ASSETS / "tts-en" / "examples" / "prompt.json").read_text())["text"]


@pytest.fixture(scope="module")
def asr():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/asr-en")


@pytest.fixture(scope="module")
def tts():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/tts-en")


@pytest.fixture(scope="module")
def music():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/audio-music")


@pytest.fixture(scope="module")
def codec(music):
    return music.codec


# ------------------------------------------------------------------------------ open file objects
def test_asr_one_open_file_twice_in_a_batch_reads_both_times(asr):
    # before: the second item found the file at its end: "cannot decode the audio (BufferedReader: ... Format
    # not recognised.)"
    with open(ASR_CLIP, "rb") as f:
        out = asr([f, f])
        assert f.tell() == 0  # left where it was
    assert out.errors == [None, None] and out.texts[0] and out.texts[0] == out.texts[1]


def test_asr_reads_an_open_file_from_where_it_stands_and_leaves_it_there(asr):
    raw = ASR_CLIP.read_bytes()
    buf = io.BytesIO(b"junk" + raw)
    buf.seek(4)
    out = asr(buf)
    assert out.errors == [None] and out.texts[0] and buf.tell() == 4


def test_tts_a_shared_file_object_prompt_serves_every_text(tts):
    # before: the prompt was read once per text (and per chunk of a long text); the second text got
    # "prompt_audio: cannot decode the audio (BytesIO: ...)"
    buf = io.BytesIO(TTS_PROMPT.read_bytes())
    out = tts(["get a new variable", "the list"], prompt_audio=buf, prompt_text=TTS_PROMPT_TEXT, seed=0)
    assert out.errors == [None, None]
    assert all(a is not None and a.size > 0 for a in out.audios)


# ------------------------------------------------------------------------------ TTS prompt_text
@pytest.mark.parametrize("prompt_text, side", [("hi", "too few"),
                                               ("the value of the object is returned by the function and then a "
                                                "great many more words are spoken after it", "too many")])
def test_tts_prompt_text_that_cannot_be_what_the_clip_says_fails_its_item(tts, prompt_text, side):
    # before: the speaking rate was read off it as it was: 'hi' for the 1.8 s example prompt made
    # 'get a new variable' about 10 s long, a long text made it a fraction of a second, with no error
    out = tts(["get a new variable", "get a new variable"], prompt_audio=str(TTS_PROMPT),
              prompt_text=[prompt_text, TTS_PROMPT_TEXT], seed=0)
    assert out.audios[0] is None and side in out.errors[0] and "exactly what the prompt clip says" in out.errors[0]
    assert out.errors[1] is None and out.audios[1] is not None and out.audios[1].size / out.sample_rate < 3.0


# ------------------------------------------------------------------------------ codec
def test_codec_encodes_samples_by_channels_as_one_mono_clip(codec):
    # before: a [n, 2] array (soundfile's layout) was read as n clips of 2 samples: codes of shape (n, 4, 1)
    t = np.arange(3200, dtype=np.float32) / 16000
    mono = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    stereo = np.stack([mono, mono], axis=1)
    codes = codec.encode(stereo)
    assert tuple(codes.shape) == (1, codec.num_codebooks, 10)
    assert torch.equal(codes, codec.encode(mono))


def test_codec_encodes_a_list_of_samples_as_one_clip(codec):
    # before: InputError "a list of waveforms must hold 1-D arrays of one length" for a plain list of floats
    samples = [0.1 * np.sin(i / 5.0) for i in range(640)]
    codes = codec.encode(samples)
    assert tuple(codes.shape) == (1, codec.num_codebooks, 2)


def test_codec_decodes_zero_frames_to_zero_samples(codec):
    # before: RuntimeError from the decoder's convolution ("Kernel size can't be greater than actual input size")
    audio = codec.decode(torch.zeros(2, codec.num_codebooks, 0, dtype=torch.long))
    assert tuple(audio.shape) == (2, 0)
    with pytest.raises(InputError, match="codes must"):
        codec.decode(torch.zeros(1, codec.num_codebooks + 1, 3, dtype=torch.long))


# ------------------------------------------------------------------------------ TTS short texts, prompt lists
def test_tts_a_one_word_text_is_not_silence(tts):
    # before: the target was 3 semantic frames (0.18 s) and the masked T2S wrote only silence for every seed
    out = tts(["yes", "the"], prompt_audio=str(TTS_PROMPT), prompt_text=TTS_PROMPT_TEXT, seed=0)
    assert out.errors == [None, None] and out.stats.extra["silent"] == []
    assert all(a.size / out.sample_rate >= 0.5 and float(np.abs(a).max()) > 1e-2 for a in out.audios)


def test_tts_silent_chunks_are_reported_by_their_text():
    # before: stats.extra["silent"] held chunk indices, which are not the texts' once a long text is chunked
    from leapgen.pipelines.tts_text import warn_silent

    loud, quiet = np.full(100, 0.3, np.float32), np.zeros(100, np.float32)
    audios = [loud, loud, loud, quiet, None]  # chunks of text 0 (three), text 1, text 2 (failed)
    assert warn_silent(audios, [0, 1, 2, 3], [0, 0, 0, 1, 2], "maskgct_t2s") == [1]


def test_tts_none_in_a_per_text_prompt_list_is_the_example_voice(tts):
    # before: "prompt_audio: unsupported audio item of type NoneType" for that text
    out = tts(["get a new variable", "the list"], prompt_audio=[None, str(TTS_PROMPT)],
              prompt_text=[None, TTS_PROMPT_TEXT], seed=0)
    assert out.errors == [None, None] and all(a is not None for a in out.audios)
    same = tts("get a new variable", seed=0)  # no prompt_audio at all: the same example voice and text
    assert len(out.semantic_tokens[0]) == len(same.semantic_tokens[0]) and out.audios[0].size == same.audios[0].size


# ------------------------------------------------------------------------------ logged, not silent
def test_music_words_past_the_text_encoders_reach_are_logged(music, caplog):
    # before: the tokenizer kept the first max_len (20) words and dropped the rest without a word
    long = "calm piano melody in C major with soft drums , slow tempo , played on an organ and then a loud guitar"
    words = music.text_tokenizer.split(long)
    assert len(words) > music.text_tokenizer.max_len
    with caplog.at_level("WARNING", logger="leapgen.pipelines.audio"):
        music.check_prompt(long, 0)
    assert "the text encoder reads the first 20" in caplog.text and "'guitar'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="leapgen.pipelines.audio"):
        music.check_prompt("calm piano melody in C major", 0)
    assert "reads the first" not in caplog.text


def test_asr_audio_below_telephone_rate_is_logged(asr, caplog):
    # before: 4 kHz speech came out as 'run one in an an' with nothing said
    import soundfile as sf
    import soxr

    wave, rate = sf.read(str(ASR_CLIP), dtype="float32")
    low = soxr.resample(wave, rate, 4000).astype(np.float32)
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(low, sampling_rate=4000)
    assert "sampled at 4000 Hz" in caplog.text and "expect a poor result" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(soxr.resample(wave, rate, 8000).astype(np.float32), sampling_rate=8000)  # telephone speech: no warning
    assert "sampled at" not in caplog.text


# ------------------------------------------------------------------------------ sampling_rate per item, stacked batches
def test_asr_arrays_at_different_rates_take_one_sampling_rate_each(asr):
    # before: sampling_rate=[22050, 8000] failed every item with "sampling_rate must be an integer number of Hz"
    import soundfile as sf
    import soxr

    wave, rate = sf.read(str(ASR_CLIP), dtype="float32")
    low = soxr.resample(wave, rate, 8000).astype(np.float32)
    out = asr([wave, low, str(ASR_CLIP)], sampling_rate=[rate, 8000, None])
    assert out.errors == [None, None, None] and out.texts[0] == asr(wave, sampling_rate=rate).texts[0]
    with pytest.raises(InputError, match="sampling_rate holds 2 rates for 3 audio items"):
        asr([wave, low, wave], sampling_rate=[rate, 8000])


def test_asr_a_batch_stacked_into_one_array_is_logged_or_named(asr, caplog, tmp_path):
    # before: a [4, T] array of four clips was averaged into one clip with nothing said, and a [B, 1, T]
    # batch was refused without saying how to pass a batch
    import soundfile as sf

    wave, rate = sf.read(str(ASR_CLIP), dtype="float32")
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(np.stack([wave] * 4), sampling_rate=rate)
    assert "read as one clip of 4 channels" in caplog.text and "list(batch)" in caplog.text
    out = asr(np.stack([wave] * 2)[:, None], sampling_rate=rate)
    assert out.texts == [None] and "list(batch)" in out.errors[0]
    caplog.clear()
    sf.write(str(tmp_path / "quad.wav"), np.stack([wave] * 4, axis=1), rate)  # a 4-channel file is no batch
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        assert asr(str(tmp_path / "quad.wav")).errors == [None]
    assert "channels" not in caplog.text


def test_tts_and_music_prompts_at_different_rates_take_one_sampling_rate_each(tts, music):
    # before: a list of sampling rates failed every prompt ("must be an integer number of Hz")
    import soundfile as sf
    import soxr

    wave, rate = sf.read(str(TTS_PROMPT), dtype="float32")
    high = soxr.resample(wave, rate, 44100).astype(np.float32)
    out = tts(["the list", "the list"], prompt_audio=[wave, high], prompt_text=TTS_PROMPT_TEXT,
              sampling_rate=[rate, 44100], seed=0)
    assert out.errors == [None, None]
    voice = tts.speak_semantic([[3, 4, 5] * 4] * 2, prompt_audio=[wave, high], sampling_rate=[rate, 44100], seed=0,
                               s2a_params={"steps_per_stage": [1, 1, 1, 1]})
    assert voice.errors == [None, None]
    clip = (0.3 * np.sin(np.arange(22050) / 5.0)).astype(np.float32)  # 0.5 s at 44.1 kHz, 1 s at 22.05 kHz
    got = music(["calm piano melody", "calm piano melody"], audio_prompt=[clip, clip], sampling_rate=[44100, 22050],
                duration=1.5, seed=0, sampler="ar")
    assert got.errors == [None, None] and got.stats.extra["prompt_frames"] == [25, 50]


# ------------------------------------------------------------------------------ paths and rates that name no file
def test_asr_a_path_that_names_no_file_says_why(asr, tmp_path):
    # before: each of these got a bare "does not exist; check the path."
    out = asr(["~/no-such-clip.wav", "https://example.com/clip.wav", f"{ASR_CLIP}\n"])
    assert "'~' is not expanded" in out.errors[0] and "os.path.expanduser" in out.errors[0]
    assert "URLs are not fetched" in out.errors[1]
    assert "strip the path" in out.errors[2]


@pytest.mark.parametrize("rate", [True, 16000.7, "16000"])
def test_codec_refuses_a_sample_rate_that_is_no_whole_number_of_hz(codec, rate):
    # before: True resampled the clip from 1 Hz; 16000.7 and "16000" passed as 16000
    with pytest.raises(InputError, match="sample_rate must be an integer number of Hz"):
        codec.encode(np.zeros(1600, np.float32), sample_rate=rate)


# ------------------------------------------------------------------------------ trailing silence
def test_asr_silence_after_the_speech_does_not_cost_the_last_word(asr, tmp_path):
    # before: the ASR kept up to 0.5 s of it, and 0.15 s more than espeak-ng's own 0.3 s lost 'function'
    # ('... returned by the'); on 200 test clips 0.3 s of it took Paraformer from 10.7 to 13.5 % WER
    import shutil
    import subprocess

    import soundfile as sf

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    path = tmp_path / "clip.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "the value of the object is returned by the function"], check=True)
    wave, rate = sf.read(str(path), dtype="float32")
    clean = asr(wave, sampling_rate=rate).texts[0]
    assert clean.endswith("function")
    padded = [np.concatenate([wave, np.zeros(int(s * rate), np.float32)]) for s in (0.15, 0.3, 1.0)]
    out = asr(padded, sampling_rate=rate)
    assert out.texts == [clean] * 3
    assert abs(out.timestamps[2][-1][2] - asr(wave, sampling_rate=rate).timestamps[0][-1][2]) < 0.1


def test_asr_takes_transformers_return_timestamps_keyword(asr):
    # before: ConfigError "unknown keyword(s) ['return_timestamps']" for the keyword transformers' ASR pipeline uses
    out = asr(str(ASR_CLIP), return_timestamps=True)
    assert out.errors == [None] and out.timestamps[0] and out.timestamps[0][0][0] == out.texts[0].split()[0]
    assert asr(str(ASR_CLIP), return_timestamps="word").texts == out.texts
    with pytest.raises(InputError, match="word timestamps"):
        asr(str(ASR_CLIP), return_timestamps="char")


# ------------------------------------------------------------------------------ S2ST output
@pytest.fixture(scope="module")
def s2st():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/s2st-en-de")


def test_s2st_output_saves_like_the_tts_and_music_outputs(s2st, tmp_path):
    # before: AttributeError: 'S2STOutput' object has no attribute 'save'
    import soundfile as sf

    clip = ASSETS / "s2st-en-de" / "examples" / "clip0.wav"
    out = s2st([str(clip), str(tmp_path / "missing.wav")], gl_iters=2)
    path = out.save(0, tmp_path / "de" / "clip0.de.wav")
    wave, rate = sf.read(str(path), dtype="float32")
    assert rate == out.sample_rate and wave.size == out.audios[0].size
    with pytest.raises(InputError, match="does not exist"):
        out.save(1, tmp_path / "x.wav")
    mels_only = s2st(str(clip), vocode=False)
    with pytest.raises(InputError, match="vocode=False"):
        mels_only.save(0, tmp_path / "y.wav")


def test_asr_a_closed_or_text_mode_file_object_says_so(asr, capfd):
    # before: "cannot decode the audio (...: Format not recognised.)", after soundfile's cffi callbacks had
    # printed tracebacks to stderr
    closed = open(ASR_CLIP, "rb")
    closed.close()
    with open(ASR_CLIP) as text_mode:
        out = asr([closed, text_mode, io.StringIO("abc")])
    assert "is closed" in out.errors[0] and "text mode" in out.errors[1] and "text mode" in out.errors[2]
    assert "Traceback" not in capfd.readouterr().err


def test_asr_a_draft_for_a_sampler_that_reads_none_is_refused(asr):
    # before: draft='ctc' with sampler='ar' (or paraformer, ctc_greedy ...) was ignored without a word
    for sampler in ("ar", "paraformer", "ctc_greedy"):
        with pytest.raises(InputError, match="reads no draft"):
            asr(str(ASR_CLIP), sampler=sampler, draft="ctc")
    assert asr(str(ASR_CLIP), sampler="gad", draft="ctc").errors == [None]


def test_asr_a_clip_scaled_up_from_near_silence_is_a_warning(asr, caplog):
    # before: scaled by thousands with an info line only; 16-bit speech at peak 1.5e-4 read
    # 'parse the object between python function' for '... returned by the function'
    import soundfile as sf

    wave, rate = sf.read(str(ASR_CLIP), dtype="float32")
    faint = np.round(wave / np.abs(wave).max() * 1.5e-4 * 32767).astype(np.int16)
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(faint, sampling_rate=rate)
    assert "below full scale" in caplog.text and "record or export it louder" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(wave * 0.1, sampling_rate=rate)  # quiet, but plenty of bits: scaled with an info line only
    assert "below full scale" not in caplog.text


def test_asr_a_heavily_clipped_clip_is_a_warning(asr, caplog):
    # before: espeak speech driven 8x into the rails read 'error url error object is returned by function', silently
    import soundfile as sf

    wave, rate = sf.read(str(ASR_CLIP), dtype="float32")
    wave = wave / np.abs(wave).max()
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr(np.clip(wave * 8, -1, 1), sampling_rate=rate)
    assert "is clipped" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="leapgen.pipelines.speech_audio"):
        asr([wave, np.clip(wave * 2, -1, 1)], sampling_rate=rate)  # full scale, lightly clipped: nothing to say
    assert "is clipped" not in caplog.text


# ------------------------------------------------------------------------------ (samples, rate) pairs
def test_a_samples_rate_pair_is_one_clip(asr, s2st, tts, music):
    # before: sf.read(path) / librosa.load / torchaudio.load's (samples, rate) was taken for two items: the
    # samples without their rate ("arrays need their sampling_rate=") and an int ("unsupported audio item")
    import soundfile as sf

    pair = sf.read(str(ASR_CLIP), dtype="float32")
    want = asr(str(ASR_CLIP)).texts
    assert asr(pair).texts == want and asr([pair, (torch.from_numpy(pair[0])[None], pair[1])]).texts == want * 2
    assert s2st(sf.read(str(ASSETS / "s2st-en-de" / "examples" / "clip0.wav")), vocode=False).errors == [None]
    voice = tts.speak_semantic([3, 4, 5] * 4, prompt_audio=sf.read(str(TTS_PROMPT)), seed=0,
                               s2a_params={"steps_per_stage": [1, 1, 1, 1]})
    assert voice.errors == [None]
    clip = (0.3 * np.sin(np.arange(8000) / 5.0)).astype(np.float32)
    assert music("calm piano melody", audio_prompt=(clip, 16000), duration=1.0, seed=0, sampler="ar").errors == [None]


def test_audio_music_all_bad_prompts_use_the_shared_wording():
    # before: "every prompt failed: ... 'calm piano melody in C major'.; prompt 1 ..." (a stray '.;'),
    # worded unlike every other pipeline's "no prompt could be used: ..."
    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/audio-music")
    with pytest.raises(InputError) as err:
        pipe(["", "  "], duration=1.0)
    msg = str(err.value)
    assert msg.startswith("no prompt could be used: prompt 0 is empty") and ".;" not in msg and msg.endswith(".")
