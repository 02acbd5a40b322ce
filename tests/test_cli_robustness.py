"""The command line on bad and unusual input, in process (``leapgen.cli.main``): sentences of
``generate speech`` (positional and in a batch job), the continuous-token image pipelines under
``generate image``, JSONL lines checked against the pipeline's call, output locations checked
before anything is loaded or generated, strict JSON from every ``--json`` printer, and sampler
lists in ``transcribe`` / ``translate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from leapgen.cli import main
from leapgen.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "assets" / "asr-en" / "examples" / "clip.wav"
CLIP_TEXT = (CLIP.parent / "clip.txt").read_text().strip()
S2ST_CLIP = ROOT / "assets" / "s2st-en-de" / "examples" / "clip0.wav"


def _strict_json(text: str):
    """Parse ``text`` refusing NaN / Infinity (which Python's json accepts, other parsers do not)."""

    def refuse(token: str):
        raise AssertionError(f"non-standard JSON constant {token} in the output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def tiny_tts(monkeypatch):
    """Every ``Pipeline.from_pretrained`` returns the tiny random TTS pipeline of test_tts (seconds)."""
    from test_tts import tiny_pipeline

    from leapgen.pipelines import Pipeline

    pipe = tiny_pipeline()
    monkeypatch.setattr(Pipeline, "from_pretrained", classmethod(lambda cls, name, **kw: pipe))
    return pipe


@pytest.fixture()
def no_loading(monkeypatch):
    """Fail the test if a command loads a pipeline, runs a recipe or a bench (its arguments should
    have been refused first)."""
    import leapgen.bench.asr
    import leapgen.train
    from leapgen.pipelines import Pipeline

    def refuse(*args, **kw):
        raise AssertionError(f"started work ({args[1:]}) although the command line was bad")

    monkeypatch.setattr(Pipeline, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(leapgen.train, "get_recipe", lambda name: refuse)
    monkeypatch.setattr(leapgen.bench.asr, "run_bench", refuse)


# ------------------------------------------------------------------------------------------ generate speech
def test_speech_speaks_each_sentence_whole(tiny_tts, tmp_path, capsys):
    out = tmp_path / "sp.wav"
    base = ["--prompt-audio", str(CLIP), "--prompt-text", CLIP_TEXT, "--param", "steps=2"]
    assert main(["generate", "speech", "hello there", *base, "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp.wav"]  # one sentence, one file (not one per letter)
    assert main(["generate", "speech", "hello there", "the value of it", *base, "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp.wav", "sp_0.wav", "sp_1.wav"]
    printed = capsys.readouterr().out
    assert "\thello there" in printed and "\tthe value of it" in printed


def test_speech_needs_prompt_audio_in_one_prompt_mode(no_loading, tmp_path, capsys):
    assert main(["generate", "speech", "hello", "--out", str(tmp_path / "s.wav")]) == 2
    err = capsys.readouterr().err
    assert "--prompt-audio is required" in err and "JSONL" in err


def test_speech_batch_takes_prompt_audio_per_line(tiny_tts, tmp_path):
    from leapgen.distributed import read_results

    src = tmp_path / "s.jsonl"
    src.write_text("\n".join([json.dumps({"text": "hello there", "prompt_audio": str(CLIP), "prompt_text": CLIP_TEXT}),
                              json.dumps({"prompt": "hello", "prompt_audio": str(CLIP)})]) + "\n")
    out = tmp_path / "out"
    assert main(["generate", "speech", "--input", str(src), "--output", str(out), "--param", "steps=2"]) == 0
    rows = read_results(out)
    assert [r["line"] for r in rows] == [1] and rows[0]["error"] is None and rows[0]["media"][0].endswith(".wav")
    assert (out / rows[0]["media"][0]).stat().st_size > 0
    (err,) = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert err["line"] == 2 and "missing key 'text'" in err["error"] and "'prompt'" in err["error"]


# ------------------------------------------------------------------------------------------ generate image
def test_image_runs_the_continuous_token_pipelines(tmp_path, capsys):
    assert main(["generate", "image", "red apple", "--pipeline", "leapgen/image-emoji-dd", "--out", str(tmp_path),
                 "--seed", "0"]) == 0
    assert main(["generate", "image", "red apple", "--pipeline", "leapgen/image-emoji-mar", "--out", str(tmp_path),
                 "--seed", "0", "--param", "num_iter=2", "--temperature", "0.5"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["red-apple_dd_0.png", "red-apple_mar_0.png"]
    assert "Traceback" not in capsys.readouterr().err


def test_image_takes_a_class_id_and_refuses_one_out_of_range(tmp_path, capsys):
    from leapgen.pipelines import Pipeline

    names = Pipeline.from_pretrained("leapgen/image-emoji-dd").class_names
    assert main(["generate", "image", "1", "--pipeline", "leapgen/image-emoji-dd", "--out", str(tmp_path),
                 "--seed", "0"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["class-1_dd_0.png"]
    assert main(["generate", "image", str(len(names)), "--pipeline", "leapgen/image-emoji-dd", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"class id {len(names)} is out of range; valid ids are 0..{len(names) - 1}" in err and "Traceback" not in err


def test_image_option_a_pipeline_does_not_take_is_refused_by_name(tmp_path, capsys):
    assert main(["generate", "image", "red apple", "--pipeline", "leapgen/image-emoji-dd", "--out", str(tmp_path),
                 "--cfg-interval", "3"]) == 2
    err = capsys.readouterr().err
    assert "--cfg-interval is not an option of ImageDDPipeline" in err and "num_steps" in err
    assert not list(tmp_path.iterdir())


def test_bench_image_names_the_command_that_runs_mar(capsys):
    assert main(["bench", "image", "--pipeline", "leapgen/image-emoji-mar", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "not an image pipeline" not in err and "leapgen generate image" in err and "image-continuous" in err


def test_call_signature_follows_forwarded_kwargs():
    from leapgen.pipelines.image_mar import ImageMARPipeline
    from leapgen.pipelines.image_nar import ImageNARPipeline
    from leapgen.pipelines.signature import call_signature

    nar = call_signature(ImageNARPipeline)  # __call__(prompt, sampler="nar", **kwargs) -> ImageARPipeline's
    assert nar.defaults["sampler"] == "nar" and {"cfg_interval", "top_k"} <= set(nar.names) and nar.required == ("prompt",)
    mar = call_signature(ImageMARPipeline)
    assert "cfg_interval" not in mar.names and mar.sampler_params and mar.defaults["sampler"] == "mar"


# ------------------------------------------------------------------------------------------ batch lines
def test_batch_line_without_prompt_is_a_clear_error(tmp_path):
    src = tmp_path / "p.jsonl"
    src.write_text("\n".join(['{"foo": "x"}', '{"prompt": "def f(", "max_new_tokns": 2}', '"def g("',
                              '{"prompt": "x = ", "id": "ok"}']) + "\n")
    out = tmp_path / "o"
    assert main(["generate", "text", "--input", str(src), "--output", str(out), "--param", "max_new_tokens=2"]) == 0
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [1, 2]
    assert "missing key 'prompt'" in errors[0]["error"] and "unknown key 'foo'" in errors[0]["error"]
    assert "did you mean 'max_new_tokens'" in errors[1]["error"]
    assert not any("TypeError" in e["error"] for e in errors)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generated"] == 2 and summary["bad_lines"] == 2 and summary["failed"] == 0


def test_batch_unknown_job_param_is_refused(tmp_path, capsys):
    src = tmp_path / "p.jsonl"
    src.write_text('{"prompt": "x"}\n')
    assert main(["batch", "text", "--input", str(src), "--output", str(tmp_path / "o"), "--param", "max_tokens=2"]) == 2
    assert "max_tokens" in capsys.readouterr().err and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ output locations
@pytest.mark.parametrize("argv, flag", [
    (["translate", "q.wav", "--out-dir", "{file}"], "--out-dir"),
    (["generate", "speech", "hi", "--prompt-audio", str(CLIP), "--out", "{missing}/s.wav"], "--out"),
    (["generate", "audio", "piano", "--out", "{missing}/c.wav"], "--out"),
    (["generate", "molecule", "--png", "{missing}/m.png"], "--png"),
    (["generate", "image", "food", "--out", "{file}"], "--out"),
    (["generate", "text", "--input", "{file}", "--output", "{file}"], "--output"),
    (["bench", "asr", "--out", "{file}"], "--out"),
    (["bench", "text", "--json", "{file}/b.json"], "--json"),
    (["train", "text-code", "--out", "{file}"], "--out"),
])
def test_output_locations_are_checked_before_anything_runs(no_loading, tmp_path, capsys, argv, flag):
    file = tmp_path / "file.jsonl"
    file.write_text('{"prompt": "x"}\n')
    argv = [a.format(file=file, missing=tmp_path / "no" / "such") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} ") and "Traceback" not in err
    assert not (tmp_path / "no").exists()


def test_check_output_path_kinds(tmp_path):
    from leapgen.cli.common import check_output_path

    f = tmp_path / "f.txt"
    f.write_text("")
    assert check_output_path(tmp_path / "new" / "deeper", "--out", "dir") == tmp_path / "new" / "deeper"
    assert check_output_path(tmp_path / "new" / "x.json", "--json", "file") == tmp_path / "new" / "x.json"
    with pytest.raises(ConfigError, match="does not exist"):
        check_output_path(tmp_path / "new" / "x.wav", "--out", "file_in_dir")
    with pytest.raises(ConfigError, match="is a folder"):
        check_output_path(tmp_path, "--out", "file")
    with pytest.raises(ConfigError, match="not a folder"):
        check_output_path(f / "sub", "--out", "dir")
    # `generate image --out cat.png` made a folder named cat.png
    with pytest.raises(ConfigError, match=r"names a \.png file, but --out is a folder"):
        check_output_path(tmp_path / "cat.png", "--out", "dir")
    assert not (tmp_path / "cat.png").exists()
    assert check_output_path(tmp_path / "run.v2", "--out", "dir") == tmp_path / "run.v2"  # not a file suffix


# ------------------------------------------------------------------------------------------ JSON and sampler lists
def test_dumps_json_is_strict(tmp_path):
    """The CLI's --json and the benches' records go through one converter (bench.common.json_safe)."""
    from leapgen.bench.common import write_json
    from leapgen.cli.common import dumps_json

    obj = {"a": float("nan"), "b": [float("inf"), 1.5], "c": np.float32("nan"), "d": torch.tensor([1.0, float("-inf")]),
           "e": (1, Path("x")), "f": np.float32(0.5)}
    want = {"a": None, "b": [None, 1.5], "c": None, "d": [1.0, None], "e": [1, "x"], "f": 0.5}
    assert _strict_json(dumps_json(obj)) == want
    assert _strict_json(write_json(tmp_path / "r.json", obj).read_text()) == want  # np.float32 was written as "0.5"


def test_transcribe_json_is_strict_and_takes_a_sampler_list(capsys):
    assert main(["transcribe", str(CLIP), "--json"]) == 0
    one = _strict_json(capsys.readouterr().out)
    assert one["results"][0]["text"] and "acceptance_rate" in one["stats"]
    assert main(["transcribe", str(CLIP), "--sampler", "ctc_greedy,ar"]) == 0
    printed = capsys.readouterr().out
    assert "--- ctc_greedy ---" in printed and "--- ar ---" in printed and printed.count(str(CLIP)) == 2
    assert main(["transcribe", str(CLIP), "--sampler", "ctc_greedy,ar", "--json"]) == 0
    runs = _strict_json(capsys.readouterr().out)["runs"]
    assert [r["sampler"] for r in runs] == ["ctc_greedy", "ar"] and all(r["results"][0]["text"] for r in runs)
    assert main(["transcribe", str(CLIP), "--sampler", "ctc_greedy,nope"]) == 2
    assert "unknown sampler 'nope'" in capsys.readouterr().err


def test_translate_json_is_strict_and_takes_a_sampler_list(tmp_path, capsys):
    assert main(["translate", str(S2ST_CLIP), "--sampler", "ar", "--json", "--out-dir", str(tmp_path)]) == 0
    one = _strict_json(capsys.readouterr().out)
    assert one["results"][0]["audio"] == str(tmp_path / "clip0.de.wav")
    assert main(["translate", str(S2ST_CLIP), "--sampler", "ar,dag_greedy", "--json", "--out-dir", str(tmp_path)]) == 0
    runs = _strict_json(capsys.readouterr().out)["runs"]
    assert [Path(r["results"][0]["audio"]).name for r in runs] == ["clip0.ar.de.wav", "clip0.dag_greedy.de.wav"]


def test_generate_text_runs_a_diffusion_lm_pipeline(capsys):
    """``generate text`` takes a diffusion-LM pipeline: its default sampler (fast_dllm) unless
    --sampler names masked ones; --top-k / --top-p, which masked samplers do not take, are refused
    by name rather than dropped; an AR sampler on it names the masked ones."""
    pipe = str(ROOT / "assets" / "text-code-diffusion-adapted")
    assert main(["generate", "text", "def add(a, b):", "--pipeline", pipe, "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "sampler=fast_dllm new_tokens=4" in out
    assert main(["generate", "text", "x = ", "--pipeline", pipe, "--max-new-tokens", "4", "--sampler", "llada,dkv_cache"]) == 0
    out = capsys.readouterr().out
    assert "--- llada ---" in out and "sampler=dkv_cache" in out
    assert main(["generate", "text", "x = ", "--pipeline", pipe, "--top-k", "5"]) == 2
    assert "--top-k" in capsys.readouterr().err
    assert main(["generate", "text", "x = ", "--pipeline", pipe, "--sampler", "speculative"]) == 2
    assert "fast_dllm" in capsys.readouterr().err


def test_every_generate_modality_takes_threads(capsys):
    for modality in ("text", "image", "molecule", "audio", "speech"):
        with pytest.raises(SystemExit):
            main(["generate", modality, "--threads", "0"])
        assert "--threads must be >= 1" in capsys.readouterr().err
