"""``leapgen samplers``: the sampler registry as a text or markdown table (``docs/samplers.md``)."""

from __future__ import annotations

import argparse


def samplers_table(markdown: bool = False) -> str:
    from ..bench.common import markdown_table, text_table
    from ..samplers import list_samplers

    headers = ("name", "family", "guarantee", "needs", "paper", "defaults")
    rows = []
    for info in list_samplers():
        defaults = (
            ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in info.defaults.items())
            or "-"
        )
        if markdown:
            rows.append(
                (
                    f"`{info.name}`",
                    info.family,
                    info.guarantee,
                    ", ".join(info.needs),
                    info.paper or "-",
                    defaults,
                )
            )
        else:
            rows.append(
                (info.name, info.family, info.guarantee, ", ".join(info.needs), info.paper or "-", defaults)
            )
    return markdown_table(headers, rows) if markdown else text_table(headers, rows)


def cmd_samplers(args: argparse.Namespace) -> int:
    print(samplers_table(markdown=args.markdown))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``samplers`` on the top-level subparsers."""
    s = sub.add_parser("samplers", help="list registered samplers", description="List the sampler registry.")
    s.add_argument("--markdown", action="store_true", help="print a markdown table (docs/samplers.md)")
    s.set_defaults(func=cmd_samplers)
