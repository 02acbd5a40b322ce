"""Benches of the recognition families beyond speech: ``leapgen bench ocr`` and ``leapgen bench peptide``.

OCR (:func:`bench_ocr`): word accuracy (and character error rate) of every sampler on the two
held-out splits of the rendered corpus (``test_words``: seen fonts, unseen words; ``test_fonts``:
unseen fonts and words), latency per image at batch 1 (median over images) and per image at batch
32, target forwards per word, speculative's agreement with ``ar``; a PNG of sample images with
their readings. Writes ``docs/bench_ocr.md`` / ``.json`` / ``bench_ocr_samples.png``.

Peptides (:func:`bench_peptide`): amino-acid precision (matched residues / predicted residues, a
residue matching when its prefix mass agrees with the truth's within 0.5 Da, Casanovo-style) and
peptide recall (exact sequence) on held-out peptides, the rate of outputs within the precursor
tolerance, and latency per spectrum (batch 1 and batch 32), per sampler. Writes
``docs/bench_peptide.md`` / ``.json``.

Timings interleave the samplers round by round (medians), in one process.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import machine_info, machine_line, markdown_table

logger = logging.getLogger(__name__)


def _cer(ref: str, hyp: str) -> float:
    d = list(range(len(hyp) + 1))
    for i, a in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, b in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a != b))
    return d[len(hyp)] / max(1, len(ref))


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table with three decimals."""
    return markdown_table(headers, [[f"{v:.3f}" if isinstance(v, float) else v for v in r] for r in rows])


def _latency(fn_by_name: dict[str, Any], items: list[Any], repeats: int) -> dict[str, float]:
    """Median seconds of ``fn(item)`` per sampler, interleaved (sampler order rotates per item)."""
    times: dict[str, list[float]] = {n: [] for n in fn_by_name}
    names = list(fn_by_name)
    for r in range(repeats):
        for k, item in enumerate(items):
            order = names[(k + r) % len(names):] + names[: (k + r) % len(names)]
            for n in order:
                t0 = time.perf_counter()
                fn_by_name[n](item)
                times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in times.items()}


