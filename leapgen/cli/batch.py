"""``leapgen generate <modality> --input prompts.jsonl --output out/ [--ray [--address ADDR] [--num-workers N]]``
(also spelled ``leapgen batch <modality> ...``).

Batch generation of a JSONL file of prompts into parquet + media files, resumable, in this process
or on Ray (:mod:`leapgen.distributed`). :func:`extend_generate` gives every ``leapgen generate``
modality the batch options: with ``--input`` the modality's one-prompt command becomes a batch job
(its positional prompt is then not needed)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from .common import parse_params


def cmd_batch(args: argparse.Namespace) -> int:
    from ..distributed import run_job

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    params = parse_params(args.param) if args.param else {}
    summary = run_job(args.input, args.output, modality=args.modality, pipeline=args.pipeline, sampler=args.sampler,
                      params=params, seed=args.seed, use_ray=args.ray, address=args.address,
                      num_workers=args.num_workers, batch_size=args.batch_size)
    print(json.dumps(summary, indent=1))
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
        positionals = [a for a in sp._actions if not a.option_strings]
        for a in positionals:  # the one-prompt argument is not needed for a batch job
            a.nargs, a.default, a.required = "?", None, False
        sp.set_defaults(func=_dispatch(modality, sp, sp.get_default("func"), [a.dest for a in positionals]))


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
                             '(e.g. {"prompt": "...", "max_new_tokens": 64}) or pass them to every line with '
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
        missing = [d for d in prompts if getattr(args, d) is None]
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
    p.add_argument("modality", help="text, image, molecule, or any with --pipeline")
    p.add_argument("--pipeline", default=None, help="pipeline name or folder (default: the modality's shipped one)")
    p.add_argument("--sampler", default=None, help="sampler name (default: the pipeline's; a line's own 'sampler' wins)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="call or sampler argument for every line, repeatable (a line's own value wins)")
    p.add_argument("--seed", type=int, default=0, help="base seed; prompt on line n uses seed+n unless it sets its own")
    _add_job_options(p, required=True)
    p.set_defaults(func=cmd_batch)
