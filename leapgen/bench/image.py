"""Image benchmark: the speculative / parallel image samplers against plain AR on the emoji pipeline,
speed and quality side by side.

Protocol (``leapgen bench image``; :func:`run_image_bench`):

* **One pipeline, one process.** The image pipeline (default ``leapgen/image-emoji``: a tiny
  LlamaGen-style GPT over a 16x16 VQ grid, its draft, the VQ decoder), fp32 on CPU,
  ``torch.set_num_threads(1)``. Every entry gets the **same prompts** (the pipeline's class names,
  round-robin: sample i has class ``i mod C``), the **same seeds**, the same batch size and the
  same sampling settings (``cfg_scale``, ``temperature``, ``top_k``, ``top_p``).
* **Entries.** ``ar`` (the reference), ``speculative`` (the draft, paper defaults), ``sjd``,
  ``gsd``, ``lantern`` (same draft as ``speculative``, ``delta=0.1``) and every other registered
  sampler of an autoregressive family whose models the pipeline has (``--samplers`` restricts
  the list, ``--exclude`` leaves some out). A requested sampler that is not registered, needs a
  model the pipeline lacks, fails on the warm-up call (2 images) or on a timed call, or is excluded,
  is listed as a ``skipped: <reason>`` row.
* **Seeds and timing.** ``samples`` images per run, generated in batches of ``batch_size``; in run
  r, batch j has seed ``seed + 1000 r + j`` for every entry, so each run is an **independent**
  sample set of the same size (this is what gives FID its run-to-run noise estimate) and the
  entries of a run see identical seeds. Calls are interleaved: for run r, for batch j, every
  entry in an order rotated by r + j. ``time.perf_counter`` around the whole pipeline call
  ("end-to-end": prefix building, sampling, VQ decoding) and the sampler's own clock
  (``DecodeStats.wall_time``, the decode loop only). Entry wall = median over runs of the run's
  total; speedup vs ``ar`` = ar wall / entry wall, both from the same process. One warm-up call per
  entry first.
* **Counts** from ``DecodeStats``, summed over batches and runs: target forwards (CFG doubles the
  batch inside one forward, counted once; the forward counter of the target model is checked
  against them), step compression = sequential AR steps (tokens per image) / target forwards,
  mean accepted = tokens committed per row per target forward (pooled), draft forwards.
* **Quality** (:mod:`leapgen.bench.image_metrics`): **FID (emoji features)** of each run's samples
  against the pipeline's training images (all of them) on the shipped feature classifier's
  penultimate features -- per run, its median and range, and pooled over runs; class accuracy
  (the classifier agrees with the prompted class), pooled; mean NLL of the generated tokens under
  the target's conditional logits (teacher-forced, no CFG), pooled. **Noise estimate**: ``ar``'s
  FID range over runs (max - min; each run an independent sample set of the same size), and the
  median FID between two ``ar`` runs' samples. A sampler's FID is "within noise" of ``ar``'s when
  the difference of medians is at most ``ar``'s range.
* **Pictures** (run 0, same prompts and seeds for every sampler): ``image_samples_<sampler>.png``
  (a grid of the samples with their classes) and ``image_acceptance_maps.png`` (per sampler, a few
  samples beside their acceptance maps: which target forward produced each token).
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ConfigError
from ..samplers.base import list_samplers
from . import image_metrics as im
from .common import machine_info, median, parse_entry, rotate, stats_record
from .efficiency import add_efficiency
from .image_pictures import acceptance_figure, sample_grid, write_pictures
from .image_runs import (
    BATCH_SWEEP_SAMPLERS,
    TARGETS_TEXT,
    call_pipeline,
    image_batch_sweep,
    image_draft_cost,
    image_targets,
)
from .image_tables import format_markdown
from .schedules import schedule_summary, schedule_variants

logger = logging.getLogger(__name__)

DEFAULT_PIPELINE = "leapgen/image-emoji"
#: always benchmarked (in this order) when registered; others follow alphabetically
CORE_SAMPLERS = ("ar", "speculative", "sjd", "gsd", "lantern")
#: sampler families whose loops drive a CausalLM (masked / NAR loops need other model contracts)
AR_FAMILIES = ("baseline", "ar-speculative", "ar-parallel", "ar-tree")
#: parameters the bench sets explicitly (the issue's setting)
ENTRY_PARAMS: dict[str, dict[str, Any]] = {"lantern": {"delta": 0.1}}
SEED_STRIDE = 1000

@dataclass
class Entry:
    name: str
    sampler: str
    params: dict[str, Any]
    guarantee: str
    family: str


@dataclass
class ImageBenchResult:
    """``result``: the JSON-able benchmark result; ``samples`` / ``maps``: run 0's PIL images and
    acceptance maps per entry (for the PNGs); ``classes``: run 0's class names per sample."""

    result: dict[str, Any]
    samples: dict[str, list[Any]] = field(default_factory=dict)
    maps: dict[str, list[Any]] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)


