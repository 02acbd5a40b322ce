"""``leapgen bench image-families``: every emoji image method in one process -- the raster model's
``ar`` / ``speculative`` / ``sjd`` / ``gsd`` / ``lantern`` (``leapgen/image-emoji``), NAR's ``nar`` and
raster ``ar`` on the same NAR model, ``var``, ``nfig``, ``ctf`` and the speculative samplers on CTF's
coarse stage -- at batch 1 and 8.

Per method: target forwards per image (the sequential steps of one call; draft / auxiliary forwards
beside), wall time per image at batch 1 and at batch 8 (median over the calls, methods interleaved in
rotating order so the machine's load drifts over all of them alike), **FID (emoji features)** and
class accuracy of ``samples`` class-prompted images decoded at batch 8 (the shipped emoji feature
classifier and training images of :mod:`leapgen.bench.image_metrics`, as ``leapgen bench image``),
and the model's held-out NLL in bits per image from its ``train_metrics.json`` (the likelihood each
family assigns to real emoji, in its own tokenisation and order). Writes ``docs/bench_image_families.md``
and ``.json``, a sample grid per method and the quality-against-wall-time figure under
``docs/image_families/``. FID at 16-24 samples is noisy (see :mod:`leapgen.bench.image_metrics`: a few
units between ``ar`` runs).
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import image_metrics as im
from .common import machine_info

logger = logging.getLogger(__name__)

PIPELINES = {"raster": "leapgen/image-emoji", "nar": "leapgen/image-emoji-nar", "var": "leapgen/image-emoji-var",
             "nfig": "leapgen/image-emoji-nfig", "ctf": "leapgen/image-emoji-ctf"}


@dataclass
class Method:
    label: str
    pipeline: str
    sampler: str
    params: dict[str, Any] = field(default_factory=dict)
    family: str = ""


METHODS = [
    Method("ar", "raster", "ar", family="raster"),
    Method("speculative", "raster", "speculative", family="raster"),
    Method("sjd", "raster", "sjd", family="raster"),
    Method("gsd", "raster", "gsd", family="raster"),
    Method("lantern", "raster", "lantern", family="raster"),
    Method("nar", "nar", "nar", family="nar"),
    Method("ar on NAR model (right head)", "nar", "ar", family="nar"),
    Method("var", "var", "var", family="var"),
    Method("nfig", "nfig", "nfig", family="nfig"),
    Method("ctf", "ctf", "ctf", family="ctf"),
    Method("ctf + speculative", "ctf", "speculative", family="ctf"),
    Method("ctf + sjd", "ctf", "sjd", family="ctf"),
    Method("ctf + lantern", "ctf", "lantern", family="ctf"),
]


def _nll_bits(pipe: Any) -> float | None:
    """Held-out bits per image (class prefix) from the pipeline's train_metrics.json."""
    from ..pipelines.base import resolve_pretrained

    try:
        m = json.loads((resolve_pretrained(pipe.name_or_path) / "train_metrics.json").read_text())
    except Exception:  # noqa: BLE001 - a pipeline without metrics
        return None
    if "heldout_nll" in m:  # the raster recipe
        return m["heldout_nll"]["target"]["class"]["bits_per_image"]
    h = m.get("heldout_nll_class_prefix")
    if h is not None:
        return (h.get("nar") or h)["bits_per_image"]
    c = m.get("heldout_class_prefix")
    if c is not None:
        return c["coarse"]["bits_per_image"] + c["fine_given_coarse"]["bits_per_image"]
    return None


def _call(pipe: Any, m: Method, prompts: list[str], seed: int, cfg_scale: float) -> tuple[Any, float]:
    t = time.perf_counter()
    out = pipe(prompts, sampler=m.sampler, cfg_scale=cfg_scale, seed=seed, **m.params)
    return out, time.perf_counter() - t


