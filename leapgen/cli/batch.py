"""``leapgen batch <modality> --input prompts.jsonl --output out/ [--ray [--address ADDR] [--num-workers N]]``.

A top-level command (rather than options of ``leapgen generate``, whose modalities take one
positional prompt): batch generation of a JSONL file of prompts into parquet + media files,
resumable, in this process or on Ray (:mod:`leapgen.distributed`)."""

from __future__ import annotations

import argparse
import json
import logging

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


def register_cli(parsers) -> None:
    p = parsers.top.add_parser(
        "batch", help="generate a JSONL file of prompts into parquet + media files (optionally on Ray)",
        description="Batch generation: one JSON object per line ({\"prompt\": ..., \"id\": ..., other call arguments}); "
        "results as parquet parts and media files in --output; bad lines in errors.jsonl; a rerun resumes.")
    p.add_argument("modality", help="text, image, molecule, or any with --pipeline")
    p.add_argument("--input", required=True, help="JSONL file of prompts")
    p.add_argument("--output", required=True, help="output folder (parquet parts, media/, errors.jsonl)")
    p.add_argument("--pipeline", default=None, help="pipeline name or folder (default: the modality's shipped one)")
    p.add_argument("--sampler", default=None, help="sampler name (default: the pipeline's)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable")
    p.add_argument("--seed", type=int, default=0, help="base seed; prompt on line n uses seed+n unless it sets its own")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per batch (and per parquet part)")
    p.add_argument("--ray", action="store_true", help="run on Ray (a local one unless --address)")
    p.add_argument("--address", default=None, help="join this Ray cluster (e.g. ray://head:10001 or auto)")
    p.add_argument("--num-workers", type=int, default=1, help="Ray actors, each with its own pipeline (default 1)")
    p.set_defaults(func=cmd_batch)
