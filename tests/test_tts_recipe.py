"""The tts-en recipe: a seconds-long smoke run end to end, then a continuation of one stage."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from leapgen.errors import ConfigError
from leapgen.train.tts_en import main

TINY = dict(per_speaker=1, codec_minutes=0.01, t2s_minutes=0.01, ar_minutes=0.01, draft_minutes=0.01, s2a_minutes=0.01,
            speaker_minutes=0.01, d_model=32, layers=1, semantic_size=16)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tts")
    metrics = main(out_dir=root / "asset", corpus_dir=root / "corpus", **TINY)
    return root, metrics


def test_smoke_run_writes_a_loadable_asset(first_run):
    from leapgen.pipelines import Pipeline

    root, metrics = first_run
    assert metrics["semantic"]["size"] == 16 and metrics["t2s"]["steps"] >= 1 and metrics["s2a"]["steps"] >= 1
    pipe = Pipeline.from_pretrained(root / "asset")
    assert pipe.t2s.config.d_model == 32 and pipe.semantic.config.size == 16


def test_continuing_one_stage_keeps_the_others(first_run):
    root, first = first_run
    m = main(out_dir=root / "continued", corpus_dir=root / "corpus", continue_from=root / "asset", stages="s2a",
             s2a_layer_probs="1,0,0,0", **TINY)
    assert m["settings"]["continue_from"] == str(root / "asset") and m["settings"]["stages"] == "s2a"
    assert m["s2a_history"] == [first["s2a"]] and m["t2s"] == first["t2s"] and "t2s_history" not in m
    assert all(h["layer"] == 0 for h in m["s2a"]["history"])
    for name, changed in (("t2s", False), ("speaker", False), ("codec", False), ("semantic", False), ("s2a", True)):
        before, after = (load_file(str(d / name / "model.safetensors")) for d in (root / "asset", root / "continued"))
        same = before.keys() == after.keys() and all((before[k] == after[k]).all() for k in before)
        assert same is not changed, name
    assert json.loads((root / "continued" / "train_metrics.json").read_text())["s2a_history"] == [first["s2a"]]
    with pytest.raises(ConfigError, match="unknown stages"):
        main(out_dir=root / "bad", corpus_dir=root / "corpus", continue_from=root / "asset", stages="s2a,vocoder", **TINY)


def test_continuing_the_codec_with_semantic_distillation(first_run):
    root, first = first_run
    m = main(out_dir=root / "codec2", corpus_dir=root / "corpus", continue_from=root / "asset", stages="codec,s2a",
             codec_distill=1.0, **TINY)
    assert m["codec"]["distill_weight"] == 1.0 and m["codec"]["steps"] >= 1
    assert m["codec_history"] == [first["codec"]] and 0.0 <= m["codec"]["layer0_given_semantic_nats"] <= 5.55
    assert all("distill" in h and 0.0 <= h["distill"] <= 2.0 for h in m["codec"]["history"])
    for name, changed in (("t2s", False), ("semantic", False), ("codec", True), ("s2a", True)):
        before, after = (load_file(str(d / name / "model.safetensors")) for d in (root / "asset", root / "codec2"))
        same = before.keys() == after.keys() and all((before[k] == after[k]).all() for k in before)
        assert same is not changed, name
    with pytest.raises(ConfigError, match="add 's2a'"):
        main(out_dir=root / "bad", corpus_dir=root / "corpus", continue_from=root / "asset", stages="codec", **TINY)
    with pytest.raises(ConfigError, match="only with continue_from"):
        main(out_dir=root / "bad", corpus_dir=root / "corpus", stages="codec,s2a", **TINY)
