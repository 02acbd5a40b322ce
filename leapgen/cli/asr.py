"""``leapgen transcribe a.wav b.wav [--sampler paraformer] [--json]`` and ``leapgen bench asr``."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ConfigError

DEFAULT_ASR_PIPELINE = "leapgen/asr-en"


def cmd_transcribe(args: argparse.Namespace) -> int:
    import torch

    from ..pipelines import ASRPipeline, Pipeline

    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, ASRPipeline):
        raise ConfigError(f"{args.pipeline} is a {type(pipe).__name__}, not an ASR pipeline; pass --pipeline {DEFAULT_ASR_PIPELINE}.")
    extra = {"draft": args.draft} if args.draft else {}
    out = pipe(list(args.files), sampler=args.sampler, batch_size=args.batch_size,
               progress=sys.stderr.isatty() or args.progress, **extra)
    failed = 0
    if args.json:
        rows = [{"file": f, "text": t, "error": e, "duration": d,
                 "words": [{"word": w, "start": s, "end": en} for w, s, en in ts] if ts else None}
                for f, t, e, d, ts in zip(args.files, out.texts, out.errors, out.durations, out.timestamps)]
        print(json.dumps({"results": rows, "stats": out.stats.as_dict()}, indent=2, default=float))
    else:
        for f, t, e in zip(args.files, out.texts, out.errors):
            print(f"{f}\tERROR: {e}" if e else f"{f}\t{t}")
        print(out.stats.summary(), file=sys.stderr)
    failed = sum(e is not None for e in out.errors)
    return 1 if failed == len(args.files) else 0


def cmd_bench_asr(args: argparse.Namespace) -> int:
    from ..bench.asr import run_bench

    samplers = tuple(s.strip() for s in args.samplers.split(",") if s.strip())
    run_bench(pipeline=args.pipeline, corpus=args.corpus, out=args.out, samplers=samplers, max_utts=args.max_utts,
              speed_utts=args.speed_utts, repeats=args.repeats, threads=args.threads, quick=args.quick)
    print(f"wrote {args.out}/bench_asr.md, bench_asr.json, bench_asr.png")
    return 0


def register_cli(parsers) -> None:
    t = parsers.top.add_parser("transcribe", help="speech to text (with word timestamps in --json)",
                               description="Transcribe audio files with the ASR pipeline.")
    t.add_argument("files", nargs="+", help="audio files (wav, flac, ogg; any rate, stereo is downmixed)")
    t.add_argument("--sampler", default="paraformer",
                   help="paraformer (default), ctc_greedy, ctc_prefix_beam, ar, ar_beam, gad, speculative, specdec")
    t.add_argument("--draft", default=None, choices=("paraformer", "ctc"), help="the NAR draft of gad / speculative / specdec")
    t.add_argument("--json", action="store_true", help="print JSON with per-word timestamps and the statistics")
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--progress", action="store_true", help="show the progress bar over files")
    t.add_argument("--pipeline", default=DEFAULT_ASR_PIPELINE)
    t.set_defaults(func=cmd_transcribe)

    b = parsers.bench.add_parser("asr", help="ASR bench: WER/CER per split, CIF length accuracy, timestamps, speed",
                                 description="Benchmark every ASR sampler; writes bench_asr.md/.json/.png.")
    b.add_argument("--pipeline", default=DEFAULT_ASR_PIPELINE)
    b.add_argument("--corpus", default=None, help="speech-en corpus folder (default: the cache)")
    b.add_argument("--out", default="docs")
    b.add_argument("--samplers", default="paraformer,ctc_greedy,ctc_prefix_beam,ar,ar_beam,gad,gad[ctc],speculative,specdec",
                   help="comma-separated; NAME[ctc] uses the CTC draft")
    b.add_argument("--max-utts", type=int, default=None, help="utterances per split (default: all)")
    b.add_argument("--speed-utts", type=int, default=12)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    b.set_defaults(func=cmd_bench_asr)
