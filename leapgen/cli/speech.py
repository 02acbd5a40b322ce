"""``leapgen generate speech "text" --prompt-audio v.wav`` and ``leapgen bench speech``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError, InputError
from .common import check_output_path, declare_outputs, parse_params, split_list, wrong_pipeline

DEFAULT_TTS_PIPELINE = "leapgen/tts-en"


#: T2S sampler names of the TTS pipeline that are not registry names
_TTS_SAMPLER_ALIASES = ("maskgct",)


def _speech_samplers(spec: str) -> list[str]:
    """The T2S samplers of ``--sampler a,b`` (each checked against the registry before anything is loaded)."""
    from ..samplers import sampler_info

    names = split_list(spec)
    if not names:
        raise ConfigError("--sampler needs at least one sampler name: maskgct, ar or speculative.")
    for name in names:
        if name not in _TTS_SAMPLER_ALIASES:
            sampler_info(name)  # UnknownSamplerError lists the registered ones
    return names


def _wav_paths(out: Path, n_texts: int, samplers: list[str]) -> list[list[Path]]:
    """``paths[s][i]``: sentence ``i`` spoken with sampler ``s``; one sentence and one sampler write
    ``--out`` itself, more add ``_<i>`` and/or ``_<sampler>`` to its name."""
    suffix = out.suffix or ".wav"
    return [[out if n_texts == 1 and len(samplers) == 1 else
             out.with_name(out.stem + (f"_{i}" if n_texts > 1 else "") + (f"_{s}" if len(samplers) > 1 else "") + suffix)
             for i in range(n_texts)] for s in samplers]


def cmd_generate_speech(args: argparse.Namespace) -> int:
    import torch

    from ..pipelines import Pipeline, TTSPipeline
    from ..pipelines.audio_output import audio_file_format

    texts = [args.text] if isinstance(args.text, str) else list(args.text)  # one sentence per argument
    if args.prompt_audio is None:
        raise ConfigError("--prompt-audio is required: a few seconds (>= 1 s) of the voice to speak with, e.g. "
                          "--prompt-audio voice.wav (in a batch job, --input, each JSONL line gives its own prompt_audio).")
    if not Path(args.prompt_audio).is_file():
        raise InputError(f"--prompt-audio {args.prompt_audio} does not exist or is not a file; pass a wav file of the voice.")
    samplers = _speech_samplers(args.sampler)
    params = parse_params(args.param)
    out_path = check_output_path(args.out, "--out", "file_in_dir")
    paths = _wav_paths(out_path, len(texts), samplers)
    for path in (p for row in paths for p in row):  # an extension soundfile cannot write, before generating
        audio_file_format(path)
    torch.set_num_threads(args.threads)
    pipe = Pipeline.from_pretrained(args.pipeline)
    if not isinstance(pipe, TTSPipeline):
        raise wrong_pipeline(args.pipeline, pipe, "a TTS pipeline", f"pass --pipeline {DEFAULT_TTS_PIPELINE}")
    ok = 0
    for k, sampler in enumerate(samplers):
        out = pipe(texts, prompt_audio=args.prompt_audio, prompt_text=args.prompt_text, sampler=sampler, seed=args.seed,
                   **params)
        if len(samplers) > 1:
            print(f"{'' if k == 0 else chr(10)}--- {sampler} ---")
        for i, t in enumerate(texts):
            if out.audios[i] is None:  # this sentence fails alone
                print(f"{t!r}\tERROR: {out.errors[i]}", file=sys.stderr)
                continue
            out.save(i, paths[k][i])
            print(f"{paths[k][i]}\t{out.audios[i].size / out.sample_rate:.2f} s\t{t}")
            ok += 1
        print(out.stats.summary(), file=sys.stderr)
    return 0 if ok else 1


def cmd_bench_speech(args: argparse.Namespace) -> int:
    from ..bench.common import split_entries
    from ..bench.tts import run_tts_bench

    run_tts_bench(pipeline=args.pipeline, corpus=args.corpus, out=args.out, max_items=args.max_items,
                  latency_items=args.latency_items, runs=args.runs, threads=args.threads,
                  samplers=tuple(split_entries(args.samplers)), batch8=tuple(split_entries(args.batch8)), s2st=args.s2st,
                  **({} if args.speed_only is None else {"speed_only": tuple(split_entries(args.speed_only))}))
    print(f"wrote {args.out}/bench_speech.md, bench_speech.json, tts/")
    return 0


def register_cli(parsers) -> None:
    g = parsers.generate.add_parser("speech", help="zero-shot text to speech (MaskGCT) in the voice of a prompt clip",
                                    description="Speak text in the voice of --prompt-audio; writes wav files.")
    g.add_argument("text", nargs="+", help="sentence(s) to speak, one argument each (quote a sentence with spaces)")
    g.add_argument("--prompt-audio", default=None,
                   help="a few seconds (>= 1 s) of the voice to imitate (required; in a batch job, per JSONL line)")
    g.add_argument("--prompt-text", default=None, help="what the prompt says (default: the bundled ASR's transcript)")
    g.add_argument("--sampler", default="maskgct",
                   help="maskgct (default), ar, speculative (the AR T2S baseline), or several separated by commas")
    g.add_argument("--param", action="append", metavar="KEY=VALUE", help="sampler parameter, repeatable (e.g. steps=8)")
    g.add_argument("--out", default="speech.wav",
                   help="output wav in an existing folder (several texts: speech_0.wav, speech_1.wav ...; several "
                        "samplers: speech_maskgct.wav ...)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    g.add_argument("--pipeline", default=DEFAULT_TTS_PIPELINE,
                   help=f"TTS pipeline name or folder (default: {DEFAULT_TTS_PIPELINE})")
    g.set_defaults(func=cmd_generate_speech)
    declare_outputs(g, out="file_in_dir")

    b = parsers.bench.add_parser("speech", help="TTS bench: ASR WER, speaker similarity, latency (MaskGCT vs AR T2S)",
                                 description="Zero-shot TTS bench on unseen voices; writes bench_speech.md/.json and tts/.")
    b.add_argument("--pipeline", default=DEFAULT_TTS_PIPELINE, help="TTS pipeline name or folder (default: %(default)s)")
    b.add_argument("--corpus", default=None, help="tts-en corpus folder (default: the cache; build: leapgen data tts-en)")
    b.add_argument("--out", default="docs", help="folder for bench_speech.md/.json and tts/ samples (default: %(default)s)")
    b.add_argument("--samplers", default="maskgct,ar,maskgct[steps=8;cfg_scale=0]",
                   help="comma-separated T2S samplers, optionally with parameters: maskgct[steps=8;cfg_scale=0]")
    b.add_argument("--batch8", default="maskgct,ar", help="the entries also timed at batch 8")
    b.add_argument("--speed-only", default=None,
                   help="entries timed at batch 1 without a quality run, comma-separated; '' for none "
                        "(default: maskgct with both guidance passes as separate forwards, cfg_batch=false)")
    b.add_argument("--max-items", type=int, default=40, help="test sentences of the quality run (default: %(default)s)")
    b.add_argument("--latency-items", type=int, default=6, help="sentences timed (default: %(default)s)")
    b.add_argument("--runs", type=int, default=3, help="interleaved timing runs; medians (default: %(default)s)")
    b.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    b.add_argument("--s2st", action="store_true", help="also run the speech-to-speech translation bench (leapgen.bench.s2st)")
    b.set_defaults(func=cmd_bench_speech)
    declare_outputs(b, out="dir")
