"""``leapgen bench image-families``: raster ``ar`` / ``speculative`` / ``sjd`` / ``gsd`` / ``lantern`` and the
NAR, VAR, NFIG and CTF families on the emoji task, in one process (:mod:`leapgen.bench.image_families`)."""

from __future__ import annotations

import argparse

from .common import add_seed_threads, declare_outputs


def cmd_bench_image_families(args: argparse.Namespace) -> int:
    from ..bench.image_families import run

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    result = run(samples=args.samples, batch=args.batch, batch1_calls=args.batch1_calls, cfg_scale=args.cfg_scale,
                 seed=args.seed, threads=args.threads, methods=methods, out_dir=args.out)
    for row in result["rows"]:
        print(f"{row['method']:<28} forwards {row['target_forwards_per_image']:>4}  b1 {row['wall_s_per_image_b1']:.2f}s  "
              f"b{args.batch} {row['wall_s_per_image_b8']:.3f}s/img  FID {row['fid_emoji']:.2f}  acc {row['class_accuracy']:.3f}")
    print(f"wrote {args.out}/bench_image_families.md, .json and {args.out}/image_families/*.png")
    return 0


def register_cli(parsers) -> None:
    b = parsers.bench.add_parser(
        "image-families", help="raster vs NAR / VAR / NFIG / CTF image methods (emoji), batch 1 and 8",
        description="Benchmark the emoji image methods that decode many tokens per step against the raster model.")
    b.add_argument("--samples", type=int, default=16,
                   help="class-prompted images per method for FID / accuracy (default 16)")
    b.add_argument("--batch", type=int, default=8,
                   help="images per call of the FID run, also timed per image (default 8)")
    b.add_argument("--batch1-calls", type=int, default=2, help="single-image calls timed per method (default 2)")
    b.add_argument("--cfg-scale", type=float, default=3.0, help="classifier-free guidance (default 3.0)")
    b.add_argument("--methods", default=None,
                   help="comma list of method labels, e.g. 'ar,nar,var,ctf + sjd' (default: all that load; "
                        "speedups need ar)")
    add_seed_threads(b)
    b.add_argument("--out", default="docs",
                   help="folder for bench_image_families.md / .json and image_families/*.png (default: docs)")
    b.set_defaults(func=cmd_bench_image_families)
    declare_outputs(b, out="dir")