# ============================================================================== entries


def select_entries(
    pipe: Any, samplers: Sequence[str] | None, exclude: Sequence[str] = ()
) -> tuple[list[Entry], list[dict[str, str]]]:
    """The entries to run and the skipped ones (``{"sampler", "reason"}``); ``exclude`` names
    samplers left out on purpose (listed as skipped, e.g. to bound the run time)."""
    infos = {i.name: i for i in list_samplers()}
    available = {k for k, v in _models(pipe).items() if v is not None}
    if samplers is None:
        extra = sorted(n for n, i in infos.items()
                       if i.family in AR_FAMILIES and "causal" in i.contracts and n not in CORE_SAMPLERS)
        names = list(CORE_SAMPLERS) + extra
    else:
        names = ["ar"] + [n for n in samplers if n != "ar"]
    entries: list[Entry] = []
    skipped: list[dict[str, str]] = []
    if "ar" in exclude:
        raise ConfigError("'ar' is the reference of every comparison and cannot be excluded.")
    for name in dict.fromkeys(list(names) + [n for n in exclude if n not in names]):
        sampler, given = parse_entry(name)  # "sjd[window=6]": the sampler with its parameters
        info = infos.get(sampler)
        if name in exclude:
            skipped.append({"sampler": name, "reason": "excluded by --exclude" + ("" if info else " (not registered)")})
            continue
        if info is None:
            skipped.append({"sampler": name, "reason": "not registered"})
            continue
        if info.family not in AR_FAMILIES:
            skipped.append(
                {"sampler": name, "reason": f"family {info.family!r} does not drive an autoregressive image model"}
            )
            continue
        missing = [n for n in info.needs if n not in available]
        if missing:
            skipped.append({"sampler": name, "reason": f"needs {', '.join(missing)} (not in this pipeline)"})
            continue
        unknown = sorted(set(given) - set(info.defaults))
        if unknown:
            raise ConfigError(f"bench entry {name!r}: sampler {sampler!r} has no parameter(s) {unknown}; "
                              f"its parameters are: {', '.join(sorted(info.defaults))}.")
        params = {k: v for k, v in ENTRY_PARAMS.get(sampler, {}).items() if k in info.defaults} | given  # the bench's setting, then the entry's
        entries.append(Entry(name, sampler, params, info.guarantee, info.family))
    return entries, skipped


def _models(pipe: Any) -> dict[str, Any]:
    lms = getattr(pipe, "_lms", None)
    if isinstance(lms, dict):
        return lms
    return {"model": getattr(pipe, "model", None), "draft": getattr(pipe, "draft", None)}


def _first_sentence(err: BaseException) -> str:
    s = f"{type(err).__name__}: {err}"
    return s.split("\n")[0][:200]


# ============================================================================== the benchmark


