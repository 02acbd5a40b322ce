"""``leapgen bench s2st``: translation quality and speed of every S2ST decoding algorithm, in one process.

Quality (splits of s2st-en-de: ``test_seen`` = new sentences of the training templates, seen
voices; ``test_unseen`` = held-out templates, unseen voices): BLEU (sacrebleu, default
tokenisation) of the predicted German phonemes written as IPA words against the reference IPA
words, the phoneme error rate (PER, jiwer over phoneme symbols) and the exact-match rate; and
ASR-BLEU: each sampler's output mels vocoded by the pipeline's Griffin-Lim, transcribed by a German
ASR (``asr``, default ``leapgen/asr-de``, its ``paraformer`` sampler, batched) and scored by
sacrebleu against the reference German text, beside two reference rows (the judge on the real
target speech, with its WER, and on the real target speech after the pipeline's mel ->
Griffin-Lim round trip); see :mod:`leapgen.bench.s2st_asr`. Without the judge asset the output
says it is missing (and why) instead of the numbers.
Speed (batch 1, CPU, ``torch.set_num_threads(threads)``, every sampler run on the same clip in
turn, ``repeats`` rounds): median decoder latency (translator decoder + path search), median
translation latency (encoder + translator decoder) and median
end-to-end latency (front end, translation, acoustic decoder, Griffin-Lim), translator decoder
forwards per utterance, and the speed-up of each against the AR baseline (``ar``).
Writes ``bench_s2st.md`` / ``bench_s2st.json`` into ``out``.
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

from . import s2st_asr

logger = logging.getLogger(__name__)

SAMPLERS = ("dag_greedy", "dag_lookahead", "dag_viterbi", "ar")
SPLITS = ("test_seen", "test_unseen")


def ipa_words(phonemes: str) -> str:
    """``"d ɛ ɾ | r oː t ə"`` -> ``"dɛɾ roːtə"``."""
    return "".join(phonemes.split()).replace("|", " ").strip()


def quality(pipe: Any, name: str, rows: list[dict[str, Any]], waves: list[np.ndarray], batch_size: int = 16,
            judge: Any | None = None) -> dict[str, Any]:
    """BLEU / PER / exact match of one sampler on manifest rows (no vocoding); with a ``judge``
    (German ASR pipeline) also ASR-BLEU and the judge's WER on the vocoded output."""
    import jiwer
    import sacrebleu

    out = pipe(waves, sampling_rate=16000, sampler=name, batch_size=batch_size, vocode=False)
    refs = [ipa_words(r["phonemes"]) for r in rows]
    hyps = [t or "" for t in out.texts]
    ref_sym = [" ".join(pipe.vocab.words(pipe.vocab.encode(r["phonemes"]))) for r in rows]
    hyp_sym = [" ".join(pipe.vocab.words(ids)) or "<empty>" for ids in out.token_ids]
    res = {"utterances": len(rows), "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
           "per": round(jiwer.wer(ref_sym, hyp_sym), 4), "exact": round(float(np.mean([h == r for h, r in zip(hyps, refs)])), 4),
           "errors": sum(e is not None for e in out.errors), "examples": [[r, h] for r, h in zip(refs[:3], hyps[:3])]}
    if judge is not None:
        res.update(s2st_asr.of_mels(judge, pipe, out.mels, [r["de"] for r in rows]))
    return res


def speed(pipe: Any, names: list[str], waves: list[np.ndarray], repeats: int) -> dict[str, dict[str, float]]:
    """Batch-1 medians over interleaved runs: translation (encoder + decoder) and end-to-end seconds,
    decoder forwards per utterance."""
    per: dict[str, dict[str, list[float]]] = {n: {"decoder": [], "translate": [], "total": [], "forwards": []} for n in names}
    for n in names:  # warm-up
        pipe(waves[0], sampling_rate=16000, sampler=n)
    for _ in range(repeats):
        for w in waves:
            for n in names:
                t0 = time.perf_counter()
                out = pipe(w, sampling_rate=16000, sampler=n)
                total = time.perf_counter() - t0
                ex = out.stats.extra
                per[n]["decoder"].append(ex["decoder_time"])
                per[n]["translate"].append(ex["encoder_time"] + ex["decoder_time"])
                per[n]["total"].append(total)
                per[n]["forwards"].append(out.stats.target_forwards)
    return {n: {"decoder_ms": 1000 * statistics.median(v["decoder"]), "translate_ms": 1000 * statistics.median(v["translate"]), "total_ms": 1000 * statistics.median(v["total"]),
                "forwards": float(np.mean(v["forwards"]))} for n, v in per.items()}


