"""``leapgen translate a.wav [--sampler dag_lookahead] [--out-dir DIR] [--json]`` and ``leapgen bench s2st``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import check_output_path, declare_outputs, print_json, sampler_runs, wrong_pipeline

DEFAULT_S2ST_PIPELINE = "leapgen/s2st-en-de"


def _wav_names(files: list[str], out_dir: Path, tag: str) -> list[Path]:
    """``NAME<tag>.de.wav`` per input in ``out_dir``; inputs with the same name get ``_1``, ``_2`` ... added."""
    seen: dict[str, int] = {}
    paths = []
    for f in files:
        stem = Path(f).stem
        n = seen.get(stem, 0)
        seen[stem] = n + 1
        paths.append(out_dir / f"{stem}{f'_{n}' if n else ''}{tag}.de.wav")
    return paths


def cmd_translate(args: argparse.Namespace) -> int:
    import soundfile as sf
    import torch

    from ..pipelines import Pipeline, S2STPipeline

    runs = sampler_runs(args.sampler, None)  # several samplers run one after the other, as in `leapgen generate`
    out_dir = check_output_path(args.out_dir, "--out-dir", "dir")
    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, S2STPipeline):
        raise wrong_pipeline(args.pipeline, pipe, "an S2ST pipeline", f"pass --pipeline {DEFAULT_S2ST_PIPELINE}")
    out_dir.mkdir(parents=True, exist_ok=True)
    results, all_failed = [], True
    for k, (info, _) in enumerate(runs):
        out = pipe(list(args.files), sampler=info.name, batch_size=args.batch_size,
                   check_language=not args.no_language_check)
        rows = []
        names = _wav_names(list(args.files), out_dir, f".{info.name}" if len(runs) > 1 else "")
        for f, a, t, e, path in zip(args.files, out.audios, out.texts, out.errors, names):
            wav = None
            if a is not None and a.size:
                sf.write(str(path), a, out.sample_rate)
                wav = str(path)
            rows.append({"file": f, "phonemes": t, "audio": wav, "error": e})
        all_failed = all_failed and all(r["error"] for r in rows)
        if args.json:
            results.append({"sampler": info.name, "results": rows, "stats": out.stats.as_dict()})
            continue
        if len(runs) > 1:
            print(f"{'' if k == 0 else chr(10)}--- {info.name} ---")
        for r in rows:
            print(f"{r['file']}\tERROR: {r['error']}" if r["error"] else f"{r['file']}\t{r['phonemes']}\t{r['audio']}")
        print(out.stats.summary(), file=sys.stderr)
    if args.json:  # one sampler: {"results", "stats"}; several: {"runs": [{"sampler", "results", "stats"}, ...]}
        print_json({k: v for k, v in results[0].items() if k != "sampler"} if len(results) == 1 else {"runs": results})
    return 1 if all_failed else 0


def cmd_bench_s2st(args: argparse.Namespace) -> int:
    from ..bench.s2st import run_s2st_bench

    samplers = tuple(s.strip() for s in args.samplers.split(",") if s.strip())
    run_s2st_bench(pipeline=args.pipeline, corpus=args.corpus, out=args.out, samplers=samplers, max_utts=args.max_utts,
                   speed_utts=args.speed_utts, repeats=args.repeats, threads=args.threads,
                   asr=None if args.asr.lower() == "none" else args.asr)
    print(f"wrote {args.out}/bench_s2st.md, bench_s2st.json")
    return 0


def register_cli(parsers) -> None:
    t = parsers.top.add_parser("translate", help="English speech to German speech (DASpeech-style S2ST)",
                               description="Translate English speech files to German speech and phonemes.")
    t.add_argument("files", nargs="+", help="audio files (wav, flac, ogg; any rate, stereo is downmixed)")
    t.add_argument("--sampler", default="dag_lookahead",
                   help="dag_lookahead (default), dag_greedy, dag_viterbi, ar; or several separated by commas "
                        "(each runs in turn and writes NAME.<sampler>.de.wav)")
    t.add_argument("--out-dir", default=".", help="folder for the NAME.de.wav files (created if missing)")
    t.add_argument("--json", action="store_true", help="print JSON with the statistics (several samplers: {\"runs\": [...]})")
    t.add_argument("--batch-size", type=int, default=8, help="files translated together in one batch (default 8)")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--no-language-check", action="store_true",
                   help="translate files the pipeline's language identifier hears as another language than English "
                        "(by default they get an ERROR line and are not translated)")
    t.add_argument("--pipeline", default=DEFAULT_S2ST_PIPELINE,
                   help=f"S2ST pipeline name or folder (default: {DEFAULT_S2ST_PIPELINE})")
    t.set_defaults(func=cmd_translate)
    declare_outputs(t, out_dir="dir")

    b = parsers.bench.add_parser("s2st", help="S2ST bench: phoneme BLEU / PER and batch-1 speed per decoding algorithm",
                                 description="Benchmark the DAG samplers against the AR baseline; writes bench_s2st.md/.json.")
    b.add_argument("--pipeline", default=DEFAULT_S2ST_PIPELINE, help="S2ST pipeline name or folder (default: %(default)s)")
    b.add_argument("--corpus", default=None, help="s2st-en-de corpus folder (default: the cache)")
    b.add_argument("--out", default="docs", help="folder for bench_s2st.md/.json and s2st/ samples (default: %(default)s)")
    b.add_argument("--samplers", default="dag_greedy,dag_lookahead,dag_viterbi,ar", help="comma-separated samplers (default: %(default)s)")
    b.add_argument("--max-utts", type=int, default=None, help="utterances per split (default: all)")
    b.add_argument("--speed-utts", type=int, default=10, help="test_unseen clips timed at batch 1 (default: %(default)s)")
    b.add_argument("--repeats", type=int, default=3, help="interleaved timing rounds; medians (default: %(default)s)")
    b.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    b.add_argument("--asr", default="leapgen/asr-de",
                   help="German ASR pipeline that transcribes the output speech for ASR-BLEU; 'none' skips it "
                        "(default: %(default)s; a missing asset is reported in the output)")
    b.set_defaults(func=cmd_bench_s2st)
    declare_outputs(b, out="dir")
