"""``leapgen ocr`` and ``leapgen sequence`` end to end on the shipped pipelines (in process,
``leapgen.cli.main``): rendered word images and simulated spectra written as MGF / JSON / JSONL,
bad items and missing files in a batch (an error line each, exit 0), every item bad (exit 1),
usage errors (exit 2 before anything loads), strict JSON, sampler lists, ``--param`` and ``--seed``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from leapgen.cli import main
from leapgen.data import peptide as corpus
from leapgen.errors import InputError
from leapgen.pipelines.spectra_files import parse_mgf, read_spectra

torch.set_num_threads(1)


def _strict_json(text: str):
    def refuse(token: str):
        raise AssertionError(f"non-standard JSON constant {token} in the output")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------------------ OCR
def _render(word: str, path: Path) -> Path:
    """Black ``word`` on white, as a phone photo of one word crops it."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 28)
    except OSError:
        font = ImageFont.load_default(size=28)
    img = Image.new("L", (160, 48), 255)
    ImageDraw.Draw(img).text((10, 6), word, font=font, fill=0)
    img.save(path)
    return path


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ocr")
    out = {w: _render(w, folder / f"{w}.png") for w in ("hello", "river")}
    jpeg = folder / "river.jpg"
    from PIL import Image

    Image.open(out["river"]).convert("RGB").save(jpeg, quality=95)
    out["jpeg"] = jpeg
    (folder / "notes.png").write_text("not an image")
    out["bad"] = folder / "notes.png"
    return out


