"""``leapgen data NAME [--out DIR] [--seed N] [--builder-option VALUE ...]``: build an offline corpus
registered in :data:`leapgen.data.DATASETS`; unknown ``--options`` are checked against the builder's
signature, as ``leapgen train`` does for recipes."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .common import declare_outputs, run_registered


def cmd_data(args: argparse.Namespace, extra: list[str]) -> int:
    from ..data import get_dataset_builder, list_datasets

    if args.name not in list_datasets():
        raise ConfigError(f"unknown dataset {args.name!r}; available datasets: {', '.join(list_datasets()) or 'none'}.")
    return run_registered("dataset", args.name, get_dataset_builder(args.name), extra, args.out, args.seed)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``data`` on the top-level subparsers."""
    d = sub.add_parser(
        "data",
        help="build an offline corpus",
        description="Build an offline corpus (leapgen.data.DATASETS). Extra --options go to the builder; an "
        "unknown dataset name lists the datasets, an option the builder lacks lists its options.",
    )
    d.add_argument("name", help="dataset name (e.g. audio-music)")
    d.add_argument("--out", default=None, help="output folder (default: the builder's)")
    d.add_argument("--seed", type=int, default=None, help="random seed (default: the builder's)")
    d.set_defaults(func=cmd_data, takes_extra=True)
    declare_outputs(d, out="dir")
