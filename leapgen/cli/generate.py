"""``leapgen generate text | image | molecule``: one pipeline call per requested sampler, results
and stats printed (images and molecule grids written as PNGs)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from .common import (
    DEFAULT_IMAGE_PIPELINE,
    DEFAULT_MOLECULE_PIPELINE,
    DEFAULT_TEXT_PIPELINE,
    check_output_path,
    declare_outputs,
    load_image_pipeline,
    load_text_pipeline,
    sampler_runs,
    wrong_pipeline,
)


def cmd_generate_text(args: argparse.Namespace) -> int:
    pipe = load_text_pipeline(args.pipeline, diffusion=True)
    from ..pipelines.text_diffusion import DiffusionTextPipeline

    masked = isinstance(pipe, DiffusionTextPipeline)
    # the pipeline's own default sampler: ar for a causal LM, fast_dllm for a diffusion LM
    runs = sampler_runs(args.sampler or ("fast_dllm" if masked else "ar"), args.param)
    filters: dict[str, Any] = {"top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p,
                               "min_new_tokens": args.min_new_tokens, "num_return_sequences": args.num_return_sequences,
                               "logprobs": args.logprobs, "presence_penalty": args.presence_penalty,
                               "frequency_penalty": args.frequency_penalty}
    if masked:  # masked samplers take none of these: refuse them by name rather than drop them
        given = [flag for flag, v, off in (("--top-k", args.top_k, 0), ("--top-p", args.top_p, 1.0),
                                           ("--min-p", args.min_p, 0.0), ("--min-new-tokens", args.min_new_tokens, 0),
                                           ("--num-return-sequences", args.num_return_sequences, 1),
                                           ("--logprobs", args.logprobs, None),
                                           ("--presence-penalty", args.presence_penalty, 0.0),
                                           ("--frequency-penalty", args.frequency_penalty, 0.0)) if v != off]
        if given:
            raise ConfigError(f"{', '.join(given)}: {args.pipeline} is a diffusion LM, whose masked samplers take no "
                              "top-k / top-p / min-p filter, min-new-tokens bound, several samples per call, "
                              "log-probabilities or presence / frequency penalty; leave them out (--temperature works).")
        filters = {}
    if args.stream and masked:
        raise ConfigError(f"--stream: {args.pipeline} is a diffusion LM, which does not write left to right; leave "
                          "--stream out.")
    stop = [unescape(s) for s in args.stop or []] or None
    progress = sys.stderr.isatty() and not args.stream
    for i, (info, own) in enumerate(runs):
        if len(runs) > 1:
            print(f"{'' if i == 0 else chr(10)}--- {info.name} ---", flush=True)
        streamer = None
        if args.stream:  # the accepted tokens as they come (several at once for a speculative step)
            from transformers import TextStreamer

            if args.echo:
                print(args.prompt, end="", flush=True)
            streamer = TextStreamer(pipe.tokenizer, skip_prompt=True)
        out = pipe(
            args.prompt,
            sampler=info.name,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            progress=progress,
            stop=stop,
            **({"streamer": streamer} if streamer is not None else {}),
            **filters,
            **own,
        )
        for j, text in enumerate(out.texts):
            if len(out.texts) > 1:  # --num-return-sequences: every sample, numbered
                print(f"--- sample {j} ---", flush=True)
            if not args.stream:
                print(args.prompt + text if args.echo else text)
            if out.logprobs is not None:
                print(format_logprobs(pipe.tokenizer, out.token_ids[j], out.logprobs[j], out.top_logprobs[j]))
        print(f"{out.stats.summary()} finish={','.join(out.finish_reasons)}")
    return 0


def format_logprobs(tokenizer: Any, ids: list[int], logprobs: list[float], tops: list[dict[int, float]]) -> str:
    """``--logprobs``: one line per generated token (its text, its log-probability, the alternatives),
    then the total."""
    piece = lambda t: repr(tokenizer.decode([t]))  # noqa: E731
    lines = []
    for t, lp, alts in zip(ids, logprobs, tops):
        more = "  ".join(f"{piece(a)}={v:.3f}" for a, v in alts.items())
        lines.append(f"  {piece(t):<16} {lp:8.3f}" + (f"   top: {more}" if more else ""))
    lines.append(f"  logprob total {sum(logprobs):.3f} over {len(ids)} tokens")
    return "\n".join(lines)


def unescape(text: str) -> str:
    """``\\n``, ``\\t`` and ``\\\\`` typed on a command line as the characters they name (a stop string)."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "image"


