"""``leapgen ocr word.png page.png [--sampler cppd] [--layout auto|word|page] [--json]``: read the text in each image file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import RunReport, file_line, sampler_runs, wrong_pipeline

DEFAULT_OCR_PIPELINE = "leapgen/ocr-en"


def default_sampler(pipe: Any) -> str:
    """The sampler a pipeline's call uses when none is given (its ``sampler`` keyword's default)."""
    import inspect

    return inspect.signature(pipe.__call__).parameters["sampler"].default


def load_runs(args: argparse.Namespace, kind: type, wanted: str, default_pipeline: str) -> tuple[Any, list[Any]]:
    """``(pipeline, sampler runs)``: ``--sampler`` / ``--param`` checked before anything loads, the
    pipeline refused unless a ``kind``, and its own default sampler when ``--sampler`` is not given."""
    import torch

    from ..pipelines import Pipeline

    runs = sampler_runs(args.sampler, args.param) if args.sampler else None  # bad names fail before loading
    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, kind):
        raise wrong_pipeline(args.pipeline, pipe, wanted, f"pass --pipeline {default_pipeline}")
    return pipe, runs or sampler_runs(default_sampler(pipe), args.param)


def run_kwargs(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """The keywords of a recognition pipeline's call that the shared options set (and ``--param``'s)."""
    extra = {"seed": args.seed} if args.seed is not None else {}
    if args.temperature is not None:
        extra["temperature"] = args.temperature
    return {"batch_size": args.batch_size, "progress": sys.stderr.isatty() or args.progress, **extra, **params}


def cmd_ocr(args: argparse.Namespace) -> int:
    from ..pipelines.ocr import OCRPipeline

    pipe, runs = load_runs(args, OCRPipeline, "an OCR pipeline", DEFAULT_OCR_PIPELINE)
    report = RunReport(args.json, len(runs))
    for info, params in runs:
        out = pipe(list(args.files), sampler=info.name, layout=args.layout, **run_kwargs(args, params))
        rows = [{"file": f, "text": t, "error": e, "confidence": wc, "char_confidences": cc, "words": ws}
                for f, t, e, wc, cc, ws in zip(args.files, out.texts, out.errors, out.word_confidences, out.confidences,
                                                out.words)]
        report.add(info.name, rows, out.stats, text_lines)
    return report.finish()


def text_lines(row: dict[str, Any]) -> str:
    """``FILE<TAB>TEXT`` per line of the image's text (a page prints one row per line), or ``FILE<TAB>ERROR: why``."""
    if row["error"] or "\n" not in (row["text"] or ""):
        return file_line(row)
    return "\n".join(file_line({**row, "text": line}) for line in row["text"].split("\n"))


def add_run_options(p: argparse.ArgumentParser, default_pipeline: str, kind: str, batch: int) -> None:
    """The options ``leapgen ocr`` and ``leapgen sequence`` share (those of ``leapgen transcribe``,
    plus ``--param``, ``--seed`` and ``--temperature``)."""
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="sampler parameter, repeatable (several samplers: each gets the ones it takes)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: none; matters only when sampling)")
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: the pipeline's, 0)")
    p.add_argument("--json", action="store_true",
                   help="print JSON with the per-item results and errors and the statistics "
                        "(several samplers: {\"runs\": [...]})")
    p.add_argument("--batch-size", type=int, default=batch, help=f"{kind} decoded together in one batch (default {batch})")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--progress", action="store_true", help=f"show the progress bar over {kind}")
    p.add_argument("--pipeline", default=default_pipeline, help=f"pipeline name or folder (default: {default_pipeline})")


def register_cli(parsers: Any) -> None:
    t = parsers.top.add_parser("ocr", help="read the text in each image: a word, a line or a printed page",
                               description="Read each image file with the OCR pipeline (characters 0-9a-z, lower "
                                           "case): a word, or printed lines cut into words. Prints FILE<TAB>TEXT per "
                                           "line of text (FILE<TAB>ERROR: ... for an image that cannot be read); "
                                           "exits 1 only when every image failed.")
    t.add_argument("files", nargs="+", metavar="IMAGE",
                   help="image files (PNG, JPEG, anything Pillow reads); any size")
    t.add_argument("--layout", choices=("auto", "word", "page"), default="auto",
                   help="auto (default): one word as it is, several lines or a long line cut into words; word: one "
                        "word per image (refuse the rest); page: always cut into lines and words")
    t.add_argument("--sampler", default=None,
                   help="cppd (the pipeline's default), ar, ar_beam, speculative; or several separated by commas "
                        "(each runs in turn)")
    add_run_options(t, DEFAULT_OCR_PIPELINE, "images", 32)
    t.set_defaults(func=cmd_ocr)
