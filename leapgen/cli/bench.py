"""``leapgen bench text | molecule | image``: argument checks, then the suites of :mod:`leapgen.bench`;
markdown to stdout, ``--json`` / ``--markdown`` (and pictures) to files."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError, a_type
from .common import (
    DEFAULT_IMAGE_PIPELINE,
    DEFAULT_TEXT_PIPELINE,
    declare_outputs,
    load_image_pipeline,
    load_text_pipeline,
    split_list,
)


def _speed_options(args: argparse.Namespace) -> list[int]:
    """Check --device before any model is loaded and parse --sweep-batch-sizes (a plot needs one)."""
    from ..bench.batch_sweep import DEFAULT_BATCH_SIZES, parse_batch_sizes
    from ..bench.efficiency import check_device, parse_dtype

    check_device(args.device)
    parse_dtype(args.dtype)
    sizes = parse_batch_sizes(args.sweep_batch_sizes) if args.sweep_batch_sizes else []
    if args.plot_batch_sweep and not sizes:
        sizes = list(DEFAULT_BATCH_SIZES)
    return sizes


def _write_plot(args: argparse.Namespace, suite: str, result: dict) -> None:
    if args.plot_batch_sweep and result.get("batch_sweep"):
        from ..bench.batch_sweep import plot_batch_sweep
        from ..bench.common import device_line

        title = device_line(result["machine"], result["settings"])
        print(f"wrote {plot_batch_sweep({suite: result['batch_sweep']}, args.plot_batch_sweep, title)}", file=sys.stderr)


def cmd_bench_text(args: argparse.Namespace) -> int:
    from ..bench.efficiency import resolve_device
    from ..bench.text import format_markdown, run_text_bench

    runs, max_new, n_prompts = args.runs, args.max_new_tokens, args.prompts
    if args.quick:
        runs, max_new, n_prompts = 2, 32, 2
    if runs < 1 or max_new < 1 or n_prompts < 1:
        raise ConfigError("--runs, --max-new-tokens and --prompts must be >= 1.")
    sizes = _speed_options(args)
    if sizes and max(sizes) > n_prompts:
        raise ConfigError(
            f"--sweep-batch-sizes goes up to {max(sizes)} but there are only {n_prompts} prompts; "
            f"pass --prompts {max(sizes)} (or more)."
        )
    pipe = resolve_device(load_text_pipeline(args.pipeline), args.device, args.dtype)
    if args.compile:
        pipe.set_compile(True)
    result = run_text_bench(
        pipe,
        runs=runs,
        max_new_tokens=max_new,
        n_prompts=n_prompts,
        peers=not args.no_peers,
        batch_size=args.batch_size,
        sweep=not (args.quick or args.no_sweep),
        samplers=split_list(args.samplers) or None,
        seed=args.seed,
        threads=args.threads,
        draft_cost=not args.no_draft_cost,
        compare_schedules=args.compare_schedules,
        batch_sweep=sizes,
        **({"sets": split_list(args.sets)} if args.sets else {}),
    )
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    result["settings"]["compile"] = bool(args.compile)
    _write_plot(args, "text", result)
    _emit(args, result, format_markdown)
    return 0


def cmd_bench_molecule(args: argparse.Namespace) -> int:
    from ..bench.molecule import (
        default_methods,
        format_markdown,
        run_batch_sweep,
        run_molecule_bench,
        write_outputs,
    )
    from ..pipelines import Pipeline

    n, runs, batch, multi_steps, maskgit_steps = args.num_samples, args.runs, args.batch_size, args.multi_steps, args.maskgit_steps
    if args.quick:
        n, runs, batch, multi_steps, maskgit_steps = 8, 1, 8, 4, 4
    if min(n, runs, batch, multi_steps, maskgit_steps) < 1:
        raise ConfigError("--num-samples, --runs, --batch-size, --multi-steps and --maskgit-steps must be >= 1.")
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not hasattr(pipe, "ar_model"):
        raise ConfigError(
            f"{args.pipeline} is {a_type(pipe)}, not a molecule pipeline with a masked and an AR model; "
            "pass --pipeline leapgen/molecule-safe or a folder saved by MoleculePipeline."
        )
    result = run_molecule_bench(
        pipe,
        num_samples=n,
        runs=runs,
        batch_size=batch,
        seed=args.seed,
        methods=default_methods(multi_steps=multi_steps, maskgit_steps=maskgit_steps, threshold=args.threshold),
        training_set=None if args.no_novelty else "moses",
        threads=args.threads,
        warmup=not args.quick,
        grid_path=args.png,
    )
    sweep = [int(x) for x in split_list(args.sweep_batch_sizes)]
    if any(bs < 1 for bs in sweep) or args.sweep_samples < 1:
        raise ConfigError("--sweep-batch-sizes must list positive integers and --sweep-samples must be >= 1.")
    if sweep:
        result["batch_sweep"] = run_batch_sweep(
            pipe, sweep, args.sweep_samples,
            methods=default_methods(multi_steps=multi_steps, maskgit_steps=maskgit_steps, threshold=args.threshold),
            runs=1, seed=args.seed, threads=args.threads,
        )
    result["settings"]["pipeline"] = args.pipeline
    result["settings"]["quick"] = bool(args.quick)
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    print(format_markdown(result, header=False))
    for path in write_outputs(result, args.json, args.markdown):
        print(f"wrote {path}", file=sys.stderr)
    if args.png:
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


def cmd_bench_image(args: argparse.Namespace) -> int:
    from ..bench.image import format_markdown, run_image_bench, write_pictures
    from ..bench.image_metrics import load_feature_classifier

    runs, samples = args.runs, args.samples
    if args.quick:
        runs, samples = 1, 4
    if runs < 1 or samples < 2 or args.batch_size < 1:
        raise ConfigError("--runs and --batch-size must be >= 1 and --samples >= 2.")
    from ..bench.common import split_entries
    from ..bench.efficiency import resolve_device

    sizes = _speed_options(args)
    pipe = resolve_device(load_image_pipeline(args.pipeline), args.device, args.dtype)
    bench = run_image_bench(
        pipe,
        runs=runs,
        samples=samples,
        batch_size=args.batch_size,
        samplers=split_entries(args.samplers) or None,
        exclude=split_list(args.exclude),
        cfg_scale=args.cfg_scale,
        cfg_interval=args.cfg_interval,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        threads=args.threads,
        classifier=load_feature_classifier(args.classifier) if args.classifier else None,
        draft_cost=not args.no_draft_cost,
        compare_schedules=args.compare_schedules,
        batch_sweep=sizes,
    )
    result = bench.result
    _write_plot(args, "image", result)
    result["settings"]["pipeline"] = args.pipeline
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    _emit(args, result, format_markdown)
    if args.png_dir:
        for p in write_pictures(bench, args.png_dir):
            print(f"wrote {p}", file=sys.stderr)
    return 0


def _emit(args: argparse.Namespace, result: dict, format_markdown) -> None:
    """The tables to stdout (no title); ``--json`` (full result) and ``--markdown`` (with title) to files."""
    from ..bench.common import write_json, write_text

    print(format_markdown(result, header=False))
    if args.json:
        print(f"wrote {write_json(args.json, result)}", file=sys.stderr)
    if args.markdown:
        print(f"wrote {write_text(args.markdown, format_markdown(result))}", file=sys.stderr)


def cmd_bench_kernels(args: argparse.Namespace) -> int:
    import torch

    from ..bench.efficiency import check_device, parse_dtype
    from ..bench.kernels import DEFAULT_SHAPES, QUICK_SHAPES, format_markdown, run_kernel_bench

    check_device(args.device)
    dtype = parse_dtype(args.dtype) or torch.float32
    if args.runs < 1 or args.threads < 1:
        raise ConfigError("--runs and --threads must be >= 1.")
    torch.set_num_threads(args.threads)
    result = run_kernel_bench(args.device, dtype, runs=2 if args.quick else args.runs,
                              shapes=QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    _emit(args, result, format_markdown)
    return 0


def _add_speed_flags(p: argparse.ArgumentParser, unit: str) -> None:
    """Flags the text and image benches share: device, draft cost, schedules, batch sweep and plot."""
    p.add_argument("--device", default=None, help="cpu (default) or cuda / cuda:N (errors when CUDA is missing)")
    p.add_argument("--dtype", default=None, help="float32 (default), float16 / fp16 or bfloat16 / bf16")
    p.add_argument("--no-draft-cost", action="store_true",
                   help="skip the untimed pass that measures draft cost per accepted token")
    p.add_argument("--compare-schedules", action="store_true",
                   help="also time the other draft-length schedules of speculative and spec_tree and say which wins")
    p.add_argument("--sweep-batch-sizes", default="", metavar="LIST",
                   help=f"also time the main samplers against ar at these batch sizes (e.g. 1,2,4,8; {unit} "
                   "grouped consecutively)")
    p.add_argument("--plot-batch-sweep", metavar="PNG", default=None,
                   help="write the speedup-vs-batch-size plot (default sizes 1,2,4,8 unless --sweep-batch-sizes)")


def add_parser(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Register ``bench`` and its suites on the top-level subparsers; returns the suite subparsers so
    that family modules (see :func:`leapgen.cli.build_parser`) add their own suites."""
    b = sub.add_parser("bench", help="run a benchmark suite", description="Run a benchmark suite.")
    bsub = b.add_subparsers(dest="suite", metavar="SUITE")
    bsub.required = True
    bt = bsub.add_parser(
        "text",
        help="text samplers vs ar and transformers generate()",
        description="Text samplers vs ar and transformers generate(): same models and prompts, one process, "
        "interleaved runs, medians. Markdown to stdout, JSON with raw timings to --json.",
    )
    bt.add_argument("--pipeline", default=DEFAULT_TEXT_PIPELINE)
    bt.add_argument("--runs", type=int, default=5, help="timed runs per prompt (median; default 5)")
    bt.add_argument("--max-new-tokens", type=int, default=128)
    bt.add_argument("--prompts", type=int, default=8, help="prompts per prompt set (default 8)")
    bt.add_argument("--batch-size", type=int, default=8,
                    help="batch of the batched table: this many prompts as one batch (default 8; <= 1: none)")
    bt.add_argument("--seed", type=int, default=0, help="prompt selection seed")
    bt.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bt.add_argument(
        "--samplers",
        default=None,
        help="comma-separated samplers to run (default: every one the pipeline serves)",
    )
    bt.add_argument("--compile", action="store_true",
                    help="torch.compile the lean runtime's forward (CUDA only; ignored on CPU)")
    bt.add_argument("--sets", default=None, help="comma-separated prompt sets (default: heldout,code-edit)")
    bt.add_argument("--no-peers", action="store_true", help="skip transformers generate() peers")
    bt.add_argument("--no-sweep", action="store_true", help="skip the speculative draft-length sweep")
    bt.add_argument("--json", metavar="PATH", help="write the full result (raw timings, machine) as JSON")
    bt.add_argument("--markdown", metavar="PATH", help="write the tables with a machine/settings header")
    bt.add_argument("--quick", action="store_true", help="smoke test: 2 prompts, 2 runs, 32 tokens, no sweep")
    _add_speed_flags(bt, "prompts")
    bt.set_defaults(func=cmd_bench_text)
    declare_outputs(bt, json="file", markdown="file", plot_batch_sweep="file")
    bm = bsub.add_parser(
        "molecule",
        help="masked molecule samplers (genmol, maskgit) vs the AR baseline",
        description="De novo molecules: genmol (one token per step and multi-token), maskgit and the ar baseline on the "
        "same pipeline, same number of samples and batch size, one process, interleaved runs, medians; RDKit metrics "
        "(validity, uniqueness, novelty, quality, diversity) beside the speed. Markdown to stdout.",
    )
    bm.add_argument("--pipeline", default="leapgen/molecule-safe")
    bm.add_argument("--num-samples", type=int, default=1000, help="de novo samples per entry and run (default 1000)")
    bm.add_argument("--runs", type=int, default=3, help="timed runs per entry (median; default 3)")
    bm.add_argument("--batch-size", type=int, default=64, help="batch size of every entry (default 64)")
    bm.add_argument("--multi-steps", type=int, default=16, help="forwards per batch of the multi-token genmol entry")
    bm.add_argument("--maskgit-steps", type=int, default=12, help="steps of the maskgit entry")
    bm.add_argument(
        "--threshold", type=float, default=None, help="also run genmol with a log-confidence threshold policy"
    )
    bm.add_argument(
        "--sweep-batch-sizes", default="", help="also time every entry at these batch sizes (comma-separated, e.g. 1,8)"
    )
    bm.add_argument("--sweep-samples", type=int, default=32, help="samples per entry in the batch-size sweep")
    bm.add_argument("--seed", type=int, default=0)
    bm.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bm.add_argument("--no-novelty", action="store_true", help="skip loading the MOSES training set for novelty")
    bm.add_argument("--json", metavar="PATH", help="write the full result (raw timings, machine) as JSON")
    bm.add_argument("--markdown", metavar="PATH", help="write the report with a machine/settings header")
    bm.add_argument("--png", metavar="PATH", help="write a 4x4 grid of multi-token genmol samples (RDKit)")
    bm.add_argument("--quick", action="store_true", help="fast mode: 8 samples, batch 8, 1 run, 4 steps, no warm-up")
    bm.set_defaults(func=cmd_bench_molecule)
    declare_outputs(bm, json="file", markdown="file", png="file")
    bi = bsub.add_parser(
        "image",
        help="image samplers (speculative, sjd, gsd, lantern, ...) vs ar: speed and FID (emoji features)",
        description="Image samplers vs ar on the same prompts and seeds: forwards, step compression, accepted length, "
        "wall speedup (interleaved runs, medians) beside FID (emoji features), class accuracy and token NLL. "
        "Markdown to stdout; --json, --markdown and --png-dir write the files.",
    )
    bi.add_argument("--pipeline", default=DEFAULT_IMAGE_PIPELINE, help="image pipeline name or folder (default: %(default)s)")
    bi.add_argument("--runs", type=int, default=3, help="interleaved runs, each a fresh sample set (default 3)")
    bi.add_argument("--samples", type=int, default=16, help="images per entry and run (default 16)")
    bi.add_argument("--batch-size", type=int, default=8, help="images per pipeline call (default 8)")
    bi.add_argument("--samplers", default=None, help="comma-separated samplers, optionally with parameters, e.g. "
                    "'sjd[window=6]' (default: ar, speculative, sjd, gsd, lantern and every other autoregressive "
                    "sampler the pipeline serves)")
    bi.add_argument("--exclude", default="", help="comma-separated samplers to leave out (listed as skipped)")
    bi.add_argument("--cfg-scale", type=float, default=None, help="default: the pipeline's")
    bi.add_argument("--cfg-interval", type=int, default=-1, help="guide only tokens 0..N+1, LlamaGen's cutoff (default -1: every token)")
    bi.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    bi.add_argument("--top-k", type=int, default=0, help="top-k filter, 0 = off (default: %(default)s)")
    bi.add_argument("--top-p", type=float, default=1.0, help="top-p filter, 1.0 = off (default: %(default)s)")
    bi.add_argument("--seed", type=int, default=0, help="base seed: run r, batch j uses seed + 1000 r + j (default: %(default)s)")
    bi.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bi.add_argument("--classifier", default=None, help="feature classifier folder (default: the pipeline's)")
    bi.add_argument("--json", metavar="PATH", help="write the full result as JSON")
    bi.add_argument("--markdown", metavar="PATH", help="write the report with a title and machine line")
    bi.add_argument("--png-dir", metavar="DIR", help="write image_samples_<sampler>.png and image_acceptance_maps.png")
    bi.add_argument("--quick", action="store_true", help="smoke test: 1 run, 4 samples")
    _add_speed_flags(bi, "images")
    bi.set_defaults(func=cmd_bench_image)
    declare_outputs(bi, json="file", markdown="file", png_dir="dir", plot_batch_sweep="file")
    bk = bsub.add_parser(
        "kernels",
        help="leapgen.kernels: each Triton kernel against its PyTorch reference (native on CUDA)",
        description="Time every kernel of leapgen.kernels against its PyTorch reference on the same random inputs "
        "at decode shapes (interleaved, medians) and check that the outputs agree. Triton runs on CUDA, or under "
        "TRITON_INTERPRET=1 (timings then meaningless); otherwise only the reference is timed.",
    )
    bk.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    bk.add_argument("--dtype", default=None, help="float32 (default), float16 or bfloat16")
    bk.add_argument("--runs", type=int, default=50, help="timed calls per backend and shape (median; default 50)")
    bk.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bk.add_argument("--json", metavar="PATH", help="write the results as JSON")
    bk.add_argument("--markdown", metavar="PATH", help="write the table as markdown")
    bk.add_argument("--quick", action="store_true", help="tiny shapes, 2 runs (smoke test)")
    bk.set_defaults(func=cmd_bench_kernels)
    declare_outputs(bk, json="file", markdown="file")
    return bsub
