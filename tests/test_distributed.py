"""``leapgen batch`` / leapgen.distributed: bad JSONL lines reported with line numbers while the rest
completes, resume without duplicates, rows independent of batching, workers and Ray.

The Ray test starts a local Ray of 2 CPUs; Ray's own start-up has fixed waits (30 s for the raylet
and its agents) that a heavily loaded machine can miss: then the test is skipped with Ray's reason,
visibly (everything else here runs without Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leapgen.cli import main
from leapgen.distributed import read_records, read_results, run_job

pytest.importorskip("pyarrow", reason="the demo extra (pyarrow) is not installed")

PROMPTS = ["def add(a, b):", "class Stack:", "import os\n", "for i in range(3):", "x = [", "def main():"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _jobs(tmp_path: Path, bad: bool = True) -> Path:
    lines = [json.dumps({"prompt": p, "max_new_tokens": 4, "temperature": 0.9, "id": f"p{i}"}) for i, p in enumerate(PROMPTS)]
    if bad:
        lines.insert(2, "{this is not json")
        lines.insert(5, "[1, 2]")
        lines.append(json.dumps({"prompt": "", "max_new_tokens": 4, "id": "empty"}))
    return _write(tmp_path / "prompts.jsonl", lines)


def _key(rows: list[dict]) -> list[tuple]:
    return [(r["id"], r["line"], r["seed"], r["output"], r["error"], r["num_sequences"], r["sequences"]) for r in rows]


def test_read_records_line_numbers(tmp_path):
    path = _write(tmp_path / "p.jsonl", ['{"prompt": "a"}', "", '"just a string"', "{oops", '{"id": "x", "prompt": "b"}',
                                          '{"id": "x", "prompt": "c"}', "3"])
    records, errors = read_records(path)
    assert [(r.line, r.id, r.data) for r in records] == [(1, "line1", {"prompt": "a"}), (3, "line3", {"prompt": "just a string"}),
                                                        (5, "x", {"prompt": "b"})]
    assert [e["line"] for e in errors] == [4, 6, 7]
    assert "not JSON" in errors[0]["error"] and "duplicate id" in errors[1]["error"] and "int" in errors[2]["error"]


def test_run_job_checks_lines_and_params_in_python(tmp_path):
    """The Python API checks what the CLI checks: unknown job parameters refuse the job before
    anything is written; lines with missing or unknown keys fail alone with their line number."""
    from leapgen.errors import ConfigError

    src = _write(tmp_path / "p.jsonl", ['{"prompt": "def f(", "max_new_tokns": 2}', '{"foo": 1}', '"x = "'])
    with pytest.raises(ConfigError, match="max_tokens"):
        run_job(src, tmp_path / "refused", modality="text", params={"max_tokens": 2})
    assert not (tmp_path / "refused").exists()
    summary = run_job(src, tmp_path / "out", modality="text", params={"max_new_tokens": 2})
    assert summary["generated"] == 1 and summary["bad_lines"] == 2
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [1, 2]
    assert "did you mean 'max_new_tokens'" in errors[0]["error"] and "missing key 'prompt'" in errors[1]["error"]
    # a pipeline that takes no input: a bare string is no call (molecule generation takes a count)
    mol = run_job(_write(tmp_path / "m.jsonl", ['"CCO"']), tmp_path / "mol", modality="molecule")
    assert mol["bad_lines"] == 1 and mol["generated"] == 0


def test_bad_lines_reported_rest_completes_and_resume(tmp_path):
    src = _jobs(tmp_path)
    out = tmp_path / "out"
    first = run_job(src, out, modality="text", batch_size=2, limit=3)  # an "interrupted" run: 3 prompts done
    assert first["generated"] == 3
    assert main(["batch", "text", "--input", str(src), "--output", str(out), "--batch-size", "3"]) == 0
    rows = read_results(out)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(PROMPTS) + 1  # no duplicates after the resume
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped_done"] == 3 and summary["generated"] == len(PROMPTS) + 1 - 3
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors if "id" not in e] == [3, 6]  # bad lines by their line numbers
    assert [e["id"] for e in errors if "id" in e] == ["empty"] and "empty" in errors[-1]["error"]
    good = [r for r in rows if r["error"] is None]
    assert len(good) == len(PROMPTS) and all(r["output"] and r["new_tokens"] >= 1 for r in good)
    # the same job in one go, other batches: the same rows (each prompt has its own seed, seed + line)
    again = tmp_path / "again"
    run_job(src, again, modality="text", batch_size=4)
    assert _key(read_results(again)) == _key(rows)


def test_line_arguments_beat_job_params_and_a_bad_seed_fails_alone(tmp_path):
    """A line's own call arguments win over the job's --param defaults (like its own seed; they were
    silently overridden), and a line with a non-integer seed fails alone (it stopped the whole job)."""
    src = _write(tmp_path / "p.jsonl", [json.dumps({"prompt": "def f(", "id": "own", "max_new_tokens": 3}),
                                        json.dumps({"prompt": "x", "id": "badseed", "seed": "abc"}),
                                        json.dumps({"prompt": "y", "id": "job"})])
    run_job(src, tmp_path / "out", modality="text", params={"max_new_tokens": 6})
    rows = {r["id"]: r for r in read_results(tmp_path / "out")}
    assert rows["own"]["new_tokens"] == 3 and rows["job"]["new_tokens"] == 6
    assert rows["badseed"]["output"] is None and "seed must be an integer" in rows["badseed"]["error"]


def test_batch_cli_errors(tmp_path, capsys):
    assert main(["batch", "text", "--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    src = _jobs(tmp_path, bad=False)
    assert main(["batch", "text", "--input", str(src), "--output", str(tmp_path / "o"), "--address", "auto"]) == 2
    assert "--ray" in capsys.readouterr().err
    assert main(["batch", "sound", "--input", str(src), "--output", str(tmp_path / "o")]) == 2
    assert "--pipeline" in capsys.readouterr().err


def test_generate_input_runs_the_batch_job(tmp_path, capsys):
    """``leapgen generate <modality> --input`` is the batch job (the spelling the docs give) and
    writes the rows ``leapgen batch`` writes; one-prompt options are refused with where they go."""
    src = _jobs(tmp_path, bad=False)
    assert main(["generate", "text", "--input", str(src), "--output", str(tmp_path / "g"), "--batch-size", "4"]) == 0
    assert main(["batch", "text", "--input", str(src), "--output", str(tmp_path / "b"), "--batch-size", "2"]) == 0
    got = read_results(tmp_path / "g")
    assert len(got) == len(PROMPTS) and _key(got) == _key(read_results(tmp_path / "b"))
    capsys.readouterr()
    for argv, words in ((["generate", "text", "--input", str(src), "--output", str(tmp_path / "x"), "--max-new-tokens", "8"],
                         ("--max-new-tokens", "--param")),
                        (["generate", "text", "--input", str(src)], ("--output",)),
                        (["generate", "text", "hi", "--ray"], ("--input",)),
                        (["generate", "text"], ("prompt", "--input"))):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert all(w in err for w in words), (argv, err)


def test_ray_one_and_two_workers_match_no_ray(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAPGEN_RAY_START_ATTEMPTS", "1")
    ray = pytest.importorskip("ray", reason="the demo extra (ray[data]) is not installed")
    from leapgen.errors import ConfigError

    src = _jobs(tmp_path, bad=False)
    local = tmp_path / "local"
    run_job(src, local, modality="text", batch_size=2)
    try:
        try:
            run_job(src, tmp_path / "w1", modality="text", batch_size=2, use_ray=True, num_workers=1)
        except ConfigError as err:
            pytest.skip(f"a local Ray could not start on this machine: {err}")
        run_job(src, tmp_path / "w2", modality="text", batch_size=2, use_ray=True, num_workers=2)
    finally:
        ray.shutdown()
    want = _key(read_results(local))
    assert _key(read_results(tmp_path / "w1")) == want
    assert _key(read_results(tmp_path / "w2")) == want


def test_an_item_the_pipeline_refuses_is_a_failed_row():
    """A pipeline that refuses an item returns ``errors[i]`` instead of raising (TTS on empty text):
    the row records that error, so the job counts it as failed and lists it in errors.jsonl, where it
    used to be a row with no output and no error."""
    from types import SimpleNamespace

    from leapgen.distributed.records import output_row

    refused = SimpleNamespace(audios=[None], sample_rate=16000, texts=[""], errors=["empty text: give at least one word."])
    assert output_row(refused)["error"] == "InputError: empty text: give at least one word."
    fine = SimpleNamespace(texts=["x = 1"], errors=[None])
    assert "error" not in output_row(fine)


def test_retry_failed_regenerates_only_the_failed_rows(tmp_path, monkeypatch):
    """A rerun skips every id written, failures included; ``--retry-failed`` generates the failed
    ones again, and their new rows replace the failures in the results and errors.jsonl while the
    successful rows stay as they were (no part is overwritten)."""
    from leapgen.distributed.runner import BatchGenerator

    src = _write(tmp_path / "p.jsonl", [json.dumps({"prompt": p, "max_new_tokens": 3, "id": f"p{i}"}) for i, p in enumerate(PROMPTS[:4])])
    out = tmp_path / "out"
    real = BatchGenerator.generate
    flaky = {"p1", "p2"}

    def generate(self, line, rid, data):
        if rid in flaky:  # a transient failure (a worker ran out of memory, say)
            return {"line": line, "id": rid, "seed": 0, "input": "{}", "output": None, "media_bytes": [], "media_ext": [],
                    "error": "internal error (RuntimeError): transient"}
        return real(self, line, rid, data)

    monkeypatch.setattr(BatchGenerator, "generate", generate)
    first = run_job(src, out, modality="text", batch_size=4)
    assert first["failed"] == 2
    before = {r["id"]: r for r in read_results(out)}
    again = run_job(src, out, modality="text", batch_size=4)  # plain rerun: nothing to do
    assert again["generated"] == 0 and again["retried"] == 0 and again["skipped_done"] == 4
    flaky.discard("p1")  # p1 recovers, p2 still fails
    assert main(["batch", "text", "--input", str(src), "--output", str(out), "--batch-size", "4", "--retry-failed"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["retried"] == 2 and summary["generated"] == 2 and summary["failed"] == 1 and summary["skipped_done"] == 2
    rows = {r["id"]: r for r in read_results(out)}
    assert sorted(rows) == ["p0", "p1", "p2", "p3"] and rows["p1"]["error"] is None and rows["p1"]["output"]
    assert rows["p0"] == before["p0"] and rows["p3"] == before["p3"] and rows["p2"]["error"]
    assert len(list(out.glob("part-*.parquet"))) == 2  # the retried batch went to a part of its own
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["id"] for e in errors] == ["p2"]
