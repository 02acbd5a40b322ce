"""Command line: ``leapgen generate | samplers | bench | train | data`` (also ``python -m leapgen``).

One module per subcommand (:mod:`.generate`, :mod:`.samplers`, :mod:`.bench`, :mod:`.train`,
:mod:`.data`), each with its ``cmd_*`` functions and an ``add_parser`` that registers its arguments;
:mod:`.common` holds the shared parsing helpers.

Families extend the CLI without editing these modules: every other module of this package that
defines ``register_cli(parsers: CliParsers)`` is found with :mod:`pkgutil` and called, and adds its
own ``generate`` modality, ``bench`` suite or top-level command (``leapgen transcribe``...). Heavy imports (torch, pipelines, benchmarks) happen inside the
commands, so ``leapgen --help`` stays fast.

Errors raised by leapgen (:class:`~leapgen.errors.LeapgenError`) are printed as ``error: <message>``
on stderr with exit status 2, without a traceback; a path the system refuses (an ``OSError`` naming
a file: a read-only or special file system, a full disk) as ``error: <path>: <reason>; ...`` with
exit status 1 (the traceback at debug level). Output locations a command declares
(:func:`.common.declare_outputs`) are checked before it runs; ``--json`` printers write strict JSON
(:func:`.common.print_json`: NaN and infinities as ``null``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import pkgutil
import sys
from dataclasses import dataclass

from ..errors import LeapgenError
from . import bench, data, generate, samplers, train
from .common import check_outputs, parse_extra_args, parse_params, parse_value

_CORE = {"bench", "common", "data", "generate", "samplers", "train"}


@dataclass
class CliParsers:
    """Where a family module hangs its commands: ``top`` (``leapgen X``), ``generate``
    (``leapgen generate X``) and ``bench`` (``leapgen bench X``) subparsers."""

    top: argparse._SubParsersAction
    generate: argparse._SubParsersAction
    bench: argparse._SubParsersAction


def _family_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _CORE and not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = argparse.ArgumentParser(
        prog="leapgen",
        description="Fast generation across modalities: every parallel-decoding method a registered sampler.",
    )
    p.add_argument("--version", action="version", version=f"leapgen {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    gsub = generate.add_parser(sub)
    samplers.add_parser(sub)
    bsub = bench.add_parser(sub)
    train.add_parser(sub)
    data.add_parser(sub)
    parsers = CliParsers(top=sub, generate=gsub, bench=bsub)
    for name in _family_modules():
        module = importlib.import_module(f"{__name__}.{name}")
        if hasattr(module, "register_cli"):
            module.register_cli(parsers)
    from .batch import extend_generate

    extend_generate(gsub)  # every modality, the families' too: --input prompts.jsonl makes a batch job
    for sp in gsub.choices.values():  # every generate modality takes --threads, as the benches do
        if "--threads" not in sp._option_string_actions:
            sp.add_argument("--threads", type=int, default=1,
                            help="torch CPU threads (default 1: these small models gain little from more, and a "
                            "busy core stalls multi-threaded small kernels)")
    return p


#: options that count something (runs, items, a batch size, a port ...): an integer >= 1 wherever they
#: appear, checked once for every command (a bench given --num-prompts 0 died in numpy)
COUNTS = frozenset({
    "runs", "repeats", "samples", "num_samples", "num_prompts", "prompts", "batch_size", "batch", "max_utts",
    "speed_utts", "max_items", "latency_items", "max_images", "speed_images", "max_spectra", "speed_spectra",
    "sweep_samples", "multi_steps", "maskgit_steps", "gen_length", "num_per_task", "num_iter", "num_draft",
    "num_images", "num_workers", "num_return_sequences", "port",
})  # not the options where 0 skips a part (bench dllm --long-prompts, bench text-lossy --long-tokens)
#: options in seconds that must be finite and above 0
DURATIONS = frozenset({"duration"})


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_extra", False):
        words = [getattr(args, d, None) for d in ("command", "modality", "suite")]  # the subcommand that was run
        where = " ".join(w for w in words if isinstance(w, str))
        parser.error(f"unrecognized arguments: {' '.join(extra)} (see `leapgen {where} --help` for its options)")
    threads = getattr(args, "threads", None)
    if threads is not None:
        if threads < 1:
            parser.error(f"--threads must be >= 1, got {threads}")
    for dest, value in sorted(vars(args).items()):
        flag = f"--{dest.replace('_', '-')}"
        if dest in COUNTS and isinstance(value, int) and not isinstance(value, bool) and value < 1:
            print(f"error: {flag} must be >= 1, got {value}.", file=sys.stderr)
            return 2
        if dest in DURATIONS and isinstance(value, float) and not (math.isfinite(value) and value > 0):
            print(f"error: {flag} must be a finite number of seconds above 0, got {value}.", file=sys.stderr)
            return 2
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    try:
        check_outputs(args)  # every output location the command declared, before anything is loaded or generated
        if getattr(args, "takes_extra", False):
            return args.func(args, extra)
        return args.func(args)
    except LeapgenError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a path the system refuses (read-only or special file system, disk full): one line
        if err.filename is None:
            raise
        logging.getLogger(__name__).debug("OSError on %s", err.filename, exc_info=True)
        what = err.strerror or type(err).__name__
        print(f"error: {err.filename}: {what}; pass a path you can read or write (and check the free space).",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["CliParsers", "build_parser", "main", "parse_extra_args", "parse_params", "parse_value"]
