"""``save_pretrained`` is all or nothing (leapgen.pipelines.folders.staged_folder): a save that fails
part way over an existing pipeline folder left its old ``model_index.json`` beside new, partial
components; now the old folder is left exactly as it was and the staging folder is removed. A save
that succeeds keeps what writing over the folder kept (other files, the warning about another
pipeline's folder) and the side folders copied from the source."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from leapgen.pipelines import Pipeline

torch.set_num_threads(1)

PROMPT = "def add(a, b):"
KW = {"max_new_tokens": 6, "seed": 0}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _changed_pipeline(monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """A text pipeline whose weights differ from the shipped ones and whose last component's save
    raises, after the others were written."""
    pipe = Pipeline.from_pretrained("leapgen/text-code", draft=None)
    with torch.no_grad():
        for p in pipe.model.parameters():
            p.mul_(0.5)
    written = [c for c in pipe.components if getattr(pipe, c) is not None]
    assert len(written) >= 2, written

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(getattr(pipe, written[-1]), "save_pretrained", boom)
    return pipe


def test_a_failed_save_over_a_pipeline_folder_leaves_it_as_it_was(tmp_path, monkeypatch):
    folder = tmp_path / "copy"
    Pipeline.from_pretrained("leapgen/text-code", draft=None).save_pretrained(folder)
    (folder / "notes.txt").write_text("mine")
    before = _files(folder)
    expected = Pipeline.from_pretrained(folder)(PROMPT, **KW).token_ids

    with pytest.raises(OSError, match="disk full"):
        _changed_pipeline(monkeypatch).save_pretrained(folder)
    assert _files(folder) == before  # not one byte of the old folder changed
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]  # the staging folder is gone
    assert Pipeline.from_pretrained(folder)(PROMPT, **KW).token_ids == expected


def test_a_failed_save_into_a_new_folder_leaves_nothing(tmp_path, monkeypatch):
    with pytest.raises(OSError, match="disk full"):
        _changed_pipeline(monkeypatch).save_pretrained(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


def test_a_save_over_a_folder_keeps_its_other_files_and_swaps_in_whole(tmp_path, caplog):
    folder = tmp_path / "copy"
    Pipeline.from_pretrained("leapgen/peptide").save_pretrained(folder)  # another pipeline's folder
    (folder / "notes.txt").write_text("mine")
    pipe = Pipeline.from_pretrained("leapgen/text-code", draft=None)
    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.folders"):
        pipe.save_pretrained(folder)
    assert "holds a PeptidePipeline; writing a TextPipeline over it" in caplog.text
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "heads").is_dir()  # the side folder copied from the source
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]
    again = Pipeline.from_pretrained(folder)
    assert again(PROMPT, **KW).token_ids == pipe(PROMPT, **KW).token_ids
    again.save_pretrained(folder)  # in place: what sits beside the components stays
    assert (folder / "heads").is_dir() and (folder / "notes.txt").read_text() == "mine"
    assert Pipeline.from_pretrained(folder)(PROMPT, **KW).token_ids == pipe(PROMPT, **KW).token_ids


def test_saving_over_the_working_folder_leaves_the_process_in_the_new_one(tmp_path, monkeypatch):
    folder = tmp_path / "here"
    pipe = Pipeline.from_pretrained("leapgen/peptide")
    pipe.save_pretrained(folder)
    monkeypatch.chdir(folder)
    pipe.save_pretrained(".")
    assert Path.cwd() == folder and (Path(".") / "model_index.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["here"]