def run(samples: int = 16, batch: int = 8, batch1_calls: int = 2, cfg_scale: float = 3.0, seed: int = 0,
        threads: int = 1, methods: list[str] | None = None, out_dir: str | Path = "docs") -> dict[str, Any]:
    """Run the suite and write the table, JSON and pictures under ``out_dir``; returns the JSON."""
    from tqdm.auto import tqdm

    from ..pipelines import Pipeline

    torch.set_num_threads(threads)
    pipes: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for key, name in PIPELINES.items():
        try:
            pipes[key] = Pipeline.from_pretrained(name)
        except Exception as err:  # noqa: BLE001 - a family not trained yet is reported, not hidden
            skipped[key] = f"{name} could not be loaded: {err}"
    chosen = [m for m in METHODS if (methods is None or m.label in methods) and m.pipeline in pipes]
    classifier = im.load_feature_classifier(PIPELINES["raster"])
    from .image import reference_images_for

    ref = classifier.features(reference_images_for(pipes["raster"]))
    names = list(pipes["raster"].class_names)
    labels = [i % len(names) for i in range(samples)]
    prompts = [names[c] for c in labels]
    batches = [list(range(i, min(i + batch, samples))) for i in range(0, samples, batch)]
    rec: dict[str, dict[str, Any]] = {m.label: {"b8": [], "b1": [], "images": [None] * samples, "stats": []} for m in chosen}
    for m in list(chosen):  # warm-up (and refuse what cannot run)
        try:
            _call(pipes[m.pipeline], m, prompts[:1], seed - 1, cfg_scale)
        except Exception as err:  # noqa: BLE001
            skipped[m.label] = f"failed on warm-up: {err}"
            chosen.remove(m)
    bar = tqdm(total=len(chosen) * (len(batches) + batch1_calls), desc="bench image-families", mininterval=10)
    for j, idx in enumerate(batches):
        for k in range(len(chosen)):
            m = chosen[(k + j) % len(chosen)]
            out, wall = _call(pipes[m.pipeline], m, [prompts[i] for i in idx], seed + 1000 * j, cfg_scale)
            r = rec[m.label]
            r["b8"].append(wall / len(idx))
            r["stats"].append(out.stats)
            for q, i in enumerate(idx):
                r["images"][i] = out.images[q]
            bar.update(1)
    for c in range(batch1_calls):
        for k in range(len(chosen)):
            m = chosen[(k + c) % len(chosen)]
            _, wall = _call(pipes[m.pipeline], m, [prompts[c % samples]], seed + 500 + c, cfg_scale)
            rec[m.label]["b1"].append(wall)
            bar.update(1)
    bar.close()
    rows = []
    for m in chosen:
        r = rec[m.label]
        st = r["stats"][0]
        feats = classifier.features(r["images"])
        rows.append({
            "method": m.label, "family": m.family, "pipeline": PIPELINES[m.pipeline], "sampler": m.sampler,
            "target_forwards_per_image": st.target_forwards, "draft_forwards": st.draft_forwards,
            "other_forwards": st.other_forwards, "new_tokens_per_image": st.new_tokens // st.batch_size,
            "wall_s_per_image_b1": statistics.median(r["b1"]), "wall_s_per_image_b8": statistics.median(r["b8"]),
            "fid_emoji": im.fid(feats, ref), "class_accuracy": im.class_accuracy(r["images"], labels, classifier),
            "nll_bits_per_image": _nll_bits(pipes[m.pipeline]),
        })
    base = next((x for x in rows if x["method"] == "ar"), None)
    for x in rows:
        if base is not None:
            x["speedup_b1"] = base["wall_s_per_image_b1"] / x["wall_s_per_image_b1"]
            x["speedup_b8"] = base["wall_s_per_image_b8"] / x["wall_s_per_image_b8"]
    mi = machine_info()
    machine = f"{mi['cpu']}, {mi['cpu_count']} CPUs, torch {mi['torch']}, {threads} thread(s), {mi['date']}"
    result = {"settings": {"samples": samples, "batch": batch, "batch1_calls": batch1_calls, "cfg_scale": cfg_scale,
                           "temperature": 1.0, "seed": seed, "threads": threads},
              "machine": machine, "machine_info": mi, "rows": rows, "skipped": skipped}
    write(result, rec, Path(out_dir))
    return result


