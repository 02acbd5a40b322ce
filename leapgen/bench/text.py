"""Text benchmark: every text sampler against plain AR and transformers' ``generate()`` peers.

Protocol (``leapgen bench text``; :func:`run_text_bench`):

* **Same models, same prompts, one process.** The pipeline's target (and draft) in fp32 on CPU,
  ``torch.set_num_threads(1)``, greedy decoding, ``max_new_tokens`` (128) with EOS stopping for
  every entry alike.
* **Prompt sets** (deterministic: they depend only on the tokenizer, ``n_prompts``, ``seed`` and the
  Python version):

  - ``heldout``: :func:`leapgen.data.code.heldout_snippets` -- whole lines cut from held-out
    stdlib files (never trained on), about 128 tokens, without the final newline (byte-level BPE
    merges a newline with the next line's indentation, so a prompt ending in a bare newline is out
    of distribution); the continuation is free generation.
  - ``code-edit``: an editing task whose answer mostly copies the prompt. From held-out stdlib
    files we take functions of 96-320 tokens (``ast``; source dedented), pick one local name
    (argument or assigned variable used at least twice) and a new name not used in the function,
    and build the prompt::

        # original
        <function source>

        # same function, with `old` renamed to `new`
        <first line of the renamed function, without its newline>

    The reference answer is the rest of the renamed function (kept in the JSON), so a model that
    edits well copies the prompt except at the renamed occurrences. Functions are taken
    round-robin over files in a seeded order, at most one per file per round.

* **Entries.** Ours, run through ``Sampler.generate`` on token ids: ``ar``, ``speculative``
  (defaults), optionally ``speculative[num_draft_tokens=K]`` with K chosen by a short sweep on
  *other* held-out prompts (fastest median wall time; reported), ``prompt_lookup`` (defaults), and
  every other registered sampler of the ``causal`` contract whose ``needs`` the pipeline can serve
  (others are listed as skipped with the reason). Peers, through transformers ``model.generate`` (``do_sample=False``,
  same ``max_new_tokens`` and EOS): ``hf_generate`` (plain), ``hf_assisted``
  (``assistant_model=draft`` with the draft length matched to ours: ``num_assistant_tokens=5``,
  ``num_assistant_tokens_schedule="constant"``, ``assistant_confidence_threshold=0``) and
  ``hf_prompt_lookup`` (``prompt_lookup_num_tokens=10``, ``max_matching_ngram_size=3``, matching our
  ``num_draft_tokens=10, max_ngram=3``; transformers takes the *first* n-gram occurrence, ours the
  *most recent*). Counterparts: ``ar``<->``hf_generate``, ``speculative``<->``hf_assisted``,
  ``prompt_lookup``<->``hf_prompt_lookup``.
* **Batch.** transformers' assisted generation is batch-1 only, so every entry runs one prompt at a
  time; an extra table runs our samplers at batch 8 (``batch_size``; 8 prompts as one batch,
  consecutive prompts grouped). ``batch_sweep`` adds speedup against ``ar`` at several batch sizes
  (:mod:`leapgen.bench.batch_sweep`, the plot).
* **Efficiency** = wall speedup against ``ar`` / step compression (:mod:`leapgen.bench.efficiency`):
  how much of the saved steps reaches the wall clock.
* **Draft cost** (:mod:`leapgen.bench.draft_cost`): after the timed runs, one untimed pass per
  drafting sampler with clocks around the proposer's calls and the draft model's forwards, reported
  per accepted draft token. ``compare_schedules`` adds the other draft-length schedules of
  ``speculative`` / ``spec_tree`` as entries (:mod:`leapgen.bench.schedules`).
* **Device.** fp32 on CPU by default; ``leapgen bench text --device cuda --dtype bfloat16`` moves the
  pipeline first, and every clock reading then synchronises the GPU.
* **Timing.** One warm-up generation per entry, then for run r: for each prompt: for each entry
  (order rotated by r): ``time.perf_counter`` around the generate call. Per entry and prompt the
  median over runs; entry wall = sum of the per-prompt medians; wall speedup = ar wall / entry wall;
  tokens/s = new tokens / entry wall.
* **Counts.** Target forwards come from our stats and, for every entry, from a forward pre-hook on
  the target ``nn.Module`` (the two must agree for ours; the hook is what counts the peers). Step
  compression = sum of sequential AR steps (longest row's new tokens) / target forwards; mean
  accepted = tokens committed per row per target forward (prefill included), pooled.
* **Exact match**: the fraction of prompts whose new tokens equal greedy ``ar``'s at batch 1 (for
  peers too; any difference is reported, not hidden). Outputs are also checked to be identical
  across runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import ConfigError
from ..samplers.base import DecodeConfig, list_samplers
from .common import machine_info, rotate
from .efficiency import add_efficiency
from .schedules import SCHEDULE_SAMPLERS, schedule_summary, schedule_variants
from .text_entries import (
    HF_ASSISTED_PARAMS,
    HF_PROMPT_LOOKUP_PARAMS,
    Entry,
    assistant_config,
    first_sentence,
    hf_entry,
    measure,
    our_entry,
    quiet_transformers,
)
from .text_prompts import (
    CODE_EDIT_MAX_TOKENS,
    CODE_EDIT_MIN_TOKENS,
    HELDOUT_PROMPT_TOKENS,
    PROMPT_SETS,
    code_edit_prompts,
    code_edit_tasks,
    heldout_prompts,
)
from .text_runs import (
    BATCH_SWEEP_SAMPLERS,
    SWEEP_DRAFT_TOKENS,
    aggregate,
    draft_cost_pass,
    sweep_draft_tokens,
    text_batch_sweep,
)
from .text_tables import format_markdown
from .verify_cost import verify_cost_curve

logger = logging.getLogger(__name__)

#: issue #11's targets on the shipped model: (label, prompt set, batch mode, entry, metric, threshold)
TARGETS = (
    ("speculative wall speedup vs ar >= 1.6x (batch 1)", "heldout", "batch1", "speculative", "speedup_vs_ar", 1.6),
    ("speculative >= 1.3x faster than hf_assisted, identical outputs", "heldout", "batch1", "speculative", "peer_speedup", 1.3),
    ("prompt_lookup >= 1.3x faster than hf_prompt_lookup, identical outputs (heldout)", "heldout", "batch1",
     "prompt_lookup", "peer_speedup", 1.3),
    ("prompt_lookup >= 1.3x faster than hf_prompt_lookup, identical outputs (code-edit)", "code-edit", "batch1",
     "prompt_lookup", "peer_speedup", 1.3),
    ("speculative wall speedup vs ar >= 1.3x (batch 8)", "heldout", "batch8", "speculative", "speedup_vs_ar", 1.3),
    ("ar no slower than hf_generate, identical outputs", "heldout", "batch1", "ar", "peer_speedup", 1.0),
    ("ar no slower than hf_generate, identical outputs (batch 8)", "heldout", "batch8", "ar", "peer_speedup", 1.0),
)
#: and: every exact sampler (greedy-exact at T=0) whose step compression is >= 1.5 is faster than
#: ar with efficiency (speedup / step compression) >= 0.6, at batch 1
EFFICIENCY_RULE = (1.5, 1.0, 0.6)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of :data:`TARGETS` and :data:`EFFICIENCY_RULE` met or not, from the result blocks."""
    out = []
    for label, sname, mode, ename, metric, thr in TARGETS:
        row = results.get(sname, {}).get(mode, {}).get(ename)
        if row is None or metric not in row:
            continue
        ok = row[metric] >= thr and (metric != "peer_speedup" or row.get("peer_identical", False))
        out.append({"target": label, "set": sname, "mode": mode, "entry": ename, "metric": metric,
                    "value": row[metric], "threshold": thr, "passed": bool(ok)})
    min_comp, min_speed, min_eff = EFFICIENCY_RULE
    for sname, modes in results.items():
        for ename, row in modes.get("batch1", {}).items():
            exact = row.get("guarantee") in ("greedy-exact", "distribution-exact") and row.get("kind") != "transformers"
            if ename == "ar" or "[" in ename or not exact or row.get("step_compression", 0.0) < min_comp:
                continue
            ok = row["speedup_vs_ar"] > min_speed and row.get("efficiency", 0.0) >= min_eff
            out.append({"target": f"{ename} (step compression {row['step_compression']:.2f} >= {min_comp}) faster "
                                  f"than ar with efficiency >= {min_eff} ({sname}): speedup {row['speedup_vs_ar']:.2f}x, "
                                  f"efficiency",
                        "set": sname, "mode": "batch1", "entry": ename, "metric": "efficiency",
                        "value": row.get("efficiency", float("nan")), "threshold": min_eff, "passed": bool(ok)})
    return out


