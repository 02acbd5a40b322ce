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
    if isinstance(args.port, int) and 1 <= args.port <= 65535:  # (the range itself is checked by launch)
        _check_port_free(args.host, args.port)  # before the pipelines load, not after
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from ..demo.app import launch
    except ImportError as err:
        raise ConfigError(f"the demo needs the 'demo' extra ({err}); install it with pip install -e '.[demo]'.") from err
    try:
        launch(port=args.port, host=args.host, share=False, pipelines=args.pipeline or None, block=True)
    except OSError as err:  # taken meanwhile: Gradio's "Cannot find empty port", one line
        raise ConfigError(f"cannot serve the demo on {args.host}:{args.port} ({err}); pass another --port.") from None
    return 0


def _check_port_free(host: str, port: int) -> None:
    """ConfigError when ``host:port`` cannot be bound (in use, or an address of another machine): the
    demo would load every pipeline first and then fail in Gradio's launch with a traceback."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise ConfigError(f"--host {host!r} is not an address of this machine ({err}); pass e.g. 127.0.0.1.") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind (a TIME_WAIT port is free)
        try:
            sock.bind(address)
        except OSError as err:
            raise ConfigError(f"cannot serve the demo on {host}:{port} ({err.strerror or err}); the port is in use or "
                              "the address is not this machine's: pass another --port (or --host).") from None


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