def format_markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    b = s["batch"]

    def speedup(x: dict[str, Any], key: str) -> str:  # no `ar` row in the run (--methods): no speedup
        return f"{x[key]:.2f}x" if key in x else "-"

    lines = [
        "# Image families: raster vs next-neighbour / next-scale / next-frequency / coarse-to-fine",
        "",
        f"Generated by `leapgen bench image-families` (one process; cfg {s['cfg_scale']}, temperature 1, "
        f"{s['samples']} class-prompted images per method decoded at batch {s['batch']}, batch-1 wall time over "
        f"{s['batch1_calls']} single-image calls; {s['threads']} thread(s)). Machine: {result['machine']}.",
        "",
        "| method | family | target forwards / image | draft+other forwards | wall s/img b1 | speedup b1 | "
        f"wall s/img b{b} | speedup b{b} | FID (emoji features) | class acc. | held-out NLL (bits/img) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in result["rows"]:
        nll = "-" if x["nll_bits_per_image"] is None else f"{x['nll_bits_per_image']:.0f}"
        lines.append(
            f"| {x['method']} | {x['family']} | {x['target_forwards_per_image']} | {x['draft_forwards']}+{x['other_forwards']} | "
            f"{x['wall_s_per_image_b1']:.2f} | {speedup(x, 'speedup_b1')} | {x['wall_s_per_image_b8']:.3f} | "
            f"{speedup(x, 'speedup_b8')} | {x['fid_emoji']:.2f} | {x['class_accuracy']:.3f} | {nll} |")
    if result["skipped"]:
        lines += ["", "Not run: " + "; ".join(f"{k}: {v}" for k, v in result["skipped"].items())]
    lines += ["", f"Speedups are against raster `ar` on `leapgen/image-emoji` in the same run. Forwards of a batch-{b} "
              f"call are shared by its {b} images (a forward per step of the order). The NLL column is each model's "
              "held-out bits per image with the class prefix (`train_metrics.json`; CTF: coarse + fine given coarse).",
              "", "Grids (beside this file): `image_families/grid_<method>.png`; quality vs time: "
              "`image_families/quality_vs_time.png`.", ""]
    return "\n".join(lines)


def write(result: dict[str, Any], rec: dict[str, dict[str, Any]], out: Path) -> None:
    pics = out / "image_families"
    pics.mkdir(parents=True, exist_ok=True)
    (out / "bench_image_families.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "bench_image_families.md").write_text(format_markdown(result))
    from PIL import Image

    for label, r in rec.items():
        ims = [x for x in r["images"] if x is not None]
        if not ims:
            continue
        w, h = ims[0].size
        cols = 8
        canvas = Image.new("RGB", (cols * w, ((len(ims) + cols - 1) // cols) * h), (255, 255, 255))
        for i, x in enumerate(ims):
            canvas.paste(x, ((i % cols) * w, (i // cols) * h))
        canvas.save(pics / f"grid_{slug(label)}.png")
    quality_figure(result, pics / "quality_vs_time.png")


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_").replace("__", "_")


def quality_figure(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"raster": "tab:blue", "nar": "tab:orange", "var": "tab:green", "nfig": "tab:red", "ctf": "tab:purple"}
    for ax, key, name in ((axes[0], "fid_emoji", "FID (emoji features), lower is better"),
                          (axes[1], "class_accuracy", "class accuracy, higher is better")):
        for x in result["rows"]:
            ax.scatter(x["wall_s_per_image_b8"], x[key], color=colors.get(x["family"], "k"))
            ax.annotate(x["method"], (x["wall_s_per_image_b8"], x[key]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("wall time per image at batch 8 (s, log)")
        ax.set_ylabel(name)
    fig.suptitle("emoji image methods: quality vs wall time (" + str(result["machine"])[:90] + ")", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["METHODS", "PIPELINES", "run", "format_markdown", "quality_figure"]