def run_s2st_bench(pipeline: str = "leapgen/s2st-en-de", corpus: str | None = None, out: str | None = "docs",
                   samplers: tuple[str, ...] = SAMPLERS, max_utts: int | None = None, speed_utts: int = 10,
                   repeats: int = 3, threads: int = 1, asr: str | None = s2st_asr.DEFAULT_JUDGE) -> dict[str, Any]:
    """Run the bench (see the module docstring); returns the result dict (written to ``out`` when given).
    ``max_utts`` limits the utterances per quality split (ASR-BLEU included); ``asr``: the German
    ASR judge (None: no ASR-BLEU)."""
    import soundfile as sf

    from ..data import s2st as corpus_mod
    from ..pipelines import Pipeline

    torch.set_num_threads(threads)
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    pipe = Pipeline.from_pretrained(pipeline)
    names = list(samplers)
    judge, why = s2st_asr.load_judge(asr)
    res: dict[str, Any] = {"pipeline": pipeline, "corpus": str(root), "threads": threads, "samplers": names,
                           "machine": platform.processor() or platform.machine(), "quality": {}, "speed": {},
                           "asr": asr, "asr_reference": {}}
    res["asr_bleu"] = why or (f"sacrebleu on the `paraformer` transcripts by `{asr}` of each output (vocoded by "
                              "the pipeline's Griffin-Lim) against the reference German text")
    for split in SPLITS:
        rows = corpus_mod.read_manifest(root, split)[:max_utts]
        waves = [sf.read(r["src_audio"], dtype="float32")[0] for r in rows]
        res["quality"][split] = {n: quality(pipe, n, rows, waves, judge=judge) for n in names}
        if judge is not None:
            res["asr_reference"][split] = s2st_asr.reference_rows(judge, pipe, rows)
        logger.info("%s: %s", split, {n: (q["bleu"], q["per"], q.get("asr_bleu")) for n, q in res["quality"][split].items()})
    rows = corpus_mod.read_manifest(root, "test_unseen")[:speed_utts]
    waves = [sf.read(r["src_audio"], dtype="float32")[0] for r in rows]
    sp = speed(pipe, names, waves, repeats)
    base = sp.get("ar")
    for v in sp.values():
        if base is not None:
            v["decoder_speedup_vs_ar"] = base["decoder_ms"] / v["decoder_ms"]
            v["translate_speedup_vs_ar"] = base["translate_ms"] / v["translate_ms"]
            v["total_speedup_vs_ar"] = base["total_ms"] / v["total_ms"]
    res["speed"] = {"utterances": len(rows), "repeats": repeats,
                    "mean_audio_s": float(np.mean([len(w) / 16000 for w in waves])), "per_sampler": sp}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        res["samples"] = write_samples(pipe, rows[0], [n for n in ("dag_lookahead", "ar") if n in names], Path(out) / "s2st")
        (Path(out) / "bench_s2st.json").write_text(json.dumps(res, indent=2, ensure_ascii=False, default=float))
        (Path(out) / "bench_s2st.md").write_text(markdown(res))
    return res


