"""``leapgen translate a.wav [--sampler dag_lookahead] [--out-dir DIR] [--json]`` and ``leapgen bench s2st``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import ConfigError

DEFAULT_S2ST_PIPELINE = "leapgen/s2st-en-de"


def cmd_translate(args: argparse.Namespace) -> int:
    import soundfile as sf
    import torch

    from ..pipelines import Pipeline, S2STPipeline

    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, S2STPipeline):
        raise ConfigError(f"{args.pipeline} is a {type(pipe).__name__}, not an S2ST pipeline; pass --pipeline {DEFAULT_S2ST_PIPELINE}.")
    out = pipe(list(args.files), sampler=args.sampler, batch_size=args.batch_size)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for f, a, t, e in zip(args.files, out.audios, out.texts, out.errors):
        wav = None
        if a is not None and a.size:
            wav = str(out_dir / (Path(f).stem + ".de.wav"))
            sf.write(wav, a, out.sample_rate)
        rows.append({"file": f, "phonemes": t, "audio": wav, "error": e})
    if args.json:
        print(json.dumps({"results": rows, "stats": out.stats.as_dict()}, indent=2, default=float, ensure_ascii=False))
    else:
        for r in rows:
            print(f"{r['file']}\tERROR: {r['error']}" if r["error"] else f"{r['file']}\t{r['phonemes']}\t{r['audio']}")
        print(out.stats.summary(), file=sys.stderr)
    return 1 if all(r["error"] for r in rows) else 0


def cmd_bench_s2st(args: argparse.Namespace) -> int:
    from ..bench.s2st import run_s2st_bench

    samplers = tuple(s.strip() for s in args.samplers.split(",") if s.strip())
    run_s2st_bench(pipeline=args.pipeline, corpus=args.corpus, out=args.out, samplers=samplers, max_utts=args.max_utts,
                   speed_utts=args.speed_utts, repeats=args.repeats, threads=args.threads)
    print(f"wrote {args.out}/bench_s2st.md, bench_s2st.json")
    return 0


def register_cli(parsers) -> None:
    t = parsers.top.add_parser("translate", help="English speech to German speech (DASpeech-style S2ST)",
                               description="Translate English speech files to German speech and phonemes.")
    t.add_argument("files", nargs="+", help="audio files (wav, flac, ogg; any rate, stereo is downmixed)")
    t.add_argument("--sampler", default="dag_lookahead", help="dag_lookahead (default), dag_greedy, dag_viterbi, ar")
    t.add_argument("--out-dir", default=".", help="where NAME.de.wav files go")
    t.add_argument("--json", action="store_true", help="print JSON with the statistics")
    t.add_argument("--batch-size", type=int, default=8)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--pipeline", default=DEFAULT_S2ST_PIPELINE)
    t.set_defaults(func=cmd_translate)

    b = parsers.bench.add_parser("s2st", help="S2ST bench: phoneme BLEU / PER and batch-1 speed per decoding algorithm",
                                 description="Benchmark the DAG samplers against the AR baseline; writes bench_s2st.md/.json.")
    b.add_argument("--pipeline", default=DEFAULT_S2ST_PIPELINE)
    b.add_argument("--corpus", default=None, help="s2st-en-de corpus folder (default: the cache)")
    b.add_argument("--out", default="docs")
    b.add_argument("--samplers", default="dag_greedy,dag_lookahead,dag_viterbi,ar")
    b.add_argument("--max-utts", type=int, default=None, help="utterances per split (default: all)")
    b.add_argument("--speed-utts", type=int, default=10)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--threads", type=int, default=1)
    b.set_defaults(func=cmd_bench_s2st)
