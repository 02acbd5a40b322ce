"""Batch-job ids: what a line may give as ``id``, and media files that never leave ``media/``.

Before: an id with a ``/`` crashed the whole job while writing its picture (FileNotFoundError), an
id ``../x`` wrote outside ``media/``, a 300-character id failed the write (file name too long),
and an object / null / boolean id was silently turned into its Python repr."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from leapgen.distributed.records import MEDIA_DIR, check_id, media_stem, read_records, write_part


def _jsonl(path: Path, ids: list) -> Path:
    path.write_text("".join(json.dumps({"prompt": "red apple", "id": i}) + "\n" for i in ids), encoding="utf-8")
    return path


def test_bad_ids_are_bad_lines_and_good_ones_pass(tmp_path):
    ids = ["ok", 7, "a/b", "x" * 300, {"n": 1}, [1], True, None, "", "  ", "tab\there", 2.5]
    records, errors = read_records(_jsonl(tmp_path / "in.jsonl", ids))
    assert [r.id for r in records] == ["ok", "7", "a/b"]
    bad = {e["line"]: e["error"] for e in errors}
    assert sorted(bad) == list(range(4, 13))
    assert "at most 200" in bad[4]
    assert "got an object" in bad[5] and "got an array" in bad[6] and "got a boolean" in bad[7]
    assert "got null" in bad[8] and "empty" in bad[9] and "empty" in bad[10]
    assert "control characters" in bad[11] and "got a number" in bad[12]


def test_check_id_accepts_strings_and_integers_only():
    assert check_id("a1") is None and check_id(0) is None and check_id("é/ü") is None
    assert check_id(False) is not None and check_id(1.0) is not None


def test_media_names_stay_in_the_media_folder_and_stay_distinct():
    assert media_stem("ok-1.v2") == "ok-1.v2"
    stems = {rid: media_stem(rid) for rid in ["a/b", "a_b", "../up", "..", ".hidden", "é", "a" * 150]}
    assert len(set(stems.values())) == len(stems)
    for rid, stem in stems.items():
        assert "/" not in stem and "\\" not in stem and not stem.startswith("."), (rid, stem)
        assert len(stem) <= 100


def test_write_part_keeps_every_file_under_media(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    rows = [{"line": n, "id": rid, "error": None, "media_bytes": [b"png"], "media_ext": ["png"]}
            for n, rid in enumerate(["a/b", "../up", "fine"], start=1)]
    part = write_part(out, rows)
    table = pq.read_table(part).to_pylist()
    names = [r["media"][0] for r in table]
    assert all(n.startswith(f"{MEDIA_DIR}/") and (out / n).is_file() for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing written beside the output folder
    assert all(r["error"] is None for r in table)


def test_a_media_write_that_fails_fails_its_row_not_the_batch(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MEDIA_DIR).write_text("a file where the folder should be")
    rows = [{"line": 1, "id": "a", "error": None, "media_bytes": [b"x"], "media_ext": ["png"]},
            {"line": 2, "id": "b", "error": None}]
    table = pq.read_table(write_part(out, rows)).to_pylist()
    assert table[0]["error"].startswith("could not write media/a_0.png") and table[0]["media"] == []
    assert table[1]["error"] is None
