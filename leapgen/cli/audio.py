"""``leapgen generate audio "..." --sampler magnet --duration 5 --out clip.wav`` and ``leapgen bench audio``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import declare_outputs, sampler_runs, wrong_pipeline

DEFAULT_AUDIO_PIPELINE = "leapgen/audio-music"


def load_audio_pipeline(name: str):
    from ..pipelines import AudioPipeline, Pipeline

    pipe = Pipeline.from_pretrained(name)
    if not isinstance(pipe, AudioPipeline):
        raise wrong_pipeline(name, pipe, "an audio pipeline", f"pass --pipeline {DEFAULT_AUDIO_PIPELINE}")
    return pipe


def cmd_generate_audio(args: argparse.Namespace) -> int:
    from ..pipelines.audio_output import audio_file_format

    runs = sampler_runs(args.sampler, args.param)
    paths = [Path(args.out) for _ in runs]
    if len(runs) > 1:
        paths = [p.with_name(f"{p.stem}_{info.name}{p.suffix or '.wav'}") for p, (info, _) in zip(paths, runs)]
    for path in paths:  # an extension soundfile cannot write is refused before anything is generated
        audio_file_format(path)
    pipe = load_audio_pipeline(args.pipeline)
    for (info, own), path in zip(runs, paths):
        out = pipe(args.prompt, sampler=info.name, duration=args.duration, cfg_scale=args.cfg_scale,
                   temperature=args.temperature, seed=args.seed, progress=sys.stderr.isatty() or args.progress,
                   **({} if args.audio_prompt is None else {"audio_prompt": args.audio_prompt}), **own)
        out.save(0, path)
        print(f"--- {info.name} --- wrote {path} ({out.audios[0].shape[0] / out.sample_rate:.2f} s at {out.sample_rate} Hz)")
        print(out.stats.summary())
    return 0


def cmd_bench_audio(args: argparse.Namespace) -> int:
    from ..bench.audio import run_audio_bench

    run_audio_bench(pipeline=args.pipeline, out_dir=args.out, corpus_dir=args.corpus, num_prompts=args.num_prompts,
                    duration=args.duration, repeats=args.repeats, seed=args.seed, quick=args.quick,
                    **({} if args.samplers is None else {"samplers": args.samplers}),
                    **({} if args.speed_only is None else {"speed_only": args.speed_only}))
    return 0


def register_cli(parsers) -> None:
    g = parsers.generate.add_parser("audio", help="text to music (codec tokens, MAGNeT / AR samplers)",
                                    description="Generate a clip from a text description and write it as a wav file.")
    g.add_argument("prompt", help="a description, e.g. 'calm piano melody in C major'")
    g.add_argument("--sampler", default="magnet", help="sampler name(s), comma-separated (magnet (default), magnet_rescored, magnet_hybrid, ar, speculative)")
    g.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter key=value (repeatable)")
    g.add_argument("--duration", type=float, default=5.0, help="seconds (default 5)")
    g.add_argument("--cfg-scale", type=float, default=None,
                   help="guidance: of the AR samplers (default 3.0), or the start of the masked samplers' annealed "
                        "guidance (default 10)")
    g.add_argument("--temperature", type=float, default=None, help="default: the sampler's paper value")
    g.add_argument("--audio-prompt", default=None, metavar="FILE",
                   help="audio file to continue: the clip (--duration long, prompt included) starts with it")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--out", default="clip.wav", help="output wav in an existing folder (several samplers: clip_<sampler>.wav)")
    g.add_argument("--progress", action="store_true", help="show the progress bar over steps")
    g.add_argument("--pipeline", default=DEFAULT_AUDIO_PIPELINE,
                   help=f"audio pipeline name or folder (default: {DEFAULT_AUDIO_PIPELINE})")
    g.set_defaults(func=cmd_generate_audio)
    declare_outputs(g, out="file_in_dir")

    b = parsers.bench.add_parser("audio", help="audio bench: classifier accuracy, Frechet distance, KL, latency, RTF",
                                 description="Benchmark the audio samplers; writes docs/bench_audio.md (+ .json) and pictures.")
    b.add_argument("--pipeline", default=DEFAULT_AUDIO_PIPELINE, help="audio pipeline name or folder (default: %(default)s)")
    b.add_argument("--out", default="docs", help="folder for bench_audio.md/.json and PNGs")
    b.add_argument("--corpus", default=None, help="audio-music corpus folder (default: the cache)")
    b.add_argument("--num-prompts", type=int, default=32, help="held-out test prompts of the quality run (default: %(default)s)")
    b.add_argument("--duration", type=float, default=5.0, help="seconds per generated clip (default: %(default)s)")
    b.add_argument("--samplers", default=None, help="comma-separated entries of the quality run: samplers, optionally with parameters, "
                   "e.g. 'magnet[steps_per_stage=[10,4,4,4]]' (default: ar, speculative, magnet, magnet_rescored, magnet_hybrid, "
                   "and magnet with 25 and 12 steps)")
    b.add_argument("--speed-only", default=None,
                   help="entries timed without a quality run, comma-separated, e.g. 'magnet[cfg_batch=false]'; '' for none "
                        "(default: that one)")
    b.add_argument("--repeats", type=int, default=3, help="interleaved batch-1 timing runs; medians (default: %(default)s)")
    b.add_argument("--seed", type=int, default=0, help="base seed: the batch of prompts starting at i uses seed + i (default: %(default)s)")
    b.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    b.set_defaults(func=cmd_bench_audio)
    declare_outputs(b, out="dir")
