"""``leapgen generate <modality> --input prompts.jsonl --output out/ [--ray [--address ADDR] [--num-workers N]]``
(also spelled ``leapgen batch <modality> ...``).

Batch generation of a JSONL file of prompts into parquet + media files, resumable, in this process
or on Ray (:mod:`leapgen.distributed`). :func:`extend_generate` gives every ``leapgen generate``
modality the batch options: with ``--input`` the modality's one-prompt command becomes a batch job
(its positional prompt is then not needed).

Every line is checked against the pipeline's call before any weights load
(:mod:`leapgen.distributed.validate`): a line that lacks a required key (``prompt``, ``text``...) or
has keys the call does not take goes to ``errors.jsonl`` with its line number and what is wrong, and
the others run; a bare JSON string is the pipeline's first input (``text`` for speech)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from ..errors import InputError
from .audio import DEFAULT_AUDIO_PIPELINE
from .common import (
    check_output_path,
    declare_outputs,
    parse_params,
    print_json,
)
from .speech import DEFAULT_TTS_PIPELINE

logger = logging.getLogger(__name__)

#: shipped pipelines of the modalities leapgen.distributed has no default for
CLI_DEFAULT_PIPELINES = {"audio": DEFAULT_AUDIO_PIPELINE, "speech": DEFAULT_TTS_PIPELINE}


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
    summary = run_job(source, out, modality=args.modality, pipeline=pipeline, sampler=args.sampler, params=params,
                      seed=args.seed, use_ray=args.ray, address=args.address, num_workers=args.num_workers,
                      batch_size=args.batch_size, retry_failed=args.retry_failed)
    print_json(summary, indent=1)
    if summary["bad_lines"] or summary["failed"]:
        print(f"{summary['bad_lines']} bad lines and {summary['failed']} failed prompts: see {args.output}/errors.jsonl")
    return 0


BATCH_OPTIONS = ("--input", "--output", "--batch-size", "--ray", "--address", "--num-workers", "--retry-failed")


def _add_job_options(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--input", required=required, help="JSONL file of prompts" + ("" if required else " (a batch job)"))
    p.add_argument("--output", required=required, help="output folder (parquet parts, media/, errors.jsonl)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per batch (and per parquet part)")
    p.add_argument("--ray", action="store_true", help="run on Ray (a local one unless --address)")
    p.add_argument("--address", default=None, help="join this Ray cluster (e.g. ray://head:10001 or auto)")
    p.add_argument("--num-workers", type=int, default=1, help="Ray actors, each with its own pipeline (default 1)")
    p.add_argument("--retry-failed", action="store_true",
                   help="a rerun into --output also generates again the prompts whose rows failed (by default it skips every id written)")


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
        from ..pipelines.signature import pipeline_signature

        _, sig = pipeline_signature(getattr(args, "pipeline", None) or "")
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
