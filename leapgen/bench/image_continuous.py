"""``leapgen bench image-continuous``: MAR, CSpD, the MAR draft alone and Distilled Decoding
(1 and 2 steps) beside raster ``ar`` of the shipped emoji GPT, in one process.

Entries (class-conditional prompts: the 8 class names in turn, ``samples`` images per run):

* ``ar``: ``leapgen/image-emoji``, raster GPT, 256 forwards per image (the reference of ``dd``);
* ``mar``: ``leapgen/image-emoji-mar`` target alone, ``num_iter`` MAR steps (the reference of ``cspd``);
* ``cspd``: draft + target, same steps/CFG/temperature, ``inner_temperature=1`` (exact);
* ``cspd (inner T 42)``: the reference code's relaxed acceptance (lossy);
* ``draft alone``: ``mar`` on the draft model;
* ``dd 1 step`` / ``dd 2 steps``: ``leapgen/image-emoji-dd``.

Every run draws a fresh seed; entries are interleaved run by run (rotating the order), wall times
are medians over runs of (call time / images). Quality: **FID (emoji features)** of all images of
an entry against the emoji dataset (the shipped feature classifier of ``leapgen/image-emoji``; see
:mod:`leapgen.bench.image_metrics` for its noise at these sample sizes) and the classifier's class
accuracy. Outputs: ``docs/bench_image_continuous.md`` / ``.json`` and one sample grid per entry
(``docs/image_continuous_<entry>.png``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import (
    fmt,
    machine_info,
    machine_line,
    markdown_table,
    median,
    rotate,
    torch_threads,
    write_json,
    write_text,
)
from .image_metrics import FEATURE_NAME, class_accuracy, fid_emoji, load_feature_classifier

logger = logging.getLogger(__name__)


@dataclass
class Entry:
    name: str
    pipeline: str  # "ar", "mar" or "dd"
    sampler: str
    params: dict[str, Any] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)
    target_forwards: list[int] = field(default_factory=list)
    draft_forwards: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    images: list[Any] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)


def default_entries(num_iter: int, num_draft: int) -> list[Entry]:
    mar = {"num_iter": num_iter}
    return [
        Entry("ar", "ar", "ar"),
        Entry("mar", "mar", "mar", dict(mar)),
        Entry("cspd", "mar", "cspd", dict(mar, num_draft=num_draft)),
        Entry("cspd (inner T 42)", "mar", "cspd", dict(mar, num_draft=num_draft, inner_temperature=42.0)),
        Entry("draft alone", "mar", "mar", dict(mar, use_draft=True)),
        Entry("dd 1 step", "dd", "dd", {"num_steps": 1}),
        Entry("dd 2 steps", "dd", "dd", {"num_steps": 2}),
    ]


def _call(pipes: dict[str, Any], e: Entry, prompts: list[str], seed: int, cfg_scale: float, temperature: float) -> Any:
    pipe = pipes[e.pipeline]
    if e.pipeline == "dd":
        return pipe(prompts, seed=seed, **e.params)
    return pipe(prompts, sampler=e.sampler, seed=seed, cfg_scale=cfg_scale, temperature=temperature, **e.params)


def run_bench(
    ar: str = "leapgen/image-emoji",
    mar: str = "leapgen/image-emoji-mar",
    dd: str = "leapgen/image-emoji-dd",
    samples: int = 16,
    runs: int = 3,
    num_iter: int = 16,
    num_draft: int = 4,
    cfg_scale: float = 3.0,
    temperature: float = 1.0,
    seed: int = 0,
    threads: int = 1,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Run every entry ``runs`` times on ``samples`` class-conditional prompts; returns the result dict."""
    from ..data.emoji import build_emoji_dataset
    from ..pipelines.base import Pipeline

    with torch_threads(threads):
        pipes = {"ar": Pipeline.from_pretrained(ar), "mar": Pipeline.from_pretrained(mar), "dd": Pipeline.from_pretrained(dd)}
        classes = list(pipes["ar"].class_names)
        prompts = [classes[i % len(classes)] for i in range(samples)]
        labels = [i % len(classes) for i in range(samples)]
        entries = [e for e in default_entries(num_iter, num_draft) if not only or e.name in only]
        classifier = load_feature_classifier(ar)
        ds = build_emoji_dataset()
        ref = classifier.features(ds.images)
        _call(pipes, entries[0], prompts[:1], seed, cfg_scale, temperature)  # warm-up
        for r in range(runs):
            for e in rotate(entries, r):
                t0 = time.perf_counter()
                out = _call(pipes, e, prompts, seed + 1000 * r + 1, cfg_scale, temperature)
                wall = time.perf_counter() - t0
                e.walls.append(wall / samples)
                e.target_forwards.append(out.stats.target_forwards)
                e.draft_forwards.append(out.stats.draft_forwards)
                e.drafted += out.stats.drafted_tokens
                e.accepted += out.stats.accepted_draft_tokens
                e.images += list(out.images)
                e.labels += labels
                logger.info("run %d %-18s %.3f s/image, %d target forwards", r, e.name, wall / samples,
                            out.stats.target_forwards)
        rows = []
        for e in entries:
            rows.append({
                "entry": e.name, "sampler": e.sampler, "params": e.params,
                "wall_per_image_s": median(e.walls), "walls": e.walls,
                "target_forwards": median(e.target_forwards), "draft_forwards": median(e.draft_forwards),
                "acceptance_rate": e.accepted / e.drafted if e.drafted else None,
                "fid": fid_emoji(e.images, None, classifier, reference_features=ref),
                "class_accuracy": class_accuracy(e.images, e.labels, classifier), "images": len(e.images),
            })
    by = {r["entry"]: r for r in rows}

    def ratio(a: str, b: str) -> float | None:
        return by[a]["wall_per_image_s"] / by[b]["wall_per_image_s"] if a in by and b in by else None

    result = {
        "machine": machine_info(), "pipelines": {"ar": ar, "mar": mar, "dd": dd},
        "settings": {"samples": samples, "runs": runs, "num_iter": num_iter, "num_draft": num_draft,
                     "cfg_scale": cfg_scale, "temperature": temperature, "seed": seed, "threads": threads},
        "rows": rows,
        "speedups": {"cspd_vs_mar": ratio("mar", "cspd"), "cspd42_vs_mar": ratio("mar", "cspd (inner T 42)"),
                     "draft_vs_mar": ratio("mar", "draft alone"), "dd1_vs_ar": ratio("ar", "dd 1 step"),
                     "dd2_vs_ar": ratio("ar", "dd 2 steps")},
        "_images": {e.name: e.images[:16] for e in entries},
    }
    return result


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    head = ["entry", "sampler", "target fwd / call", "draft fwd / call", "acceptance", "s / image",
            FEATURE_NAME, "class acc.", "images"]
    rows = [[r["entry"], r["sampler"], fmt(r["target_forwards"], 1), fmt(r["draft_forwards"], 1),
             fmt(r["acceptance_rate"]) if r["acceptance_rate"] is not None else "-", fmt(r["wall_per_image_s"], 4),
             fmt(r["fid"]), fmt(r["class_accuracy"]), r["images"]] for r in result["rows"]]
    sp = result["speedups"]
    lines = [
        "# Continuous-token images: MAR, CSpD, Distilled Decoding beside raster AR",
        "",
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"Settings: {s['samples']} class-conditional images per call (the 8 class names in turn), {s['runs']} "
        f"interleaved runs with fresh seeds, cfg {s['cfg_scale']}, temperature {s['temperature']}; MAR/CSpD "
        f"{s['num_iter']} steps, {s['num_draft']} drafted steps per verification. Wall time = median over runs of "
        "call time / images (calls of a whole batch: one forward counts once). FID (emoji features) of all images of "
        "an entry vs the 1619 dataset images; see docs/bench_image.md for its noise at this sample size.",
        "",
        markdown_table(head, rows),
        "",
        "Wall-clock ratios (same process): "
        + ", ".join(f"{k} {fmt(v)}x" for k, v in sp.items() if v is not None) + ".",
        "",
        "Written by `leapgen bench image-continuous`; pictures: docs/image_continuous_<entry>.png.",
    ]
    return "\n".join(lines) + "\n"


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_").replace("__", "_")


def write_outputs(result: dict[str, Any], markdown_path: str | Path, json_path: str | Path, picture_dir: str | Path) -> list[Path]:
    from .image_pictures import sample_grid

    images = result.pop("_images")
    paths = [write_text(markdown_path, markdown(result)), write_json(json_path, result)]
    for name, ims in images.items():
        ims = [im for im in ims if im is not None]
        if ims:
            p = Path(picture_dir) / f"image_continuous_{slug(name)}.png"
            p.parent.mkdir(parents=True, exist_ok=True)
            sample_grid(ims, title=name, cols=8).save(p)
            paths.append(p)
    return paths


__all__ = ["Entry", "default_entries", "markdown", "run_bench", "write_outputs"]
