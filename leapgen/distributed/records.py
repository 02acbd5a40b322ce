"""Batch jobs' input and output: JSONL prompts with line numbers, one result row per prompt.

Input: one JSON object per line (``{"prompt": "...", "id": "a1", "seed": 3, ...}``; a bare JSON
string is the pipeline's input, e.g. the prompt). A malformed line is reported with its line number in ``errors.jsonl`` and
the rest of the job goes on. Each prompt gets the seed ``seed + line`` unless it gives its own, so
its result does not depend on which worker ran it or with whom (1 worker, 2 workers or no Ray
write the same rows).

Output folder: ``part-<first>-<last>.parquet`` files (one per finished batch, written atomically),
``media/<id>_<k>.png|wav`` for pictures and audio (an id with other characters than ``A-Za-z0-9._-``
gets a safe stem plus a hash: :func:`media_stem`), ``errors.jsonl``. A text row also carries each
returned sequence with its index, finish / stop reason, log-probabilities and error
(:func:`text_sequences`). A rerun reads the ids already
in the parquet files and only does the others (resume without duplicates).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..configuration import json_safe
from ..errors import InputError

#: the shipped pipeline used for a modality when --pipeline is not given
DEFAULT_PIPELINES = {"text": "leapgen/text-code", "image": "leapgen/image-emoji", "molecule": "leapgen/molecule-safe"}
ERRORS_FILE = "errors.jsonl"
MEDIA_DIR = "media"
#: the longest id a line may give (it names the line's media files and its parquet rows)
MAX_ID_CHARS = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def check_id(value: Any) -> str | None:
    """Why ``value`` cannot be a line's ``id``, or None: a non-empty string (at most
    :data:`MAX_ID_CHARS` characters, no control characters) or an integer."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        kind = {dict: "an object", list: "an array", float: "a number", bool: "a boolean"}.get(type(value), "null")
        return f"'id' must be a string or an integer, got {kind} ({json.dumps(value)[:60]})"
    if isinstance(value, str):
        if not value.strip():
            return "'id' is empty; give a non-empty string or an integer"
        if len(value) > MAX_ID_CHARS:
            return f"'id' has {len(value)} characters; at most {MAX_ID_CHARS} are allowed"
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            return "'id' contains control characters (newline, tab, ...); remove them"
    return None


def media_stem(rid: str) -> str:
    """A file-name stem for an id: the id itself when it is made of ``A-Za-z0-9._-`` only (and does not
    start with a dot), else its safe characters (at most 80) + ``-`` + 10 hex digits of its SHA-1, so
    that ids like ``a/b`` or ``../x`` never leave ``media/`` and two ids never share a file."""
    if not _UNSAFE.search(rid) and not rid.startswith(".") and len(rid) <= 100:
        return rid
    safe = _UNSAFE.sub("_", rid).lstrip(".")[:80]
    return f"{safe}-{hashlib.sha1(rid.encode('utf-8')).hexdigest()[:10]}"


@dataclass
class Record:
    line: int  # 1-based line number in the input file
    id: str
    data: dict[str, Any]
    bare: bool = False  # the line was a bare JSON string (given the key ``input_param``)

    def as_row(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "record": json.dumps(self.data, sort_keys=True)}


def read_records(path: str | os.PathLike, input_param: str = "prompt") -> tuple[list[Record], list[dict[str, Any]]]:
    """Parse a JSONL file: the good records, and one error entry (line, error, text) per bad line;
    a bare string is ``{input_param: string}``. What the keys may be is checked by the job
    (:class:`leapgen.distributed.validate.LineChecker`)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--input {path} does not exist; pass a JSONL file with one prompt object per line.")
    records, errors, seen = [], [], set()
    with path.open(encoding="utf-8-sig", errors="replace") as f:  # -sig: a BOM (Windows editors) is no bad line 1
        for n, raw in enumerate(f, start=1):
            text = raw.strip()
            if not text:
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                errors.append({"line": n, "error": f"not JSON: {err.msg} at column {err.colno}", "text": text[:200]})
                continue
            bare = isinstance(value, str)
            if bare:
                value = {input_param: value}
            if not isinstance(value, dict):
                errors.append({"line": n, "error": f"expected a JSON object or string, got {type(value).__name__}",
                               "text": text[:200]})
                continue
            if "id" in value and (why := check_id(value["id"])) is not None:
                errors.append({"line": n, "error": why, "text": text[:200]})
                continue
            rid = str(value.pop("id", f"line{n}"))
            if rid in seen:
                errors.append({"line": n, "error": f"duplicate id {rid!r}", "text": text[:200]})
                continue
            seen.add(rid)
            records.append(Record(line=n, id=rid, data=value, bare=bare))
    return records, errors


def write_errors(out_dir: Path, errors: list[dict[str, Any]]) -> Path:
    path = out_dir / ERRORS_FILE
    with path.open("w") as f:
        for e in sorted(errors, key=lambda e: (e.get("line", 0), e.get("id", ""))):
            f.write(json.dumps(e) + "\n")
    return path


def done_ids(out_dir: Path, failed: bool = True) -> set[str]:
    """Ids already written to the parquet parts of ``out_dir`` (what a resumed run skips);
    ``failed=False`` leaves out the ids that have no successful row (``--retry-failed``)."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for part in sorted(out_dir.glob("part-*.parquet")):
        table = pq.read_table(part, columns=["id", "error"]).to_pylist()
        ids.update(r["id"] for r in table if failed or not r["error"])
    return ids