def run_image_bench(
    pipe: Any,
    runs: int = 3,
    samples: int = 16,
    *,
    batch_size: int = 8,
    samplers: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    cfg_scale: float | None = None,
    cfg_interval: int = -1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    threads: int = 1,
    classifier: Any = None,
    reference_images: Any = None,
    maps_per_sampler: int = 4,
    progress: bool | None = None,
    draft_cost: bool = True,
    compare_schedules: bool = False,
    batch_sweep: Sequence[int] = (),
    batch_sweep_samplers: Sequence[str] = BATCH_SWEEP_SAMPLERS,
) -> ImageBenchResult:
    """Run the image benchmark on ``pipe`` (an ``ImageARPipeline``) and return the result.

    ``classifier`` defaults to the pipeline's shipped ``feature_classifier/`` and
    ``reference_images`` to the pipeline's training images (:func:`reference_images_for`).
    ``cfg_scale=None`` uses the pipeline's default. ``draft_cost``: one untimed pass per drafting
    sampler measuring draft cost per accepted token; ``compare_schedules``: entries for the other
    draft-length schedules of ``speculative`` / ``spec_tree``; ``batch_sweep``: batch sizes at which
    ``batch_sweep_samplers`` are timed against ``ar`` (max(batch_sweep) images, speed only).
    Run on a GPU by moving the pipeline first (``pipe.to("cuda", torch.bfloat16)``).
    """
    from tqdm.auto import tqdm

    if runs < 1 or samples < 1 or batch_size < 1:
        raise ConfigError(f"runs, samples and batch_size must be >= 1, got {runs}, {samples}, {batch_size}.")
    if samples < 2:
        raise ConfigError("samples must be >= 2 (FID needs a covariance); use e.g. --samples 4.")
    torch.set_num_threads(threads)
    machine = machine_info()
    class_names = list(getattr(pipe, "class_names", None) or [])
    if not class_names:
        raise ConfigError("the pipeline has no class_names; the image bench prompts with class names.")
    if cfg_scale is None:
        cfg_scale = default_cfg_scale(pipe)
    settings = {
        "pipeline": str(getattr(pipe, "name_or_path", None)),
        "runs": runs,
        "samples": samples,
        "batch_size": batch_size,
        "cfg_scale": cfg_scale,
        "cfg_interval": cfg_interval,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        "seed_rule": f"run r, batch j: seed {seed} + {SEED_STRIDE} r + j",
        "exclude": list(exclude),
        "threads": threads,
        "dtype": str(getattr(pipe, "dtype", "")),
        "device": str(getattr(pipe, "device", "")),
    }
    settings_call = {k: settings[k] for k in ("cfg_scale", "cfg_interval", "temperature", "top_k", "top_p")}

    # ---- quality references
    if classifier is None:
        classifier = im.load_feature_classifier(_pipeline_folder(pipe))
    if reference_images is None:
        reference_images = reference_images_for(pipe)
    ref_feats = classifier.features(reference_images)

    # ---- prompts
    labels = [i % len(class_names) for i in range(samples)]
    prompts = [class_names[c] for c in labels]
    batches = [list(range(i, min(i + batch_size, samples))) for i in range(0, samples, batch_size)]

    entries, skipped = select_entries(pipe, samplers, exclude)
    if compare_schedules:
        for name, lab, params in schedule_variants([e.name for e in entries]):
            base = next(e for e in entries if e.name == name)
            entries.append(Entry(lab, name, {**base.params, **params}, base.guarantee, base.family))
    if not entries or entries[0].name != "ar":
        raise ConfigError("the sampler 'ar' (the reference) is not available.")
    target = _models(pipe).get("model")

    # ---- warm-up (also weeds out samplers that cannot run on this pipeline / these settings)
    for e in list(entries):
        try:
            call_pipeline(pipe, e, prompts[: min(2, len(batches[0]))], seed - 1, settings_call)
        except Exception as err:
            if e.name == "ar":
                raise
            logger.warning("skipping %s: %s", e.name, err)
            skipped.append({"sampler": e.name, "reason": f"failed on warm-up: {_first_sentence(err)}"})
            entries.remove(e)

    # ---- interleaved runs
    names = [e.name for e in entries]
    per: dict[str, dict[str, Any]] = {
        n: {
            "e2e": [[0.0] * len(batches) for _ in range(runs)],
            "decode": [[0.0] * len(batches) for _ in range(runs)],
            "stats": [],
            "images": [[None] * samples for _ in range(runs)],
            "tokens": [[None] * samples for _ in range(runs)],
            "hook_ok": True,
        }
        for n in names
    }
    maps: dict[str, list[Any]] = {n: [] for n in names}
    failed: dict[str, str] = {}
    disable = (not sys.stderr.isatty()) if progress is None else not progress
    bar = tqdm(total=runs * len(batches) * len(entries), desc="bench image", unit="call", disable=disable)
    for r in range(runs):
        for j, idx in enumerate(batches):
            for e in rotate(entries, r + j):
                if e.name in failed:
                    continue
                before = getattr(target, "forwards", None)
                try:
                    out, wall = call_pipeline(pipe, e, [prompts[i] for i in idx], seed + SEED_STRIDE * r + j, settings_call)
                except Exception as err:  # a sampler that breaks on some seeds: reported, not hidden
                    if e.name == "ar":
                        raise
                    logger.warning("dropping %s: %s", e.name, err)
                    failed[e.name] = f"failed in run {r}, batch {j}: {_first_sentence(err)}"
                    continue
                st = stats_record(out.stats)
                if before is not None and target.forwards - before != st["target_forwards"]:
                    per[e.name]["hook_ok"] = False
                rec = per[e.name]
                rec["e2e"][r][j] = wall
                rec["decode"][r][j] = st["decode_s"]
                rec["stats"].append(st)
                tok = out.token_ids
                for k, i in enumerate(idx):
                    rec["images"][r][i] = out.images[k]
                    rec["tokens"][r][i] = (tok[k] if isinstance(tok, torch.Tensor) else torch.as_tensor(tok[k])).reshape(-1)
                if r == 0 and len(maps[e.name]) < maps_per_sampler:
                    for k in range(min(len(idx), maps_per_sampler - len(maps[e.name]))):
                        maps[e.name].append(out.acceptance_map(k, with_image=False))
                bar.update(1)
    bar.close()
    for name, reason in failed.items():
        skipped.append({"sampler": name, "reason": reason})
    entries = [e for e in entries if e.name not in failed]
    names = [e.name for e in entries]
    costs = (
        image_draft_cost(
            pipe, entries, _models(pipe), [[prompts[i] for i in idx] for idx in batches],
            [seed + j for j in range(len(batches))], settings_call,
        )
        if draft_cost
        else {}
    )
    sweep_res = None
    if batch_sweep:
        n_sweep = max(batch_sweep)
        sweep_prompts = [class_names[i % len(class_names)] for i in range(n_sweep)]
        sweep_entries = [e for e in entries if e.name == "ar" or e.name in batch_sweep_samplers]
        sweep_res = image_batch_sweep(pipe, sweep_entries, sweep_prompts, batch_sweep, settings_call, seed, runs)

    # ---- aggregate
    # the classifier's own class order decides what a correct prediction is
    clf_names = [str(c).lower() for c in classifier.class_names]
    missing = sorted({p for p in prompts if p.lower() not in clf_names})
    if missing:
        logger.warning("class accuracy not computed: the classifier does not know the classes %s", missing)
    clf_labels = None if missing else [clf_names.index(p.lower()) for p in prompts]
    cond = _condition(pipe, prompts * runs)
    results: dict[str, dict[str, Any]] = {}
    for e in entries:
        rec = per[e.name]
        sts = rec["stats"]
        tf = sum(s["target_forwards"] for s in sts)
        base = sum(s["baseline_steps"] for s in sts)
        acc = sum(s["accepted_sum"] for s in sts)
        acc_n = sum(s["accepted_steps"] for s in sts)
        n_calls = len(sts)
        e2e_runs = [sum(x) for x in rec["e2e"]]
        dec_runs = [sum(x) for x in rec["decode"]]
        fid_runs = [im.fid(classifier.features(rec["images"][r]), ref_feats) for r in range(runs)]
        all_images = [x for r in range(runs) for x in rec["images"][r]]
        all_labels = clf_labels * runs if clf_labels is not None else None
        nll = im.token_nll(target, [[] for _ in range(len(prompts) * runs)],
                           [t for r in range(runs) for t in rec["tokens"][r]], cond=cond)
        results[e.name] = {
            "name": e.name,
            "guarantee": e.guarantee,
            "family": e.family,
            "params": e.params,
            "calls": n_calls,
            "images": runs * samples,
            "target_forwards": tf,
            "target_forwards_per_call": tf / n_calls if n_calls else float("nan"),
            "target_forwards_per_image": tf * 1.0 / (runs * samples),
            "draft_forwards": sum(s["draft_forwards"] for s in sts),
            "other_forwards": sum(s["other_forwards"] for s in sts),
            "new_tokens": sum(s["new_tokens"] for s in sts),
            "ar_steps": base,
            "step_compression": base / tf if tf else float("nan"),
            "mean_accepted": acc / acc_n if acc_n else float("nan"),
            "forward_counter_agrees": rec["hook_ok"],
            "decode_s_runs": dec_runs,
            "e2e_s_runs": e2e_runs,
            "decode_s": median(dec_runs),
            "e2e_s": median(e2e_runs),
            "fid_runs": fid_runs,
            "fid_median": median(fid_runs),
            "fid_range": (max(fid_runs) - min(fid_runs)) if runs > 1 else float("nan"),
            "fid_pooled": im.fid(classifier.features(all_images), ref_feats),
            "class_accuracy": im.class_accuracy(all_images, all_labels, classifier)
            if all_labels is not None
            else float("nan"),
            "mean_nll": nll,
        }
    ar = results["ar"]
    for row in results.values():
        row["speedup_vs_ar"] = ar["decode_s"] / row["decode_s"] if row["decode_s"] else float("nan")
        row["e2e_speedup_vs_ar"] = ar["e2e_s"] / row["e2e_s"] if row["e2e_s"] else float("nan")
        row["fid_change_vs_ar"] = row["fid_median"] - ar["fid_median"]
    add_efficiency(results.values())

    ar_pairs = [
        im.fid(classifier.features(per["ar"]["images"][a]), classifier.features(per["ar"]["images"][b]))
        for a, b in itertools.combinations(range(runs), 2)
    ]
    noise = {
        "fid_noise_ar": ar["fid_range"],
        "fid_ar_vs_ar_median": median(ar_pairs) if ar_pairs else float("nan"),
        "definition": "fid_noise_ar = max - min of ar's per-run FID (emoji features) over the runs, each run an "
        f"independent set of {samples} samples; fid_ar_vs_ar_median = median FID between two ar runs' samples.",
    }
    clf_metrics = {k: v for k, v in getattr(classifier, "metrics", {}).items() if k != "path"}
    return ImageBenchResult(
        result={
            "suite": "image",
            "settings": settings,
            "machine": machine,
            "prompts": prompts,
            "labels": labels,
            "classifier": {
                "feature_dim": classifier.config.get("feature_dim"),
                "class_names": list(classifier.class_names),
                "metrics": clf_metrics,
            },
            "reference_images": int(ref_feats.shape[0]),
            "noise": noise,
            "skipped": skipped,
            "results": results,
            "targets": image_targets(results, noise),
            "draft_cost": costs,
            "schedules": schedule_summary(results, wall_key="decode_s") if compare_schedules else [],
            "batch_sweep": sweep_res,
        },
        samples={n: per[n]["images"][0] for n in names if "[" not in n},  # no pictures of schedule variants
        maps={n: m for n, m in maps.items() if "[" not in n},
        classes=prompts,
    )


