"""ASRPipeline and ``leapgen transcribe``: inputs of every kind, bad items failing alone, long audio
split on silences, save / load; and on the shipped asset: every sampler decodes the shipped clip,
``speculative`` equals ``ar``, word timestamps are ordered and inside the clip."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from asr_tiny import synth_clips, tiny_net

from leapgen import Pipeline
from leapgen.cli import main as cli_main
from leapgen.errors import ModelMismatchError
from leapgen.pipelines import ASRPipeline
from leapgen.samplers import list_samplers
from leapgen.tokenizers.asr_vocab import ASRVocab
from leapgen.tokenizers.speech_features import SpeechFrontend

ASSET = Path(__file__).resolve().parents[1] / "assets" / "asr-en"
CLIP = ASSET / "examples" / "clip.wav"
ASR_SAMPLERS = ["paraformer", "ctc_greedy", "ctc_prefix_beam", "ar", "ar_beam", "gad", "speculative", "specdec"]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return synth_clips(tmp_path_factory.mktemp("asr") / "u", 2, seed=3)


@pytest.fixture(scope="module")
def tiny_pipe():
    torch.set_num_threads(1)
    vocab = ASRVocab([f"w{i}" for i in range(21)])
    return ASRPipeline(model=tiny_net(0), frontend=SpeechFrontend(), vocab=vocab)


def test_bad_items_fail_alone(tiny_pipe, clips, tmp_path):
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF0000WAVEnot really audio")
    good = clips[0]["audio"]
    items = [good, str(tmp_path / "missing.wav"), str(corrupt), np.zeros(0, np.float32), np.zeros(16000, np.float32),
             np.ones(100, np.float32) * 0.1, np.ones((2, 3, 400), np.float32), np.array(["a", "b"]),
             np.ones(1000, np.complex64), np.full(1000, np.nan, np.float32), good]
    out = tiny_pipe(items, sampling_rate=16000)
    assert isinstance(out.texts[0], str) and out.errors[0] is None
    assert out.texts[-1] == out.texts[0]
    expected = ["does not exist", "cannot read", "empty", "silent", "shorter than one 25 ms frame", "shape",
                "unsupported audio dtype", "unsupported audio dtype", "NaN"]
    for i, what in enumerate(expected, start=1):
        assert out.texts[i] is None and what in out.errors[i], (i, out.errors[i])


def test_audio_items_get_the_error_of_what_is_wrong(tiny_pipe, clips, tmp_path):
    """A Hugging Face datasets dict {"array", "sampling_rate"} used to be refused with "arrays need
    their sampling_rate=" although it carries one; an int got the same message, and a directory was
    said not to exist."""
    wave, rate = sf.read(clips[0]["audio"], dtype="float32")
    ref = tiny_pipe(wave, sampling_rate=rate)
    hf = {"array": wave, "sampling_rate": rate}
    out = tiny_pipe([hf, hf])
    assert out.errors == [None, None] and out.texts == ref.texts * 2
    out = tiny_pipe([5, str(tmp_path), {"audio": wave}, {"array": wave, "sampling_rate": 8000}, hf], sampling_rate=rate)
    assert out.errors[4] is None and out.texts[4] == ref.texts[0]
    assert "unsupported audio item of type int" in out.errors[0] and "file path" in out.errors[0]
    assert "sampling_rate" not in out.errors[0].split(";")[0]
    assert "is a directory" in out.errors[1] and "does not exist" not in out.errors[1]
    assert "'array' and 'sampling_rate'" in out.errors[2] and "'audio'" in out.errors[2]
    assert "sampling_rate=8000" in out.errors[3]
    assert "unsupported audio item of type int" in tiny_pipe(5).errors[0]


def test_bad_call_arguments_are_refused(tiny_pipe, clips):
    from leapgen.errors import InputError

    good = clips[0]["audio"]
    for kw in ({"batch_size": 0}, {"batch_size": -1}, {"batch_size": 2.0}, {"max_new_tokens": 0}, {"max_new_tokens": -3}):
        with pytest.raises(InputError, match=next(iter(kw))):
            tiny_pipe(good, **kw)
    assert len(tiny_pipe(good, sampler="ar", max_new_tokens=1).token_ids[0]) <= 1
    assert tiny_pipe(good, batch_size=np.int64(2)).errors == [None]  # numpy integers are integers


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(sampler="gsd"), dict(sampler="lantern")])
def test_a_bad_call_raises_instead_of_failing_every_item(tiny_pipe, clips, kwargs):
    """An error of the call itself used to come back as the same per-item error on every clip."""
    from leapgen.errors import ConfigError

    with pytest.raises(ConfigError):
        tiny_pipe([clips[0]["audio"], clips[1]["audio"]], **kwargs)


def test_rates_channels_and_dtypes(tiny_pipe, clips):
    wave, rate = sf.read(clips[0]["audio"], dtype="float32")
    base = tiny_pipe(wave, sampling_rate=rate).texts[0]
    assert tiny_pipe(np.stack([wave, wave], 1), sampling_rate=rate).texts[0] == base  # [N, 2]
    assert tiny_pipe(np.stack([wave, wave], 0), sampling_rate=rate).texts[0] == base  # [2, N]
    pcm = np.round(wave * 32767).astype(np.int16)
    assert tiny_pipe(pcm, sampling_rate=rate).errors[0] is None
    import soxr

    up = soxr.resample(wave, 16000, 44100)
    out = tiny_pipe(up, sampling_rate=44100)
    assert out.errors[0] is None and abs(out.durations[0] - len(wave) / 16000) < 0.01
    assert "sampling_rate" in tiny_pipe(wave).errors[0]  # an array without its rate fails alone


def test_long_audio_is_split_on_silences(tiny_pipe, clips):
    wave, _ = sf.read(clips[0]["audio"], dtype="float32")
    long = np.concatenate([wave, np.zeros(8000, np.float32)] * 40)  # ~2 minutes
    t0 = time.perf_counter()
    out = tiny_pipe(long, sampling_rate=16000)
    assert out.errors[0] is None and out.stats.extra["segments"] >= long.size / 16000 / 12
    assert time.perf_counter() - t0 < 60


def test_wrong_sampler_contract_and_save_load(tiny_pipe, tmp_path, clips):
    masked = next(s.name for s in list_samplers() if s.contracts == ("masked",))
    with pytest.raises(ModelMismatchError):
        tiny_pipe(clips[0]["audio"], sampler=masked)
    tiny_pipe.ts_snap_s = 0.2
    tiny_pipe.save_pretrained(tmp_path / "p")
    tiny_pipe.ts_snap_s = 0.0
    again = Pipeline.from_pretrained(tmp_path / "p")
    assert isinstance(again, ASRPipeline) and again.ts_snap_s == 0.2
    assert again(clips[0]["audio"]).texts == tiny_pipe(clips[0]["audio"]).texts


def test_snap_to_speech_moves_boundaries_onto_speech_edges_only_nearby():
    """Word boundaries move onto the edges of speech runs (10 ms energy frames): a start in silence
    forward to the onset, a start in speech back to its run's onset, an end in silence back to the
    offset, an end in speech forward to the run's end; never further than the limit, never past the
    other boundary; continuous speech (no silence nearby) and a limit of 0 move nothing."""
    from leapgen.pipelines.asr_timing import snap_to_speech, speech_frames

    rate = 16000
    wave = np.zeros(rate, np.float32)  # speech in [0.20, 0.45) and [0.60, 0.90) s
    g = np.random.default_rng(0)
    for a, b in ((0.20, 0.45), (0.60, 0.90)):
        wave[int(a * rate) : int(b * rate)] = g.uniform(-0.5, 0.5, int(b * rate) - int(a * rate))
    speech = speech_frames(wave, rate)
    assert speech.shape == (100,) and speech[20:45].all() and not speech[45:60].any() and not speech[:20].any()
    spans = snap_to_speech([(0.15, 0.50), (0.63, 0.85)], speech, 0.1)
    assert spans == pytest.approx([(0.20, 0.45), (0.60, 0.90)])
    assert snap_to_speech([(0.15, 0.50)], speech, 0.02) == [(0.15, 0.50)]  # edges beyond the limit
    assert snap_to_speech([(0.15, 0.50)], speech, 0.0) == [(0.15, 0.50)]
    assert snap_to_speech([(0.25, 0.40)], np.ones(100, bool), 0.1) == [(0.25, 0.40)]  # continuous speech
    for s0, e0 in snap_to_speech([(0.44, 0.46), (0.46, 0.59), (0.0, 0.05)], speech, 0.3):
        assert s0 < e0


def test_word_spans_never_overlap():
    """Where a word's end runs past the next word's start, both meet at the middle of the overlap,
    within each word's own span; spans already apart are untouched."""
    from leapgen.pipelines.asr_timing import without_overlap

    assert without_overlap([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == [(0.0, 0.75), (0.75, 2.0), (3.0, 4.0)]
    assert without_overlap([(0.0, 0.4), (0.5, 0.9)]) == [(0.0, 0.4), (0.5, 0.9)]
    spans = without_overlap([(0.0, 2.0), (0.1, 0.3), (0.2, 0.25)])
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        assert s0 <= e0 <= s1
    assert without_overlap([]) == []



@pytest.mark.parametrize("reuse", [True, False])
def test_word_spans_follow_their_definition(tiny_pipe, monkeypatch, reuse):
    """Token k opens at the first frame whose CIF weight for it reaches ``ts_start_threshold`` (its
    fire frame when none does) and closes ``ts_end_offset`` frames after its fire frame; rows keep
    ``token_num`` tokens. Checked against a per-token loop on random alphas, with the decode's CIF
    weights reused and recomputed."""
    from leapgen.models.cif import cif_weights

    g = torch.Generator().manual_seed(0)
    alphas = torch.rand(3, 40, generator=g) * 0.6
    alphas[2] = 0.0  # a row that never fires
    alphas[1, 30:] = 0.0
    token_num = torch.floor(alphas.double().sum(-1)).long()
    fired = {"alphas": alphas, "token_num": token_num}
    if reuse:
        fired["cif_weights"], fired["cif_fires"] = cif_weights(alphas)
    monkeypatch.setattr(type(tiny_pipe.views["paraformer"]), "fired", lambda self, state: fired)
    tiny_pipe.ts_start_threshold, tiny_pipe.ts_end_offset = 0.1, 1.0
    got = tiny_pipe._word_spans(None)
    w, fires = cif_weights(alphas)
    step = tiny_pipe.model.config.frame_seconds
    for r in range(3):
        frames = fires[r].nonzero().flatten().tolist()
        want = []
        for k in range(min(int(token_num[r]), len(frames))):
            above = (w[r, k] >= 0.1).nonzero().flatten()
            start = int(above[0]) if above.numel() else frames[k]
            want.append((start * step, (frames[k] + 1.0) * step))
        assert got[r] == want
    assert len(got[0]) == int(token_num[0]) > 5 and got[2] == []

# ------------------------------------------------------------------------------------------ shipped asset


@pytest.fixture(scope="module")
def shipped():
    assert ASSET.is_dir() and CLIP.is_file(), f"the shipped asset {ASSET} (with examples/clip.wav) is missing"
    torch.set_num_threads(1)
    return Pipeline.from_pretrained("leapgen/asr-en")


def test_every_sampler_decodes_the_shipped_clip(shipped):
    ref = (ASSET / "examples" / "clip.txt").read_text().strip()
    outs = {s: shipped(str(CLIP), sampler=s) for s in ASR_SAMPLERS}
    for s, o in outs.items():
        assert o.errors == [None] and isinstance(o.texts[0], str), s
        assert o.stats.new_tokens >= len(o.token_ids[0]) and o.stats.target_forwards >= 1, s
    assert outs["paraformer"].texts[0] and outs["ar"].texts[0]
    import jiwer

    shipped_wer = json.loads((ASSET / "train_metrics.json").read_text())["finalize"]["example"]["paraformer_wer"]
    assert jiwer.wer(ref, outs["paraformer"].texts[0]) <= shipped_wer + 1e-9  # as when the recipe chose the clip
    assert outs["gad"].token_ids == outs["ar"].token_ids
    assert outs["speculative"].token_ids == outs["ar"].token_ids
    assert shipped(str(CLIP), sampler="gad", draft="ctc").token_ids == outs["ar"].token_ids
    assert outs["gad"].stats.target_forwards <= outs["ar"].stats.target_forwards
    words = outs["paraformer"].timestamps[0]
    assert [w for w, _, _ in words] == outs["paraformer"].texts[0].split()
    dur = outs["paraformer"].durations[0]
    for (_, s0, e0), (_, s1, _) in zip(words, words[1:]):
        assert 0 <= s0 < e0 <= dur + 0.1 and e0 <= s1  # ordered, no overlap


def test_cif_tail_calibration_picks_the_lowest_wer_and_ships_it(shipped):
    from leapgen.train.asr_en import calibrate_tail

    rows = [{"audio": str(CLIP), "text": (ASSET / "examples" / "clip.txt").read_text().strip()}]
    kept = shipped.model.config.tail
    try:
        # a 3.0 tail fires three extra words: it must lose to 0.45 whatever the grid's order
        for grid in ((0.45, 3.0), (3.0, 0.45)):
            res = calibrate_tail(shipped, rows, grid)
            assert res["wer_by_tail"]["3"] > res["wer_by_tail"]["0.45"], res
            assert res["tail"] == shipped.model.config.tail == 0.45
        n = {}
        for t in (0.45, 3.0):
            shipped.model.config.tail = t
            n[t] = len(shipped(str(CLIP)).token_ids[0])
        assert n[3.0] >= n[0.45] + 2  # floor(sum(alpha) + tail) tokens
    finally:
        shipped.model.config.tail = kept
    # the shipped model runs with the tail its recipe calibrated on training utterances
    chosen = json.loads((ASSET / "train_metrics.json").read_text())["finalize"]["cif_tail"]
    saved = json.loads((ASSET / "model" / "config.json").read_text())["tail"]
    assert saved == chosen["tail"] == kept
    assert chosen["wer_by_tail"][f"{saved:g}"] == min(chosen["wer_by_tail"].values())


def test_cli_transcribe_json(shipped, capsys, tmp_path):
    bad = tmp_path / "missing.wav"
    assert cli_main(["transcribe", str(CLIP), str(bad), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first, second = data["results"]
    assert first["text"] and first["words"] and first["error"] is None
    assert second["text"] is None and "does not exist" in second["error"]
    assert cli_main(["transcribe", str(CLIP), "--sampler", "ctc_greedy"]) == 0
    assert str(CLIP) in capsys.readouterr().out
