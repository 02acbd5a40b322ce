"""The speed reporting of the text and image benches: efficiency maths, the transformers identity
check, draft cost per accepted token, schedule comparison, the batch-size sweep and its plot, and
the --device option (quick, on the tiny models of conftest)."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from leapgen.bench.batch_sweep import parse_batch_sizes, plot_batch_sweep, run_batch_sweep, sweep_markdown
from leapgen.bench.common import device_line, machine_info
from leapgen.bench.draft_cost import DraftCostProfiler, cost_row
from leapgen.bench.efficiency import add_efficiency, check_device, efficiency, identity_lines, parse_dtype
from leapgen.bench.schedules import schedule_summary, schedule_variants
from leapgen.errors import ConfigError


def test_efficiency_is_speedup_over_step_compression() -> None:
    assert efficiency(1.5, 2.5) == pytest.approx(0.6)
    assert efficiency(1.0, 1.0) == 1.0
    for bad in ((1.0, 0.0), (float("nan"), 2.0), (2.0, float("inf")), (None, 2.0)):
        assert math.isnan(efficiency(*bad))
    rows = [{"speedup_vs_ar": 1.2, "step_compression": 2.0}, {"speedup_vs_ar": 0.5}]
    add_efficiency(rows)
    assert rows[0]["efficiency"] == pytest.approx(0.6) and math.isnan(rows[1]["efficiency"])


def test_identity_lines_name_identical_and_differing_peers() -> None:
    block = {
        "ar": {"name": "ar", "kind": "leapgen", "counterpart": "hf_generate", "peer_identical": True,
               "exact_match": 1.0, "mismatched_prompts": []},
        "speculative": {"name": "speculative", "kind": "leapgen", "counterpart": "hf_assisted",
                        "peer_identical": False, "peer_mismatched_prompts": [1], "exact_match": 1.0,
                        "mismatched_prompts": []},
        "hf_generate": {"name": "hf_generate", "kind": "transformers", "exact_match": 1.0, "mismatched_prompts": []},
        "hf_assisted": {"name": "hf_assisted", "kind": "transformers", "exact_match": 0.5, "mismatched_prompts": [1]},
    }
    lines = identity_lines(block)
    assert lines[0] == "`hf_generate`: identical to `ar`"
    assert "DIFFERS from `speculative` on prompts [1]" in lines[1] and "differs from `ar` on prompts [1]" in lines[1]


def test_batch_sweep_maths_and_plot(tmp_path) -> None:
    # fake sampler: ar costs 1 s per step; "fast" halves the steps at 0.6 s per step
    def call(name, idx):
        steps = 10 if name == "ar" else 5
        return {"target_forwards": steps, "baseline_steps": 10, "new_tokens": 10 * len(idx)}, (
            1.0 * steps if name == "ar" else 0.6 * steps
        ) * (1 + 0.1 * (len(idx) - 1))

    sw = run_batch_sweep(["fast"], [4, 1, 2], 4, call, runs=2)
    assert sw["batch_sizes"] == [1, 2, 4] and sw["samplers"] == ["ar", "fast"]
    for bs in (1, 2, 4):
        row = sw["rows"]["fast"][bs]
        assert row["speedup_vs_ar"] == pytest.approx(10 / 3)
        assert row["step_compression"] == pytest.approx(2.0)
        assert row["efficiency"] == pytest.approx(10 / 6)
        assert sw["rows"]["ar"][bs]["speedup_vs_ar"] == pytest.approx(1.0)
    assert sw["rows"]["ar"][1]["wall_s"] == pytest.approx(4 * 10.0)  # 4 chunks of one item
    assert "3.33x (2.00, 1.67)" in sweep_markdown(sw)
    png = plot_batch_sweep({"text": sw, "image": sw}, tmp_path / "sub" / "speedup.png", title="t")
    assert Image.open(png).size[0] > 200
    assert parse_batch_sizes("8, 1,2,2") == [1, 2, 8]
    for bad in ("0,1", "a", ""):
        with pytest.raises(ConfigError):
            parse_batch_sizes(bad)
    with pytest.raises(ConfigError):
        plot_batch_sweep({}, tmp_path / "x.png")
    # redrawn from saved JSON (integer keys come back as strings)
    from leapgen.bench.batch_sweep import main
    from leapgen.bench.common import write_json

    js = write_json(tmp_path / "t.json", {"machine": machine_info(), "settings": {"device": "cpu"}, "batch_sweep": sw})
    assert main(["--text", str(js), "--image", str(js), "--out", str(tmp_path / "both.png")]) == 0
    assert Image.open(tmp_path / "both.png").size[0] > 400
    assert main(["--out", str(tmp_path / "none.png")]) == 2


def test_device_and_dtype_options() -> None:
    assert check_device(None) is None and check_device("cpu") == torch.device("cpu")
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype(None) is None
    with pytest.raises(ConfigError, match="--dtype"):
        parse_dtype("int8")
    with pytest.raises(ConfigError):
        check_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            check_device("cuda")
    line = device_line(machine_info(), {"device": "cpu", "dtype": "torch.float32", "threads": 1})
    assert "cores" in line and "threads" in line and "device cpu" in line and "float32" in line and "torch " in line


def test_cli_refuses_cuda_without_it(capsys) -> None:
    from leapgen.cli import main

    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    assert main(["bench", "text", "--quick", "--device", "cuda", "--dtype", "bfloat16"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert main(["bench", "text", "--quick", "--sweep-batch-sizes", "1,8"]) == 2
    assert "--prompts 8" in capsys.readouterr().err


def test_draft_cost_profiler_times_draft_forwards_and_restores(pipe) -> None:
    from leapgen.samplers import get_sampler
    from leapgen.samplers.base import DecodeConfig
    from leapgen.samplers.speculative import DraftChain

    lms = pipe._lms
    propose = DraftChain.__dict__.get("propose")
    call = type(lms["draft"]).__call__
    smp = get_sampler("speculative")
    ids = pipe.encode(["def add(a, b):", "import os\n"])
    cfg = DecodeConfig(max_new_tokens=12, eos_token_id=None)
    with DraftCostProfiler(DraftChain, [lms["draft"]]) as prof:
        res = smp.generate(lms, ids, cfg, torch.Generator().manual_seed(0))
    assert DraftChain.__dict__.get("propose") is propose and type(lms["draft"]).__call__ is call
    tot = prof.totals()
    assert tot["draft_forwards"] == res.stats.draft_forwards > 0
    assert tot["draft_fwd_s"] > 0 and tot["propose_s"] >= 0
    row = cost_row("speculative", tot, res.stats.accepted_draft_tokens, res.stats.wall_time, res.stats.new_tokens)
    assert row["draft_forwards_per_accepted"] == pytest.approx(tot["draft_forwards"] / res.stats.accepted_draft_tokens)
    assert 0 < row["draft_share"] < 1
    # the same output with and without the profiler
    again = smp.generate(lms, ids, cfg, torch.Generator().manual_seed(0))
    assert again.sequences == res.sequences


def test_schedule_variants_and_summary() -> None:
    var = schedule_variants(["ar", "speculative", "spec_tree", "prompt_lookup"])
    labels = [v[1] for v in var]
    assert "speculative[schedule=heuristic]" in labels and "speculative[schedule=confidence]" in labels
    assert "speculative[schedule=constant]" in labels and "speculative[schedule=auto]" not in labels  # auto: the default
    # spec_tree's default is heuristic (the faster one in every table of the text bench)
    assert "spec_tree[schedule=constant]" in labels and "spec_tree[schedule=heuristic]" not in labels
    assert "spec_tree[schedule=confidence]" not in labels
    assert "prompt_lookup[schedule=constant]" in labels and "prompt_lookup[schedule=cost]" not in labels
    block = {
        "speculative": {"wall_s": 2.0, "speedup_vs_ar": 1.0, "step_compression": 2.0},
        "speculative[schedule=heuristic]": {"wall_s": 1.0, "speedup_vs_ar": 2.0, "step_compression": 2.5},
    }
    (s,) = schedule_summary(block)
    assert s["winner"] == "heuristic" and s["default"] == "auto"
    assert s["schedules"]["heuristic"]["vs_default"] == pytest.approx(2.0)


@pytest.mark.slow
def test_text_bench_reports_efficiency_identity_cost_and_sweep(pipe) -> None:
    from leapgen.bench.text import format_markdown, run_text_bench

    res = run_text_bench(
        pipe, runs=1, max_new_tokens=10, n_prompts=2, sets=("heldout",), batch_size=2, sweep=False,
        samplers=["speculative", "prompt_lookup", "spec_tree"], compare_schedules=True, batch_sweep=(1, 2),
        progress=False,
    )
    b1, b2 = res["results"]["heldout"]["batch1"], res["results"]["heldout"]["batch2"]
    for block in (b1, b2):
        for row in block.values():
            assert row["efficiency"] == pytest.approx(row["speedup_vs_ar"] / row["step_compression"])
            assert row["hook_forwards_agree"], row["name"]
    for peer in ("hf_generate", "hf_assisted", "hf_prompt_lookup"):
        assert b1[peer]["exact_match"] == 1.0
    assert b1["speculative"]["peer_identical"] and b1["speculative"]["peer_mismatched_prompts"] == []
    # the batched table has transformers' plain generate() on the same left-padded batch (only it
    # takes batches), and ar is compared with it
    assert set(b2) & {"hf_generate", "hf_assisted", "hf_prompt_lookup"} == {"hf_generate"}
    assert b2["hf_generate"]["exact_match"] == 1.0 and b2["ar"]["peer_identical"]
    assert b2["ar"]["counterpart"] == "hf_generate" and b2["ar"]["peer_speedup"] > 0
    cost = res["draft_cost"]["heldout"]["batch1"]
    assert "ar" not in cost and cost["speculative"]["draft_forwards"] > 0
    assert cost["prompt_lookup"]["draft_forwards"] == 0
    assert {"speculative[schedule=heuristic]", "spec_tree[schedule=constant]", "prompt_lookup[schedule=constant]"} <= set(b1)
    assert {s["sampler"] for s in res["schedules"]["heldout"]["batch1"]} == {"speculative", "spec_tree", "prompt_lookup"}
    assert set(res["batch_sweep"]["rows"]["speculative"]) == {1, 2}
    md = format_markdown(res)
    assert md.count("device cpu") >= 3 and "| efficiency |" in md.replace("  ", " ")
    assert md.count("Outputs at T=0, transformers vs leapgen: `hf_generate`: identical to `ar`") == 2  # batch 1 and 2
    assert "draft fwd / accepted" in md and "speedup against ar vs batch size" in md
    assert [c["batch"] for c in res["verify_cost"]] == [1, 2] and "t(n) / t(1)" in md
    assert all(c["rows"][0]["n"] == 1 for c in res["verify_cost"])
    assert "draft-and-verify can be at most" in md  # the ceiling, from speculative[schedule=constant]


def test_verify_cost_curve_and_speedup_ceiling(target_model, draft_far) -> None:
    from leapgen.bench.verify_cost import curve_markdown, speedup_ceiling, verify_cost_curve
    from leapgen.models.lean import lean_or_hf

    lms = {"model": lean_or_hf(target_model), "draft": lean_or_hf(draft_far)}
    curve = verify_cost_curve(lms, context=16, sizes=(1, 2, 6), runs=3, batch=2)
    assert curve["batch"] == 2
    assert [r["n"] for r in curve["rows"]] == [1, 2, 6]
    assert curve["rows"][0]["vs_one"] == 1.0 and all(r["ms"] > 0 for r in curve["rows"])
    assert curve["draft_ms"] > 0 and curve["draft_vs_target"] == pytest.approx(curve["draft_ms"] / curve["rows"][0]["ms"])
    # the cache was rolled back after every timed block: a later forward starts at the context length
    assert "| 6 |" in curve_markdown(curve).replace(" ", "").replace("|6|", "| 6 |")
    # E / (t(k+1)/t(1) + k d(1)/t(1)) on a hand-made curve
    hand = {"rows": [{"n": 1, "vs_one": 1.0}, {"n": 6, "vs_one": 2.0}], "draft_vs_target": 0.1}
    assert speedup_ceiling(hand, 5, 3.0) == pytest.approx(3.0 / 2.5)
    assert math.isnan(speedup_ceiling(hand, 3, 3.0))  # no t(4) measured