def write_samples(pipe: Any, row: dict[str, Any], names: list[str], folder: Path) -> dict[str, Any]:
    """The first speed clip translated by each sampler: ``<sampler>.wav`` and one PNG with the
    reference German log-mel above each sampler's (``folder``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    ref = pipe.mel(torch.from_numpy(sf.read(row["tgt_audio"], dtype="float32")[0]))
    mels, info = [("reference (espeak-ng de)", ref)], {"source": row["en"], "reference": row["de"]}
    for n in names:
        out = pipe(row["src_audio"], sampler=n)
        sf.write(str(folder / f"{n}.wav"), out.audios[0], out.sample_rate)
        mels.append((f"{n}: {out.texts[0]}", out.mels[0]))
        info[n] = {"wav": f"s2st/{n}.wav", "phonemes": out.texts[0]}
    fig, axes = plt.subplots(len(mels), 1, figsize=(8, 2.2 * len(mels)))
    for ax, (title, m) in zip(axes, mels):
        ax.imshow(m.T.numpy(), origin="lower", aspect="auto")
        ax.set_title(title, fontsize=9)
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(folder / "mels.png", dpi=80)
    plt.close(fig)
    info["png"] = "s2st/mels.png"
    return info


def asr_markdown(res: dict[str, Any]) -> list[str]:
    """The ASR-BLEU reference rows (judge on the real and on the vocoded target speech), or why
    there is no ASR-BLEU."""
    if not res.get("asr_reference"):
        return ["", f"**ASR-BLEU**: {res.get('asr_bleu', 'missing')}."]
    lines = ["", f"ASR-BLEU references (judge `{res['asr']}`): the same judge on the real German target speech "
             "(its own error) and on that speech after the pipeline's mel -> Griffin-Lim round trip "
             "(the ceiling of a system with perfect mels).", "",
             "| reference | " + " | ".join(f"{s} ASR-BLEU | {s} judge WER" for s in SPLITS) + " |",
             "|---|" + "---|---|" * len(SPLITS)]
    for key, label in (("real_target", "real target speech"), ("vocoded_target", "target speech via Griffin-Lim")):
        cells = []
        for s in SPLITS:
            r = res["asr_reference"][s][key]
            cells += [f"{r['asr_bleu']:.2f}", f"{r['asr_wer']:.3f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def markdown(res: dict[str, Any]) -> str:
    """The bench result as a markdown page."""
    names = res["samplers"]
    lines = ["# S2ST bench (`leapgen bench s2st`)", "",
             f"Pipeline `{res['pipeline']}`, {res['threads']} CPU thread(s), machine `{res['machine']}`. "
             "BLEU: sacrebleu on the predicted German phonemes written as IPA words against the reference; "
             "PER: phoneme error rate; exact: share of utterances with every phoneme right. "
             f"ASR-BLEU: {res['asr_bleu']}.", ""]
    judged = bool(res.get("asr_reference"))
    extra = " | {s} ASR-BLEU" if judged else ""
    lines += ["## Quality", "", "| sampler | " + " | ".join(f"{s} BLEU | {s} PER | {s} exact" + extra.format(s=s)
                                                           for s in SPLITS) + " |",
              "|---|" + ("---|---|---|---|" if judged else "---|---|---|") * len(SPLITS)]
    for n in names:
        cells = []
        for s in SPLITS:
            q = res["quality"][s][n]
            cells += [f"{q['bleu']:.2f}", f"{q['per']:.3f}", f"{q['exact']:.3f}"] + ([f"{q['asr_bleu']:.2f}"] if judged else [])
        lines.append(f"| `{n}` | " + " | ".join(cells) + " |")
    lines += asr_markdown(res)
    sp = res["speed"]
    lines += ["", "## Speed (batch 1)", "",
              f"{sp['utterances']} `test_unseen` clips (mean {sp['mean_audio_s']:.2f} s), {sp['repeats']} interleaved rounds, medians.",
              "", "| sampler | decoder forwards | decoder ms (translator decoder + path search) | speed-up vs ar | translation ms (encoder + decoder) "
              "| speed-up vs ar | end-to-end ms (front end, translation, acoustic decoder, Griffin-Lim) | speed-up vs ar |",
              "|---|---|---|---|---|---|---|---|"]
    for n in names:
        v = sp["per_sampler"][n]
        lines.append(f"| `{n}` | {v['forwards']:.1f} | {v['decoder_ms']:.1f} | {v.get('decoder_speedup_vs_ar', float('nan')):.2f}x "
                     f"| {v['translate_ms']:.1f} | {v.get('translate_speedup_vs_ar', float('nan')):.2f}x "
                     f"| {v['total_ms']:.1f} | {v.get('total_speedup_vs_ar', float('nan')):.2f}x |")
    la, ar = sp["per_sampler"].get("dag_lookahead"), sp["per_sampler"].get("ar")
    if la and ar:
        seen = res["quality"]["test_seen"]
        key = "asr_bleu" if "asr_bleu" in seen["dag_lookahead"] and "asr_bleu" in seen["ar"] else "bleu"
        diff = seen["dag_lookahead"][key] - seen["ar"][key]  # the ASR-BLEU; phoneme BLEU without a judge
        x = la["translate_speedup_vs_ar"]
        lines += ["", f"Targets: `dag_lookahead` >= 8x faster than `ar` at batch 1 (translation): {x:.2f}x, "
                  f"{'met' if x >= 8 else 'not met'}; {'ASR-BLEU' if key == 'asr_bleu' else 'phoneme BLEU (no judge)'} "
                  f"within 2 points of `ar` (test_seen): {diff:+.2f}, {'met' if diff >= -2 else 'not met'}."]
    if res.get("samples"):
        smp = res["samples"]
        lines += ["", f"Samples (source: \"{smp['source']}\", reference: \"{smp['reference']}\"): "
                  + ", ".join(f"[{n}]({smp[n]['wav']})" for n in ("dag_lookahead", "ar") if n in smp)
                  + f"; log-mels: ![mels]({smp['png']})"]
    lines += ["", "Examples (`test_unseen`, reference / `dag_lookahead`):", ""]
    q = res["quality"]["test_unseen"].get("dag_lookahead")
    if q:
        lines += [f"- `{r}` / `{h}`" for r, h in q["examples"]]
    return "\n".join(lines) + "\n"


__all__ = ["SAMPLERS", "markdown", "run_s2st_bench"]
