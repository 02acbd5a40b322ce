"""Audit of the demo and the batch / scale-out path as users drive them (each test a few seconds):
an option must not lift the demo's bounds or replace the tab's own fields, a failing item fails
alone in a batch whatever it raises, and an empty input, an output folder that cannot be made or a
missing / unreachable Ray give a clear error instead of a traceback or a minutes-long wait."""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import pytest

from leapgen.demo import discover
from leapgen.demo.app import call_kwargs
from leapgen.distributed import runner
from leapgen.distributed.records import read_results
from leapgen.errors import ConfigError, InputError


@pytest.fixture(scope="module")
def specs() -> dict[str, Any]:
    return {s.tab: s for s in discover(["leapgen/text-code", "leapgen/molecule-safe", "leapgen/image-emoji"])}


@pytest.mark.parametrize("tab, value, options, msg", [
    ("molecule-safe", 8, '{"num_samples": 100000}', "set by the tab"),      # ran 100000 molecules (hung the queue)
    ("text-code", "def f():", '{"prompt": "import os"}', "set by the tab"),  # silently generated for another prompt
    ("text-code", "def f():", '{"seed": 3}', "set by the tab"),              # silently ignored
    ("text-code", "def f():", '{"max_new_tokens": 100000}', "<= 512"),     # past the demo's bound
    ("image-emoji", "faces", '{"num_images_per_prompt": 20}', "<= 8"),     # 20 images: ~10 s of a shared CPU
])
def test_demo_options_cannot_lift_bounds_or_replace_the_input(specs, tab, value, options, msg):
    spec = specs[tab]
    with pytest.raises(InputError, match=msg):
        call_kwargs(spec, value, spec.baseline, spec.size, "", options, 0)


def test_demo_bounds_still_let_a_small_option_through(specs):
    kw = call_kwargs(specs["text-code"], "def f():", "ar", 32, "", '{"max_new_tokens": 16, "temperature": 0.5}', 1)
    assert kw["max_new_tokens"] == 16 and kw["temperature"] == 0.5


def test_demo_number_input_nan_is_a_message(specs):
    with pytest.raises(InputError, match="whole number"):  # was "ValueError: cannot convert float NaN to integer"
        call_kwargs(specs["molecule-safe"], float("nan"), "genmol", None, "", "", 0)


class _FakePipe:
    """Stands in for a loaded pipeline: one item raises what no leapgen check catches."""

    def set_progress_bar_config(self, **_: Any) -> None:
        pass

    def __call__(self, prompt: str, seed: int = 0, **kwargs: Any) -> Any:
        if prompt == "boom":
            raise AttributeError("'bool' object has no attribute 'mode'")  # e.g. molecule cache=true
        from leapgen.pipelines.outputs import TextOutput
        from leapgen.samplers.base import DecodeStats

        return TextOutput(texts=[prompt.upper()], token_ids=[[1]], stats=DecodeStats(sampler="ar"))


def _fake_init(self: runner.BatchGenerator, pipeline: str, sampler: str | None = None,
               params: dict[str, Any] | None = None, seed: int = 0, threads: int = 1) -> None:
    self.pipe, self.sampler, self.params, self.seed = _FakePipe(), sampler, dict(params or {}), seed


def test_one_item_with_an_internal_error_fails_alone(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(runner.BatchGenerator, "__init__", _fake_init)
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(p) for p in ["a", "boom", "c"]) + "\n")
    with caplog.at_level("INFO", logger="leapgen.distributed.runner"):
        summary = runner.run_job(src, tmp_path / "out", modality="text", batch_size=2)
    progress = [r.getMessage() for r in caplog.records if "prompts done" in r.getMessage()]
    assert progress == ["batch: 2/3 prompts done; part-00000001-00000002.parquet: 2 rows, 1 failed",
                        "batch: 3/3 prompts done; part-00000003-00000003.parquet: 1 rows, 0 failed"]
    rows = read_results(tmp_path / "out")
    assert [r["output"] for r in rows] == ["A", None, "C"] and summary["failed"] == 1
    assert "internal error (AttributeError)" in rows[1]["error"]
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [2]


def test_empty_input_file_is_refused(tmp_path):
    src = tmp_path / "empty.jsonl"
    src.write_text("\n\n")
    with pytest.raises(InputError, match="holds no prompts"):
        runner.run_job(src, tmp_path / "out", modality="text")


def test_output_folder_that_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("x")
    src = tmp_path / "in.jsonl"
    src.write_text('"a"\n')
    with pytest.raises(ConfigError, match="cannot be created"):  # was a NotADirectoryError traceback
        runner.run_job(src, tmp_path / "file" / "out", modality="text")


