"""``leapgen bench asr``: accuracy, timestamps and speed of every ASR sampler, in one process.

Accuracy (per split of speech-en: ``test_seen`` = unseen sentences / seen voices,
``test_unseen_voice``, ``timing``): WER, CER, sentence error rate, substitutions / deletions /
insertions (jiwer), CIF length accuracy (Paraformer's token count == the reference word count),
and for ``speculative`` whether its output is identical to ``ar`` on every utterance.
Timestamps: mean absolute word-boundary error (start and end) of ``paraformer`` on the held-out
half of the timing split (the first half calibrated the pipeline's two timestamp settings).
Speed (utterances of 5 s or more, CPU, ``torch.set_num_threads(threads)``): batch-1 latency split
into front end, encoder and decoder time (medians over ``repeats`` interleaved runs), decoder
speed-up over ``ar``, end-to-end speed-up, real-time factor, and batch-16 throughput.
Writes ``bench_asr.md`` / ``bench_asr.json`` and ``bench_asr.png`` into ``out``.
"""

from __future__ import annotations

import json
import logging
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

SAMPLERS = ("paraformer", "ctc_greedy", "ctc_prefix_beam", "ar", "ar_beam", "gad", "gad[ctc]", "speculative", "specdec")
SPLITS = ("test_seen", "test_unseen_voice", "timing")


def _run(pipe: Any, name: str, audio: Any, **kw: Any) -> Any:
    if name.endswith("[ctc]"):
        return pipe(audio, sampler=name[: -len("[ctc]")], draft="ctc", **kw)
    return pipe(audio, sampler=name, **kw)


