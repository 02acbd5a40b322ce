"""``leapgen generate speech "text" --prompt-audio v.wav`` and ``leapgen bench speech``."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError

DEFAULT_TTS_PIPELINE = "leapgen/tts-en"


def cmd_generate_speech(args: argparse.Namespace) -> int:
    import torch

    from ..pipelines import Pipeline, TTSPipeline

    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, TTSPipeline):
        raise ConfigError(f"{args.pipeline} is a {type(pipe).__name__}, not a TTS pipeline; pass --pipeline {DEFAULT_TTS_PIPELINE}.")
    out = pipe(list(args.text), prompt_audio=args.prompt_audio, prompt_text=args.prompt_text, sampler=args.sampler,
               seed=args.seed)
    ok = 0
    for i, t in enumerate(args.text):
        if out.audios[i] is None:
            print(f"{t!r}\tERROR: {out.errors[i]}", file=sys.stderr)
            continue
        path = args.out if len(args.text) == 1 else args.out.replace(".wav", f"_{i}.wav")
        out.save(i, path)
        print(f"{path}\t{out.audios[i].size / out.sample_rate:.2f} s\t{t}")
        ok += 1
    print(out.stats.summary(), file=sys.stderr)
    return 0 if ok else 1


def cmd_bench_speech(args: argparse.Namespace) -> int:
    from ..bench.tts import run_tts_bench

    samplers = tuple(s.strip() for s in args.samplers.split(",") if s.strip())
    run_tts_bench(pipeline=args.pipeline, corpus=args.corpus, out=args.out, max_items=args.max_items,
                  latency_items=args.latency_items, runs=args.runs, threads=args.threads, samplers=samplers,
                  batch8=tuple(s.strip() for s in args.batch8.split(",") if s.strip()), s2st=args.s2st)
    print(f"wrote {args.out}/bench_speech.md, bench_speech.json, tts/")
    return 0


def register_cli(parsers) -> None:
    g = parsers.generate.add_parser("speech", help="zero-shot text to speech (MaskGCT) in the voice of a prompt clip",
                                    description="Speak text in the voice of --prompt-audio; writes wav files.")
    g.add_argument("text", nargs="+", help="sentence(s) to speak")
    g.add_argument("--prompt-audio", required=True, help="a few seconds (>= 1 s) of the voice to imitate")
    g.add_argument("--prompt-text", default=None, help="what the prompt says (default: the bundled ASR's transcript)")
    g.add_argument("--sampler", default="maskgct", help="maskgct (default), ar, speculative (the AR T2S baseline)")
    g.add_argument("--out", default="speech.wav", help="output wav (several texts: speech_0.wav, speech_1.wav ...)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=int, default=1)
    g.add_argument("--pipeline", default=DEFAULT_TTS_PIPELINE)
    g.set_defaults(func=cmd_generate_speech)

    b = parsers.bench.add_parser("speech", help="TTS bench: ASR WER, speaker similarity, latency (MaskGCT vs AR T2S)",
                                 description="Zero-shot TTS bench on unseen voices; writes bench_speech.md/.json and tts/.")
    b.add_argument("--pipeline", default=DEFAULT_TTS_PIPELINE)
    b.add_argument("--corpus", default=None, help="tts-en corpus folder (default: the cache; build: leapgen data tts-en)")
    b.add_argument("--out", default="docs")
    b.add_argument("--samplers", default="maskgct,ar,maskgct[steps=8;cfg_scale=0]",
                   help="comma-separated T2S samplers, optionally with parameters: maskgct[steps=8;cfg_scale=0]")
    b.add_argument("--batch8", default="maskgct,ar", help="the entries also timed at batch 8")
    b.add_argument("--max-items", type=int, default=40)
    b.add_argument("--latency-items", type=int, default=6)
    b.add_argument("--runs", type=int, default=3)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--s2st", action="store_true", help="also run the speech-to-speech translation bench (leapgen.bench.s2st)")
    b.set_defaults(func=cmd_bench_speech)
