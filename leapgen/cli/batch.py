"""``leapgen generate <modality> --input prompts.jsonl --output out/ [--ray [--address ADDR] [--num-workers N]]``
(also spelled ``leapgen batch <modality> ...``).

Batch generation of a JSONL file of prompts into parquet + media files, resumable, in this process
or on Ray (:mod:`leapgen.distributed`). :func:`extend_generate` gives every ``leapgen generate``
modality the batch options: with ``--input`` the modality's one-prompt command becomes a batch job
(its positional prompt is then not needed).

Before the job runs, every line is checked against the pipeline's call (read from its folder, no
weights loaded): a line that lacks a required key (``prompt``, ``text``...) or has keys the call does
not take goes to ``errors.jsonl`` with its line number and what is wrong, and the others run; a bare
JSON string is the pipeline's first input (``text`` for speech)."""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from .audio import DEFAULT_AUDIO_PIPELINE
from .common import (
    CallSignature,
    call_signature,
    check_output_path,
    declare_outputs,
    dumps_json,
    parse_params,
    print_json,
)
from .speech import DEFAULT_TTS_PIPELINE

logger = logging.getLogger(__name__)

#: shipped pipelines of the modalities leapgen.distributed has no default for
CLI_DEFAULT_PIPELINES = {"audio": DEFAULT_AUDIO_PIPELINE, "speech": DEFAULT_TTS_PIPELINE}


def _signature(pipeline: str) -> tuple[str, CallSignature]:
    """The pipeline's class name and call parameters, from its model_index.json (nothing loaded)."""
    from ..pipelines.base import pipeline_class, read_model_index, resolve_pretrained

    folder = resolve_pretrained(pipeline)
    cls = pipeline_class(read_model_index(folder)["_class_name"], folder)
    return cls.__name__, call_signature(cls)


def _sampler_keys() -> set[str]:
    from ..samplers import list_samplers

    return {k for info in list_samplers() for k in info.defaults}


def _unknown_keys(keys: list[str], sig: CallSignature, sampler_keys: set[str]) -> list[str]:
    return [k for k in keys if k not in sig.names and not (sig.sampler_params and k in sampler_keys)]