def write_part(out_dir: Path, rows: list[dict[str, Any]]) -> Path | None:
    """Write finished rows: media bytes to media/, the rest to one parquet part (atomic rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        return None
    media = out_dir / MEDIA_DIR
    clean = []
    for row in rows:
        row = dict(row)
        names = []
        for k, (blob, ext) in enumerate(zip(row.pop("media_bytes", []) or [], row.pop("media_ext", []) or [])):
            name = f"{MEDIA_DIR}/{media_stem(str(row['id']))}_{k}.{ext}"
            try:
                media.mkdir(parents=True, exist_ok=True)
                (out_dir / name).write_bytes(blob)
            except OSError as err:  # a full disk or a read-only folder fails this row, not the batch
                row["error"] = row.get("error") or f"could not write {name}: {err.strerror or err}"
                continue
            names.append(name)
        row["media"] = names
        clean.append(row)
    clean.sort(key=lambda r: r["line"])
    lines = [r["line"] for r in clean]
    path = out_dir / f"part-{min(lines):08d}-{max(lines):08d}.parquet"
    retry = 1
    while path.exists():  # a retried batch never replaces a part that holds other rows
        path = out_dir / f"part-{min(lines):08d}-{max(lines):08d}-retry{retry}.parquet"
        retry += 1
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pylist(clean), tmp)
    os.replace(tmp, path)
    return path


def read_results(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows written so far, one per id, in input order. An id retried (``--retry-failed``) has
    several rows: its successful one wins, else the last failure written."""
    import pyarrow.parquet as pq

    parts = sorted(Path(out_dir).glob("part-*.parquet"), key=lambda p: p.stat().st_mtime_ns)
    rows: dict[str, dict[str, Any]] = {}
    for part in parts:
        for row in pq.read_table(part).to_pylist():
            old = rows.get(row["id"])
            if old is None or old.get("error") or not row.get("error"):
                rows[row["id"]] = row
    return sorted(rows.values(), key=lambda r: r["line"])


# ------------------------------------------------------------------------------------------ one prompt
def _at(values: Any, k: int) -> Any:
    return values[k] if values is not None and k < len(values) else None


def text_sequences(out: Any) -> dict[str, Any]:
    """A text output's columns beyond ``output``: ``num_sequences`` (``num_return_sequences`` of the
    call) and ``sequences``, strict JSON text (:func:`~leapgen.configuration.json_safe`: NaN and
    infinities as null) of one object per returned sequence, in vLLM's ``CompletionOutput`` words:
    ``index``, ``text``, ``token_ids``, ``finish_reason``, ``stop_reason``, ``logprobs`` (with
    ``logprobs=k``: each token's log-probability, else null), ``top_logprobs`` (per token
    ``{"token_id": logprob}``, else null) and ``error`` (why that sequence failed, else null)."""
    seqs = [{"index": k, "text": text, "token_ids": _at(out.token_ids, k), "finish_reason": _at(out.finish_reasons, k),
             "stop_reason": _at(out.stop_reasons, k), "logprobs": _at(out.logprobs, k),
             "top_logprobs": _at(out.top_logprobs, k), "error": _at(out.errors, k)}
            for k, text in enumerate(out.texts)]
    return {"num_sequences": len(seqs), "sequences": json.dumps(json_safe(seqs), ensure_ascii=False, allow_nan=False)}


def _png(img: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _wav(wave: Any, rate: int) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, wave, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def output_row(out: Any) -> dict[str, Any]:
    """The columns of one result, chosen by the output's fields (text, SMILES, pictures, audio), and
    ``error`` when the pipeline refused the item (its ``errors``)."""
    row: dict[str, Any] = {"output": None, "media_bytes": [], "media_ext": []}
    if getattr(out, "smiles", None) is not None:
        row["output"] = json.dumps(out.smiles)
        row["valid"] = int(sum(out.valid))
    elif getattr(out, "texts", None) is not None:
        row["output"] = out.texts[0] if len(out.texts) == 1 else json.dumps(out.texts)
        if hasattr(out, "finish_reasons"):  # a text pipeline's per-sequence outputs
            row.update(text_sequences(out))
    if getattr(out, "images", None):
        row["media_bytes"] += [_png(im) for im in out.images if im is not None]
        row["media_ext"] += ["png"] * (len(row["media_bytes"]) - len(row["media_ext"]))
    if getattr(out, "audios", None):
        clips = [_wav(a, out.sample_rate) for a in out.audios if a is not None]
        row["media_bytes"] += clips
        row["media_ext"] += ["wav"] * len(clips)
    failed = [e for e in (getattr(out, "errors", None) or []) if e]
    if failed:  # the pipeline refused the item (its errors[i]): the row records why, not an empty output
        row["error"] = "InputError: " + "; ".join(str(e) for e in failed)
    s = getattr(out, "stats", None)
    if s is not None:
        row.update(sampler=s.sampler, new_tokens=int(s.new_tokens), target_forwards=int(s.target_forwards),
                   step_compression=float(s.step_compression), wall_s=float(s.wall_time))
    return row


__all__ = ["DEFAULT_PIPELINES", "Record", "done_ids", "output_row", "read_records", "read_results", "text_sequences",
           "write_errors", "write_part"]
