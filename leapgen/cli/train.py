"""``leapgen train NAME [--out DIR] [--seed N] [--recipe-option VALUE ...]``: run a recipe of
:mod:`leapgen.train`; unknown ``--options`` are checked against the recipe's signature."""

from __future__ import annotations

import argparse
import inspect
import json

from ..errors import ConfigError
from .common import parse_extra_args


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    import logging

    from ..train import get_recipe, list_recipes

    if args.name not in list_recipes():
        raise ConfigError(
            f"unknown training recipe {args.name!r}; available recipes: {', '.join(list_recipes())}."
        )
    fn = get_recipe(args.name)
    kwargs = parse_extra_args(extra)
    if args.out is not None:
        kwargs["out_dir"] = args.out
    if args.seed is not None:
        kwargs["seed"] = args.seed
    sig = inspect.signature(fn)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        unknown = [k for k in kwargs if k not in sig.parameters]
        if unknown:
            opts = ", ".join("--" + p.replace("_", "-") for p in sig.parameters)
            raise ConfigError(f"recipe {args.name!r} has no option(s) {unknown}; its options: {opts}.")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = fn(**kwargs)
    if result is not None:
        print(json.dumps(result, indent=2, default=str))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``train`` on the top-level subparsers."""
    t = sub.add_parser(
        "train",
        help="run a training recipe",
        description="Run a training recipe (leapgen.train). Extra --options are passed to the recipe "
        "(e.g. --target-tokens 20000).",
    )
    t.add_argument("name", help="recipe name (e.g. text-code)")
    t.add_argument("--out", default=None, help="output folder (default: the recipe's)")
    t.add_argument("--seed", type=int, default=None)
    t.set_defaults(func=cmd_train, takes_extra=True)
