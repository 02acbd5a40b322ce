"""Zero-shot TTS (MaskGCT): schedules, guidance, seeded reproducibility, the pipeline on a shipped
clip with every sampler, bad inputs, and the training loops (tiny random models, seconds)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from asr_tiny import tiny_net
from harness_tts import PROMPT, SEM, TARGET, s2a_inputs, t2s_inputs, tiny_tts_nets

from leapgen.errors import ConfigError, InputError, ModelMismatchError
from leapgen.models.tts import (
    CODEC_PER_SEMANTIC,
    S2AConfig,
    S2ANet,
    SemanticCodebook,
    SemanticConfig,
    SpeakerConfig,
    SpeakerNet,
    T2SConfig,
    T2SNet,
    ar_t2s_config,
)
from leapgen.models.tts_lm import S2AMaskedLM, T2SMaskedLM
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.samplers.masked import MaskedInputs
from leapgen.samplers.masked.maskgct_common import EmbeddingCFG
from leapgen.tokenizers.phones import PhoneTokenizer, clean_text, phonemize

CLIP = Path(__file__).resolve().parents[1] / "assets" / "asr-en" / "examples" / "clip.wav"
CLIP_TEXT = (CLIP.parent / "clip.txt").read_text().strip()


def _run(name: str, model, inputs, seed: int = 0, temperature: float = 0.9, **params):
    tokens, cond = inputs
    g = torch.Generator().manual_seed(seed)
    return get_sampler(name, **params).generate({"model": model}, MaskedInputs(tokens, cond=cond),
                                                DecodeConfig(max_new_tokens=1, temperature=temperature), g)


# ------------------------------------------------------------------------------------------ schedules
def test_t2s_schedule_reveals_everything_and_keeps_the_prompt():
    t2s, _ = tiny_tts_nets()
    x, cond = t2s_inputs(2)
    res = _run("maskgct_t2s", T2SMaskedLM(t2s), (x, cond), steps=5)
    assert torch.equal(res.tokens[:, :PROMPT], x[:, :PROMPT])
    assert bool(((res.tokens >= 0) & (res.tokens < SEM)).all())
    per_step = [sum(s) for s in res.stats.accepted_per_step]
    assert res.stats.extra["steps"] == 5 and sum(per_step) == 2 * TARGET and min(per_step) >= 2  # >= 1 per row and step
    # sin schedule: after step i, floor(sin(pi/2 * (1 - (i+1)/5)) * 8) stay masked (clamped to >= 1 before the last)
    left, want = TARGET, []
    for i in range(5):
        keep = int(np.floor(np.sin(np.pi / 2 * (1 - (i + 1) / 5)) * TARGET))
        keep = min(max(keep, 1 if i < 4 else 0), left - 1)
        want.append(left - keep)
        left = keep
    assert [s // 2 for s in per_step] == want


def test_s2a_stages_coarse_to_fine_with_per_layer_steps():
    _, s2a = tiny_tts_nets()
    x, cond = s2a_inputs(2)
    res = _run("maskgct_s2a", S2AMaskedLM(s2a), (x, cond), steps_per_stage=(4, 2, 1))
    assert res.stats.extra["stages"] == 3 and res.stats.extra["steps"] == 4 + 2 + 1
    assert torch.equal(res.tokens[:, :, :6], x[:, :, :6])
    assert bool((res.tokens != S2AMaskedLM(s2a).mask_id).all())
    # MaskGCT's [25, 10, 1, 1, ...] rule: a list longer than the layers is cut, a shorter one extended with 1
    assert _run("maskgct_s2a", S2AMaskedLM(s2a), (x, cond), steps_per_stage=(3,)).stats.extra["steps"] == 3 + 1 + 1


def test_embedding_cfg_costs_one_forward_and_rescales():
    t2s, _ = tiny_tts_nets()
    x, cond = t2s_inputs(1)
    m = T2SMaskedLM(t2s)
    _run("maskgct_t2s", m, (x, cond), steps=4, cfg_scale=0.0)
    assert m.forwards == 4
    m2 = T2SMaskedLM(t2s)
    apart = _run("maskgct_t2s", m2, (x, cond), steps=4, cfg_batch=False)
    assert m2.forwards == 8  # the conditional pass, then the unconditional one
    m3 = T2SMaskedLM(t2s)
    one = _run("maskgct_t2s", m3, (x, cond), steps=4)  # "auto": one row on a CPU shares one forward
    assert m3.forwards == 4 and one.stats.extra["guidance_batched"] == 4
    assert torch.equal(one.tokens, apart.tokens)
    # rescale 1: the guided hidden state has the conditional one's per-position std
    h_c, h_u = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    g = h_c + 2.5 * (h_c - h_u)
    g = g * h_c.std(-1, keepdim=True) / g.std(-1, keepdim=True)
    assert torch.allclose(g.std(-1), h_c.std(-1), atol=1e-5)
    with pytest.raises(ConfigError):
        EmbeddingCFG(rescale_cfg=1.5)


@pytest.mark.parametrize("stage", ["t2s", "s2a"])
def test_embedding_cfg_in_a_doubled_batch_equals_two_passes(stage):
    t2s, s2a = tiny_tts_nets()
    name, view, inputs = ("maskgct_t2s", T2SMaskedLM(t2s), t2s_inputs(3)) if stage == "t2s" else ("maskgct_s2a", S2AMaskedLM(s2a), s2a_inputs(3))
    params = {"steps": 4} if stage == "t2s" else {"steps_per_stage": (3, 2, 1)}
    rows = []
    original = view._forward

    def counting(tokens, cond, st, am):
        rows.append((tokens.shape[0], tuple(torch.as_tensor(cond.get("uncond", False)).reshape(-1).tolist())))
        return original(tokens, cond, st, am)

    view._forward = counting
    apart = _run(name, view, inputs, seed=3, cfg_batch=False, **params)
    rows_apart, rows[:] = list(rows), []
    both = _run(name, view, inputs, seed=3, cfg_batch=True, **params)
    assert torch.equal(both.tokens, apart.tokens)
    assert both.stats.target_forwards * 2 == apart.stats.target_forwards == 2 * both.stats.extra["guidance_batched"]
    assert rows_apart[0] == (3, (False,)) and rows_apart[1] == (3, (True,))
    assert rows[0] == (6, (False,) * 3 + (True,) * 3)  # conditional rows, then the unconditional ones
    bad = dict(inputs[1], uncond=torch.ones(2, dtype=torch.bool))
    with pytest.raises(InputError, match="uncond"):
        view(inputs[0], bad)


def test_last_step_is_argmax_and_seeds_reproduce():
    t2s, _ = tiny_tts_nets()
    x, cond = t2s_inputs(3)
    a = _run("maskgct_t2s", T2SMaskedLM(t2s), (x, cond), seed=1, steps=6)
    b = _run("maskgct_t2s", T2SMaskedLM(t2s), (x, cond), seed=1, steps=6)
    c = _run("maskgct_t2s", T2SMaskedLM(t2s), (x, cond), seed=2, steps=6)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    # one step: everything is decided by the last-step argmax of the guided logits, whatever the seed
    one = [_run("maskgct_t2s", T2SMaskedLM(t2s), (x, cond), seed=s, steps=1, cfg_scale=0.0).tokens for s in (0, 1)]
    assert torch.equal(one[0], one[1])
    logits = T2SMaskedLM(t2s)(x, cond, attention_mask=None)
    assert torch.equal(one[0][:, PROMPT:], logits[:, PROMPT:].argmax(-1))


def test_samplers_refuse_wrong_models_and_params():
    t2s, s2a = tiny_tts_nets()
    x, cond = t2s_inputs(1)
    with pytest.raises(ModelMismatchError):
        get_sampler("maskgct_s2a").generate({"model": T2SMaskedLM(t2s)}, MaskedInputs(x, cond=cond), DecodeConfig(max_new_tokens=1))
    with pytest.raises(ConfigError):
        get_sampler("maskgct_t2s", filter_thres=2.0)
    with pytest.raises(InputError):
        T2SMaskedLM(t2s)(x, None)


# ------------------------------------------------------------------------------------------ G2P
def test_phonemize_and_bad_text():
    ipa = phonemize(["Hello there.", "the value"])
    assert len(ipa) == 2 and all(ipa)
    tok = PhoneTokenizer.fit(ipa)
    assert tok.encode(ipa[0])[0] > 1 and PhoneTokenizer.from_config(tok.config_dict()).itos == tok.itos
    for bad in ("", "   ", "?!", "1.2.3", "hello 世界"):  # digits are read ("123 456"), unreadable ones refused
        with pytest.raises(InputError):
            clean_text(bad)
    assert clean_text("123 456") == "one hundred twenty three four hundred fifty six"


# ------------------------------------------------------------------------------------------ pipeline
@functools.cache
def tiny_pipeline():
    from transformers import LlamaForCausalLM

    from leapgen.pipelines import TTSPipeline
    from leapgen.tokenizers.asr_vocab import ASRVocab
    from leapgen.tokenizers.audio_codec import AudioCodec
    from leapgen.tokenizers.speech_features import SpeechFrontend

    torch.manual_seed(0)
    phones = PhoneTokenizer.fit(phonemize([CLIP_TEXT, "hello there how are you the value of it"]))
    sem = SemanticCodebook(SemanticConfig(size=SEM, dim=32))
    sem.centroids.copy_(torch.nn.functional.normalize(torch.randn(SEM, 32), dim=-1))
    codec = AudioCodec(num_filters=4, hidden_size=16, num_codebooks=2, codebook_size=16).eval()
    t2s = T2SNet(T2SConfig(phone_vocab=len(phones), semantic_size=SEM, d_model=32, heads=2, ff=64, layers=1)).eval()
    s2a = S2ANet(S2AConfig(semantic_size=SEM, num_codebooks=2, codebook_size=16, d_model=32, heads=2, ff=64, layers=1)).eval()
    ar = LlamaForCausalLM(ar_t2s_config(len(phones), SEM, d_model=32, layers=1, heads=2, ff=64)).eval()
    draft = LlamaForCausalLM(ar_t2s_config(len(phones), SEM, d_model=16, layers=1, heads=2, ff=32)).eval()
    words = ["hello", "there"] + [f"w{i}" for i in range(21)]
    return TTSPipeline(t2s=t2s, s2a=s2a, ar_t2s=ar, ar_draft=draft, codec=codec, semantic=sem,
                       speaker=SpeakerNet(SpeakerConfig(channels=16, embed_dim=8, num_speakers=3)).eval(),
                       asr_model=tiny_net(), frontend=SpeechFrontend(), asr_vocab=ASRVocab(words), phones=phones)


@pytest.mark.parametrize("sampler", ["maskgct", "ar", "speculative"])
def test_every_sampler_runs_on_a_shipped_clip(sampler):
    pipe = tiny_pipeline()
    params = {"steps": 3, "s2a_params": {"steps_per_stage": (2, 1)}} if sampler == "maskgct" else {"s2a_params": {"steps_per_stage": (2, 1)}}
    out = pipe(["Hello there.", "the value of it"], prompt_audio=str(CLIP), prompt_text=CLIP_TEXT, sampler=sampler, seed=0, **params)
    assert out.errors == [None, None] and out.sample_rate == 16000
    assert all(a is not None and a.dtype == np.float32 and a.size > 0 for a in out.audios)
    again = pipe(["Hello there.", "the value of it"], prompt_audio=str(CLIP), prompt_text=CLIP_TEXT, sampler=sampler, seed=0, **params)
    assert all(np.array_equal(a, b) for a, b in zip(out.audios, again.audios))
    assert out.stats.extra["s2a_forwards"] > 0 and out.stats.target_forwards > 0


def test_pipeline_bad_inputs_fail_alone():
    import soundfile as sf

    pipe = tiny_pipeline()
    wave = sf.read(str(CLIP), dtype="float32")[0]
    out = pipe(["", "?! ...", "hello there", "hello there", "1.2.3"],
               prompt_audio=[str(CLIP), str(CLIP), wave[:8000], str(CLIP), str(CLIP)],
               prompt_text=CLIP_TEXT, sampling_rate=16000, steps=2, s2a_params={"steps_per_stage": (1, 1)})
    assert [e is not None for e in out.errors] == [True, True, True, False, True] and out.audios[3] is not None
    assert "empty" in out.errors[0] and "pronounceable" in out.errors[1] and "speaking rate" in out.errors[2]
    assert "cannot read '1.2.3' as a number" in out.errors[4]  # digits are read ("123"); these are not
    bad = pipe("hello there", prompt_audio=str(CLIP), prompt_text="a", steps=2)
    assert "phones" in bad.errors[0]
    missing = pipe("hello there", prompt_audio="/no/such.wav", prompt_text=CLIP_TEXT)
    assert "does not exist" in missing.errors[0]
    with pytest.raises(InputError):
        pipe("hello there")
    with pytest.raises(ModelMismatchError):
        pipe("hello there", prompt_audio=str(CLIP), sampler="maskgit")
    with pytest.raises(InputError):
        pipe("hello there", prompt_audio=str(CLIP), sampler="maskgct_s2a")


def test_prompt_text_and_silent_prompt_errors_name_the_prompt(caplog, monkeypatch):
    """An empty prompt_text is named as such (not as empty text to speak); a silent prompt clip with
    is named as the prompt's; silent generated speech is logged
    per item and listed in stats.extra["silent"]."""
    pipe = tiny_pipeline()
    out = pipe(["hello there", "hello there"], prompt_audio=str(CLIP), prompt_text=["", CLIP_TEXT], steps=2,
               s2a_params={"steps_per_stage": (1, 1)})
    assert out.errors[0] is not None and "prompt_text" in out.errors[0] and out.errors[1] is None
    silent = pipe("hello there", prompt_audio=np.zeros(32000, np.float32), sampling_rate=16000, steps=2)
    assert silent.errors[0].startswith("prompt_audio:") and "silent" in silent.errors[0]
    monkeypatch.setattr(pipe.codec, "decode", lambda codes: torch.zeros(codes.shape[0], 960 * 4))  # only silence
    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.tts"):
        quiet = pipe(["hello there", ""], prompt_audio=str(CLIP), prompt_text=CLIP_TEXT, steps=2,
                     s2a_params={"steps_per_stage": (1, 1)})
    assert quiet.stats.extra["silent"] == [0] and "item 0: the generated speech is silent" in caplog.text


def test_speak_semantic_runs_the_s2a_alone_per_item():
    import soundfile as sf

    pipe = tiny_pipeline()
    wave = sf.read(str(CLIP), dtype="float32")[0]
    sem = pipe.semantic_of(wave)[:20]
    kw = {"s2a_params": {"steps_per_stage": (2, 1)}, "seed": 0}
    out = pipe.speak_semantic([sem, [SEM + 5], sem[:7]], str(CLIP), **kw)
    assert [e is not None for e in out.errors] == [False, True, False]
    assert "semantic tokens" in out.errors[1] and out.audios[1] is None
    for i, n in ((0, 20), (2, 7)):
        assert out.codes[i].shape == (2, CODEC_PER_SEMANTIC * n)  # [K, frames], the prompt excluded
        assert out.audios[i].dtype == np.float32 and out.audios[i].size == out.codes[i].shape[1] * pipe.codec.hop_length
    again = pipe.speak_semantic([sem, [SEM + 5], sem[:7]], str(CLIP), **kw)
    assert torch.equal(again.codes[0], out.codes[0]) and torch.equal(again.codes[2], out.codes[2])  # seeded
    missing = pipe.speak_semantic(sem, "/no/such.wav")
    assert "does not exist" in missing.errors[0]
    with pytest.raises(InputError):
        pipe.speak_semantic([], str(CLIP))


# ------------------------------------------------------------------------------------------ training loops
def test_training_loops_run():
    from leapgen.train.tts_stages import train_s2a, train_speaker, train_t2s

    g = np.random.default_rng(0)
    data = [{"phones": list(g.integers(2, 12, 10)), "semantic": list(g.integers(0, SEM, 12)),
             "codes": g.integers(0, 16, (3, 36))} for _ in range(4)]
    t2s, s2a = T2SNet(T2SConfig(phone_vocab=12, semantic_size=SEM, d_model=16, heads=2, ff=32, layers=1)), \
        S2ANet(S2AConfig(semantic_size=SEM, num_codebooks=3, codebook_size=16, d_model=16, heads=2, ff=32, layers=1))
    assert train_t2s(t2s, data, 1.0, batch_size=2, max_steps=2)["steps"] == 2
    assert train_s2a(s2a, data, 1.0, batch_size=2, max_steps=2, crop_frames=30)["steps"] == 2
    spk = SpeakerNet(SpeakerConfig(channels=8, embed_dim=4, num_speakers=2))
    assert train_speaker(spk, [torch.randn(50, 80) for _ in range(4)], [0, 1, 0, 1], 1.0, batch_size=2, crop=20, max_steps=2)["steps"] == 2
    stats = SemanticCodebook(SemanticConfig(size=4, dim=3)).fit(torch.randn(40, 3), iters=3)
    assert stats["size"] == 4 and 1 <= stats["used"] <= 4


# ------------------------------------------------------------------------------------------ bench: stage ablation
def test_stage_ablation_runs_and_the_semantic_probe_is_exact_for_a_lossless_codebook():
    import soundfile as sf

    from leapgen.bench.tts_stages import quantised_encoder, stage_ablation
    from leapgen.pipelines.asr import ASRPipeline

    pipe = tiny_pipeline()
    wave = sf.read(str(CLIP), dtype="float32")[0]
    items = [{"text": CLIP_TEXT, "prompt": str(CLIP), "prompt_text": CLIP_TEXT}]
    judge = ASRPipeline(model=pipe.asr_model, frontend=pipe.frontend, vocab=pipe.asr_vocab)
    rec = stage_ablation(pipe, judge, items, [wave], seed=0)
    assert set(rec) == {"codec", "semantic_probe", "semantic_probe_unquantised", "s2a_from_real_semantic", "s2a_real_layer0"}
    assert all(isinstance(v, float) and v >= 0 for v in rec.values())
    assert "encode" not in vars(pipe.asr_model)  # the probe puts the encoder back
    # a codebook holding every encoder state of the clip loses nothing; a 1-centroid one loses everything
    x, lengths = pipe.frontend([wave])
    with torch.no_grad():
        states = pipe.asr_model.encode(x, lengths)[0][0]
        lossless = SemanticCodebook(SemanticConfig(size=states.shape[0], dim=states.shape[1]))
        lossless.centroids.copy_(SemanticCodebook.normalise(states))
        one = SemanticCodebook(SemanticConfig(size=1, dim=states.shape[1]))
        one.centroids.copy_(SemanticCodebook.normalise(states[:1]))
        with quantised_encoder(pipe.asr_model, lossless):
            assert torch.allclose(pipe.asr_model.encode(x, lengths)[0][0], states, atol=1e-4)
        with quantised_encoder(pipe.asr_model, one):
            q = pipe.asr_model.encode(x, lengths)[0][0]
        assert torch.allclose(q / q.norm(dim=-1, keepdim=True), one.centroids.expand_as(q), atol=1e-5)
        assert torch.allclose(q.norm(dim=-1), states.norm(dim=-1), atol=1e-4)
