"""``leapgen bench speech``: zero-shot TTS (MaskGCT vs the AR T2S baseline) on unseen voices.

One process, ``torch.set_num_threads(threads)`` (1 by default). Items: the ``test`` utterances of the
``tts-en`` corpus spoken by *unseen* speakers (held-out espeak-ng accents / variants); the prompt of
an item is another clip of the same speaker (``prompts`` split, with its known text as
``prompt_text``), the target text is the test sentence, whose real espeak-ng speech is the reference.

* **Where it is lost** (:mod:`leapgen.bench.tts_stages`): each stage fed the real thing (codec,
  semantic tokens, S2A on real semantic tokens), scored by the same ASR.
* **Intelligibility**: WER of the shipped ASR (``asr-en``, Paraformer) on the generated speech,
  beside its WER on the real speech of the same sentences and voices.
* **Speaker similarity**: cosine of x-vector embeddings (the asset's ``speaker`` network, trained on
  the seen voices only): generated vs its prompt; real same-voice (test clip vs the prompt of its
  speaker) and real different-voice (test clip vs prompts of the other unseen speakers) for the
  distributions it should be compared with.
* Entries: a T2S sampler name, optionally with parameters: ``maskgct[steps=8;cfg_scale=0]``.
* **Latency** (median over interleaved runs, ``leapgen.bench.common.interleaved``) at batch 1 and 8,
  T2S alone and end to end (T2S + the shared ``maskgct_s2a`` + codec), with T2S forwards; speedup =
  AR latency / MaskGCT latency. Speed-only entries (``speed_only``, default: MaskGCT with its two
  guidance passes as separate forwards, ``cfg_batch=false`` for T2S and S2A) are timed at batch 1
  beside the others, without a quality run.

Writes ``bench_speech.json`` / ``bench_speech.md`` and, under ``<out>/tts/``, sample wavs and a
spectrogram PNG. ``--s2st`` also calls ``leapgen.bench.s2st.run_s2st_bench`` when that module exists.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .common import (
    interleaved,
    machine_info,
    machine_line,
    markdown_table,
    median,
    parse_entry,
    torch_threads,
)

logger = logging.getLogger(__name__)


def _items(corpus: str | None, max_items: int) -> list[dict[str, Any]]:
    from ..data.tts_en import default_dir, read_manifest

    root = corpus or str(default_dir())
    prompts = {r["speaker"]: r for r in read_manifest(root, "prompts") if r["audio"].endswith("_p0.wav")}
    rows = [r for r in read_manifest(root, "test") if not r["seen"]]
    rows.sort(key=lambda r: (r["audio"].rsplit("_t", 1)[1], r["speaker"]))  # round-robin over speakers
    out = []
    for r in rows[:max_items]:
        p = prompts[r["speaker"]]
        out.append({"text": r["text"], "speaker": r["speaker"], "real": r["audio"], "prompt": p["audio"], "prompt_text": p["text"]})
    return out


#: timed only: MaskGCT with both CFG passes as separate forwards (the doubled batch's ablation)
SPEED_ONLY = ('maskgct[cfg_batch=false;s2a_params={"cfg_batch":false}]',)


def _wav(path: str) -> np.ndarray:
    import soundfile as sf

    return sf.read(path, dtype="float32")[0]


def _wer(asr: Any, waves: list[np.ndarray | None], texts: list[str]) -> float:
    import jiwer

    hyps = asr([w if w is not None and w.size > 400 else np.zeros(1600, np.float32) for w in waves],
               sampling_rate=16000, sampler="paraformer").texts
    return float(jiwer.wer(texts, [h or "<empty>" for h in hyps]))


def _dist(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=np.float64)
    return {"mean": round(float(a.mean()), 4), "std": round(float(a.std()), 4), "p10": round(float(np.quantile(a, 0.1)), 4),
            "median": round(float(np.median(a)), 4), "p90": round(float(np.quantile(a, 0.9)), 4), "n": int(a.size)}


def _spectrogram(waves: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..tokenizers.audio_codec import log_mel

    fig, axes = plt.subplots(len(waves), 1, figsize=(8, 2.0 * len(waves)))
    for ax, (name, w) in zip(np.atleast_1d(axes), waves.items()):
        m = log_mel(torch.from_numpy(w)[None], 16000, 1024, 64, 160)[0].numpy()
        ax.imshow(m, origin="lower", aspect="auto", cmap="magma")
        ax.set_title(name, fontsize=9)
        ax.set_yticks([])
    plt.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def run_tts_bench(pipeline: str = "leapgen/tts-en", corpus: str | None = None, out: str = "docs", max_items: int = 40,
                  latency_items: int = 6, runs: int = 3, threads: int = 1, seed: int = 0,
                  samplers: tuple[str, ...] = ("maskgct", "ar", "maskgct[steps=8;cfg_scale=0]"), batch8: tuple[str, ...] = ("maskgct", "ar"),
                  s2st: bool = False, ablation: bool = True, speed_only: tuple[str, ...] = SPEED_ONLY) -> dict[str, Any]:
    """Run the bench (see the module docstring); returns the JSON record. ``speed_only``: entries
    timed at batch 1 beside the others, without a quality run (ablations of a speed mechanism)."""
    import soundfile as sf

    from ..pipelines import Pipeline

    t_start = time.perf_counter()
    with torch_threads(threads), torch.inference_mode():
        pipe = Pipeline.from_pretrained(pipeline)
        asr = Pipeline.from_pretrained("leapgen/asr-en")
        items = _items(corpus, max_items)
        texts = [it["text"] for it in items]
        real = [_wav(it["real"]) for it in items]
        prompts = [_wav(it["prompt"]) for it in items]
        spk = pipe.speaker
        e_real, e_prompt = spk.embed_waves(real), spk.embed_waves(prompts)
        record: dict[str, Any] = {"machine": machine_info(), "pipeline": pipeline, "items": len(items), "seed": seed,
                                  "samplers": list(samplers), "speed_only": list(speed_only),
                                  "threads": threads, "real": {"asr_wer": round(_wer(asr, real, texts), 4)}}
        same = [float(e_real[i] @ e_prompt[i]) for i in range(len(items))]
        first = {it["speaker"]: i for i, it in reversed(list(enumerate(items)))}  # one prompt per speaker
        diff = [float(e_real[i] @ e_prompt[j]) for i in range(len(items)) for sp, j in first.items() if sp != items[i]["speaker"]]
        record["real"]["similarity_same_voice"] = _dist(same)
        record["real"]["similarity_different_voice"] = _dist(diff)
        if ablation:
            from .tts_stages import stage_ablation

            record["stages"] = stage_ablation(pipe, asr, items, real, seed)
        # quality: every item, batches of 8
        gen: dict[str, list[np.ndarray | None]] = {}
        for name in samplers:
            audios: list[np.ndarray | None] = []
            for s in range(0, len(items), 8):
                chunk = items[s : s + 8]
                smp, params = parse_entry(name)
                res = pipe([c["text"] for c in chunk], prompt_audio=[c["prompt"] for c in chunk],
                           prompt_text=[c["prompt_text"] for c in chunk], sampler=smp, seed=seed + s, **params)
                audios += res.audios
            gen[name] = audios
            emb = spk.embed_waves([a if a is not None and a.size > 1600 else np.zeros(3200, np.float32) for a in audios])
            sims = [float(emb[i] @ e_prompt[i]) for i in range(len(items))]
            record[name] = {"asr_wer": round(_wer(asr, audios, texts), 4), "similarity_to_prompt": _dist(sims),
                            "seconds_generated": round(sum(a.size for a in audios if a is not None) / 16000, 2),
                            "seconds_real": round(sum(a.size for a in real) / 16000, 2)}
            logger.info("%s: %s", name, record[name])
        # latency, interleaved
        lat: dict[tuple[str, int], list[dict[str, float]]] = {}
        lat_items = items[:latency_items]

        def measure(name: str, item: Any, run: int) -> None:
            batch = [item] if isinstance(item, dict) else item
            t0 = time.perf_counter()
            smp, params = parse_entry(name)
            res = pipe([c["text"] for c in batch], prompt_audio=[c["prompt"] for c in batch],
                       prompt_text=[c["prompt_text"] for c in batch], sampler=smp, seed=seed + run, **params)
            total = time.perf_counter() - t0
            st = res.stats
            lat.setdefault((name, len(batch)), []).append(
                {"total": total, "t2s": st.extra["t2s_time"], "s2a": st.extra["s2a_time"], "t2s_forwards": st.target_forwards + st.draft_forwards,
                 "frames": st.extra["semantic_frames"]})

        interleaved([*samplers, *speed_only], lat_items, runs, measure, desc="tts latency b1")
        interleaved([s for s in samplers if s in batch8], [items[:8]], runs, measure, desc="tts latency b8")
        record["latency"] = []
        for (name, b), rows in sorted(lat.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            record["latency"].append({"sampler": name, "batch": b, "median_total_s": round(median([r["total"] for r in rows]), 4),
                                      "median_t2s_s": round(median([r["t2s"] for r in rows]), 4),
                                      "median_s2a_s": round(median([r["s2a"] for r in rows]), 4),
                                      "median_t2s_forwards": median([r["t2s_forwards"] for r in rows]),
                                      "median_frames": median([r["frames"] for r in rows]), "n": len(rows)})
        base = {(r["batch"]): r for r in record["latency"] if r["sampler"] == "ar"}
        for r in record["latency"]:
            ref = base.get(r["batch"])
            if ref is not None:
                r["speedup_t2s_vs_ar"] = round(ref["median_t2s_s"] / r["median_t2s_s"], 3)
                r["speedup_total_vs_ar"] = round(ref["median_total_s"] / r["median_total_s"], 3)
        # samples
        pics = Path(out) / "tts"
        pics.mkdir(parents=True, exist_ok=True)
        sf.write(str(pics / "prompt.wav"), prompts[0], 16000, subtype="PCM_16")
        sf.write(str(pics / "real.wav"), real[0], 16000, subtype="PCM_16")
        show = {f"prompt ({items[0]['speaker']}, unseen voice)": prompts[0], f"real: {texts[0]}": real[0]}
        for name in samplers:
            if gen[name][0] is not None:
                fname = name.replace("[", "_").replace("]", "").replace(";", "_").replace("=", "")
                sf.write(str(pics / f"{fname}.wav"), gen[name][0], 16000, subtype="PCM_16")
                show[f"{name}: {texts[0]}"] = gen[name][0]
        _spectrogram(show, pics / "spectrogram.png")
        record["samples"] = {"text": texts[0], "prompt_text": items[0]["prompt_text"], "files": sorted(p.name for p in pics.iterdir())}
        if s2st:
            try:
                from . import s2st as s2st_bench  # the speech-to-speech translation half, when present
            except ImportError:
                logger.warning("leapgen.bench.s2st is not available; --s2st skipped")
            else:
                record["s2st"] = s2st_bench.run_s2st_bench(out=out)
    record["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "bench_speech.json").write_text(json.dumps(record, indent=2, default=float) + "\n")
    (Path(out) / "bench_speech.md").write_text(render(record))
    return record


def render(rec: dict[str, Any]) -> str:
    """The markdown tables of a bench record."""
    samplers = rec.get("samplers", [k for k in ("maskgct", "ar", "speculative") if k in rec])
    lines = ["# Speech generation bench (zero-shot TTS)", "", machine_line(rec["machine"]), "",
             f"{rec['items']} test sentences spoken by unseen espeak-ng voices; prompts are other clips of the same voices.", "",
             "## Intelligibility and speaker similarity", ""]
    rows = [["real espeak-ng speech", rec["real"]["asr_wer"], "-", rec["real"]["similarity_same_voice"]["mean"],
             rec["real"]["similarity_different_voice"]["mean"]]]
    for s in samplers:
        r = rec[s]
        rows.append([s, r["asr_wer"], round(r["asr_wer"] / max(rec["real"]["asr_wer"], 1e-9), 2),
                     r["similarity_to_prompt"]["mean"], "-"])
    lines.append(markdown_table(["speech", "ASR WER", "WER / real WER", "speaker sim. to prompt (mean)",
                                 "different-voice sim. (mean)"], rows))
    lines += ["", "Similarity distributions (cosine of x-vectors):", ""]
    d = [["real, same voice", *rec["real"]["similarity_same_voice"].values()],
         ["real, different voice", *rec["real"]["similarity_different_voice"].values()]]
    d += [[f"{s}, generated vs prompt", *rec[s]["similarity_to_prompt"].values()] for s in samplers]
    lines.append(markdown_table(["pair", "mean", "std", "p10", "median", "p90", "n"], d))
    if "stages" in rec:
        from .tts_stages import render_ablation

        lines += render_ablation(rec["stages"], rec["real"]["asr_wer"], {s: rec[s]["asr_wer"] for s in samplers})
    lines += ["", "## Latency (median, interleaved runs)", ""]
    lat = [[r["sampler"], r["batch"], r["median_t2s_s"], r["median_t2s_forwards"], r["median_s2a_s"], r["median_total_s"],
            r.get("speedup_t2s_vs_ar", "-"), r.get("speedup_total_vs_ar", "-")] for r in rec["latency"]]
    lines.append(markdown_table(["T2S sampler", "batch", "T2S s", "T2S forwards", "S2A s", "total s", "T2S speedup vs AR",
                                 "total speedup vs AR"], lat))
    lines += ["", f"Bench wall time {rec['wall_seconds']} s.", ""]
    return "\n".join(lines)


__all__ = ["render", "run_tts_bench"]
