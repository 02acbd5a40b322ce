"""``leapgen transcribe a.wav b.wav [--sampler paraformer] [--json]`` and ``leapgen bench asr``."""

from __future__ import annotations

import argparse
import sys

from .common import RunReport, declare_outputs, file_line, sampler_runs, wrong_pipeline

DEFAULT_ASR_PIPELINE = "leapgen/asr-en"


def cmd_transcribe(args: argparse.Namespace) -> int:
    import torch

    from ..pipelines import ASRPipeline, Pipeline

    runs = sampler_runs(args.sampler, None)  # several samplers run one after the other, as in `leapgen generate`
    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, ASRPipeline):
        raise wrong_pipeline(args.pipeline, pipe, "an ASR pipeline", f"pass --pipeline {DEFAULT_ASR_PIPELINE}")
    extra = {"draft": args.draft} if args.draft else {}
    report = RunReport(args.json, len(runs))
    for info, _ in runs:
        out = pipe(list(args.files), sampler=info.name, batch_size=args.batch_size,
                   progress=sys.stderr.isatty() or args.progress, **extra)
        rows = [{"file": f, "text": t, "error": e, "duration": d,
                 "words": [{"word": w, "start": s, "end": en} for w, s, en in ts] if ts else None}
                for f, t, e, d, ts in zip(args.files, out.texts, out.errors, out.durations, out.timestamps)]
        report.add(info.name, rows, out.stats, file_line)
    return report.finish()


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
                   help="paraformer (default), ctc_greedy, ctc_prefix_beam, ar, ar_beam, gad, speculative, specdec; "
                        "or several separated by commas (each runs in turn)")
    t.add_argument("--draft", default=None, choices=("paraformer", "ctc"), help="the NAR draft of gad / speculative / specdec (default: paraformer)")
    t.add_argument("--json", action="store_true",
                   help="print JSON with per-word timestamps and the statistics (several samplers: {\"runs\": [...]})")
    t.add_argument("--batch-size", type=int, default=16, help="files decoded together in one batch (default 16)")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--progress", action="store_true", help="show the progress bar over files")
    t.add_argument("--pipeline", default=DEFAULT_ASR_PIPELINE,
                   help=f"ASR pipeline name or folder (default: {DEFAULT_ASR_PIPELINE})")
    t.set_defaults(func=cmd_transcribe)

    b = parsers.bench.add_parser("asr", help="ASR bench: WER/CER per split, CIF length accuracy, timestamps, speed",
                                 description="Benchmark every ASR sampler; writes bench_asr.md/.json/.png.")
    b.add_argument("--pipeline", default=DEFAULT_ASR_PIPELINE, help="ASR pipeline name or folder (default: %(default)s)")
    b.add_argument("--corpus", default=None, help="speech-en corpus folder (default: the cache)")
    b.add_argument("--out", default="docs", help="folder for bench_asr.md/.json/.png (default: %(default)s)")
    b.add_argument("--samplers", default="paraformer,ctc_greedy,ctc_prefix_beam,ar,ar_beam,gad,gad[ctc],speculative,specdec",
                   help="comma-separated; NAME[ctc] uses the CTC draft")
    b.add_argument("--max-utts", type=int, default=None, help="utterances per split (default: all)")
    b.add_argument("--speed-utts", type=int, default=12, help="utterances of >= 5 s timed at batch 1 (default: %(default)s)")
    b.add_argument("--repeats", type=int, default=3, help="interleaved timing rounds; medians (default: %(default)s)")
    b.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    b.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    b.set_defaults(func=cmd_bench_asr)
    declare_outputs(b, out="dir")
