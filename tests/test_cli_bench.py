"""The command line and the text benchmark, end to end on the shipped pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from leapgen.samplers import list_samplers

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leapgen", *args], capture_output=True, text=True, env=ENV, timeout=300)


def test_samplers_lists_the_registry() -> None:
    res = run_cli("samplers", "--markdown")
    assert res.returncode == 0, res.stderr
    for info in list_samplers():
        assert f"`{info.name}`" in res.stdout
        assert info.guarantee in res.stdout


@pytest.mark.slow
def test_generate_text_prints_text_and_one_stats_line_per_sampler() -> None:
    res = run_cli("generate", "text", "def add(a, b):", "--sampler", "ar,speculative", "--max-new-tokens", "12")
    assert res.returncode == 0, res.stderr
    stats = [line for line in res.stdout.splitlines() if "target_forwards=" in line]
    assert len(stats) == 2
    assert "sampler=ar" in stats[0] and "sampler=speculative" in stats[1]


def test_generate_text_errors_are_clear() -> None:
    res = run_cli("generate", "text", "x", "--sampler", "no_such_sampler", "--max-new-tokens", "4")
    assert res.returncode == 2
    assert res.stderr.startswith("error:") and "registered samplers" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli("generate", "text", "x", "--max-new-tokens", "0")
    assert res.returncode == 2 and "max_new_tokens" in res.stderr


@pytest.mark.slow
def test_text_bench_quick_run_is_consistent() -> None:
    from leapgen import Pipeline
    from leapgen.bench import run_text_bench

    pipe = Pipeline.from_pretrained("leapgen/text-code")
    res = run_text_bench(
        pipe, runs=1, max_new_tokens=16, n_prompts=1, batch_size=2, sweep=False,
        samplers=["speculative", "prompt_lookup"], progress=False,
    )
    for sname in ("heldout", "code-edit"):
        block = res["results"][sname]["batch1"]
        assert {"ar", "speculative", "prompt_lookup", "hf_generate", "hf_assisted", "hf_prompt_lookup"} <= set(block)
        assert block["ar"]["step_compression"] == pytest.approx(1.0)
        for name in ("speculative", "prompt_lookup", "hf_generate", "hf_assisted", "hf_prompt_lookup"):
            assert block[name]["exact_match"] == 1.0, name
        assert block["speculative"]["peer_identical"] and block["prompt_lookup"]["peer_identical"]
        assert res["results"][sname]["batch2"]["speculative"]["exact_match"] == 1.0


def test_text_bench_sets_and_compile_flags() -> None:
    """--sets picks prompt sets (an unknown one is refused before any timing); --compile is
    recorded and, on CPU, ignored with a log line (torch.compile is used on CUDA only)."""
    res = run_cli("bench", "text", "--quick", "--sets", "nope")
    assert res.returncode == 2 and "unknown prompt set 'nope'" in res.stderr and "Traceback" not in res.stderr
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        res = run_cli("bench", "text", "--quick", "--sets", "heldout", "--samplers", "speculative", "--compile",
                      "--no-peers", "--batch-size", "1", "--json", out)
        assert res.returncode == 0, res.stderr[-3000:]
        result = json.load(open(out))
    assert set(result["results"]) == {"heldout"}
    assert result["settings"]["compile"] is True
