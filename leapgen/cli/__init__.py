"""Command line: ``leapgen generate | samplers | bench | train`` (also ``python -m leapgen``).

One module per subcommand (:mod:`.generate`, :mod:`.samplers`, :mod:`.bench`, :mod:`.train`), each
with its ``cmd_*`` functions and an ``add_parser`` that registers its arguments; :mod:`.common`
holds the shared parsing helpers. Heavy imports (torch, pipelines, benchmarks) happen inside the
commands, so ``leapgen --help`` stays fast.

Errors raised by leapgen (:class:`~leapgen.errors.LeapgenError`) are printed as ``error: <message>``
on stderr with exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import LeapgenError
from . import bench, generate, samplers, train
from .common import parse_extra_args, parse_params, parse_value


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = argparse.ArgumentParser(
        prog="leapgen",
        description="Fast generation across modalities: every parallel-decoding method a registered sampler.",
    )
    p.add_argument("--version", action="version", version=f"leapgen {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    generate.add_parser(sub)
    samplers.add_parser(sub)
    bench.add_parser(sub)
    train.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if getattr(args, "takes_extra", False):
            return args.func(args, extra)
        return args.func(args)
    except LeapgenError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["build_parser", "main", "parse_extra_args", "parse_params", "parse_value"]
