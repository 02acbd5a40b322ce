"""Reading MS/MS spectrum files for the peptide pipeline: MGF, JSON and JSONL.

MGF: ``BEGIN IONS`` ... ``END IONS`` blocks with ``PEPMASS``, ``CHARGE``, ``TITLE`` and one
``m/z intensity`` peak per line; parameters before the first block apply to every block. Each
spectrum comes out as pyteomics' MGF reader gives it (``m/z array``, ``intensity array``,
``params``), which :class:`~leapgen.pipelines.peptide.PeptidePipeline` takes as it is. JSON: one
spectrum dict ``{"mz", "intensity", "precursor_mz", "charge"}`` or a list of them; JSONL: one such
dict per line. A block or line that cannot be read is an :class:`~leapgen.errors.InputError` in its
place, so the other spectra still count::

    from leapgen.pipelines.spectra_files import read_spectra
    spectra = [s for s in read_spectra("run.mgf") if not isinstance(s, Exception)]
    out = Pipeline.from_pretrained("leapgen/peptide")(spectra)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError

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


def parse_json_spectra(text: str, lines: bool) -> list[Any]:
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
    p = Path(path).expanduser()  # "~/runs/a.mgf"
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
        items = parse_json_spectra(text, lines=suffix == ".jsonl")
        if not items:
            raise InputError(f"{path!r} holds no spectrum")
        return items
    raise InputError(f"{path!r} is neither MGF (BEGIN IONS ... END IONS) nor JSON spectra")


__all__ = ["parse_json_spectra", "parse_mgf", "read_spectra"]