# ============================================================================== pipeline helpers


def default_cfg_scale(pipe: Any) -> float:
    """The ``cfg_scale`` default of the pipeline's ``__call__`` (1.0 when it has none)."""
    import inspect

    p = inspect.signature(pipe.__call__).parameters.get("cfg_scale")
    return float(p.default) if p is not None and p.default is not inspect.Parameter.empty else 1.0


def _pipeline_folder(pipe: Any) -> str:
    name = getattr(pipe, "name_or_path", None)
    if not name:
        raise ConfigError("pass classifier= (the pipeline does not say where it was loaded from).")
    return str(name)


def reference_images_for(pipe: Any) -> Any:
    """The pipeline's training images (``pipe.training_images()`` if it has one, else the emoji
    dataset of :func:`leapgen.data.emoji.build_emoji_dataset` at the pipeline's image size)."""
    fn = getattr(pipe, "training_images", None)
    if callable(fn):
        return fn()
    from ..data.emoji import build_emoji_dataset

    size = int(getattr(pipe, "image_size", im.IMAGE_SIZE))
    return build_emoji_dataset(size=size).images


def _condition(pipe: Any, prompts: list[str]) -> Any:
    """The (unguided) condition the pipeline gives the target for each prompt."""
    fn = getattr(pipe, "encode", None)
    if not callable(fn):
        raise ConfigError("the pipeline has no encode(prompts) -> condition; cannot score token NLL.")
    return fn(prompts)


__all__ = [
    "TARGETS_TEXT",
    "CORE_SAMPLERS",
    "ImageBenchResult",
    "acceptance_figure",
    "format_markdown",
    "reference_images_for",
    "run_image_bench",
    "sample_grid",
    "select_entries",
    "write_pictures",
]