#: the one-image options of ``generate image`` and the flag that sets each
_IMAGE_OPTIONS = {"cfg_scale": "--cfg-scale", "cfg_interval": "--cfg-interval", "temperature": "--temperature",
                  "top_k": "--top-k", "top_p": "--top-p", "negative_prompt": "--negative-prompt"}


def _image_call_kwargs(args: argparse.Namespace, pipe: Any, runs: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """The call arguments the command line set, checked against what this pipeline's ``__call__``
    takes (continuous-token MAR and DD take fewer than the raster pipelines); an option it does not
    take is an error naming the options it does."""
    from ..pipelines.signature import call_signature

    sig = call_signature(type(pipe))
    kwargs = {k: v for k, v in (("seed", args.seed), ("num_images_per_prompt", args.num_images),
                                ("progress", sys.stderr.isatty())) if k in sig.names}
    for dest, flag in _IMAGE_OPTIONS.items():
        value = getattr(args, dest)
        if value is None:  # not given: the pipeline's own default
            continue
        takes = dest in sig.names or (sig.sampler_params and runs and all(
            info is not None and dest in info.defaults for info, _ in runs))
        if not takes:
            raise ConfigError(f"{flag} is not an option of {type(pipe).__name__} ({args.pipeline}); its call takes "
                              f"{sig.describe()}. Leave {flag} out (or pass a sampler parameter with --param KEY=VALUE).")
        kwargs[dest] = _class_or_text(value) if dest == "negative_prompt" else value  # "3": class 3
    return kwargs


def _class_or_text(value: str) -> str | int:
    """An image prompt from the command line: a whole number (``"3"``, ``" 3 "``, ``"-1"``) is a class id,
    so that an id out of range is refused as one (``"-1"`` was read as the text "1"); anything else a text."""
    return int(value) if re.fullmatch(r"\s*[+-]?\d+\s*", value) else value


def cmd_generate_image(args: argparse.Namespace) -> int:
    from ..pipelines.image_mar import resolve_prompts
    from ..pipelines.signature import call_signature
    from .common import parse_params

    runs = sampler_runs(args.sampler, args.param) if args.sampler is not None else None
    if args.num_images < 1:
        raise ConfigError(f"--num-images must be >= 1, got {args.num_images}.")
    out_dir = check_output_path(args.out, "--out", "dir")
    pipe = load_image_pipeline(args.pipeline, raster_only=False)
    if runs is None:  # no --sampler: the pipeline's own default sampler
        default = call_signature(type(pipe)).defaults.get("sampler")
        runs = sampler_runs(default, args.param) if isinstance(default, str) else [(None, parse_params(args.param))]
    kwargs = _image_call_kwargs(args, pipe, runs)
    prompt: str | int = _class_or_text(args.prompt)  # "3": class id 3
    _, errors = resolve_prompts(pipe, [prompt])  # a bad prompt fails here, before anything is written
    if errors[0] is not None:
        raise InputError(errors[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, (info, own) in enumerate(runs):
        out = pipe(prompt, **({} if info is None else {"sampler": info.name}), **kwargs, **own)
        name = info.name if info is not None else out.stats.sampler
        print(f"{'' if k == 0 else chr(10)}--- {name} ---")
        for i, img in enumerate(out.images):
            stem = out_dir / f"{_slug(args.prompt if isinstance(prompt, str) else f'class-{prompt}')}_{name}_{i}"
            img.save(f"{stem}.png")
            print(f"wrote {stem}.png")
            if args.save_map and hasattr(out, "acceptance_map"):
                out.acceptance_map(i, with_image=False).save(f"{stem}_map.png")
                print(f"wrote {stem}_map.png")
            elif args.save_map:
                print(f"no {stem.name}_map.png: {type(pipe).__name__} has no per-token acceptance map")
        print(out.stats.summary())
    return 0


def cmd_generate_molecule(args: argparse.Namespace) -> int:
    from ..pipelines import Pipeline
    runs = sampler_runs(args.sampler, args.param)
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}.")
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not hasattr(pipe, "ar_model"):
        raise wrong_pipeline(args.pipeline, pipe, "a molecule pipeline", f"pass --pipeline {DEFAULT_MOLECULE_PIPELINE}")
    task_args: dict[str, Any] = {"task": args.task}
    if args.fragments:
        task_args["fragments"] = args.fragments
    if args.molecules:
        task_args["molecules"] = args.molecules
    for k, (info, own) in enumerate(runs):
        out = pipe(num_samples=args.num_samples, sampler=info.name, seed=args.seed, temperature=args.temperature,
                   progress=sys.stderr.isatty(), **task_args, **own)
        print(f"{'' if k == 0 else chr(10)}--- {info.name} ({args.task}) ---")
        for i, (smi, err) in enumerate(zip(out.smiles, out.errors)):
            score = f"  score={out.scores[i]:.3f}" if out.scores and out.scores[i] is not None else ""
            print(f"{i:3d}  {smi}{score}" if smi else f"{i:3d}  - ({err})")
        print(f"valid {sum(out.valid)}/{len(out.valid)}" + (f", filtered {out.num_filtered}" if out.num_filtered else ""))
        print(out.stats.summary())
        if args.png:
            from ..bench.molecule import save_grid

            path = args.png if len(runs) == 1 else str(Path(args.png).with_suffix("")) + f"_{info.name}.png"
            try:
                save_grid(out.smiles, path, n=16, title=info.name)
                print(f"wrote {path}")
            except InputError as e:
                print(f"no picture: {e}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Register ``generate`` and its modalities on the top-level subparsers; returns the modality
    subparsers so that family modules (see :func:`leapgen.cli.build_parser`) add their own."""
    # ---- generate
    g = sub.add_parser("generate", help="generate with a pipeline", description="Generate with a pipeline.")
    gsub = g.add_subparsers(dest="modality", metavar="MODALITY")
    gsub.required = True
    gt = gsub.add_parser("text", help="continue a text prompt", description="Continue a text prompt.")
    gt.add_argument("prompt", help="the prompt text")
    gt.add_argument(
        "--sampler", default=None,
        help="sampler name, or several separated by commas (default: ar; fast_dllm for a diffusion-LM pipeline)",
    )
    gt.add_argument(
        "--pipeline",
        default=DEFAULT_TEXT_PIPELINE,
        help=f"pipeline name or folder (default: {DEFAULT_TEXT_PIPELINE}; a diffusion LM such as "
        "leapgen/text-code-diffusion works too)",
    )
    gt.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate at most (default 128)")
    gt.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gt.add_argument("--top-k", type=int, default=0, help="0 disables (default)")
    gt.add_argument("--top-p", type=float, default=1.0, help="1 disables (default)")
    gt.add_argument("--min-p", type=float, default=0.0,
                    help="keep tokens at least this fraction as likely as the top one, applied after top-k / top-p "
                    "(vLLM's min_p); 0 disables (default)")
    gt.add_argument("--min-new-tokens", type=int, default=0,
                    help="no end-of-sequence before this many new tokens (transformers' min_new_tokens; the lossless "
                    "samplers take it); 0 disables (default)")
    gt.add_argument("--num-return-sequences", type=int, default=1,
                    help="samples per prompt, printed in turn (needs --temperature > 0); default 1")
    gt.add_argument("--logprobs", type=int, default=None, metavar="K",
                    help="print each token's log-probability under the model and its K most likely alternatives "
                    "(vLLM's logprobs, K in 0..20); default off")
    gt.add_argument("--presence-penalty", type=float, default=0.0,
                    help="subtract this from the logit of every token already generated (OpenAI / vLLM "
                    "presence_penalty, -2..2; the prompt does not count); 0 disables (default)")
    gt.add_argument("--frequency-penalty", type=float, default=0.0,
                    help="subtract this times the number of times a token was generated from its logit (OpenAI / "
                    "vLLM frequency_penalty, -2..2); 0 disables (default)")
    gt.add_argument("--seed", type=int, default=None, help="random seed (default: none, a fresh draw each run)")
    gt.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="sampler parameter, repeatable (e.g. num_draft_tokens=4)",
    )
    gt.add_argument("--echo", action="store_true", help="print the prompt before the generated text")
    gt.add_argument("--stop", action="append", metavar="TEXT",
                    help="stop string, repeatable; the text ends before it (\\n and \\t are read as newline and tab)")
    gt.add_argument("--stream", action="store_true",
                    help="print the text as the tokens are accepted (a causal-LM pipeline; the stop string itself may show)")
    gt.set_defaults(func=cmd_generate_text)
    gi = gsub.add_parser(
        "image",
        help="generate images from a class name or an emoji name",
        description="Generate images with an image pipeline; writes PNGs (and acceptance maps) and prints the stats.",
    )
    gi.add_argument("prompt", help="a class name (e.g. animals), a class id (e.g. 3) or, for the emoji model, a Unicode "
                                   "name (e.g. 'red apple')")
    gi.add_argument("--sampler", default=None,
                    help="sampler name, or several separated by commas (default: the pipeline's, ar for the raster one)")
    gi.add_argument("--pipeline", default=DEFAULT_IMAGE_PIPELINE,
                    help=f"default: {DEFAULT_IMAGE_PIPELINE}; any image pipeline (-nar, -var, -ctf, -mar, -dd ...)")
    gi.add_argument("--cfg-scale", type=float, default=None, help="classifier-free guidance (default: the pipeline's)")
    gi.add_argument("--cfg-interval", type=int, default=None,
                    help="LlamaGen's guidance cutoff: N >= 0 guides tokens 0..N+1 only (the loop index i = k-1 of "
                         "token k is compared with N), -1 guides every token (default: the pipeline's, -1)")
    gi.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: the pipeline's, 1)")
    gi.add_argument("--top-k", type=int, default=None, help="0 disables (default: the pipeline's, 0)")
    gi.add_argument("--top-p", type=float, default=None, help="1 disables (default: the pipeline's, 1)")
    gi.add_argument("--negative-prompt", default=None, metavar="PROMPT",
                    help="a class name, id or emoji name that guidance steers away from (needs --cfg-scale other than 1)")
    # the options a pipeline's call does not take (e.g. --top-k for MAR, --cfg-scale for DD) are refused by name
    gi.add_argument("--seed", type=int, default=None, help="random seed (default: none, a fresh draw each run)")
    gi.add_argument("--num-images", type=int, default=1, help="images per sampler (default 1)")
    gi.add_argument("--out", default=".", help="folder for the PNGs (default: current folder)")
    gi.add_argument("--save-map", action="store_true", help="also write <name>_map.png: which forward made each token")
    gi.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable")
    gi.set_defaults(func=cmd_generate_image)
    declare_outputs(gi, out="dir")

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
    gm.add_argument("--num-samples", type=int, default=16,
                    help="molecules per sampler (default 16; for lead_opt, candidates per molecule and round)")
    gm.add_argument("--temperature", type=float, default=None, help="default: the sampler's paper setting")
    gm.add_argument("--seed", type=int, default=None, help="random seed (default: none, a fresh draw each run)")
    gm.add_argument("--png", default=None, help="also draw the first 16 valid molecules into this PNG, an RDKit grid (several samplers: "
                         "<name>_<sampler>.png)")
    gm.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable")
    gm.set_defaults(func=cmd_generate_molecule)
    declare_outputs(gm, png="file_in_dir")
    return gsub