def _suggest(key: str, sig: CallSignature, sampler_keys: set[str]) -> str:
    pool = list(sig.names) + (sorted(sampler_keys) if sig.sampler_params else [])
    if key == "prompt" and sig.required:
        return f" (this pipeline's input is {sig.required[0]!r})"
    close = difflib.get_close_matches(key, pool, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def line_problem(data: dict[str, Any], sig: CallSignature, cls: str, job_keys: set[str], sampler_keys: set[str]) -> str | None:
    """What is wrong with one JSONL object for a call of ``cls`` (None = fine): the required keys it
    lacks (the job's --param counts) and the keys the call does not take."""
    missing = [k for k in sig.required if k not in data and k not in job_keys]
    unknown = _unknown_keys(list(data), sig, sampler_keys)
    if not missing and not unknown:
        return None
    parts = []
    if missing:
        parts.append(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}")
    if unknown:
        parts.append("unknown key" + ("s " if len(unknown) > 1 else " ")
                     + ", ".join(repr(k) + _suggest(k, sig, sampler_keys) for k in unknown))
    example = json.dumps({k: "..." for k in sig.required} or {"seed": 0})
    return f"{'; '.join(parts)}. A {cls} line takes {sig.describe()}, e.g. {example}."


def check_lines(path: Path, pipeline: str, params: dict[str, Any], work_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """Check every line of ``path`` against ``pipeline``'s call. Returns the file to run (``path``,
    or a copy in ``work_dir`` with the bad lines blanked, so that line numbers and seeds are kept,
    and bare strings given the pipeline's input key) and one error entry per bad line."""
    cls, sig = _signature(pipeline)
    sampler_keys = _sampler_keys()
    unknown = _unknown_keys(list(params), sig, sampler_keys)
    if unknown:
        raise ConfigError(f"--param {', '.join(unknown)}: {cls} ({pipeline}) takes no such argument; it takes "
                          f"{sig.describe()}.")
    input_key = sig.required[0] if sig.required else None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    errors: list[dict[str, Any]] = []
    changed = False
    for n, raw in enumerate(lines, start=1):
        try:
            value = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError:
            continue  # leapgen.distributed reports it (not JSON) with its line number
        if isinstance(value, str):
            if input_key is None:
                errors.append({"line": n, "error": f"a bare string is no {cls} call; give a JSON object, e.g. "
                               f"{{\"seed\": 0}} (it takes {sig.describe()}).", "text": raw.strip()[:200]})
                lines[n - 1], changed = "", True
            elif input_key != "prompt":  # leapgen.distributed reads a bare string as {"prompt": ...}
                lines[n - 1], changed = json.dumps({input_key: value}), True
            continue
        if not isinstance(value, dict):
            continue
        problem = line_problem({k: v for k, v in value.items() if k != "id"}, sig, cls, set(params), sampler_keys)
        if problem is not None:
            errors.append({"line": n, "error": problem, "text": raw.strip()[:200]})
            lines[n - 1], changed = "", True
    if not changed:
        return path, errors
    copy = work_dir / "checked_input.jsonl"
    copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return copy, errors


def _merge_errors(out_dir: Path, summary: dict[str, Any], line_errors: list[dict[str, Any]]) -> None:
    """Add the lines refused before the job to its errors.jsonl and summary (bad lines)."""
    from ..distributed.records import ERRORS_FILE, write_errors

    path = out_dir / ERRORS_FILE
    kept = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    write_errors(out_dir, kept + line_errors)
    summary["bad_lines"] = summary.get("bad_lines", 0) + len(line_errors)
    (out_dir / "summary.json").write_text(dumps_json(summary, indent=1) + "\n")


def cmd_batch(args: argparse.Namespace) -> int:
    from ..distributed import run_job
    from ..distributed.records import DEFAULT_PIPELINES

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    params = parse_params(args.param) if args.param else {}
    out = check_output_path(args.output, "--output", "dir")
    source = Path(args.input)
    if not source.is_file():
        raise InputError(f"--input {source} does not exist; pass a JSONL file with one prompt object per line.")
    pipeline = args.pipeline or DEFAULT_PIPELINES.get(args.modality) or CLI_DEFAULT_PIPELINES.get(args.modality)
    line_errors: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="leapgen-batch-") as tmp:
        if pipeline is not None:  # without one, run_job says which modalities have a default
            source, line_errors = check_lines(source, pipeline, params, Path(tmp))
        summary = run_job(source, out, modality=args.modality, pipeline=pipeline, sampler=args.sampler,
                          params=params, seed=args.seed, use_ray=args.ray, address=args.address,
                          num_workers=args.num_workers, batch_size=args.batch_size)
    if line_errors:
        logger.info("batch: %d lines refused before the job (missing or unknown keys), see %s/errors.jsonl",
                    len(line_errors), out)
        _merge_errors(out, summary, line_errors)
    print_json(summary, indent=1)
    if summary["bad_lines"] or summary["failed"]:
        print(f"{summary['bad_lines']} bad lines and {summary['failed']} failed prompts: see {args.output}/errors.jsonl")
    return 0


BATCH_OPTIONS = ("--input", "--output", "--batch-size", "--ray", "--address", "--num-workers")


def _add_job_options(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--input", required=required, help="JSONL file of prompts" + ("" if required else " (a batch job)"))
    p.add_argument("--output", required=required, help="output folder (parquet parts, media/, errors.jsonl)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per batch (and per parquet part)")
    p.add_argument("--ray", action="store_true", help="run on Ray (a local one unless --address)")
    p.add_argument("--address", default=None, help="join this Ray cluster (e.g. ray://head:10001 or auto)")
    p.add_argument("--num-workers", type=int, default=1, help="Ray actors, each with its own pipeline (default 1)")


def extend_generate(gsub: argparse._SubParsersAction) -> None:
    """Give every ``leapgen generate`` modality the batch-job options (called once every family
    has registered its modality). Options a modality already defines are left to it."""
    for modality, sp in gsub.choices.items():
        if any(o in sp._option_string_actions for o in BATCH_OPTIONS):
            continue
        group = sp.add_argument_group("batch job (JSONL in, parquet + media out; optionally on Ray)")
        _add_job_options(group, required=False)  # type: ignore[arg-type]
        declare_outputs(sp, output="dir")
        positionals = [a for a in sp._actions if not a.option_strings]
        for a in positionals:  # the one-prompt argument is not needed for a batch job
            # a list stays a list (nargs "+" -> "*"): "?" would hand a sentence over as one string
            a.nargs = "*" if a.nargs in ("+", "*") else "?"
            a.default, a.required = None, False
        sp.set_defaults(func=_dispatch(modality, sp, sp.get_default("func"), [a.dest for a in positionals]))


def _example_line(parser: argparse.ArgumentParser, args: argparse.Namespace, given: list[argparse.Action],
                  prompts: list[str]) -> str:
    """A JSONL line that carries the one-prompt options given, with the pipeline's own key names when
    its folder can be read (e.g. ``{"text": "...", "prompt_audio": "voice.wav"}``)."""
    line: dict[str, Any] = {(prompts[0] if prompts else "prompt"): "..."}
    try:
        _, sig = _signature(getattr(args, "pipeline", None) or "")
        names: tuple[str, ...] | None = sig.names
        line = {(sig.required[0] if sig.required else "prompt"): "..."}
    except Exception:  # noqa: BLE001 - only the example's key names depend on it
        names = None
    for a in given:
        if names is None or a.dest in names:
            line[a.dest] = getattr(args, a.dest)
    if len(line) == 1:
        line["seed"] = 3
    return json.dumps(line)


def _dispatch(modality: str, parser: argparse.ArgumentParser, single: Any, prompts: list[str]) -> Any:
    def run(args: argparse.Namespace) -> int:
        if args.input is not None:
            if args.output is None:
                parser.error("--input needs --output (the folder for the parquet parts, media/ and errors.jsonl)")
            shared = {"help", "sampler", "pipeline", "param", "seed"} | {o.lstrip("-").replace("-", "_") for o in BATCH_OPTIONS}
            given = [a for a in parser._actions if a.option_strings and a.dest not in shared
                     and getattr(args, a.dest, a.default) != a.default]
            if given:  # one-prompt options are not guessed into call arguments: say where they go
                flags = ", ".join(a.option_strings[-1] for a in given)
                parser.error(f"{flags} set(s) one prompt's call; in a batch job put call arguments in each JSONL line "
                             f"(e.g. {_example_line(parser, args, given, prompts)}) or pass them to every line with "
                             "--param KEY=VALUE")
            args.modality = modality
            if getattr(args, "sampler", None) is not None and "," in args.sampler:
                parser.error("a batch job runs one sampler; give one --sampler name")
            args.param = getattr(args, "param", None)
            args.seed = getattr(args, "seed", None) or 0
            args.pipeline = getattr(args, "pipeline", None)
            return cmd_batch(args)
        if args.output is not None or args.ray or args.address is not None:
            parser.error("--output, --ray and --address go with --input (a JSONL file of prompts)")
        missing = [d for d in prompts if getattr(args, d) in (None, [])]
        if missing:
            parser.error(f"the following arguments are required: {', '.join(missing)} (or --input prompts.jsonl "
                         "for a batch job)")
        return single(args)

    return run


def register_cli(parsers) -> None:
    p = parsers.top.add_parser(
        "batch", help="generate a JSONL file of prompts into parquet + media files (optionally on Ray)",
        description="Batch generation: one JSON object per line ({\"prompt\": ..., \"id\": ..., other call arguments}); "
        "results as parquet parts and media files in --output; bad lines in errors.jsonl; a rerun resumes.")
    p.add_argument("modality", help="text, image, molecule, audio, speech, or any with --pipeline")
    p.add_argument("--pipeline", default=None, help="pipeline name or folder (default: the modality's shipped one)")
    p.add_argument("--sampler", default=None, help="sampler name (default: the pipeline's; a line's own 'sampler' wins)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="call or sampler argument for every line, repeatable (a line's own value wins)")
    p.add_argument("--seed", type=int, default=0, help="base seed; prompt on line n uses seed+n unless it sets its own")
    _add_job_options(p, required=True)
    declare_outputs(p, output="dir")
    p.set_defaults(func=cmd_batch)
