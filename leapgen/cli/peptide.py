"""``leapgen sequence spectra.mgf [more.mgf | spectra.json ...] [--sampler ar_bidirectional] [--json]``:
de novo peptide sequencing of every MS/MS spectrum in the files.

Files: MGF (``BEGIN IONS`` ... ``END IONS`` blocks with ``PEPMASS``, ``CHARGE``, ``TITLE`` and one
``m/z intensity`` peak per line; parameters before the first block apply to every block), JSON (one
spectrum dict ``{"mz", "intensity", "precursor_mz", "charge"}`` or a list of them) or JSONL (one
such dict per line). A file chosen by its suffix; any other suffix is sniffed. Each spectrum is
named ``FILE#N`` (N counts from 1 within its file). A file that cannot be read, or a block or line
that cannot be parsed, is one item with its error; the other spectra are still sequenced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError
from .common import sampler_runs, wrong_pipeline
from .ocr import add_run_options, default_sampler, run_kwargs

DEFAULT_PEPTIDE_PIPELINE = "leapgen/peptide"
_COMMENT = ("#", ";", "!", "/")


# ------------------------------------------------------------------------------------------ reading
def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _mgf_param(params: dict[str, Any], key: str, value: str) -> None:
    key = key.strip().lower()
    value = value.strip()
    if key == "pepmass":  # "mz [intensity]"; a value that is no number is left for the pipeline to refuse
        parts = value.split()
        params[key] = tuple(_number(v) for v in parts) if parts else None
    else:
        params[key] = value  # CHARGE stays "2+": the pipeline reads MGF's charge notation


def parse_mgf(text: str) -> list[dict[str, Any] | InputError]:
    """The spectra of an MGF text, as pyteomics' MGF reader gives them (``m/z array``, ``intensity
    array``, ``params`` with ``pepmass`` and ``charge``); a block that cannot be read is an
    :class:`InputError` in its place (naming its line), so the others still count."""
    import numpy as np

    out: list[dict[str, Any] | InputError] = []
    glob: dict[str, Any] = {}
    block: dict[str, Any] | None = None
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(_COMMENT):
            continue
        upper = line.upper()
        if upper == "BEGIN IONS":
            if block is not None:
                out.append(InputError(f"the spectrum starting at line {start} has no END IONS (another BEGIN IONS at line {n})"))
            block, start = {"params": dict(glob), "mz": [], "intensity": [], "error": None}, n
        elif upper == "END IONS":
            if block is None:
                continue  # a stray END IONS ends nothing
            if block["error"]:
                out.append(InputError(block["error"]))
            elif not block["mz"]:
                title = f" {block['params']['title']!r}" if block["params"].get("title") else ""
                out.append(InputError(f"the spectrum{title} at line {start} has no peaks"))
            else:
                out.append({"m/z array": np.asarray(block["mz"], dtype=np.float64),
                            "intensity array": np.asarray(block["intensity"], dtype=np.float64),
                            "params": block["params"]})
            block = None
        elif "=" in line and line[0].isalpha():
            key, _, value = line.partition("=")
            _mgf_param(block["params"] if block is not None else glob, key, value)
        elif block is not None and block["error"] is None:
            fields = line.replace(",", " ").split()
            try:
                mz, inten = float(fields[0]), float(fields[1])
            except (IndexError, ValueError):
                block["error"] = f"line {n}: cannot read a peak ('m/z intensity') from {line[:60]!r}"
                continue
            block["mz"].append(mz)
            block["intensity"].append(inten)
    if block is not None:
        out.append(InputError(f"the spectrum starting at line {start} has no END IONS (the file ends first)"))
    return out


def _parse_json(text: str, lines: bool) -> list[Any]:
    if lines:
        items: list[Any] = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as err:
                    items.append(InputError(f"line {n} is not JSON ({err.msg})"))
        return items
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"not JSON ({err.msg} at line {err.lineno}); a JSON spectrum file holds a dict (mz, "
                         "intensity, precursor_mz, charge) or a list of them") from None
    return data if isinstance(data, list) else [data]


def read_spectra(path: str) -> list[Any]:
    """Every spectrum of the file at ``path`` (see the module docstring); one that cannot be read is an
    InputError in its place. A file that cannot be read at all raises InputError."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{path!r} is a directory, not a spectrum file; pass MGF or JSON files")
    if not p.is_file():
        raise InputError(f"spectrum file {path!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path!r} is not a text file; pass MGF, JSON or JSONL spectra") from None
    except OSError as err:
        raise InputError(f"{path!r} cannot be read ({err.strerror})") from None
    suffix = p.suffix.lower()
    head = text.lstrip()[:1]
    if suffix == ".mgf" or (suffix not in (".json", ".jsonl") and "BEGIN IONS" in text.upper()):
        items = parse_mgf(text)
        if not items:
            raise InputError(f"{path!r} holds no spectrum (no BEGIN IONS ... END IONS block)")
        return items
    if suffix in (".json", ".jsonl") or head in ("{", "["):
        items = _parse_json(text, lines=suffix == ".jsonl")
        if not items:
            raise InputError(f"{path!r} holds no spectrum")
        return items
    raise InputError(f"{path!r} is neither MGF (BEGIN IONS ... END IONS) nor JSON spectra")


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
    import torch

    from ..pipelines import Pipeline
    from ..pipelines.peptide import PeptidePipeline
    from ..samplers import DecodeStats
    from .common import print_json

    runs = sampler_runs(args.sampler, args.param) if args.sampler else None  # bad names fail before loading
    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, PeptidePipeline):
        raise wrong_pipeline(args.pipeline, pipe, "a peptide pipeline", f"pass --pipeline {DEFAULT_PEPTIDE_PIPELINE}")
    runs = runs or sampler_runs(default_sampler(pipe), args.param)
    entries = collect(list(args.files))
    todo = [i for i, e in enumerate(entries) if e["error"] is None]
    results, any_ok = [], False
    for k, (info, params) in enumerate(runs):
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
        any_ok = any_ok or any(r["error"] is None for r in rows)
        if args.json:
            results.append({"sampler": info.name, "results": rows, "stats": stats.as_dict()})
            continue
        if len(runs) > 1:
            print(f"{'' if k == 0 else chr(10)}--- {info.name} ---")
        for r in rows:
            print(f"{r['spectrum']}\tERROR: {r['error']}" if r["error"] else
                  f"{r['spectrum']}\t{r['sequence']}\t{r['score']:.3f}\t{r['mass_error']:+.4f}")
        print(stats.summary(), file=sys.stderr)
    if args.json:  # one sampler: {"results", "stats"}; several: {"runs": [{"sampler", "results", "stats"}, ...]}
        print_json({k: v for k, v in results[0].items() if k != "sampler"} if len(results) == 1 else {"runs": results})
    return 0 if any_ok else 1


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