# ============================================================================== the benchmark


def run_text_bench(
    pipe: Any,
    runs: int = 5,
    max_new_tokens: int = 128,
    n_prompts: int = 8,
    *,
    sets: Sequence[str] = PROMPT_SETS,
    peers: bool = True,
    batch_size: int = 8,
    sweep: bool = True,
    sweep_values: Sequence[int] = SWEEP_DRAFT_TOKENS,
    samplers: Sequence[str] | None = None,
    seed: int = 0,
    threads: int = 1,
    progress: bool | None = None,
    draft_cost: bool = True,
    compare_schedules: bool = False,
    batch_sweep: Sequence[int] = (),
    batch_sweep_samplers: Sequence[str] = BATCH_SWEEP_SAMPLERS,
    verify_cost: bool = True,
) -> dict[str, Any]:
    """Run the text benchmark on ``pipe`` (a :class:`~leapgen.pipelines.TextPipeline`); return the
    result dict (settings, machine, prompts, sweep, per-set per-mode entries, targets, skipped).

    ``batch_size`` <= 1 skips the batched table; ``peers=False`` skips transformers' generate();
    ``samplers`` restricts our entries to those names (``ar`` is always run: it is the reference).
    ``draft_cost``: one extra untimed pass per drafting sampler measuring draft cost per accepted
    token; ``compare_schedules``: extra entries for the other draft-length schedules of
    ``speculative`` / ``spec_tree`` and a summary of which is fastest; ``batch_sweep``: batch sizes
    at which ``batch_sweep_samplers`` are timed against ``ar`` on the held-out prompts (the plot);
    ``verify_cost``: the target's forward time for 1..8 new tokens against one
    (:mod:`leapgen.bench.verify_cost`), what bounds every draft-and-verify sampler.
    Run the pipeline on a GPU by moving it first (``pipe.to("cuda", torch.bfloat16)``).
    """
    import sys

    from tqdm.auto import tqdm

    if runs < 1:
        raise ConfigError(f"runs must be >= 1, got {runs}")
    for s in sets:
        if s not in PROMPT_SETS:
            raise ConfigError(f"unknown prompt set {s!r}; choose from {PROMPT_SETS}")
    torch.set_num_threads(threads)
    machine = machine_info()
    tok = pipe.tokenizer
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    config = DecodeConfig(max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
    window = pipe.context_window

    # ---- prompts
    prompt_sets: dict[str, dict[str, Any]] = {}
    # prompt lengths shrink only for models whose context window cannot hold the defaults
    room = window - max_new_tokens
    heldout_tokens = min(HELDOUT_PROMPT_TOKENS, room)
    edit_max = min(CODE_EDIT_MAX_TOKENS, (room - 32) // 2)
    edit_min = min(CODE_EDIT_MIN_TOKENS, edit_max // 2)
    if ("heldout" in sets and heldout_tokens < 8) or ("code-edit" in sets and edit_max < 16):
        raise ConfigError(
            f"max_new_tokens={max_new_tokens} leaves too little of the {window}-token context window for prompts"
        )
    if "heldout" in sets:
        texts = heldout_prompts(n_prompts, tok, prompt_tokens=heldout_tokens, seed=seed)
        prompt_sets["heldout"] = {"texts": texts}
    if "code-edit" in sets:
        tasks = code_edit_tasks(n_prompts, tok, seed=seed, min_tokens=edit_min, max_tokens=edit_max)
        prompt_sets["code-edit"] = {"texts": [t["prompt"] for t in tasks], "tasks": tasks}
    for ps in prompt_sets.values():
        ps["ids"] = pipe.encode(ps["texts"])
        too_long = [len(x) for x in ps["ids"] if len(x) + max_new_tokens > window]
        if too_long:
            raise ConfigError(
                f"prompts of {too_long} tokens + {max_new_tokens} new exceed the context window {window}"
            )

    with quiet_transformers():
        # ---- sweep for a tuned speculative row
        sweep_res = None
        if sweep and pipe.draft is not None and (samplers is None or "speculative" in samplers):
            sweep_ids = pipe.encode(heldout_prompts(2, tok, prompt_tokens=heldout_tokens, seed=seed + 1))
            sweep_res = sweep_draft_tokens(pipe, sweep_ids, config, sweep_values, runs=2)

        # ---- entries
        ours: list[Entry] = []
        skipped: list[dict[str, str]] = []
        available = {k for k, v in pipe._lms.items() if v is not None}
        infos = {i.name: i for i in list_samplers()}
        # the samplers of the causal contract (the heads samplers have `leapgen bench text-lossy`;
        # masked, audio, speech ... samplers run on other pipelines)
        names = ["ar", "speculative", "prompt_lookup"] + sorted(
            n for n in infos if n not in ("ar", "speculative", "prompt_lookup") and "causal" in infos[n].contracts
        )
        if samplers is not None:
            unknown = sorted(set(samplers) - set(infos))
            if unknown:
                raise ConfigError(f"unknown sampler(s) {unknown}; registered: {', '.join(sorted(infos))}")
            names = [n for n in names if n == "ar" or n in samplers]
        for name in names:
            info = infos.get(name)
            if info is None:
                continue
            missing = [n for n in info.needs if n not in available]
            if missing:
                skipped.append(
                    {"sampler": name, "reason": f"needs {', '.join(missing)} (not in this pipeline)"}
                )
                continue
            try:
                ours.append(our_entry(pipe, name, name, {}, config))
            except Exception as err:  # a sampler that cannot even be built with defaults
                skipped.append({"sampler": name, "reason": f"{type(err).__name__}: {err}"})
                continue
            if (
                name == "speculative"
                and sweep_res
                and sweep_res["best"] != info.defaults.get("num_draft_tokens")
            ):
                k = sweep_res["best"]
                ours.append(
                    our_entry(
                        pipe, name, f"speculative[num_draft_tokens={k}]", {"num_draft_tokens": k}, config
                    )
                )
        if compare_schedules:
            for name, label, params in schedule_variants([e.name for e in ours]):
                ours.append(our_entry(pipe, name, label, params, config))
        hf: list[Entry] = []
        if peers:
            hf.append(hf_entry(pipe, "hf_generate", max_new_tokens, eos, pad, {}))
            if pipe.draft is not None:
                hf.append(
                    hf_entry(pipe, "hf_assisted", max_new_tokens, eos, pad, {"assistant_model": pipe.draft})
                )
            hf.append(
                hf_entry(pipe, "hf_prompt_lookup", max_new_tokens, eos, pad, dict(HF_PROMPT_LOOKUP_PARAMS))
            )

        with assistant_config(pipe.draft, HF_ASSISTED_PARAMS if peers else {}):
            # ---- warm-up (also weeds out samplers that fail on this pipeline)
            first = next(iter(prompt_sets.values()))["ids"]
            modes: dict[str, list[Entry]] = {"batch1": ours + hf}
            if batch_size > 1:  # with transformers' plain generate() on the same left-padded batches
                modes[f"batch{batch_size}"] = list(ours) + [e for e in hf if e.batch]
            for mode, entries in modes.items():
                bs = 1 if mode == "batch1" else batch_size
                for e in list(entries):
                    try:
                        measure(e, first[:bs], pipe)
                    except Exception as err:
                        if e.kind == "transformers" or e.name in ("ar",):
                            raise
                        logger.warning("skipping %s: %s", e.name, err)
                        skipped.append(
                            {"sampler": e.name, "reason": f"failed on warm-up: {first_sentence(err)}"}
                        )
                        for m in modes.values():
                            if e in m:
                                m.remove(e)

            # ---- work items: (set, mode, item index)
            items: dict[tuple[str, str], list[list[list[int]]]] = {}
            for sname, ps in prompt_sets.items():
                for mode in modes:
                    bs = 1 if mode == "batch1" else batch_size
                    items[(sname, mode)] = [ps["ids"][i : i + bs] for i in range(0, len(ps["ids"]), bs)]
            times = {key: {e.name: [[] for _ in its] for e in modes[key[1]]} for key, its in items.items()}
            stats: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {
                key: {e.name: [{} for _ in its] for e in modes[key[1]]} for key, its in items.items()
            }
            outs: dict[tuple[str, str], dict[str, list[Any]]] = {
                key: {e.name: [None for _ in its] for e in modes[key[1]]} for key, its in items.items()
            }
            unstable: set[tuple[str, str, str]] = set()
            disable = (not sys.stderr.isatty()) if progress is None else not progress
            for r in tqdm(range(runs), desc="bench text", unit="run", disable=disable):
                for key, its in items.items():
                    order = rotate(modes[key[1]], r)
                    for i, ids in enumerate(its):
                        for e in order:
                            seqs, st, wall = measure(e, ids, pipe)
                            times[key][e.name][i].append(wall)
                            if outs[key][e.name][i] is None:
                                outs[key][e.name][i] = seqs
                                stats[key][e.name][i] = st
                            elif outs[key][e.name][i] != seqs:
                                unstable.add((key[0], key[1], e.name))

            # ---- draft cost (untimed: its clocks add work to every proposer call)
            costs: dict[tuple[str, str], dict[str, Any]] = {}
            if draft_cost:
                for key, its in items.items():
                    costs[key] = draft_cost_pass(modes[key[1]], its, pipe)

            # ---- the target's cost for a block of n tokens against one (what caps speculation)
            curves = (
                [verify_cost_curve(pipe._lms, runs=max(10, 6 * runs), batch=b) for b in sorted({1, batch_size}) if b >= 1]
                if verify_cost
                else []
            )

            # ---- speedup against ar vs batch size
            sweep_batches = None
            if batch_sweep:
                sweep_src = prompt_sets.get("heldout") or next(iter(prompt_sets.values()))
                live = {e.name for e in ours}
                sweep_batches = text_batch_sweep(
                    pipe,
                    sweep_src["ids"],
                    config,
                    batch_sweep,
                    [n for n in batch_sweep_samplers if n in live and n != "ar"],
                    runs,
                )

    # ---- aggregate
    results: dict[str, Any] = {}
    for (sname, mode), its in items.items():
        ref = [row for item in outs[(sname, "batch1")]["ar"] for row in item]
        block = {}
        for e in modes[mode]:
            block[e.name] = aggregate(
                e,
                its,
                times[(sname, mode)][e.name],
                stats[(sname, mode)][e.name],
                outs[(sname, mode)][e.name],
                ref,
            )
            block[e.name]["stable_across_runs"] = (sname, mode, e.name) not in unstable
        ar_wall = block["ar"]["wall_s"]
        for row in block.values():
            row["speedup_vs_ar"] = ar_wall / row["wall_s"] if row["wall_s"] else float("nan")
            peer = block.get(row["counterpart"] or "")
            if peer is not None:
                row["peer_speedup"] = peer["wall_s"] / row["wall_s"] if row["wall_s"] else float("nan")
                a = [x for item in outs[(sname, mode)][row["name"]] for x in item]
                b = [x for item in outs[(sname, mode)][peer["name"]] for x in item]
                row["peer_identical"] = a == b
                row["peer_mismatched_prompts"] = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        add_efficiency(block.values())
        results.setdefault(sname, {})[mode] = block
    results_ar_tokens = {s: [row for item in outs[(s, "batch1")]["ar"] for row in item] for s in prompt_sets}

    targets = evaluate_targets(results)

    return {
        "suite": "text",
        "settings": {
            "pipeline": getattr(pipe, "name_or_path", None),
            "runs": runs,
            "max_new_tokens": max_new_tokens,
            "n_prompts": n_prompts,
            "batch_size": batch_size,
            "greedy": True,
            "dtype": str(pipe.dtype),
            "device": str(pipe.device),
            "threads": threads,
            "seed": seed,
            "compare_schedules": compare_schedules,
            "hf_assisted": HF_ASSISTED_PARAMS,
            "hf_prompt_lookup": HF_PROMPT_LOOKUP_PARAMS,
        },
        "machine": machine,
        "prompts": {
            s: {
                "texts": ps["texts"],
                "n_tokens": [len(x) for x in ps["ids"]],
                **(
                    {"tasks": [{k: t[k] for k in ("old", "new", "reference")} for t in ps["tasks"]]}
                    if "tasks" in ps
                    else {}
                ),
                "ar_tokens": results_ar_tokens[s],
            }
            for s, ps in prompt_sets.items()
        },
        "sweep": sweep_res,
        "draft_cost": {s: {m: costs[(s, m)] for (s2, m) in costs if s2 == s} for s in prompt_sets} if costs else {},
        "schedules": {
            s: {m: schedule_summary(block, SCHEDULE_SAMPLERS) for m, block in modes_.items()}
            for s, modes_ in results.items()
        }
        if compare_schedules
        else {},
        "batch_sweep": sweep_batches,
        "verify_cost": curves,
        "skipped": skipped,
        "results": results,
        "targets": targets,
    }


__all__ = [
    "PROMPT_SETS",
    "EFFICIENCY_RULE",
    "TARGETS",
    "evaluate_targets",
    "code_edit_prompts",
    "code_edit_tasks",
    "format_markdown",
    "heldout_prompts",
    "run_text_bench",
    "sweep_draft_tokens",
]
