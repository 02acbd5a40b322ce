"""``leapgen bench image-continuous``: MAR, CSpD (exact and the reference's relaxed setting), the MAR
draft alone and Distilled Decoding (1 and 2 steps) beside raster ``ar`` on the emoji task, in one
process (:mod:`leapgen.bench.image_continuous`)."""

from __future__ import annotations

import argparse

from .common import add_seed_threads, declare_outputs


def cmd_bench_image_continuous(args: argparse.Namespace) -> int:
    import logging

    from ..bench.image_continuous import run_bench, write_outputs

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    only = [m.strip() for m in args.only.split(",")] if args.only else None
    result = run_bench(ar=args.ar, mar=args.mar, dd=args.dd, samples=args.samples, runs=args.runs,
                       num_iter=args.num_iter, num_draft=args.num_draft, cfg_scale=args.cfg_scale,
                       temperature=args.temperature, seed=args.seed, threads=args.threads, only=only)
    paths = write_outputs(result, f"{args.out}/bench_image_continuous.md", f"{args.out}/bench_image_continuous.json", args.out)
    for r in result["rows"]:
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        print(f"{r['entry']:<20} target fwd {r['target_forwards']:>6.1f}  draft fwd {r['draft_forwards']:>5.1f}  "
              f"acc {acc:>5}  {r['wall_per_image_s']:.4f} s/img  FID {r['fid']:.2f}  class acc {r['class_accuracy']:.3f}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def register_cli(parsers) -> None:
    b = parsers.bench.add_parser(
        "image-continuous", help="MAR / CSpD / Distilled Decoding vs raster ar (emoji)",
        description="Benchmark continuous-token MAR with CSpD and Distilled Decoding against the raster emoji GPT.")
    b.add_argument("--ar", default="leapgen/image-emoji", help="raster pipeline of the ar row (default: leapgen/image-emoji)")
    b.add_argument("--mar", default="leapgen/image-emoji-mar",
                   help="MAR pipeline of the mar / cspd / draft rows (default: leapgen/image-emoji-mar)")
    b.add_argument("--dd", default="leapgen/image-emoji-dd", help="Distilled Decoding pipeline (default: leapgen/image-emoji-dd)")
    b.add_argument("--samples", type=int, default=16, help="class-prompted images per call (default 16)")
    b.add_argument("--runs", type=int, default=3, help="interleaved runs, fresh seeds (default 3)")
    b.add_argument("--num-iter", type=int, default=16, help="MAR steps of mar / cspd / draft alone (default 16)")
    b.add_argument("--num-draft", type=int, default=4, help="drafted MAR steps per verification (default 4)")
    b.add_argument("--cfg-scale", type=float, default=3.0, help="classifier-free guidance (default 3.0)")
    b.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    add_seed_threads(b)
    b.add_argument("--only", default=None,
                   help="comma list of entries: ar, mar, cspd, cspd (inner T 42), draft alone, dd 1 step, dd 2 steps "
                        "(default: all)")
    b.add_argument("--out", default="docs",
                   help="folder for bench_image_continuous.md / .json and image_continuous_*.png (default: docs)")
    b.set_defaults(func=cmd_bench_image_continuous)
    declare_outputs(b, out="dir")
