"""A batch job's text rows carry everything the text pipeline returns per sequence (2026-11-29): with
``num_return_sequences`` n sequences per input line, each with its index, finish and stop reason,
``logprobs`` / ``top_logprobs`` and error (the ``sequences`` column, strict JSON; ``num_sequences``).
Before, the rows held the texts only. The columns written before are unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from leapgen.cli import main
from leapgen.distributed import read_results, run_job
from leapgen.distributed.records import output_row
from leapgen.pipelines import Pipeline

pytest.importorskip("pyarrow", reason="the demo extra (pyarrow) is not installed")
torch.set_num_threads(1)

OLD_COLUMNS = {"line", "id", "seed", "input", "output", "valid", "sampler", "new_tokens", "target_forwards",
               "step_compression", "wall_s", "error", "media"}
LINES = [
    {"prompt": "def add(a, b):", "id": "n2", "max_new_tokens": 5, "temperature": 0.9, "num_return_sequences": 2,
     "logprobs": 2},
    {"prompt": "class Stack:", "id": "stop", "max_new_tokens": 12, "temperature": 0.0, "stop": ["\n"], "logprobs": 0},
    {"prompt": "import os\n", "id": "plain", "max_new_tokens": 4, "temperature": 0.9},
]


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _job(tmp_path: Path) -> list[dict]:
    src = tmp_path / "p.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in LINES) + "\n")
    run_job(src, tmp_path / "out", modality="text", batch_size=2)
    return read_results(tmp_path / "out")


def test_rows_carry_every_sequence_with_its_outputs(tmp_path):
    rows = {r["id"]: r for r in _job(tmp_path)}
    pipe = Pipeline.from_pretrained("leapgen/text-code")
    pipe.set_progress_bar_config(disable=True)
    for n, line in enumerate(LINES, start=1):
        row = rows[line["id"]]
        assert OLD_COLUMNS <= set(row) and row["error"] is None
        kwargs = {k: v for k, v in line.items() if k not in ("prompt", "id")}
        want = pipe(line["prompt"], seed=n, **kwargs)  # the job's seed for line n (job seed 0)
        seqs = _strict(row["sequences"])
        assert row["num_sequences"] == len(seqs) == line.get("num_return_sequences", 1)
        assert row["output"] == (want.texts[0] if len(want.texts) == 1 else json.dumps(want.texts))  # as before
        for k, seq in enumerate(seqs):
            assert seq["index"] == k
            assert seq["text"] == want.texts[k] and seq["token_ids"] == want.token_ids[k]
            assert seq["finish_reason"] == want.finish_reasons[k] in ("stop", "length")
            assert seq["stop_reason"] == want.stop_reasons[k]
            assert seq["error"] is None
            if "logprobs" not in line:
                assert seq["logprobs"] is None and seq["top_logprobs"] is None
                continue
            assert len(seq["logprobs"]) == len(seq["token_ids"])
            assert seq["logprobs"] == pytest.approx(want.logprobs[k])
            want_top = [{str(t): v for t, v in d.items()} for d in want.top_logprobs[k]]
            assert [set(d) for d in seq["top_logprobs"]] == [set(d) for d in want_top]
            assert all(len(d) == line["logprobs"] for d in seq["top_logprobs"])
    assert _strict(rows["stop"]["sequences"])[0]["stop_reason"] in ("\n", pipe.tokenizer.eos_token_id, None)


def test_a_failed_prompt_fills_its_sequences_with_the_error():
    out = SimpleNamespace(texts=[None, None], token_ids=[None, None], errors=["prompt is empty", "prompt is empty"],
                          finish_reasons=[None, None], stop_reasons=[None, None], logprobs=None, top_logprobs=None)
    row = output_row(out)
    assert row["error"].startswith("InputError: prompt is empty")
    seqs = _strict(row["sequences"])
    assert [s["index"] for s in seqs] == [0, 1] and all(s["error"] == "prompt is empty" for s in seqs)


def test_nan_and_infinite_log_probabilities_are_written_as_null():
    out = SimpleNamespace(texts=["ab"], token_ids=[[5, 6]], errors=[None], finish_reasons=["length"],
                          stop_reasons=[None], logprobs=[[-math.inf, float("nan")]],
                          top_logprobs=[[{5: -math.inf}, {6: float("nan"), 7: -1.5}]])
    seq = _strict(output_row(out)["sequences"])[0]
    assert seq["logprobs"] == [None, None]
    assert seq["top_logprobs"] == [{"5": None}, {"6": None, "7": -1.5}]


def test_the_cli_batch_job_writes_logprobs_and_n_sequences(tmp_path, capsys):
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"prompt": "def f(x):", "id": "a", "max_new_tokens": 3}) + "\n")
    assert main(["generate", "text", "--input", str(src), "--output", str(tmp_path / "o"), "--param", "logprobs=1",
                 "--param", "num_return_sequences=3", "--param", "temperature=0.8"]) == 0
    capsys.readouterr()
    (row,) = read_results(tmp_path / "o")
    seqs = _strict(row["sequences"])
    assert row["num_sequences"] == 3 and [s["index"] for s in seqs] == [0, 1, 2]
    assert all(len(s["logprobs"]) == len(s["token_ids"]) and s["finish_reason"] for s in seqs)