def test_ray_not_installed_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    src = tmp_path / "in.jsonl"
    src.write_text('"a"\n')
    with pytest.raises(ConfigError, match="pip install"):  # was ModuleNotFoundError
        runner.run_job(src, tmp_path / "out", modality="text", use_ray=True)


def test_unreachable_ray_address_fails_fast():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match="no Ray cluster answers"):  # Ray itself retried for minutes
        runner._check_reachable(f"127.0.0.1:{port}", timeout=2)
    with pytest.raises(ConfigError, match="no Ray cluster answers"):
        runner._check_reachable(f"ray://127.0.0.1:{port}", timeout=2)
    runner._check_reachable("auto")  # resolved by Ray


@pytest.mark.parametrize("tab, sampler, params", [
    ("text-code", "spec_tree", '{"num_nodes": 100000, "depth": 1000}'),  # ran for minutes, holding the queue
    ("text-code", "judge", '{"num_draft_tokens": 100000}'),
    ("audio-music", "magnet", '{"steps_per_stage": [1000000, 10, 10, 10]}'),
    ("text-code-diffusion", "fast_dllm", '{"steps": 1000000}'),
])
def test_demo_refuses_huge_sampler_parameters(tab, sampler, params):
    spec = discover([f"leapgen/{tab}"])[0]
    value = spec.example
    with pytest.raises(InputError, match="more than the demo runs"):
        call_kwargs(spec, value, sampler, spec.size, params, "", 0)


def test_demo_sampler_parameters_within_bounds_pass():
    spec = discover(["leapgen/text-code"])[0]
    kw = call_kwargs(spec, "def f():", "spec_tree", 8, '{"num_nodes": 64, "depth": 8, "widths": [8, 4, 2, 1, 1]}', "", 0)
    assert kw["num_nodes"] == 64 and kw["depth"] == 8


def test_compare_keeps_the_side_that_ran_when_the_other_is_refused():
    """molecule-safe with compare: the baseline genmol samples, jacobi is greedy-only and refuses; the
    view showed only the message and threw away the baseline's molecules."""
    import torch

    from leapgen.demo.app import PipelineCache, make_runner

    torch.set_num_threads(1)
    spec = discover(["leapgen/molecule-safe"])[0]
    run = make_runner(spec, PipelineCache())
    out = run(2, None, "jacobi", "{}", "", 0, True, progress=lambda *a, **k: None)
    error, base_html, chosen_html = out[0], out[2], out[6]
    assert "leapgen-error" in error and "jacobi" in error and "greedy" in error
    assert "valid" in base_html  # the baseline's molecules are shown
    assert "greedy" in chosen_html  # the refused column says why


def test_generic_renderer_shows_item_errors_in_full():
    """peptide / s2st (generic fallback): a refused item's reason was one cut-short ``repr`` in the table."""
    from dataclasses import dataclass

    from leapgen.demo.render import render_generic

    @dataclass
    class _Out:
        sequences: list
        errors: list

    reason = "a spectrum dict needs mz, intensity, precursor_mz and charge; " + "x" * 500
    html = render_generic(_Out([None, "PEP"], [reason, None]), None).html
    assert 'class="leapgen-item-error">item 0: a spectrum dict' in html and "x" * 500 in html


def test_demo_with_only_unknown_pipelines_names_them():
    """`leapgen demo --pipeline leapgen/nope` said "no shipped pipeline is installed" (there are 17)."""
    from leapgen.demo.app import build_app

    with pytest.raises(ConfigError, match=r"none of --pipeline leapgen/nope could be read.*leapgen/text-code"):
        build_app(["leapgen/nope"])


def test_demo_json_list_input_is_bounded():
    """peptide's spectra box took a JSON list of any length (100000 spectra in one request)."""
    spec = discover(["leapgen/peptide"])[0]
    one = json.loads(spec.example)
    assert len(call_kwargs(spec, json.dumps([one] * 2), spec.baseline, spec.size, "", "", 0)["spectra"]) == 2
    with pytest.raises(InputError, match="at most 64"):
        call_kwargs(spec, json.dumps([one] * 1000), spec.baseline, spec.size, "", "", 0)


def test_input_with_a_byte_order_mark_reads_line_one(tmp_path):
    """A JSONL file saved with a UTF-8 BOM (Windows editors) lost its first prompt as "not JSON"."""
    from leapgen.distributed.records import read_records

    src = tmp_path / "bom.jsonl"
    src.write_text('{"prompt": "a"}\r\n"b"\r\n', encoding="utf-8-sig")
    records, errors = read_records(src)
    assert [r.data for r in records] == [{"prompt": "a"}, {"prompt": "b"}] and errors == []
