"""``leapgen train NAME [--out DIR] [--seed N] [--recipe-option VALUE ...]``: run a recipe of
:mod:`leapgen.train`; unknown ``--options`` are checked against the recipe's signature."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .common import declare_outputs, run_registered


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from ..train import get_recipe, list_recipes

    if args.name not in list_recipes():
        raise ConfigError(
            f"unknown training recipe {args.name!r}; available recipes: {', '.join(list_recipes())}."
        )
    return run_registered("recipe", args.name, get_recipe(args.name), extra, args.out, args.seed)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``train`` on the top-level subparsers."""
    t = sub.add_parser(
        "train",
        help="run a training recipe",
        description="Run a training recipe (leapgen.train). Extra --options are passed to the recipe "
        "(e.g. --target-tokens 20000); an unknown recipe name lists the recipes, an option the recipe "
        "lacks lists its options.",
    )
    t.add_argument("name", help="recipe name (e.g. text-code)")
    t.add_argument("--out", default=None, help="output folder (default: the recipe's)")
    t.add_argument("--seed", type=int, default=None, help="random seed (default: the recipe's)")
    t.set_defaults(func=cmd_train, takes_extra=True)
    declare_outputs(t, out="dir")
