"""``leapgen sequence spectra.mgf [more.mgf | spectra.json ...] [--sampler ar_bidirectional] [--json]``:
de novo peptide sequencing of every MS/MS spectrum in the files.

Files: MGF, JSON or JSONL, read by :mod:`leapgen.pipelines.spectra_files` (chosen by the suffix;
any other suffix is sniffed). Each spectrum is
named ``FILE#N`` (N counts from 1 within its file). A file that cannot be read, or a block or line
that cannot be parsed, is one item with its error; the other spectra are still sequenced.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError
from ..pipelines.spectra_files import read_spectra
from .common import RunReport
from .ocr import add_run_options, load_runs, run_kwargs

DEFAULT_PEPTIDE_PIPELINE = "leapgen/peptide"


# ------------------------------------------------------------------------------------------ reading
def _title(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return None
    title = (spec.get("params") or {}).get("title") if isinstance(spec.get("params"), dict) else None
    title = title if title is not None else spec.get("title")
    return None if title is None else str(title)


def collect(files: list[str]) -> list[dict[str, Any]]:
    """One entry per spectrum of ``files`` (``label``, ``file``, ``index``, ``title``, ``spectrum``,
    ``error``); a file that cannot be read is one entry with its error."""
    entries = []
    for f in files:
        try:
            items = read_spectra(f)
        except InputError as err:
            entries.append({"label": f, "file": f, "index": None, "title": None, "spectrum": None, "error": str(err)})
            continue
        for n, item in enumerate(items, 1):
            bad = isinstance(item, InputError)
            entries.append({"label": f"{f}#{n}", "file": f, "index": n, "title": None if bad else _title(item),
                            "spectrum": None if bad else item, "error": str(item) if bad else None})
    return entries


# ------------------------------------------------------------------------------------------ command
def cmd_sequence(args: argparse.Namespace) -> int:
    from ..pipelines.peptide import PeptidePipeline
    from ..samplers import DecodeStats

    pipe, runs = load_runs(args, PeptidePipeline, "a peptide pipeline", DEFAULT_PEPTIDE_PIPELINE)
    entries = collect(list(args.files))
    todo = [i for i, e in enumerate(entries) if e["error"] is None]
    report = RunReport(args.json, len(runs))
    for info, params in runs:
        rows = [{"spectrum": e["label"], "file": e["file"], "index": e["index"], "title": e["title"], "sequence": None,
                 "score": None, "precursor_ok": None, "mass_error": None, "error": e["error"]} for e in entries]
        if todo:
            out = pipe([entries[i]["spectrum"] for i in todo], sampler=info.name, **run_kwargs(args, params))
            for j, i in enumerate(todo):
                rows[i].update(sequence=out.sequences[j], score=out.scores[j], precursor_ok=out.precursor_ok[j],
                               mass_error=out.mass_error[j], error=out.errors[j])
            stats = out.stats
        else:  # nothing readable: no call (the pipeline refuses an empty list)
            stats = DecodeStats(sampler=info.name)
        report.add(info.name, rows, stats, _spectrum_line)
    return report.finish()


def _spectrum_line(r: dict[str, Any]) -> str:
    if r["error"]:
        return f"{r['spectrum']}\tERROR: {r['error']}"
    return f"{r['spectrum']}\t{r['sequence']}\t{r['score']:.3f}\t{r['mass_error']:+.4f}"


def register_cli(parsers: Any) -> None:
    t = parsers.top.add_parser(
        "sequence", help="de novo peptide sequencing of MS/MS spectra (MGF or JSON files)",
        description="Sequence every spectrum of MGF / JSON / JSONL files with the peptide pipeline. Prints "
                    "FILE#N<TAB>PEPTIDE<TAB>SCORE<TAB>MASS_ERROR per spectrum (SCORE: mean log-probability per "
                    "residue; MASS_ERROR: peptide mass minus precursor mass, Da), FILE#N<TAB>ERROR: ... for one that "
                    "cannot be sequenced; exits 1 only when every spectrum failed.")
    t.add_argument("files", nargs="+", metavar="SPECTRUM_FILE",
                   help="MGF files (PEPMASS, CHARGE, peaks), or JSON / JSONL files of {mz, intensity, precursor_mz, "
                        "charge} dicts")
    t.add_argument("--sampler", default=None,
                   help="ar_bidirectional (the pipeline's default), ar, ar_beam, ctc_pmc; or several separated by "
                        "commas (each runs in turn)")
    add_run_options(t, DEFAULT_PEPTIDE_PIPELINE, "spectra", 32)
    t.set_defaults(func=cmd_sequence)