def test_ocr_reads_images_and_a_bad_item_or_missing_file_fails_alone(words, tmp_path, capsys):
    missing = tmp_path / "missing.png"
    files = [words["hello"], words["bad"], words["jpeg"], missing]
    assert main(["ocr", *map(str, files)]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 4 and [ln.split("\t")[0] for ln in lines] == list(map(str, files))
    assert lines[0] == f"{words['hello']}\thello"
    assert "ERROR: " in lines[1] and "not a readable image" in lines[1]
    assert "ERROR" not in lines[2] and lines[2].split("\t")[1]
    assert "ERROR: " in lines[3] and "does not exist" in lines[3]


def test_ocr_json_has_texts_confidences_errors_and_stats(words, tmp_path, capsys):
    missing = tmp_path / "missing.png"
    assert main(["ocr", str(words["hello"]), str(missing), "--json", "--seed", "0"]) == 0
    data = _strict_json(capsys.readouterr().out)
    good, bad = data["results"]
    assert good["text"] == "hello" and good["error"] is None and 0 < good["confidence"] <= 1
    assert len(good["char_confidences"]) == 5
    assert bad["text"] is None and "does not exist" in bad["error"] and bad["confidence"] is None
    assert data["stats"]["sampler"] == "cppd"  # the pipeline's default


def test_ocr_sampler_list_with_a_param_runs_each_sampler(words, capsys):
    argv = ["ocr", str(words["hello"]), str(words["river"]), "--sampler", "ar,speculative",
            "--param", "num_draft_tokens=17", "--json"]
    assert main(argv) == 0
    runs = _strict_json(capsys.readouterr().out)["runs"]
    assert [r["sampler"] for r in runs] == ["ar", "speculative"]
    assert [x["text"] for x in runs[0]["results"]] == [x["text"] for x in runs[1]["results"]]  # greedy-exact
    assert main(["ocr", str(words["hello"]), "--sampler", "ar,cppd"]) == 0
    out = capsys.readouterr().out
    assert "--- ar ---" in out and "--- cppd ---" in out


def test_ocr_every_item_bad_exits_1(words, tmp_path, capsys):
    assert main(["ocr", str(tmp_path / "a.png"), str(words["bad"])]) == 1
    assert capsys.readouterr().out.count("ERROR: ") == 2


@pytest.fixture()
def no_loading(monkeypatch):
    from leapgen.pipelines import Pipeline

    def refuse(*args, **kw):
        raise AssertionError("loaded a pipeline although the command line was bad")

    monkeypatch.setattr(Pipeline, "from_pretrained", classmethod(refuse))


@pytest.mark.parametrize("command", ["ocr", "sequence"])
def test_usage_errors_exit_2_before_loading(command, no_loading, tmp_path, capsys):
    f = str(tmp_path / "x")
    assert main([command, f, "--sampler", "nope"]) == 2
    assert "unknown sampler 'nope'" in capsys.readouterr().err
    assert main([command, f, "--sampler", "ar", "--param", "oops"]) == 2
    assert "--param expects key=value" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # no file at all: argparse's usage error
        main([command])
    assert exc.value.code == 2
    assert "required: " in capsys.readouterr().err


def test_a_pipeline_of_the_other_kind_is_refused_naming_its_command(words, tmp_path, capsys):
    assert main(["ocr", str(words["hello"]), "--pipeline", "leapgen/peptide"]) == 2
    assert "run it with `leapgen sequence`" in capsys.readouterr().err
    assert main(["sequence", str(tmp_path / "x.mgf"), "--pipeline", "leapgen/ocr-en"]) == 2
    assert "run it with `leapgen ocr`" in capsys.readouterr().err


def test_bad_call_keywords_exit_2(words, capsys):
    assert main(["ocr", str(words["hello"]), "--batch-size", "0"]) == 2
    assert "--batch-size must be >= 1" in capsys.readouterr().err  # checked by the CLI before the pipeline loads


# ------------------------------------------------------------------------------------------ peptides
PEPTIDES = (("GASPLK", 2), ("PEPTLDEK", 2))


def _spectra() -> list[dict]:
    return [corpus.simulate(seq, z, random.Random(0)) for seq, z in PEPTIDES]


def _mgf_block(s: dict, title: str) -> str:
    peaks = "\n".join(f"{m:.5f} {i:.4f}" for m, i in zip(s["mz"], s["intensity"]))
    return f"BEGIN IONS\nTITLE={title}\nPEPMASS={s['precursor_mz']:.6f} 1000.0\nCHARGE={s['charge']}+\n{peaks}\nEND IONS\n"


@pytest.fixture(scope="module")
def spectra_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("spectra")
    s = _spectra()
    bad_block = "BEGIN IONS\nTITLE=broken\nPEPMASS=500.0\nCHARGE=2+\n100.0 abc\nEND IONS\n"
    mgf = folder / "run.mgf"
    mgf.write_text("# written by the test\n" + _mgf_block(s[0], "first") + bad_block + _mgf_block(s[1], "second"))
    rows = [{"mz": x["mz"].tolist(), "intensity": x["intensity"].tolist(), "precursor_mz": x["precursor_mz"],
             "charge": x["charge"]} for x in s]
    js = folder / "spectra.json"
    js.write_text(json.dumps(rows))
    jsonl = folder / "spectra.jsonl"
    jsonl.write_text(json.dumps(rows[0]) + "\n{not json\n" + json.dumps({**rows[1], "charge": 9}) + "\n")
    return {"mgf": mgf, "json": js, "jsonl": jsonl}


def test_sequence_mgf_json_and_a_missing_file(spectra_files, tmp_path, capsys):
    from leapgen.pipelines import Pipeline

    missing = tmp_path / "missing.mgf"
    assert main(["sequence", str(spectra_files["mgf"]), str(missing), str(spectra_files["json"])]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    mgf, js = spectra_files["mgf"], spectra_files["json"]
    assert [ln.split("\t")[0] for ln in lines] == [f"{mgf}#1", f"{mgf}#2", f"{mgf}#3", str(missing), f"{js}#1", f"{js}#2"]
    assert "ERROR: line" in lines[1] and "cannot read a peak" in lines[1]
    assert "ERROR: " in lines[3] and "does not exist" in lines[3]
    # the MGF and JSON spectra read as the Python API reads the simulated dicts
    expected = Pipeline.from_pretrained("leapgen/peptide")(_spectra()).sequences
    got = [lines[k].split("\t") for k in (0, 2, 4, 5)]
    assert [g[1] for g in got] == expected * 2
    for g in got:
        assert len(g) == 4 and float(g[2]) <= 0 and abs(float(g[3])) < 1e4


def test_sequence_json_output_and_jsonl_bad_lines(spectra_files, capsys):
    argv = ["sequence", str(spectra_files["jsonl"]), str(spectra_files["mgf"]), "--sampler", "ctc_pmc", "--json", "--seed", "0"]
    assert main(argv) == 0
    data = _strict_json(capsys.readouterr().out)
    rows = data["results"]
    assert data["stats"]["sampler"] == "ctc_pmc"
    assert [r["index"] for r in rows] == [1, 2, 3, 1, 2, 3]
    assert rows[0]["error"] is None and rows[0]["sequence"] and rows[0]["precursor_ok"] is True  # mass control
    assert "not JSON" in rows[1]["error"] and rows[1]["sequence"] is None
    assert "charge" in rows[2]["error"]
    assert rows[3]["title"] == "first" and rows[5]["title"] == "second" and rows[4]["title"] is None
    assert all(abs(r["mass_error"]) <= 0.1 for r in rows if r["error"] is None)


def test_sequence_sampler_list_and_param(spectra_files, capsys):
    argv = ["sequence", str(spectra_files["json"]), "--sampler", "ar,ctc_pmc", "--param", "tolerance=0.05", "--json"]
    assert main(argv) == 0
    runs = _strict_json(capsys.readouterr().out)["runs"]
    assert [r["sampler"] for r in runs] == ["ar", "ctc_pmc"]
    assert all(abs(x["mass_error"]) <= 0.05 for x in runs[1]["results"])


def test_sequence_every_file_bad_exits_1(spectra_files, tmp_path, capsys):
    empty = tmp_path / "empty.mgf"
    empty.write_text("")
    other = tmp_path / "table.csv"
    other.write_text("a,b\n1,2\n")
    assert main(["sequence", str(tmp_path / "missing.mgf"), str(empty), str(other)]) == 1
    out = capsys.readouterr().out
    assert out.count("ERROR: ") == 3 and "no spectrum" in out and "neither MGF" in out
    assert main(["sequence", str(tmp_path / "missing.mgf"), "--json"]) == 1
    assert _strict_json(capsys.readouterr().out)["results"][0]["error"]


def test_mgf_reader_global_params_comments_and_broken_blocks(tmp_path):
    text = ("CHARGE=2+\n; comment\nBEGIN IONS\nPEPMASS=400.5\n100.0 1.0\n200.0\t2.0 1+\nEND IONS\n"
            "BEGIN IONS\nTITLE=t\nPEPMASS=300.0\nEND IONS\n"
            "BEGIN IONS\nPEPMASS=300\n101.0 3.0\n")
    items = parse_mgf(text)
    assert len(items) == 3
    first = items[0]
    assert first["params"]["charge"] == "2+" and first["params"]["pepmass"] == (400.5,)
    assert first["m/z array"].tolist() == [100.0, 200.0] and first["intensity array"].tolist() == [1.0, 2.0]
    assert isinstance(items[1], InputError) and "'t'" in str(items[1]) and "no peaks" in str(items[1])
    assert isinstance(items[2], InputError) and "no END IONS" in str(items[2])
    f = tmp_path / "spectra.txt"  # any suffix: sniffed
    f.write_text(text)
    assert len(read_spectra(str(f))) == 3
    with pytest.raises(InputError, match="directory"):
        read_spectra(str(tmp_path))


def test_help_lists_both_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "ocr" in out and "sequence" in out
