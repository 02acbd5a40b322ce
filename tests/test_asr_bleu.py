"""The German ASR judge of the S2ST bench: the speech-de corpus plan (no S2ST test sentence, every
test word known), its builder on a tiny size, the asr-de recipe's smoke run, and the ASR-BLEU scoring."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from leapgen.bench import s2st_asr
from leapgen.data import s2st
from leapgen.data import speech_de as corpus
from leapgen.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"utterances": 8, "test_sentences": 4, "timing_utts": 2}


@pytest.fixture(scope="module")
def full_plan():
    return corpus.plan()


def s2st_test_refs() -> set[str]:
    jobs = s2st.plan(**corpus.S2ST_PLAN)
    return {j["de"] for split in ("test_seen", "test_unseen") for j in jobs[split]}


def test_plan_excludes_every_s2st_test_sentence_and_covers_their_words(full_plan):
    jobs, vocab, info = full_plan
    refs = s2st_test_refs()
    assert len(refs) == 400 and info["excluded_s2st_test_sentences"] >= 400
    for split, items in jobs.items():
        assert not {j["text"] for j in items} & refs, split
    train_words = {w for j in jobs["train"] for w in j["text"].split()}
    ref_words = {w for s in refs for w in s.split()}
    assert ref_words <= train_words, ref_words - train_words  # the judge has heard every test word
    assert ref_words <= set(vocab)
    assert not {j["text"] for j in jobs["test_seen"]} & {j["text"] for j in jobs["train"]}
    assert {j["template"] for j in s2st.plan(**corpus.S2ST_PLAN)["test_unseen"]} <= set(corpus.TEMPLATES)


def test_plan_voices_include_the_s2st_target_voice(full_plan):
    jobs, _, _ = full_plan
    voices = [(j["voice"], j["rate"], j["pitch"]) for j in jobs["train"]]
    target = tuple(s2st.TARGET_VOICE[k] for k in ("voice", "rate", "pitch"))
    share = voices.count(target) / len(voices)
    assert 0.3 < share < 0.5 and len(set(v[0] for v in voices)) > 5
    assert all(130 <= r <= 180 and 35 <= p <= 65 for _, r, p in voices)


def test_plan_also_excludes_sentences_read_from_a_built_s2st_corpus(tmp_path):
    extra = "der rote ball ist im garten"
    (tmp_path / "test_seen.jsonl").write_text(json.dumps({"de": extra}, ensure_ascii=False) + "\n")
    excluded, sources = corpus.s2st_test_sentences(tmp_path)
    assert extra in excluded and sources["read_from_corpus"] == 1
    jobs, _, _ = corpus.plan(utterances=3000, s2st_dir=tmp_path)
    assert extra not in {j["text"] for items in jobs.values() for j in items}


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("speech-de")
    summary = corpus.build(out, **TINY)
    return out, summary


def test_builder_writes_the_speech_en_manifest_format(tiny_corpus):
    out, summary = tiny_corpus
    assert summary["train"]["utterances"] == 8 and summary["test_seen"]["utterances"] == 4
    rows = corpus.read_manifest(out, "train")
    assert {"audio", "text", "voice", "rate", "pitch", "fx", "duration"} <= set(rows[0])
    assert Path(rows[0]["audio"]).exists() and rows[0]["duration"] > 0.3
    timing = corpus.read_manifest(out, "timing")
    assert len(timing) == 2 and all(len(r["words"]) == len(r["text"].split()) for r in timing)
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split()
    assert "fünf" in vocab and "weiße" in vocab
    assert json.loads((out / "meta.json").read_text())["target_voice"] == s2st.TARGET_VOICE


def test_bad_builder_options_and_missing_manifests_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="utterances"):
        corpus.build(tmp_path, utterances=0)
    with pytest.raises(ConfigError, match="leapgen data speech-de"):
        corpus.read_manifest(tmp_path, "train")


def test_recipe_smoke_run_gives_a_loadable_pipeline(tiny_corpus, tmp_path):
    from leapgen.pipelines import Pipeline
    from leapgen.train import asr_de

    out, _ = tiny_corpus
    m = asr_de.main(out_dir=str(tmp_path / "asr-de"), corpus=str(out), init_from=str(ROOT / "assets" / "asr-en"),
                    max_steps=2, batch_size=4, eval_utts=4, log_every=1, threads=1)
    assert m["steps"] == 2 and m["recipe"] == "asr-de" and m["dataset"] == "speech-de"
    assert (tmp_path / "asr-de" / "train_metrics.json").exists()
    pipe = Pipeline.from_pretrained(tmp_path / "asr-de")
    assert "fünf" in pipe.vocab.itos
    row = corpus.read_manifest(out, "test_seen")[0]
    assert isinstance(pipe(row["audio"], sampler="paraformer").texts[0], str)
    with pytest.raises(ConfigError, match="no option"):
        asr_de.main(out_dir=str(tmp_path / "x"), no_such_option=1)


def test_asr_bleu_perfect_transcripts_score_100_and_a_mangled_one_less():
    refs = ["der rote ball ist im garten", "ich sehe drei blaue tassen", "wo ist das grüne auto"]
    perfect = s2st_asr.score(list(refs), refs)
    assert perfect["asr_bleu"] == 100.0 and perfect["asr_wer"] == 0.0
    mangled = s2st_asr.score([refs[0], "ich sehe zwei blaue tassen", ""], refs)
    assert mangled["asr_bleu"] < 100.0 and mangled["asr_wer"] > 0.0
    with pytest.raises(ValueError):
        s2st_asr.score(["a"], refs)


class EchoJudge:
    """A stand-in ASR pipeline: returns ``texts`` in order, recording what it was given."""

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.calls = texts, []

    def __call__(self, waves, sampling_rate, sampler, batch_size):
        self.calls.append((len(waves), sampling_rate, sampler))
        return SimpleNamespace(texts=self.texts[: len(waves)])


def test_reference_rows_transcribe_the_real_and_the_vocoded_target(tmp_path):
    import soundfile as sf

    from leapgen.tokenizers.mel import MelSpectrogram

    rows = []
    for k, text in enumerate(["wo ist der hut", "hast du drei autos"]):
        wave = 0.3 * np.sin(np.linspace(0, 400 * (k + 1), 8000)).astype(np.float32)
        sf.write(str(tmp_path / f"{k}.wav"), wave, 16000)
        rows.append({"tgt_audio": str(tmp_path / f"{k}.wav"), "de": text})
    judge = EchoJudge([r["de"] for r in rows] * 2)
    ref = s2st_asr.reference_rows(judge, SimpleNamespace(mel=MelSpectrogram()), rows)
    assert ref["real_target"]["asr_bleu"] == 100.0 and ref["vocoded_target"]["utterances"] == 2
    assert judge.calls == [(2, 16000, "paraformer")] * 2
    # an empty output is transcribed as '' without calling the judge on it
    assert s2st_asr.transcribe(judge, [None, np.zeros(0, np.float32)], 16000) == ["", ""]


def test_a_missing_judge_is_reported_not_skipped(tmp_path):
    from leapgen.bench.s2st import asr_markdown

    judge, why = s2st_asr.load_judge(str(tmp_path / "no-such-asr"))
    assert judge is None and why.startswith("missing") and "leapgen train asr-de" in why
    assert "missing" in "\n".join(asr_markdown({"asr_bleu": why, "asr_reference": {}}))


def test_vocode_keeps_none_and_gives_waves():
    from leapgen.tokenizers.mel import MelSpectrogram

    pipe = SimpleNamespace(mel=MelSpectrogram())
    mel = pipe.mel(torch.from_numpy(0.1 * np.random.default_rng(0).standard_normal(4000).astype(np.float32)))
    waves = s2st_asr.vocode(pipe, [None, mel], iters=2)
    assert waves[0] is None and waves[1].ndim == 1 and len(waves[1]) > 1000


def test_bench_markdown_has_asr_bleu_columns_and_reference_rows():
    from leapgen.bench.s2st import SPLITS, markdown

    q = {"bleu": 40.0, "per": 0.1, "exact": 0.2, "asr_bleu": 55.5, "examples": [["a", "a"]]}
    ref = {"real_target": {"asr_bleu": 100.0, "asr_wer": 0.0}, "vocoded_target": {"asr_bleu": 97.25, "asr_wer": 0.01}}
    sp = {"forwards": 1.0, "decoder_ms": 1.0, "translate_ms": 2.0, "total_ms": 3.0}
    res = {"pipeline": "p", "threads": 1, "machine": "m", "samplers": ["dag_lookahead"], "asr": "leapgen/asr-de",
           "asr_bleu": "sacrebleu ...", "quality": {s: {"dag_lookahead": q} for s in SPLITS},
           "asr_reference": {s: ref for s in SPLITS},
           "speed": {"utterances": 1, "repeats": 1, "mean_audio_s": 2.0, "per_sampler": {"dag_lookahead": sp}}}
    md = markdown(res)
    assert "test_seen ASR-BLEU" in md and "| 55.50 |" in md
    assert "| target speech via Griffin-Lim | 97.25 | 0.010 |" in md


def test_bench_target_line_reads_asr_bleu_when_judged_and_phoneme_bleu_without():
    from leapgen.bench.s2st import SPLITS, markdown

    def res(judged: bool) -> dict:
        def q(bleu: float, asr: float) -> dict:
            return {"bleu": bleu, "per": 0.1, "exact": 0.2, "examples": [], **({"asr_bleu": asr} if judged else {})}
        sp = {"forwards": 1.0, "decoder_ms": 1.0, "translate_ms": 2.0, "total_ms": 3.0, "translate_speedup_vs_ar": 5.0}
        return {"pipeline": "p", "threads": 1, "machine": "m", "samplers": ["dag_lookahead", "ar"],
                "asr": "leapgen/asr-de" if judged else None, "asr_bleu": "..." if judged else "missing",
                "quality": {s: {"dag_lookahead": q(40.0, 50.0), "ar": q(45.0, 49.0)} for s in SPLITS},
                "asr_reference": {},
                "speed": {"utterances": 1, "repeats": 1, "mean_audio_s": 2.0,
                          "per_sampler": {"dag_lookahead": sp, "ar": {**sp, "translate_speedup_vs_ar": 1.0}}}}

    assert "ASR-BLEU within 2 points of `ar` (test_seen): +1.00, met" in markdown(res(True))
    assert "phoneme BLEU (no judge) within 2 points of `ar` (test_seen): -5.00, not met" in markdown(res(False))