def bench_ocr(pipeline: str = "leapgen/ocr-en", corpus: str | None = None, out: str = "docs",
              samplers: tuple[str, ...] = ("cppd", "ar", "speculative"), max_images: int = 300, speed_images: int = 20,
              repeats: int = 2) -> dict[str, Any]:
    import torch

    from ..data import ocr as corpus_mod
    from ..pipelines import Pipeline

    torch.set_num_threads(1)
    pipe = Pipeline.from_pretrained(pipeline)
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    res: dict[str, Any] = {"pipeline": pipeline, "machine": machine_info(), "splits": {}, "latency": {}}
    for split in ("test_words", "test_fonts"):
        images, labels = corpus_mod.load_split(root, split)
        images, labels = images[:max_images], labels[:max_images]
        per = {}
        texts_ar = texts_spec = None
        for name in samplers:
            o = pipe(list(images), sampler=name, batch_size=32)
            texts = o.texts
            per[name] = {"word_accuracy": float(np.mean([t == y for t, y in zip(texts, labels)])),
                         "cer": float(np.mean([_cer(y, t or "") for t, y in zip(texts, labels)])),
                         "target_forwards_per_batch": o.stats.target_forwards / max(1, -(-len(labels) // 32)),
                         "texts": texts[:12]}
            if name == "ar":
                texts_ar = texts
            if name == "speculative":
                texts_spec = texts
        if texts_ar is not None and texts_spec is not None:
            per["speculative"]["agrees_with_ar"] = float(np.mean([a == b for a, b in zip(texts_spec, texts_ar)]))
        res["splits"][split] = {"n": len(labels), "samplers": per, "labels": labels[:12]}
    images, _ = corpus_mod.load_split(root, "test_fonts")
    ones = [images[i : i + 1] for i in range(min(speed_images, len(images)))]
    fns = {n: (lambda x, n=n: pipe(list(x), sampler=n)) for n in samplers}
    with torch.inference_mode():  # the shared encoder alone, on the same images: what every sampler pays
        fns["(encoder)"] = lambda x: pipe.model.encode(torch.as_tensor(x).float() / 127.5 - 1.0)
        b1 = _latency(fns, ones, repeats)
    batch = [images[:32]]
    b32 = _latency({n: (lambda x, n=n: pipe(list(x), sampler=n, batch_size=32)) for n in samplers}, batch, max(2, repeats))
    res["latency"] = {n: {"batch1_ms": 1000 * b1[n], "batch32_ms_per_image": 1000 * b32[n] / 32} for n in samplers}
    if "ar" in b1 and "cppd" in b1:
        res["latency"]["cppd_speedup_vs_ar_batch1"] = b1["ar"] / b1["cppd"]
        enc = b1["(encoder)"]
        res["latency"]["encoder_batch1_ms"] = 1000 * enc
        res["latency"]["cppd_speedup_vs_ar_batch1_after_encoder"] = (b1["ar"] - enc) / max(1e-9, b1["cppd"] - enc)
    _write_ocr(res, Path(out), images[:12], pipe)
    return res


def _write_ocr(res: dict[str, Any], out: Path, images: np.ndarray, pipe: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_ocr.json").write_text(json.dumps(res, indent=1))
    samplers = [s for s, v in res["latency"].items() if isinstance(v, dict)]  # the rest are summary figures
    rows = []
    for s in samplers:
        w = res["splits"]["test_words"]["samplers"][s]
        f = res["splits"]["test_fonts"]["samplers"][s]
        lat = res["latency"][s]
        rows.append([s, w["word_accuracy"], f["word_accuracy"], w["cer"], f["cer"], lat["batch1_ms"],
                     lat["batch32_ms_per_image"], f["target_forwards_per_batch"]])
    md = ["# OCR bench (`leapgen bench ocr`)", "",
          f"Pipeline `{res['pipeline']}`; held-out splits of the rendered corpus "
          f"({res['splits']['test_words']['n']} images each). Latency on this machine's CPU, 1 thread, medians, "
          "interleaved in one process.", "", f"Machine: {machine_line(res['machine'])}.", "",
          _table(["sampler", "word acc (unseen words)", "word acc (unseen fonts)", "CER (words)", "CER (fonts)",
                  "latency b=1 (ms)", "latency b=32 (ms/img)", "target fwd / batch (fonts)"], rows), ""]
    if "cppd_speedup_vs_ar_batch1" in res["latency"]:
        lat = res["latency"]
        md.append(f"cppd speed-up over ar at batch 1: {lat['cppd_speedup_vs_ar_batch1']:.2f}x end to end; the shared "
                  f"encoder alone takes {lat['encoder_batch1_ms']:.2f} ms, and without it (pre-processing and decoding) "
                  f"cppd is {lat['cppd_speedup_vs_ar_batch1_after_encoder']:.2f}x faster than ar")
    spec = res["splits"]["test_fonts"]["samplers"].get("speculative", {})
    if "agrees_with_ar" in spec:
        md.append(f"\nspeculative (CPPD draft, AR verifier) readings equal ar's: {spec['agrees_with_ar']:.3f}")
    md += ["", "![samples](bench_ocr_samples.png)", ""]
    (out / "bench_ocr.md").write_text("\n".join(md) + "\n")
    try:
        from PIL import Image, ImageDraw

        labels = res["splits"]["test_fonts"]["labels"]
        images = images[: len(labels)]  # the split may hold fewer labelled images than the picture's rows
        o1 = pipe(list(images), sampler="cppd")
        o2 = pipe(list(images), sampler="ar")
        canvas = Image.new("L", (420, 40 * len(images)), 255)
        d = ImageDraw.Draw(canvas)
        for k, im in enumerate(images):
            canvas.paste(Image.fromarray(im).resize((100, 32)), (4, 40 * k + 4))
            d.text((112, 40 * k + 4), f"truth {labels[k]}", fill=0)
            d.text((112, 40 * k + 20), f"cppd {o1.texts[k]}   ar {o2.texts[k]}", fill=0)
        canvas.save(out / "bench_ocr_samples.png")
    except Exception as err:  # pragma: no cover - the picture is a convenience
        logger.warning("sample picture not written: %s", err)


def _aa_matches(pred: str, truth: str, masses: dict[str, float], tol: float = 0.5) -> int:
    """Residues of ``pred`` whose prefix mass matches a prefix mass of ``truth`` within ``tol`` and
    whose residue mass matches (Casanovo's aa-match, prefix direction only)."""
    pm, tm = np.cumsum([masses[a] for a in pred]), np.cumsum([masses[a] for a in truth])
    n = 0
    for i, a in enumerate(pred):
        j = np.argmin(np.abs(tm - pm[i])) if tm.size else -1
        if j >= 0 and abs(tm[j] - pm[i]) <= tol and abs(masses[truth[j]] - masses[a]) <= 0.1:
            n += 1
    return n


def bench_peptide(pipeline: str = "leapgen/peptide", corpus: str | None = None, out: str = "docs",
                  samplers: tuple[str, ...] = ("ar", "ar_bidirectional", "ctc_pmc"), max_spectra: int = 300,
                  speed_spectra: int = 10, repeats: int = 2) -> dict[str, Any]:
    import torch

    from ..data import peptide as corpus_mod
    from ..pipelines import Pipeline

    torch.set_num_threads(1)
    pipe = Pipeline.from_pretrained(pipeline)
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    data, seqs = corpus_mod.load_split(root, "test")
    n = min(max_spectra, len(seqs))
    spectra = [{"mz": data["mz"][i, : data["n_peaks"][i]], "intensity": data["intensity"][i, : data["n_peaks"][i]],
                "precursor_mz": float(data["precursor_mz"][i]), "charge": int(data["charge"][i])} for i in range(n)]
    truth = seqs[:n]
    masses = dict(corpus_mod.RESIDUES)
    res: dict[str, Any] = {"pipeline": pipeline, "machine": machine_info(), "n": n, "samplers": {}}
    for name in samplers:
        o = pipe(spectra, sampler=name, batch_size=32)
        pred = [s or "" for s in o.sequences]
        matched = sum(_aa_matches(p, t, masses) for p, t in zip(pred, truth))
        res["samplers"][name] = {
            "aa_precision": matched / max(1, sum(len(p) for p in pred)),
            "aa_recall": matched / max(1, sum(len(t) for t in truth)),
            "peptide_recall": float(np.mean([p == t for p, t in zip(pred, truth)])),
            "within_tolerance": float(np.mean([bool(ok) for ok in o.precursor_ok])),
            "examples": list(zip(truth[:5], pred[:5])),
        }
    b1 = _latency({s: (lambda x, s=s: pipe(x, sampler=s)) for s in samplers}, spectra[:speed_spectra], repeats)
    b32 = _latency({s: (lambda x, s=s: pipe(x, sampler=s, batch_size=32)) for s in samplers}, [spectra[:32]], repeats)
    for s in samplers:
        res["samplers"][s]["batch1_ms"] = 1000 * b1[s]
        res["samplers"][s]["batch32_ms_per_spectrum"] = 1000 * b32[s] / 32
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    (outp / "bench_peptide.json").write_text(json.dumps(res, indent=1))
    rows = [[s, v["aa_precision"], v["aa_recall"], v["peptide_recall"], v["within_tolerance"], v["batch1_ms"],
             v["batch32_ms_per_spectrum"]] for s, v in res["samplers"].items()]
    md = ["# Peptide bench (`leapgen bench peptide`)", "",
          f"Pipeline `{pipeline}`; {n} held-out simulated spectra. Latency on this machine's CPU, 1 thread, medians, "
          "interleaved in one process. Precursor tolerance 0.1 Da.", "", f"Machine: {machine_line(res['machine'])}.", "",
          _table(["sampler", "AA precision", "AA recall", "peptide recall", "within precursor tol.", "latency b=1 (ms)",
                  "latency b=32 (ms/spectrum)"], rows), "", "Examples (truth -> prediction):", ""]
    for s, v in res["samplers"].items():
        md.append(f"- {s}: " + ", ".join(f"{t} -> {p}" for t, p in v["examples"][:3]))
    (outp / "bench_peptide.md").write_text("\n".join(md) + "\n")
    return res


__all__ = ["bench_ocr", "bench_peptide"]
