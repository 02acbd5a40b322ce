"""``leapgen demo``: serve the Gradio demo (one tab per shipped pipeline) on 127.0.0.1."""

from __future__ import annotations

import argparse
import logging

from ..errors import ConfigError
from .common import declare_outputs


def cmd_demo(args: argparse.Namespace) -> int:
    if args.share:  # refused before anything heavy is imported
        raise ConfigError("--share is refused: the leapgen demo runs offline and opens no public tunnel. "
                          "Serve it on your network with --host 0.0.0.0 (behind your own proxy) instead.")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from ..demo.app import launch
    except ImportError as err:
        raise ConfigError(f"the demo needs the 'demo' extra ({err}); install it with pip install -e '.[demo]'.") from err
    launch(port=args.port, host=args.host, share=False, pipelines=args.pipeline or None, block=True)
    return 0


def cmd_bench_demo_startup(args: argparse.Namespace) -> int:
    from ..bench.demo_startup import run

    res = run(args.runs, args.out)
    logging.getLogger(__name__).info("demo interactive after %.1f s (median of %d)", res["median_s"], len(res["runs_s"]))
    return 0


def register_cli(parsers) -> None:
    p = parsers.top.add_parser("demo", help="serve the Gradio demo of every shipped pipeline",
                               description="Serve a Gradio app with one tab per shipped pipeline (found at run time), "
                               "every sampler registered for its model, a compare mode and the decode stats.")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 warns)")
    p.add_argument("--pipeline", action="append", metavar="NAME", help="only these pipelines (repeatable), e.g. leapgen/text-code")
    p.add_argument("--share", action="store_true", help="refused: the demo never opens a public tunnel")
    p.set_defaults(func=cmd_demo)
    b = parsers.bench.add_parser("demo-startup", help="seconds from `leapgen demo` to an interactive page (chromium)",
                                 description="Start `leapgen demo` several times and time it until the page is "
                                 "usable in headless chromium; writes bench_demo_startup.md/.json.")
    b.add_argument("--runs", type=int, default=3, help="demo starts timed; medians (default: %(default)s)")
    b.add_argument("--out", default="docs", help="folder for bench_demo_startup.md/.json (default: %(default)s)")
    b.set_defaults(func=cmd_bench_demo_startup)
    declare_outputs(b, out="dir")
