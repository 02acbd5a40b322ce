"""S2ST (DASpeech-style) tests: corpus grammar, durations, tiny-model losses, acoustic decoder,
Griffin-Lim, the AR view on the encoder-decoder contract, the recipe on a tiny corpus, and the
shipped pipeline (every sampler on a shipped clip, bad input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from asr_tiny import tiny_inputs
from s2st_tiny import tiny_net

from leapgen.data import s2st as corpus
from leapgen.errors import ConfigError
from leapgen.models.s2st_lm import DAGLM, S2STDecoderLM
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.tokenizers.mel import MelSpectrogram
from leapgen.train.s2st import fit_durations, utterance_durations

ASSET = Path(__file__).resolve().parents[1] / "assets" / "s2st-en-de"


def test_ipa_symbols():
    assert corpus.ipa_symbols("dɛɾ rˈoːtə bˈal") == ["d", "ɛ", "ɾ", "|", "r", "oː", "t", "ə", "|", "b", "a", "l"]


def test_grammar_agreement_and_held_out_splits():
    import random

    rng = random.Random(0)
    for t in corpus.TRAIN_TEMPLATES + corpus.HELDOUT_TEMPLATES:
        en, de = corpus._fill(t, rng)
        assert en and de and en != de
    jobs = corpus.plan(0, 300, 20)
    train_de = {j["de"] for j in jobs["train"]}
    assert not train_de & {j["de"] for j in jobs["test_seen"]}
    assert {j["template"] for j in jobs["test_unseen"]} <= set(corpus.HELDOUT_TEMPLATES)
    assert {j["template"] for j in jobs["train"]} <= set(corpus.TRAIN_TEMPLATES)
    seen_voices = {j["voice"] for j in jobs["train"]}
    assert not seen_voices & {j["voice"] for j in jobs["test_unseen"]}
    assert corpus.plan(0, 300, 20) == jobs
    with pytest.raises(ConfigError):
        corpus._fill("nope", rng)


def test_durations_sum_to_the_mel_length():
    targets = [[3, 4, 5], [3, 3], [5, 4]]
    means = fit_durations(targets, [12, 6, 9], 6)
    for t, frames in zip(targets, [12, 6, 9]):
        d = utterance_durations(t, frames, means)
        assert sum(d) == frames and len(d) == len(t)


def test_tiny_model_losses_backward():
    net = tiny_net(0).train()
    feats = torch.randn(2, 20, 560)
    lengths = torch.tensor([20, 14])
    y = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    yl = torch.tensor([4, 2])
    mel = torch.randn(2, 30, 80)
    dur = torch.tensor([[5, 5, 10, 10], [8, 12, 0, 0]])
    out = net.losses(feats, lengths, y, yl, mel=mel, mel_lengths=torch.tensor([30, 20]), durations=dur,
                     glance_ratio=0.5, generator=torch.Generator().manual_seed(0))
    assert all(torch.isfinite(v) for v in out.values())
    assert float(out["dag_valid"]) == 1.0
    out["loss"].backward()
    assert net.links.q.weight.grad is not None and net.tts.out.weight.grad is not None


def test_acoustic_decoder_and_griffin_lim():
    net = tiny_net(1)
    tok = torch.tensor([[3, 4, 5], [6, 0, 0]])
    mel, frames, dur = net.tts.generate(tok, None, tok != 0)
    assert mel.shape[0] == 2 and mel.shape[2] == 80 and (dur[0] >= 1).all() and int(dur[1, 1:].sum()) == 0
    assert frames.tolist() == dur.sum(-1).tolist()
    m = MelSpectrogram()
    wave = torch.sin(torch.arange(8000) * 0.05)
    spec = m(wave)
    assert spec.shape == (8000 // 256 + 1, 80)
    back = m.griffin_lim(spec, iters=4)
    assert back.shape[0] == (spec.shape[0] - 1) * 256 and float(back.abs().max()) <= 0.951
    assert m.griffin_lim(spec[:1], iters=2).numel() > 0  # shorter than one window: padded


def test_ar_baseline_runs_with_the_ar_sampler():
    net = tiny_net(2)
    view = S2STDecoderLM(net)
    res = get_sampler("ar").generate({"model": view}, [[1]] * 2, DecodeConfig(max_new_tokens=6, eos_token_id=1),
                                     cond=tiny_inputs(2))
    assert len(res.sequences) == 2 and all(len(s) <= 6 for s in res.sequences)
    dag = DAGLM(net)
    for name in ("dag_greedy", "dag_lookahead", "dag_viterbi"):
        r = get_sampler(name).generate({"model": dag}, [[1]] * 2, DecodeConfig(max_new_tokens=30), cond=tiny_inputs(2))
        assert r.stats.target_forwards == 1


def test_corpus_time_budget_cuts_only_the_training_split(tmp_path):
    """``max_minutes`` stops the training split; the test splits are always complete."""
    summary = corpus.build(tmp_path / "c", pairs=50, test_pairs=2, max_minutes=0.0)
    assert summary["test_seen"]["pairs"] == 2 and summary["test_unseen"]["pairs"] == 2
    assert summary["train"]["pairs"] == 0


def test_recipe_on_a_tiny_corpus(tmp_path):
    from leapgen.pipelines import Pipeline
    from leapgen.train import s2st as recipe

    corpus.build(tmp_path / "c", pairs=6, test_pairs=2)
    m = recipe.main(out_dir=str(tmp_path / "asset"), corpus=str(tmp_path / "c"), max_steps=1,
                    init_from=str(ASSET.parent / "asr-en"), batch_size=4, threads=1,
                    log_every=1)
    assert m["steps"] == 1 and (tmp_path / "asset" / "examples" / "clip0.wav").exists()
    pipe = Pipeline.from_pretrained(tmp_path / "asset")
    out = pipe(str(tmp_path / "asset" / "examples" / "clip0.wav"), sampler="dag_lookahead", max_new_tokens=8)
    assert out.errors == [None] and out.sample_rate == 16000


@pytest.fixture(scope="module")
def shipped():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained(ASSET)


@pytest.mark.parametrize("sampler", ["dag_lookahead", "dag_greedy", "dag_viterbi", "ar"])
def test_every_sampler_runs_on_a_shipped_clip(shipped, sampler):
    out = shipped(str(ASSET / "examples" / "clip0.wav"), sampler=sampler, gl_iters=4)
    assert out.errors == [None] and out.texts[0] and out.audios[0].size > 0
    assert out.stats.target_forwards >= 1 and out.stats.extra["latency"] > 0
    if sampler.startswith("dag"):
        assert out.stats.target_forwards == 1


def test_bad_input_fails_alone(shipped):
    clip = str(ASSET / "examples" / "clip1.wav")
    out = shipped([clip, np.zeros(16000, np.float32), np.ones(100, np.float32) * 0.1, "/no/such.wav", clip],
                  sampling_rate=16000, gl_iters=2)
    assert out.errors[0] is None and out.errors[4] is None and out.texts[0] == out.texts[4]
    assert "silent" in out.errors[1] and "short" in out.errors[2] and "does not exist" in out.errors[3]
    assert out.audios[1] is None and out.texts[3] is None
    from leapgen.errors import InputError

    with pytest.raises(InputError):
        shipped([])
    bad_rate = shipped(np.random.default_rng(0).standard_normal(8000).astype(np.float32), sampling_rate="16k")
    assert "sampling_rate" in bad_rate.errors[0]


@pytest.mark.parametrize("kwargs", [dict(speed=1e-3), dict(speed=float("inf")), dict(speed=True), dict(max_new_tokens=0),
                                    dict(gl_iters=-1)])
def test_bad_call_arguments_are_refused(shipped, kwargs):
    """speed=1e-3 used to ask the acoustic decoder for ~40 GB of frames (a raw RuntimeError, or a
    machine that swaps), speed=inf / gl_iters=-1 / max_new_tokens=0 were silently accepted."""
    from leapgen.errors import InputError

    with pytest.raises(InputError, match=next(iter(kwargs))):
        shipped(str(ASSET / "examples" / "clip0.wav"), gl_iters=kwargs.pop("gl_iters", 2), **kwargs)


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(sampler="gsd")])
def test_a_bad_call_raises_instead_of_failing_every_item(shipped, kwargs):
    """An error of the call itself used to come back as the same per-item error on every clip."""
    from leapgen.errors import ConfigError

    clip = str(ASSET / "examples" / "clip0.wav")
    with pytest.raises(ConfigError):
        shipped([clip, clip], **kwargs)


def test_vocode_false_gives_no_audio_and_keeps_the_mels(shipped):
    """vocode=False used to return audios=[array of length 0], which reads as a silent translation."""
    clip = str(ASSET / "examples" / "clip0.wav")
    out = shipped([clip, "/no/such.wav"], vocode=False)
    assert out.errors[0] is None and out.texts[0] and out.errors[1]
    assert out.audios == [None, None] and out.mels[0].shape[0] > 0 and out.stats.extra["vocoder_time"] == 0.0
    spoken = shipped(clip, gl_iters=2)
    assert spoken.audios[0].size > 0 and torch.equal(spoken.mels[0], out.mels[0])