def _load_waves(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    import soundfile as sf

    return [sf.read(r["audio"], dtype="float32")[0] for r in rows]


def accuracy(pipe: Any, name: str, rows: list[dict[str, Any]], batch_size: int = 16) -> dict[str, Any]:
    """WER, CER, SER, S/D/I and (paraformer) CIF length accuracy of one sampler on manifest rows."""
    import jiwer

    waves = _load_waves(rows)
    out = _run(pipe, name, waves, sampling_rate=16000, batch_size=batch_size)
    refs = [r["text"] for r in rows]
    hyps = [t or "" for t in out.texts]
    words = jiwer.process_words(refs, [h if h else "<empty>" for h in hyps])
    res: dict[str, Any] = {
        "utterances": len(rows),
        "wer": words.wer, "cer": jiwer.cer(refs, [h if h else "<empty>" for h in hyps]),
        "ser": float(np.mean([h != r for h, r in zip(hyps, refs)])),
        "substitutions": words.substitutions, "deletions": words.deletions, "insertions": words.insertions,
        "ref_words": sum(len(r.split()) for r in refs),
        "length_accuracy": float(np.mean([len(h.split()) == len(r.split()) for h, r in zip(hyps, refs)])),
        "errors": sum(e is not None for e in out.errors),
    }
    res["_token_ids"] = out.token_ids
    res["_timestamps"] = out.timestamps
    return res


def speed(pipe: Any, names: list[str], waves: list[np.ndarray], repeats: int) -> dict[str, dict[str, float]]:
    """Batch-1 medians (front end / encoder / decoder / total seconds per utterance) and RTF,
    samplers interleaved within every repeat; mean target / draft forwards per utterance (the
    decoder's; a NAR pass counts as one); batch-16 throughput (utterances / s)."""
    per: dict[str, dict[str, list[float]]] = {n: {"frontend": [], "encoder": [], "decoder": [], "total": []} for n in names}
    calls: dict[str, dict[str, list[int]]] = {n: {"target": [], "draft": []} for n in names}
    audio_s = float(np.mean([len(w) / 16000 for w in waves]))
    for n in names:  # warm-up
        _run(pipe, n, waves[0], sampling_rate=16000)
    for _ in range(repeats):
        for w in waves:
            for n in names:
                t0 = time.perf_counter()
                out = _run(pipe, n, w, sampling_rate=16000)
                total = time.perf_counter() - t0
                ex = out.stats.extra
                per[n]["frontend"].append(ex["frontend_time"])
                per[n]["encoder"].append(ex["encoder_time"])
                per[n]["decoder"].append(ex["decoder_time"])
                per[n]["total"].append(total)
                calls[n]["target"].append(out.stats.target_forwards)
                calls[n]["draft"].append(out.stats.draft_forwards)
    res: dict[str, dict[str, float]] = {}
    batch = [waves[i % len(waves)] for i in range(32)]
    for n in names:
        med = {k: statistics.median(v) for k, v in per[n].items()}
        t0 = time.perf_counter()
        _run(pipe, n, batch, sampling_rate=16000, batch_size=16)
        thr = len(batch) / (time.perf_counter() - t0)
        res[n] = {**{f"{k}_ms": 1000 * v for k, v in med.items()}, "rtf": med["total"] / audio_s,
                  "throughput_b16_utt_s": thr, "audio_s": audio_s,
                  "target_forwards": float(np.mean(calls[n]["target"])), "draft_forwards": float(np.mean(calls[n]["draft"]))}
    if "ar" in res:
        for n in names:
            res[n]["decoder_speedup_vs_ar"] = res["ar"]["decoder_ms"] / max(res[n]["decoder_ms"], 1e-9)
            res[n]["e2e_speedup_vs_ar"] = res["ar"]["total_ms"] / max(res[n]["total_ms"], 1e-9)
    return res


def run_bench(pipeline: str = "leapgen/asr-en", corpus: str | None = None, out: str = "docs",
              samplers: tuple[str, ...] = SAMPLERS, max_utts: int | None = None, speed_utts: int = 12, repeats: int = 3,
              threads: int = 1, quick: bool = False) -> dict[str, Any]:
    """Run the whole bench (see the module docstring); returns the results written to JSON."""
    from ..data.speech import default_dir, read_manifest
    from ..pipelines import Pipeline
    from ..pipelines.asr_timing import boundary_errors
    from .asr_report import write_report

    torch.set_num_threads(threads)
    pipe = Pipeline.from_pretrained(pipeline)
    root = Path(corpus) if corpus else default_dir()
    if quick:
        max_utts, speed_utts, repeats = max_utts or 8, min(speed_utts, 2), 1
    names = list(samplers)
    results: dict[str, Any] = {"pipeline": pipeline, "corpus": str(root), "accuracy": {}, "samplers": names,
                               "cif_tail": pipe.model.config.tail}
    timing_rows = read_manifest(root, "timing")
    held = timing_rows[len(timing_rows) // 2 :]
    for split in SPLITS:
        rows = held if split == "timing" else read_manifest(root, split)
        rows = rows[:max_utts] if max_utts else rows
        results["accuracy"][split] = {}
        for n in names:
            t0 = time.perf_counter()
            acc = accuracy(pipe, n, rows)
            ids, stamps = acc.pop("_token_ids"), acc.pop("_timestamps")
            if n == "ar":
                ar_ids = ids
            if n.split("[")[0] in ("gad", "speculative", "specdec") and "ar" in names:
                acc["identical_to_ar"] = sum(a == b for a, b in zip(ids, ar_ids))
            if split == "timing" and n == "paraformer":
                errs = [e for r, ts in zip(rows, stamps) if ts for e in boundary_errors(ts, [tuple(w) for w in r["words"]])]
                acc["timestamp_mae_ms"] = 1000 * float(np.mean(errs)) if errs else float("nan")
                acc["timestamp_p90_ms"] = 1000 * float(np.percentile(errs, 90)) if errs else float("nan")
                acc["timestamp_boundaries"] = len(errs)
            acc["seconds"] = time.perf_counter() - t0
            results["accuracy"][split][n] = acc
            logger.info("%s %s: %s", split, n, {k: v for k, v in acc.items() if isinstance(v, (int, float))})
    long_rows = [r for s in ("test_seen", "timing") for r in read_manifest(root, s) if r["duration"] >= 5.0]
    long_rows = long_rows[:speed_utts]
    results["speed"] = speed(pipe, names, _load_waves(long_rows), repeats)
    results["speed_utterances"] = len(long_rows)
    results["environment"] = {"torch": torch.__version__, "threads": threads, "python": platform.python_version(),
                              "cpu": platform.processor() or platform.machine(), "quick": quick}
    metrics = Path(pipeline.replace("leapgen/", "assets/")) / "train_metrics.json"
    if metrics.exists():
        tm = json.loads(metrics.read_text())
        results["training"] = {k: tm.get(k) for k in ("train_utterances", "train_hours", "vocab_words", "steps",
                                                       "epochs", "train_minutes", "parameters", "settings", "previous")}
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_asr.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    write_report(results, out_dir)
    return results
