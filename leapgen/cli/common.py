"""Helpers shared by the subcommands: ``KEY=VALUE`` parsing, recipe options, pipeline loading
with an error that names the expected kind of pipeline (and the command that runs the one given),
the checks of output locations made before anything is generated, a pipeline call's parameters,
and strict JSON for every ``--json`` printer."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError

DEFAULT_TEXT_PIPELINE = "leapgen/text-code"
DEFAULT_IMAGE_PIPELINE = "leapgen/image-emoji"
DEFAULT_MOLECULE_PIPELINE = "leapgen/molecule-safe"


def parse_value(s: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"``/``"false"`` -> bool, ``"none"`` -> None, else the string."""
    low = s.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{"k": parse_value(v)}``."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--param expects key=value (e.g. --param num_draft_tokens=4), got {item!r}.")
        out[key] = parse_value(value)
    return out


def parse_extra_args(argv: list[str]) -> dict[str, Any]:
    """``["--target-tokens", "20000", "--flag", "--x=1"]`` -> ``{"target_tokens": 20000, "flag": True, "x": 1}``."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"unexpected argument {arg!r}; recipe options look like --name value.")
        name, sep, value = arg[2:].partition("=")
        key = name.replace("-", "_")
        if sep:
            out[key] = parse_value(value)
            i += 1
        elif i + 1 < len(argv) and not (argv[i + 1].startswith("--") and len(argv[i + 1]) > 2):
            out[key] = parse_value(argv[i + 1])
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def load_text_pipeline(name: str, diffusion: bool = False):
    """A text pipeline (autoregressive); with ``diffusion`` also a diffusion-LM one."""
    from ..pipelines import Pipeline, TextPipeline
    from ..pipelines.text_diffusion import DiffusionTextPipeline

    pipe = Pipeline.from_pretrained(name)
    kinds = (TextPipeline, DiffusionTextPipeline) if diffusion else (TextPipeline,)
    if not isinstance(pipe, kinds):
        raise wrong_pipeline(name, pipe, "a text pipeline", f"pass --pipeline {DEFAULT_TEXT_PIPELINE}")
    return pipe


#: the command that drives each kind of pipeline (named in the error when another command gets one)
PIPELINE_COMMANDS = {
    "TextPipeline": "leapgen generate text",
    "DiffusionTextPipeline": "leapgen generate text",
    "ImageARPipeline": "leapgen generate image",
    "ImageNARPipeline": "leapgen generate image",
    "ImageCTFPipeline": "leapgen generate image",
    "ImageScalePipeline": "leapgen generate image",
    "ImageMARPipeline": "leapgen generate image",
    "ImageDDPipeline": "leapgen generate image",
    "MoleculePipeline": "leapgen generate molecule",
    "AudioPipeline": "leapgen generate audio",
    "TTSPipeline": "leapgen generate speech",
    "ASRPipeline": "leapgen transcribe",
    "S2STPipeline": "leapgen translate",
    "OCRPipeline": "leapgen ocr",
    "PeptidePipeline": "leapgen sequence",
}


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def wrong_pipeline(name: str, pipe: Any, wanted: str, hint: str) -> ConfigError:
    """The error for a pipeline of the wrong kind: what it is, that it is not ``wanted`` (e.g. "a
    text pipeline"), the command that runs it (when one does) and what to pass instead (``hint``)."""
    kind = type(pipe).__name__
    command = next((c for cls in type(pipe).__mro__ if (c := PIPELINE_COMMANDS.get(cls.__name__))), None)
    runs_it = f"run it with `{command}`, or " if command else ""
    return ConfigError(f"{name} is {_a(kind)}, not {wanted}; {runs_it}{hint}.")


def load_image_pipeline(name: str, raster_only: bool = True):
    """An image pipeline: with ``raster_only`` one with a VQ tokenizer and token grids (what ``leapgen
    bench image`` measures), else any prompt-to-image pipeline (continuous-token MAR and DD too)."""
    from ..pipelines import Pipeline

    pipe = Pipeline.from_pretrained(name)
    if not hasattr(pipe, "class_names"):
        raise wrong_pipeline(name, pipe, "an image pipeline", f"pass --pipeline {DEFAULT_IMAGE_PIPELINE}")
    if raster_only and not hasattr(pipe, "vq"):  # an image pipeline, but with continuous tokens (MAR)
        raise ConfigError(f"{name} is {_a(type(pipe).__name__)}, a continuous-token image pipeline this command cannot "
                          "run (it needs token grids, e.g. ImageARPipeline); `leapgen generate image` generates with it "
                          f"and `leapgen bench image-continuous` benchmarks it, or pass --pipeline {DEFAULT_IMAGE_PIPELINE}.")
    return pipe


__all__ = [
    "DEFAULT_IMAGE_PIPELINE",
    "DEFAULT_MOLECULE_PIPELINE",
    "DEFAULT_TEXT_PIPELINE",
    "check_outputs",
    "check_output_path",
    "declare_outputs",
    "dumps_json",
    "load_image_pipeline",
    "load_text_pipeline",
    "parse_extra_args",
    "parse_params",
    "parse_value",
    "print_json",
    "wrong_pipeline",
]


def split_list(spec: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (comma-separated CLI lists)."""
    return [x.strip() for x in (spec or "").split(",") if x.strip()]


def sampler_runs(spec: str, param_items: list[str] | None) -> list[tuple[Any, dict[str, Any]]]:
    """The samplers named in ``--sampler a,b`` with the ``--param`` values each one takes.

    With several samplers every parameter goes to the samplers that have it, and one that no sampler
    takes is an error; unknown names raise UnknownSamplerError listing the registered ones."""
    from ..samplers import sampler_info

    names = split_list(spec)
    if not names:
        raise ConfigError("--sampler needs at least one sampler name (see `leapgen samplers`).")
    params = parse_params(param_items)
    infos = [sampler_info(n) for n in names]
    if len(infos) == 1:
        return [(infos[0], params)]
    unused = [k for k in params if not any(k in i.defaults for i in infos)]
    if unused:
        raise ConfigError(f"no sampler among {names} takes parameter(s) {unused}.")
    return [(i, {k: v for k, v in params.items() if k in i.defaults}) for i in infos]


def run_registered(kind: str, name: str, fn, extra: list[str], out: str | None, seed: int | None) -> int:
    """Run a registered recipe or corpus builder ``fn`` with the ``--options`` in ``extra`` (checked
    against its signature), ``out_dir`` and ``seed``; print its JSON summary. ``kind`` names it in errors."""
    import logging

    kwargs = parse_extra_args(extra)
    if out is not None:
        kwargs["out_dir"] = out
    if seed is not None:
        kwargs["seed"] = seed
    from ..train.common import check_options
    from ..train.option_values import check_option_values

    if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
        check_options(name, fn, kwargs, kind=kind)  # names and values
    else:  # its own named options here; it checks what it passes on
        kwargs = check_option_values(name, fn, kwargs, kind=kind)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = fn(**kwargs)
    if result is not None:
        print_json(result)
    return 0


# ------------------------------------------------------------------------------------------ strict JSON
def dumps_json(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj`` (what every ``--json`` printer of the CLI writes): NaN and
    infinities become ``null``, so any JSON parser reads it."""
    from ..bench.common import json_safe

    return json.dumps(json_safe(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def print_json(obj: Any, indent: int | None = 2) -> None:
    """Print ``obj`` as strict JSON (see :func:`dumps_json`) on stdout."""
    print(dumps_json(obj, indent=indent))


# ------------------------------------------------------------------------------------------ output locations
#: kinds of output location: a folder (created with its parents), a file whose folder is created
#: if missing, and a file that must go in an existing folder
OUTPUT_KINDS = ("dir", "file", "file_in_dir")


def file_line(row: dict[str, Any]) -> str:
    """``FILE<TAB>TEXT``, or ``FILE<TAB>ERROR: why`` (``transcribe`` and ``ocr``)."""
    return f"{row['file']}\tERROR: {row['error']}" if row["error"] else f"{row['file']}\t{row['text']}"


class RunReport:
    """What ``transcribe``, ``ocr`` and ``sequence`` print for each sampler they run: one line per item
    (``line(row)``) and the statistics on stderr, or, with ``--json``, the rows and statistics of every
    run printed at the end (one run: ``{"results", "stats"}``; several: ``{"runs": [{"sampler", ...}]}``).
    :meth:`finish` returns the exit code: 0 when some item worked, 1 when every one failed."""

    def __init__(self, as_json: bool, n_runs: int) -> None:
        self.as_json, self.n_runs = as_json, n_runs
        self.results: list[dict[str, Any]] = []
        self.runs = 0
        self.any_ok = False

    def add(self, name: str, rows: list[dict[str, Any]], stats: Any, line: Any) -> None:
        self.any_ok = self.any_ok or any(r.get("error") is None for r in rows)
        self.runs += 1
        if self.as_json:
            self.results.append({"sampler": name, "results": rows, "stats": stats.as_dict()})
            return
        if self.n_runs > 1:
            print(f"{'' if self.runs == 1 else chr(10)}--- {name} ---")
        for r in rows:
            print(line(r))
        print(stats.summary(), file=sys.stderr)

    def finish(self) -> int:
        if self.as_json:
            one = len(self.results) == 1
            print_json({k: v for k, v in self.results[0].items() if k != "sampler"} if one else {"runs": self.results})
        return 0 if self.any_ok else 1


def _writable_dir(folder: Path, flag: str, path: Path) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: the folder {folder} is not writable; pass a path in a folder you can write to.")


#: suffixes that name a file, not a folder, in an output-folder option
FILE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".wav", ".flac", ".mp3",
                           ".ogg", ".json", ".jsonl", ".md", ".txt", ".csv", ".parquet", ".sdf", ".smi"})


def check_output_path(path: str | os.PathLike, flag: str, kind: str = "file") -> Path:
    """Check, before anything is generated, that ``path`` can be written as ``kind`` (one of
    :data:`OUTPUT_KINDS`); raise :class:`ConfigError` naming ``flag`` and the fix otherwise. Creates nothing."""
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind must be one of {OUTPUT_KINDS}, got {kind!r}")
    p = Path(path).expanduser()
    if kind == "dir":
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{flag} {p} exists and is not a folder; pass a folder (a missing one is created).")
        if not p.exists() and p.suffix.lower() in FILE_SUFFIXES:  # `--out cat.png` would make a folder cat.png
            raise ConfigError(f"{flag} {p} names a {p.suffix} file, but {flag} is a folder: the command writes its "
                              f"files inside it under names of its own; pass a folder (e.g. {p.parent}).")
        missing_from = p
    else:
        if p.is_dir():
            raise ConfigError(f"{flag} {p} is a folder, not a file; pass a file path (e.g. one inside that folder).")
        if p.exists() and not os.access(p, os.W_OK):
            raise ConfigError(f"{flag} {p} exists and is not writable; pass another file name.")
        parent = p.parent if str(p.parent) else Path(".")
        if kind == "file_in_dir":
            if not parent.exists():
                raise ConfigError(f"{flag} {p}: the folder {parent} does not exist; create it (mkdir -p {parent}) "
                                  "or pass a path in an existing folder.")
            if not parent.is_dir():
                raise ConfigError(f"{flag} {p}: {parent} is a file, not a folder; pass a path in a folder.")
            _writable_dir(parent, flag, p)
            return p
        missing_from = parent
    ancestor = missing_from
    while not ancestor.exists():  # the nearest existing folder, where the missing ones will be created
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise ConfigError(f"{flag} {p}: {ancestor} is a file, not a folder; pass a path under a folder.")
    if ancestor.exists():
        _writable_dir(ancestor, flag, p)
    return p


def add_seed_threads(parser: argparse.ArgumentParser) -> None:
    """The ``--seed`` (base seed) and ``--threads`` options every bench takes."""
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")


def declare_outputs(parser: argparse.ArgumentParser, **kinds: str) -> None:
    """Mark options of ``parser`` as output locations (dest -> kind of :data:`OUTPUT_KINDS`), which
    :func:`check_outputs` checks before the command runs."""
    for kind in kinds.values():
        if kind not in OUTPUT_KINDS:
            raise ValueError(f"kind must be one of {OUTPUT_KINDS}, got {kind!r}")
    declared = {**(parser.get_default("output_paths") or {}), **kinds}
    parser.set_defaults(output_paths=declared)


def check_outputs(args: argparse.Namespace) -> None:
    """Check every output location the command declared (see :func:`declare_outputs`) that is set;
    a batch job (``--input``) writes only its ``--output`` folder."""
    declared = dict(getattr(args, "output_paths", None) or {})
    if "output" in declared and getattr(args, "input", None) is not None:
        declared = {"output": declared["output"]}
    for dest, kind in declared.items():
        value = getattr(args, dest, None)
        if isinstance(value, (str, os.PathLike)) and str(value):
            check_output_path(value, "--" + dest.replace("_", "-"), kind)


