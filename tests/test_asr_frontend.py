"""The speech front end: Kaldi fbank parity (kaldi-native-fbank vs the batched torch version), LFR
7/6 as FunASR's apply_lfr, CMVN, save/load, and errors on clips shorter than one frame."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from asr_tiny import synth_clips

from leapgen.errors import InputError
from leapgen.tokenizers.speech_features import SpeechFrontend, apply_lfr, fbank_torch, kaldi_fbank


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    import soundfile as sf

    rows = synth_clips(tmp_path_factory.mktemp("clips") / "u", 3, seed=1)
    return [sf.read(r["audio"], dtype="float32")[0] for r in rows]


def test_fbank_parity_knf_vs_torch_batched(clips):
    g = np.random.default_rng(0)
    waves = clips + [(g.standard_normal(5000) * 0.1).astype(np.float32)]
    n = max(len(w) for w in waves)
    batch = torch.zeros(len(waves), n)
    for i, w in enumerate(waves):
        batch[i, : len(w)] = torch.from_numpy(w)
    feats, frames = fbank_torch(batch, torch.tensor([len(w) for w in waves]))
    for i, w in enumerate(waves):
        ref = kaldi_fbank(w)
        assert int(frames[i]) == ref.shape[0]
        got = feats[i, : ref.shape[0]].numpy()
        assert np.abs(got - ref).max() < 1e-2, np.abs(got - ref).max()
        assert np.abs(got - ref).mean() < 1e-4
        assert feats[i, ref.shape[0] :].abs().max() == 0 if feats.shape[1] > ref.shape[0] else True
    assert kaldi_fbank(waves[0]).shape[1] == 80


def test_frontend_features_torch_default_match_kaldi(clips):
    """The pipeline's front end runs the float32 torch fbank by default; its LFR features match
    those of kaldi-native-fbank (the ones the shipped models were trained on), and dither > 0
    or ``fbank="kaldi"`` selects kaldi-native-fbank; an unknown backend is refused."""
    from leapgen.tokenizers.speech_features import FrontendConfig

    fast, ref = SpeechFrontend(), SpeechFrontend(FrontendConfig(fbank="kaldi"))
    assert fast.config.fbank == "torch"
    for w in clips:
        a, b = fast.features(w), ref.features(w)
        assert a.dtype == torch.float32 and a.shape == b.shape == (int(np.ceil(kaldi_fbank(w).shape[0] / 6)), 560)
        assert (a - b).abs().max() < 1e-2 and (a - b).abs().mean() < 1e-4
    with pytest.raises(InputError, match="fbank must be"):
        SpeechFrontend(FrontendConfig(fbank="librosa")).features(clips[0])


def test_lfr_matches_funasr_rule():
    x = torch.arange(20 * 2, dtype=torch.float32).view(20, 2)  # 20 frames of dim 2
    y = apply_lfr(x, 7, 6)
    assert y.shape == (4, 14)  # ceil(20 / 6)
    # frame 0 = 3 copies of frame 0 (left pad) then frames 0..3
    assert torch.equal(y[0].view(7, 2), torch.cat([x[:1].expand(3, 2), x[:4]]))
    assert torch.equal(y[1].view(7, 2), x[3:10])
    # the last window runs past the end: padded with the last frame
    assert torch.equal(y[3].view(7, 2), torch.cat([x[15:20], x[19:20].expand(2, 2)]))
    assert isinstance(apply_lfr(x.numpy()), np.ndarray)


def test_frontend_cmvn_and_round_trip(tmp_path, clips):
    fe = SpeechFrontend()
    raw = [fe.features(w) for w in clips]
    assert raw[0].shape[1] == 560
    fe.fit_cmvn(raw)
    feats, lengths = fe(clips)
    allf = torch.cat([feats[i, : int(lengths[i])] for i in range(len(clips))])
    assert allf.mean(0).abs().max() < 1e-3 and (allf.std(0) - 1).abs().max() < 1e-2
    fe.save_pretrained(tmp_path / "frontend")
    again = SpeechFrontend.from_pretrained(tmp_path / "frontend")
    f2, _ = again(clips)
    assert torch.allclose(feats, f2)
    assert again.config.frame_seconds == pytest.approx(0.06)


def test_clip_shorter_than_one_frame_is_refused():
    with pytest.raises(InputError, match="one 25 ms frame"):
        kaldi_fbank(np.zeros(399, np.float32))
    with pytest.raises(InputError, match="400"):
        fbank_torch(torch.zeros(1, 100))


def test_corpus_plan_holds_out_the_same_sentences_and_gaps_a_share_of_training():
    """``speech-en``'s plan: a larger vocabulary keeps the 1,000-word corpus's held-out sentences
    (so test splits stay comparable and tts-en's training text never overlaps them), never trains
    on them, and ``gapped`` synthesises that share of the training utterances word by word with
    50-300 ms silences (no sox effects); ``gapped=0`` is the plan of earlier releases."""
    from leapgen.data.speech import plan

    base, _ = plan(0, 0.3, 1000, 300, 20, 10, 0.5)
    assert base == plan(0, 0.3, 1000, 300, 20, 10, 0.5, gapped=0.0)[0]
    assert not any("gaps" in j for j in base["train"])
    big, vocab = plan(0, 0.3, 2000, 300, 20, 10, 0.5, gapped=0.3)
    assert len(vocab) == 2000
    held = [j["text"] for j in base["test_seen"]]
    assert [j["text"] for j in big["test_seen"]] == held
    assert not {j["text"] for j in big["train"]} & set(held)
    gapped = [j for j in big["train"] if "gaps" in j]
    assert 0.15 < len(gapped) / len(big["train"]) < 0.45
    for j in gapped:
        assert j["id"].startswith("tg") and j["fx"] == {} and len(j["gaps"]) == len(j["text"].split()) + 1
        assert all(0.05 <= g <= 0.3 for g in j["gaps"])
