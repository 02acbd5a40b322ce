"""Command line: ``leapgen generate | samplers | bench | train`` (also ``python -m leapgen``).

Errors raised by leapgen (:class:`~leapgen.errors.LeapgenError`) are printed as ``error: <message>``
on stderr with exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError, InputError, LeapgenError

DEFAULT_TEXT_PIPELINE = "leapgen/text-code"


# ============================================================================== helpers


def parse_value(s: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"``/``"false"`` -> bool, ``"none"`` -> None, else the string."""
    low = s.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{"k": parse_value(v)}``."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--param expects key=value (e.g. --param num_draft_tokens=4), got {item!r}.")
        out[key] = parse_value(value)
    return out


def parse_extra_args(argv: list[str]) -> dict[str, Any]:
    """``["--target-tokens", "20000", "--flag", "--x=1"]`` -> ``{"target_tokens": 20000, "flag": True, "x": 1}``."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"unexpected argument {arg!r}; recipe options look like --name value.")
        name, sep, value = arg[2:].partition("=")
        key = name.replace("-", "_")
        if sep:
            out[key] = parse_value(value)
            i += 1
        elif i + 1 < len(argv) and not (argv[i + 1].startswith("--") and len(argv[i + 1]) > 2):
            out[key] = parse_value(argv[i + 1])
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def _load_text_pipeline(name: str):
    from .pipelines import Pipeline, TextPipeline

    pipe = Pipeline.from_pretrained(name)
    if not isinstance(pipe, TextPipeline):
        raise ConfigError(
            f"{name} is a {type(pipe).__name__}, not a text pipeline; pass --pipeline with a text pipeline."
        )
    return pipe


# ============================================================================== commands


def cmd_generate_text(args: argparse.Namespace) -> int:
    from .samplers import sampler_info

    names = [n.strip() for n in args.sampler.split(",") if n.strip()]
    if not names:
        raise ConfigError("--sampler needs at least one sampler name (see `leapgen samplers`).")
    params = parse_params(args.param)
    infos = [sampler_info(n) for n in names]  # raises UnknownSamplerError with the list of names
    if len(names) > 1:  # route each parameter to the samplers that take it
        unused = [k for k in params if not any(k in i.defaults for i in infos)]
        if unused:
            raise ConfigError(f"no sampler among {names} takes parameter(s) {unused}.")
    pipe = _load_text_pipeline(args.pipeline)
    progress = sys.stderr.isatty()
    for i, info in enumerate(infos):
        own = params if len(names) == 1 else {k: v for k, v in params.items() if k in info.defaults}
        out = pipe(
            args.prompt,
            sampler=info.name,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            progress=progress,
            **own,
        )
        if len(names) > 1:
            print(f"{'' if i == 0 else chr(10)}--- {info.name} ---")
        text = out.texts[0]
        print(args.prompt + text if args.echo else text)
        print(out.stats.summary())
    return 0


def samplers_table(markdown: bool = False) -> str:
    from .bench.common import markdown_table, text_table
    from .samplers import list_samplers

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


def cmd_bench_text(args: argparse.Namespace) -> int:
    from .bench.common import write_json, write_text
    from .bench.text import format_markdown, run_text_bench

    runs, max_new, n_prompts = args.runs, args.max_new_tokens, args.prompts
    if args.quick:
        runs, max_new, n_prompts = 2, 32, 2
    if runs < 1 or max_new < 1 or n_prompts < 1:
        raise ConfigError("--runs, --max-new-tokens and --prompts must be >= 1.")
    pipe = _load_text_pipeline(args.pipeline)
    result = run_text_bench(
        pipe,
        runs=runs,
        max_new_tokens=max_new,
        n_prompts=n_prompts,
        peers=not args.no_peers,
        batch_size=args.batch_size,
        sweep=not (args.quick or args.no_sweep),
        samplers=[x.strip() for x in args.samplers.split(",") if x.strip()] if args.samplers else None,
        seed=args.seed,
        threads=args.threads,
    )
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    md = format_markdown(result)
    print(format_markdown(result, header=False))
    if args.json:
        print(f"wrote {write_json(args.json, result)}", file=sys.stderr)
    if args.markdown:
        print(f"wrote {write_text(args.markdown, md)}", file=sys.stderr)
    return 0


def cmd_bench_molecule(args: argparse.Namespace) -> int:
    from .bench.molecule import (
        default_methods,
        format_markdown,
        run_batch_sweep,
        run_molecule_bench,
        write_outputs,
    )
    from .pipelines import Pipeline

    n, runs, batch, multi_steps, maskgit_steps = args.num_samples, args.runs, args.batch_size, args.multi_steps, args.maskgit_steps
    if args.quick:
        n, runs, batch, multi_steps, maskgit_steps = 8, 1, 8, 4, 4
    if min(n, runs, batch, multi_steps, maskgit_steps) < 1:
        raise ConfigError("--num-samples, --runs, --batch-size, --multi-steps and --maskgit-steps must be >= 1.")
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not hasattr(pipe, "ar_model"):
        raise ConfigError(
            f"{args.pipeline} is a {type(pipe).__name__}, not a molecule pipeline with a masked and an AR model; "
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
    sweep = [int(x) for x in args.sweep_batch_sizes.split(",") if x.strip()] if args.sweep_batch_sizes else []
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


DEFAULT_IMAGE_PIPELINE = "leapgen/image-emoji"


def _load_image_pipeline(name: str):
    from .pipelines import Pipeline

    pipe = Pipeline.from_pretrained(name)
    if not hasattr(pipe, "class_names") or not hasattr(pipe, "vq"):
        raise ConfigError(
            f"{name} is a {type(pipe).__name__}, not an image pipeline; pass --pipeline {DEFAULT_IMAGE_PIPELINE} "
            "or a folder saved by ImageARPipeline."
        )
    return pipe


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "image"


def cmd_generate_image(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .samplers import sampler_info

    names = [n.strip() for n in args.sampler.split(",") if n.strip()]
    if not names:
        raise ConfigError("--sampler needs at least one sampler name (see `leapgen samplers`).")
    if args.num_images < 1:
        raise ConfigError(f"--num-images must be >= 1, got {args.num_images}.")
    params = parse_params(args.param)
    infos = [sampler_info(n) for n in names]  # raises UnknownSamplerError with the list of names
    if len(names) > 1:
        unused = [k for k in params if not any(k in i.defaults for i in infos)]
        if unused:
            raise ConfigError(f"no sampler among {names} takes parameter(s) {unused}.")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} exists and is not a folder; pass a folder for the PNGs.")
    pipe = _load_image_pipeline(args.pipeline)
    pipe.encode([args.prompt])  # bad prompts fail here, before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    kwargs = {} if args.cfg_scale is None else {"cfg_scale": args.cfg_scale}
    for k, info in enumerate(infos):
        own = params if len(names) == 1 else {p: v for p, v in params.items() if p in info.defaults}
        out = pipe(
            args.prompt,
            sampler=info.name,
            cfg_interval=args.cfg_interval,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            num_images_per_prompt=args.num_images,
            progress=sys.stderr.isatty(),
            **kwargs,
            **own,
        )
        print(f"{'' if k == 0 else chr(10)}--- {info.name} ---")
        for i, img in enumerate(out.images):
            stem = out_dir / f"{_slug(args.prompt)}_{info.name}_{i}"
            img.save(f"{stem}.png")
            print(f"wrote {stem}.png")
            if args.save_map:
                out.acceptance_map(i, with_image=False).save(f"{stem}_map.png")
                print(f"wrote {stem}_map.png")
        print(out.stats.summary())
    return 0


DEFAULT_MOLECULE_PIPELINE = "leapgen/molecule-safe"


def cmd_generate_molecule(args: argparse.Namespace) -> int:
    from .pipelines import Pipeline
    from .samplers import sampler_info

    names = [n.strip() for n in args.sampler.split(",") if n.strip()]
    if not names:
        raise ConfigError("--sampler needs at least one sampler name (see `leapgen samplers`).")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}.")
    params = parse_params(args.param)
    infos = [sampler_info(n) for n in names]  # raises UnknownSamplerError with the list of names
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not hasattr(pipe, "ar_model"):
        raise ConfigError(
            f"{args.pipeline} is a {type(pipe).__name__}, not a molecule pipeline; "
            f"pass --pipeline {DEFAULT_MOLECULE_PIPELINE} or a folder saved by MoleculePipeline."
        )
    task_args: dict[str, Any] = {"task": args.task}
    if args.fragments:
        task_args["fragments"] = args.fragments
    if args.molecules:
        task_args["molecules"] = args.molecules
    for k, info in enumerate(infos):
        own = params if len(names) == 1 else {p: v for p, v in params.items() if p in info.defaults}
        out = pipe(num_samples=args.num_samples, sampler=info.name, seed=args.seed, temperature=args.temperature,
                   progress=sys.stderr.isatty(), **task_args, **own)
        print(f"{'' if k == 0 else chr(10)}--- {info.name} ({args.task}) ---")
        for i, (smi, err) in enumerate(zip(out.smiles, out.errors)):
            score = f"  score={out.scores[i]:.3f}" if out.scores and out.scores[i] is not None else ""
            print(f"{i:3d}  {smi}{score}" if smi else f"{i:3d}  - ({err})")
        print(f"valid {sum(out.valid)}/{len(out.valid)}" + (f", filtered {out.num_filtered}" if out.num_filtered else ""))
        print(out.stats.summary())
        if args.png:
            from .bench.molecule import save_grid

            path = args.png if len(infos) == 1 else str(Path(args.png).with_suffix("")) + f"_{info.name}.png"
            try:
                save_grid(out.smiles, path, n=16, title=info.name)
                print(f"wrote {path}")
            except InputError as e:
                print(f"no picture: {e}")
    return 0


def cmd_bench_image(args: argparse.Namespace) -> int:
    from .bench.common import write_json, write_text
    from .bench.image import format_markdown, run_image_bench, write_pictures
    from .bench.image_metrics import load_feature_classifier

    runs, samples = args.runs, args.samples
    if args.quick:
        runs, samples = 1, 4
    if runs < 1 or samples < 2 or args.batch_size < 1:
        raise ConfigError("--runs and --batch-size must be >= 1 and --samples >= 2.")
    pipe = _load_image_pipeline(args.pipeline)
    bench = run_image_bench(
        pipe,
        runs=runs,
        samples=samples,
        batch_size=args.batch_size,
        samplers=[x.strip() for x in args.samplers.split(",") if x.strip()] if args.samplers else None,
        exclude=[x.strip() for x in args.exclude.split(",") if x.strip()],
        cfg_scale=args.cfg_scale,
        cfg_interval=args.cfg_interval,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        threads=args.threads,
        classifier=load_feature_classifier(args.classifier) if args.classifier else None,
    )
    result = bench.result
    result["settings"]["pipeline"] = args.pipeline
    result["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:]) if sys.argv else None
    print(format_markdown(result, header=False))
    if args.json:
        print(f"wrote {write_json(args.json, result)}", file=sys.stderr)
    if args.markdown:
        print(f"wrote {write_text(args.markdown, format_markdown(result))}", file=sys.stderr)
    if args.png_dir:
        for p in write_pictures(bench, args.png_dir):
            print(f"wrote {p}", file=sys.stderr)
    return 0


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    import logging

    from .train import get_recipe, list_recipes

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


# ============================================================================== parser


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(
        prog="leapgen",
        description="Fast generation across modalities: every parallel-decoding method a registered sampler.",
    )
    p.add_argument("--version", action="version", version=f"leapgen {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # ---- generate
    g = sub.add_parser("generate", help="generate with a pipeline", description="Generate with a pipeline.")
    gsub = g.add_subparsers(dest="modality", metavar="MODALITY")
    gsub.required = True
    gt = gsub.add_parser("text", help="continue a text prompt", description="Continue a text prompt.")
    gt.add_argument("prompt", help="the prompt text")
    gt.add_argument(
        "--sampler", default="ar", help="sampler name, or several separated by commas (default: ar)"
    )
    gt.add_argument(
        "--pipeline",
        default=DEFAULT_TEXT_PIPELINE,
        help=f"pipeline name or folder (default: {DEFAULT_TEXT_PIPELINE})",
    )
    gt.add_argument("--max-new-tokens", type=int, default=128)
    gt.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gt.add_argument("--top-k", type=int, default=0, help="0 disables (default)")
    gt.add_argument("--top-p", type=float, default=1.0, help="1 disables (default)")
    gt.add_argument("--seed", type=int, default=None)
    gt.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="sampler parameter, repeatable (e.g. num_draft_tokens=4)",
    )
    gt.add_argument("--echo", action="store_true", help="print the prompt before the generated text")
    gt.set_defaults(func=cmd_generate_text)
    gi = gsub.add_parser(
        "image",
        help="generate images from a class name or an emoji name",
        description="Generate images with an image pipeline; writes PNGs (and acceptance maps) and prints the stats.",
    )
    gi.add_argument("prompt", help="a class name (e.g. animals) or, for the emoji model, a Unicode name (e.g. 'red apple')")
    gi.add_argument("--sampler", default="ar", help="sampler name, or several separated by commas (default: ar)")
    gi.add_argument("--pipeline", default=DEFAULT_IMAGE_PIPELINE, help=f"default: {DEFAULT_IMAGE_PIPELINE}")
    gi.add_argument("--cfg-scale", type=float, default=None, help="classifier-free guidance (default: the pipeline's)")
    gi.add_argument("--cfg-interval", type=int, default=-1, help="guide only the first N tokens (-1: all)")
    gi.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1)")
    gi.add_argument("--top-k", type=int, default=0, help="0 disables (default)")
    gi.add_argument("--top-p", type=float, default=1.0, help="1 disables (default)")
    gi.add_argument("--seed", type=int, default=None)
    gi.add_argument("--num-images", type=int, default=1, help="images per sampler (default 1)")
    gi.add_argument("--out", default=".", help="folder for the PNGs (default: current folder)")
    gi.add_argument("--save-map", action="store_true", help="also write <name>_map.png: which forward made each token")
    gi.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable")
    gi.set_defaults(func=cmd_generate_image)

    gm = gsub.add_parser(
        "molecule",
        help="generate molecules (de novo, fragment tasks, lead optimisation)",
        description="Generate molecules with a molecule pipeline; prints SMILES (None with the reason when a sample "
        "is not a molecule) and the stats per sampler.",
    )
    gm.add_argument("--task", default="de_novo", help="de_novo (default), linker, motif, scaffold, superstructure, lead_opt")
    gm.add_argument("--fragments", nargs="+", metavar="SMILES", help="fragment SMILES with [*] attachment points")
    gm.add_argument("--molecules", nargs="+", metavar="SMILES", help="starting molecules for --task lead_opt")
    gm.add_argument("--sampler", default="genmol", help="sampler name, or several separated by commas (default: genmol)")
    gm.add_argument("--pipeline", default=DEFAULT_MOLECULE_PIPELINE, help=f"default: {DEFAULT_MOLECULE_PIPELINE}")
    gm.add_argument("--num-samples", type=int, default=16)
    gm.add_argument("--temperature", type=float, default=None, help="default: the sampler's paper setting")
    gm.add_argument("--seed", type=int, default=None)
    gm.add_argument("--png", default=None, help="also draw the valid molecules into this PNG (RDKit grid)")
    gm.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable")
    gm.set_defaults(func=cmd_generate_molecule)

    # ---- samplers
    s = sub.add_parser("samplers", help="list registered samplers", description="List the sampler registry.")
    s.add_argument("--markdown", action="store_true", help="print a markdown table (docs/samplers.md)")
    s.set_defaults(func=cmd_samplers)

    # ---- bench
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
    bt.add_argument("--batch-size", type=int, default=4, help="batch of the extra batched table (<= 1: none)")
    bt.add_argument("--seed", type=int, default=0, help="prompt selection seed")
    bt.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bt.add_argument(
        "--samplers",
        default=None,
        help="comma-separated samplers to run (default: every one the pipeline serves)",
    )
    bt.add_argument("--no-peers", action="store_true", help="skip transformers generate() peers")
    bt.add_argument("--no-sweep", action="store_true", help="skip the speculative draft-length sweep")
    bt.add_argument("--json", metavar="PATH", help="write the full result (raw timings, machine) as JSON")
    bt.add_argument("--markdown", metavar="PATH", help="write the tables with a machine/settings header")
    bt.add_argument("--quick", action="store_true", help="smoke test: 2 prompts, 2 runs, 32 tokens, no sweep")
    bt.set_defaults(func=cmd_bench_text)
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
    bi = bsub.add_parser(
        "image",
        help="image samplers (speculative, sjd, gsd, lantern, ...) vs ar: speed and FID (emoji features)",
        description="Image samplers vs ar on the same prompts and seeds: forwards, step compression, accepted length, "
        "wall speedup (interleaved runs, medians) beside FID (emoji features), class accuracy and token NLL. "
        "Markdown to stdout; --json, --markdown and --png-dir write the files.",
    )
    bi.add_argument("--pipeline", default=DEFAULT_IMAGE_PIPELINE)
    bi.add_argument("--runs", type=int, default=3, help="interleaved runs, each a fresh sample set (default 3)")
    bi.add_argument("--samples", type=int, default=16, help="images per entry and run (default 16)")
    bi.add_argument("--batch-size", type=int, default=8, help="images per pipeline call (default 8)")
    bi.add_argument("--samplers", default=None, help="comma-separated samplers (default: ar, speculative, sjd, gsd, "
                    "lantern and every other autoregressive sampler the pipeline serves)")
    bi.add_argument("--exclude", default="", help="comma-separated samplers to leave out (listed as skipped)")
    bi.add_argument("--cfg-scale", type=float, default=None, help="default: the pipeline's")
    bi.add_argument("--cfg-interval", type=int, default=-1)
    bi.add_argument("--temperature", type=float, default=1.0)
    bi.add_argument("--top-k", type=int, default=0)
    bi.add_argument("--top-p", type=float, default=1.0)
    bi.add_argument("--seed", type=int, default=0)
    bi.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    bi.add_argument("--classifier", default=None, help="feature classifier folder (default: the pipeline's)")
    bi.add_argument("--json", metavar="PATH", help="write the full result as JSON")
    bi.add_argument("--markdown", metavar="PATH", help="write the report with a title and machine line")
    bi.add_argument("--png-dir", metavar="DIR", help="write image_samples_<sampler>.png and image_acceptance_maps.png")
    bi.add_argument("--quick", action="store_true", help="smoke test: 1 run, 4 samples")
    bi.set_defaults(func=cmd_bench_image)

    # ---- train
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
