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
  every other registered sampler whose ``needs`` the pipeline can serve (others are listed as
  skipped with the reason). Peers, through transformers ``model.generate`` (``do_sample=False``,
  same ``max_new_tokens`` and EOS): ``hf_generate`` (plain), ``hf_assisted``
  (``assistant_model=draft`` with the draft length matched to ours: ``num_assistant_tokens=5``,
  ``num_assistant_tokens_schedule="constant"``, ``assistant_confidence_threshold=0``) and
  ``hf_prompt_lookup`` (``prompt_lookup_num_tokens=10``, ``max_matching_ngram_size=3``, matching our
  ``num_draft_tokens=10, max_ngram=3``; transformers takes the *first* n-gram occurrence, ours the
  *most recent*). Counterparts: ``ar``<->``hf_generate``, ``speculative``<->``hf_assisted``,
  ``prompt_lookup``<->``hf_prompt_lookup``.
* **Batch.** transformers' assisted generation is batch-1 only, so every entry runs one prompt at a
  time; an extra table runs our samplers at batch 4 (consecutive prompts grouped).
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

import ast
import contextlib
import io
import keyword
import logging
import random
import textwrap
import tokenize
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ConfigError
from ..samplers.base import DecodeConfig, list_samplers, sampler_info
from .common import (
    ForwardCounter,
    fmt,
    machine_info,
    machine_line,
    markdown_table,
    median,
    rotate,
    stats_record,
    timed,
)

logger = logging.getLogger(__name__)

PROMPT_SETS = ("heldout", "code-edit")
HELDOUT_PROMPT_TOKENS = 128
CODE_EDIT_MIN_TOKENS = 96
CODE_EDIT_MAX_TOKENS = 320
SWEEP_DRAFT_TOKENS = (2, 3, 4, 5, 6, 8)
HF_ASSISTED_PARAMS = {
    "num_assistant_tokens": 5,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.0,
}
HF_PROMPT_LOOKUP_PARAMS = {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 3}
COUNTERPART = {"ar": "hf_generate", "speculative": "hf_assisted", "prompt_lookup": "hf_prompt_lookup"}
NEW_NAMES = ("value", "item", "result", "buf", "obj", "tmp", "arg", "node", "entry", "data", "acc", "elem")

#: the issue's targets: (label, prompt set, entry, metric, threshold)
TARGETS = (
    ("speculative step compression >= 2.0", "heldout", "speculative", "step_compression", 2.0),
    ("speculative wall speedup vs ar >= 1.5x", "heldout", "speculative", "speedup_vs_ar", 1.5),
    (
        "prompt_lookup step compression >= 2.5 (code-edit)",
        "code-edit",
        "prompt_lookup",
        "step_compression",
        2.5,
    ),
    (
        "speculative >= 1.2x faster than hf_assisted, identical outputs",
        "heldout",
        "speculative",
        "peer_speedup",
        1.2,
    ),
    (
        "prompt_lookup >= 1.2x faster than hf_prompt_lookup, identical outputs (code-edit)",
        "code-edit",
        "prompt_lookup",
        "peer_speedup",
        1.2,
    ),
)


# ============================================================================== prompt sets


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def heldout_prompts(
    n: int, tokenizer: Any, prompt_tokens: int = HELDOUT_PROMPT_TOKENS, seed: int = 0
) -> list[str]:
    """``n`` held-out stdlib snippets of about ``prompt_tokens`` tokens (free continuation)."""
    from ..data.code import heldout_snippets

    # byte-level BPE merges a newline with the next line's indentation ("\n   " is one token), so a
    # prompt ending in a bare "\n" is out of distribution: end the prompt before the last newline
    return [s.rstrip("\r\n") for s in heldout_snippets(n, tokenizer, prompt_tokens=prompt_tokens, seed=seed)]


def _rename(source: str, old: str, new: str) -> str | None:
    """``source`` with every NAME token ``old`` replaced by ``new`` (strings/comments untouched)."""
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    lines = source.splitlines(keepends=True)
    for t in reversed(toks):
        if t.string == old:
            (row, col), (_, end) = t.start, t.end
            line = lines[row - 1]
            lines[row - 1] = line[:col] + new + line[end:]
    return "".join(lines)


def _name_counts(source: str) -> dict[str, int] | None:
    counts: dict[str, int] = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type == tokenize.NAME:
                counts[t.string] = counts.get(t.string, 0) + 1
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return counts


def _function_candidates(path: Any) -> list[tuple[str, list[str]]]:
    """(dedented source, renamable local names) for each function of a file."""
    from ..data.code import read_text

    text = read_text(path)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        src = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
        if not src.endswith("\n"):
            src += "\n"
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        names += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        counts = _name_counts(src)
        if counts is None:
            continue
        local = sorted(
            {
                x
                for x in names
                if x not in ("self", "cls")
                and len(x) >= 2
                and not keyword.iskeyword(x)
                and counts.get(x, 0) >= 2
            }
        )
        if local:
            out.append((src, local))
    return out


def code_edit_tasks(
    n: int,
    tokenizer: Any,
    seed: int = 0,
    min_tokens: int = CODE_EDIT_MIN_TOKENS,
    max_tokens: int = CODE_EDIT_MAX_TOKENS,
) -> list[dict[str, str]]:
    """``n`` deterministic "rename a variable" editing tasks built from held-out stdlib functions.

    Each task is ``{"prompt", "reference", "old", "new", "source"}``; see the module docstring.
    """
    from ..data.code import stdlib_files

    rng = random.Random(seed)
    files = stdlib_files("heldout")
    order = list(range(len(files)))
    rng.shuffle(order)
    pools: list[list[tuple[str, list[str]]]] = []
    for i in order:
        cands = [
            c
            for c in _function_candidates(files[i])
            if min_tokens <= _n_tokens(tokenizer, c[0]) <= max_tokens
        ]
        rng.shuffle(cands)
        pools.append(cands)
    tasks: list[dict[str, str]] = []
    seen: set[str] = set()
    while len(tasks) < n and any(pools):
        for pool in pools:
            if len(tasks) >= n:
                break
            while pool:
                src, local = pool.pop()
                if src in seen:
                    continue
                counts = _name_counts(src) or {}
                old = rng.choice(local)
                fresh = [x for x in NEW_NAMES if x not in counts]
                if not fresh:
                    continue
                new = rng.choice(fresh)
                renamed = _rename(src, old, new)
                if renamed is None:
                    continue
                first, _, rest = renamed.partition("\n")
                prompt = f"# original\n{src}\n# same function, with `{old}` renamed to `{new}`\n{first}"
                seen.add(src)
                tasks.append(
                    {"prompt": prompt, "reference": "\n" + rest, "old": old, "new": new, "source": src}
                )
                break
    if len(tasks) < n:
        raise RuntimeError(
            f"could only build {len(tasks)} of {n} code-edit prompts from held-out functions of "
            f"{min_tokens}-{max_tokens} tokens; ask for fewer prompts"
        )
    return tasks


def code_edit_prompts(n: int, tokenizer: Any, seed: int = 0) -> list[str]:
    return [t["prompt"] for t in code_edit_tasks(n, tokenizer, seed=seed)]


# ============================================================================== entries


@dataclass
class Entry:
    """One thing to time: ``run(list of prompt ids) -> (new token ids per row, stats dict)``."""

    name: str
    kind: str  # "leapgen" or "transformers"
    guarantee: str
    run: Callable[[list[list[int]]], tuple[list[list[int]], dict[str, Any]]]
    params: dict[str, Any] = field(default_factory=dict)
    counterpart: str | None = None
    batch: bool = True  # can run several prompts in one call


def _our_entry(pipe: Any, name: str, label: str, params: dict[str, Any], config: DecodeConfig) -> Entry:
    from ..samplers.base import get_sampler

    sampler = get_sampler(name, **params)
    lms = pipe._lms
    info = sampler_info(name)

    def run(ids: list[list[int]]):
        with torch.inference_mode():
            res = sampler.generate(lms, ids, config, torch.Generator().manual_seed(0))
        return res.sequences, stats_record(res.stats)

    return Entry(
        name=label,
        kind="leapgen",
        guarantee=info.guarantee,
        run=run,
        params=dict(sampler.params),
        counterpart=COUNTERPART.get(label),
    )


def _hf_entry(
    pipe: Any, name: str, max_new_tokens: int, eos: int | None, pad: int, extra: dict[str, Any]
) -> Entry:
    model = pipe.model

    def run(ids: list[list[int]]):
        if len(ids) != 1:
            raise ValueError("transformers peers run at batch 1")
        x = torch.tensor(ids, dtype=torch.long, device=model.device)
        with torch.inference_mode():
            out = model.generate(
                x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
                use_cache=True,
                **extra,
            )
        seq = out[0, x.shape[1] :].tolist()
        return [seq], {"new_tokens": len(seq), "baseline_steps": len(seq), "accepted_sum": len(seq)}

    params = {k: (v if k != "assistant_model" else "draft") for k, v in extra.items()}
    if name == "hf_assisted":
        params.update(HF_ASSISTED_PARAMS)
    return Entry(
        name=name, kind="transformers", guarantee="greedy-exact", run=run, params=params, batch=False
    )


@contextlib.contextmanager
def _assistant_config(draft: Any, params: dict[str, Any]):
    """Set transformers' assisted-generation knobs on the draft's generation_config, then restore."""
    if draft is None:
        yield
        return
    gc = draft.generation_config
    saved = {k: getattr(gc, k, None) for k in params}
    for k, v in params.items():
        setattr(gc, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)


@contextlib.contextmanager
def _quiet():
    try:
        from transformers.utils import logging as hf_logging

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        hf_logging = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            if hf_logging is not None:
                hf_logging.set_verbosity(level)


# ============================================================================== measurement


def _measure(entry: Entry, ids: list[list[int]], pipe: Any) -> tuple[list[list[int]], dict[str, Any], float]:
    with ForwardCounter(pipe.model) as ct, ForwardCounter(pipe.draft) as cd:
        (seqs, st), wall = timed(lambda: entry.run(ids))
    st = dict(st)
    st["hook_target_forwards"] = ct.count
    st.setdefault("target_forwards", ct.count)
    if entry.kind == "transformers":
        st["draft_forwards"] = cd.count
        st["accepted_steps"] = ct.count
    return seqs, st, wall


def _first_sentence(err: BaseException) -> str:
    msg = str(err).split(". ")[0].split("; ")[0].rstrip(".")
    return f"{type(err).__name__}: {msg[:160]}"


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def sweep_draft_tokens(
    pipe: Any,
    prompts_ids: list[list[int]],
    config: DecodeConfig,
    values: Sequence[int] = SWEEP_DRAFT_TOKENS,
    runs: int = 2,
) -> dict[str, Any]:
    """Median wall time of ``speculative`` for each ``num_draft_tokens`` in ``values`` (interleaved)."""
    entries = {k: _our_entry(pipe, "speculative", f"k={k}", {"num_draft_tokens": k}, config) for k in values}
    for e in entries.values():  # warm-up
        _measure(e, prompts_ids[:1], pipe)
    times: dict[int, list[list[float]]] = {k: [[] for _ in prompts_ids] for k in values}
    stats: dict[int, list[dict[str, Any]]] = {k: [{} for _ in prompts_ids] for k in values}
    for r in range(runs):
        for i, ids in enumerate(prompts_ids):
            for k in rotate(list(values), r):
                _, st, wall = _measure(entries[k], [ids], pipe)
                times[k][i].append(wall)
                stats[k][i] = st
    rows = []
    for k in values:
        wall = sum(median(t) for t in times[k])
        tf = sum(s["target_forwards"] for s in stats[k][: len(prompts_ids)])
        base = sum(s["baseline_steps"] for s in stats[k][: len(prompts_ids)])
        toks = sum(s["new_tokens"] for s in stats[k][: len(prompts_ids)])
        rows.append(
            {
                "num_draft_tokens": k,
                "wall_s": wall,
                "tokens_per_s": toks / wall if wall else float("nan"),
                "step_compression": base / tf if tf else float("nan"),
            }
        )
    best = min(rows, key=lambda r: r["wall_s"])["num_draft_tokens"]
    return {"values": list(values), "runs": runs, "n_prompts": len(prompts_ids), "rows": rows, "best": best}


def _aggregate(
    entry: Entry,
    items: list[list[int]],
    times: list[list[float]],
    stats: list[dict[str, Any]],
    seqs: list[list[list[int]]],
    ref: list[list[int]],
) -> dict[str, Any]:
    """Aggregate one entry over the items of one (prompt set, batch mode)."""
    walls = [median(t) for t in times]
    wall = sum(walls)
    toks = sum(s["new_tokens"] for s in stats)
    tf = sum(s["target_forwards"] for s in stats)
    base = sum(s["baseline_steps"] for s in stats)
    acc = sum(s["accepted_sum"] for s in stats)
    acc_n = sum(s["accepted_steps"] for s in stats)
    flat = [row for item in seqs for row in item]
    matches = [a == b for a, b in zip(flat, ref)]
    return {
        "name": entry.name,
        "kind": entry.kind,
        "guarantee": entry.guarantee,
        "params": entry.params,
        "counterpart": entry.counterpart,
        "wall_s": wall,
        "new_tokens": toks,
        "tokens_per_s": toks / wall if wall else float("nan"),
        "target_forwards": tf,
        "target_forwards_per_call": tf / len(stats) if stats else float("nan"),
        "draft_forwards": sum(s.get("draft_forwards", 0) for s in stats),
        "step_compression": base / tf if tf else float("nan"),
        "mean_accepted": acc / acc_n if acc_n else float("nan"),
        "exact_match": sum(matches) / len(matches) if matches else float("nan"),
        "mismatched_prompts": [i for i, m in enumerate(matches) if not m],
        "hook_forwards_agree": all(s["hook_target_forwards"] == s["target_forwards"] for s in stats),
        "per_item": [
            {
                "times_s": t,
                "median_s": w,
                **{k: v for k, v in s.items()},
                "first_diff_vs_ar": [_first_diff(row, ref[j]) for row, j in zip(sq, _row_ids(items, i))],
            }
            for i, (t, w, s, sq) in enumerate(zip(times, walls, stats, seqs))
        ],
    }


def _row_ids(items: list[Any], i: int) -> list[int]:
    start = sum(len(x) for x in items[:i])
    return list(range(start, start + len(items[i])))


# ============================================================================== the benchmark


def run_text_bench(
    pipe: Any,
    runs: int = 5,
    max_new_tokens: int = 128,
    n_prompts: int = 8,
    *,
    sets: Sequence[str] = PROMPT_SETS,
    peers: bool = True,
    batch_size: int = 4,
    sweep: bool = True,
    sweep_values: Sequence[int] = SWEEP_DRAFT_TOKENS,
    samplers: Sequence[str] | None = None,
    seed: int = 0,
    threads: int = 1,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Run the text benchmark on ``pipe`` (a :class:`~leapgen.pipelines.TextPipeline`); return the
    result dict (settings, machine, prompts, sweep, per-set per-mode entries, targets, skipped).

    ``batch_size`` <= 1 skips the batched table; ``peers=False`` skips transformers' generate();
    ``samplers`` restricts our entries to those names (``ar`` is always run: it is the reference).
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
    if heldout_tokens < 8 or edit_max < 16:
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

    with _quiet():
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
        names = ["ar", "speculative", "prompt_lookup"] + sorted(
            n for n in infos if n not in ("ar", "speculative", "prompt_lookup")
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
                ours.append(_our_entry(pipe, name, name, {}, config))
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
                    _our_entry(
                        pipe, name, f"speculative[num_draft_tokens={k}]", {"num_draft_tokens": k}, config
                    )
                )
        hf: list[Entry] = []
        if peers:
            hf.append(_hf_entry(pipe, "hf_generate", max_new_tokens, eos, pad, {}))
            if pipe.draft is not None:
                hf.append(
                    _hf_entry(pipe, "hf_assisted", max_new_tokens, eos, pad, {"assistant_model": pipe.draft})
                )
            hf.append(
                _hf_entry(pipe, "hf_prompt_lookup", max_new_tokens, eos, pad, dict(HF_PROMPT_LOOKUP_PARAMS))
            )

        with _assistant_config(pipe.draft, HF_ASSISTED_PARAMS if peers else {}):
            # ---- warm-up (also weeds out samplers that fail on this pipeline)
            first = next(iter(prompt_sets.values()))["ids"]
            modes: dict[str, list[Entry]] = {"batch1": ours + hf}
            if batch_size > 1:
                modes[f"batch{batch_size}"] = list(ours)
            for mode, entries in modes.items():
                bs = 1 if mode == "batch1" else batch_size
                for e in list(entries):
                    try:
                        _measure(e, first[:bs], pipe)
                    except Exception as err:
                        if e.kind == "transformers" or e.name in ("ar",):
                            raise
                        logger.warning("skipping %s: %s", e.name, err)
                        skipped.append(
                            {"sampler": e.name, "reason": f"failed on warm-up: {_first_sentence(err)}"}
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
                            seqs, st, wall = _measure(e, ids, pipe)
                            times[key][e.name][i].append(wall)
                            if outs[key][e.name][i] is None:
                                outs[key][e.name][i] = seqs
                                stats[key][e.name][i] = st
                            elif outs[key][e.name][i] != seqs:
                                unstable.add((key[0], key[1], e.name))

    # ---- aggregate
    results: dict[str, Any] = {}
    for (sname, mode), its in items.items():
        ref = [row for item in outs[(sname, "batch1")]["ar"] for row in item]
        block = {}
        for e in modes[mode]:
            block[e.name] = _aggregate(
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
        results.setdefault(sname, {})[mode] = block
    results_ar_tokens = {s: [row for item in outs[(s, "batch1")]["ar"] for row in item] for s in prompt_sets}

    targets = []
    for label, sname, ename, metric, thr in TARGETS:
        row = results.get(sname, {}).get("batch1", {}).get(ename)
        if row is None or metric not in row:
            continue
        value = row[metric]
        ok = value >= thr
        if metric == "peer_speedup":
            ok = ok and row.get("peer_identical", False)
        targets.append(
            {
                "target": label,
                "set": sname,
                "entry": ename,
                "metric": metric,
                "value": value,
                "threshold": thr,
                "passed": bool(ok),
            }
        )

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
        "skipped": skipped,
        "results": results,
        "targets": targets,
    }


# ============================================================================== reporting

COLUMNS = (
    "entry",
    "guarantee",
    "target fwd/call",
    "mean accepted",
    "step compression",
    "tokens/s",
    "speedup vs ar",
    "exact match vs ar",
    "vs transformers peer",
)


def _peer_cell(row: dict[str, Any]) -> str:
    if "peer_speedup" not in row:
        return ""
    same = "identical" if row["peer_identical"] else "OUTPUTS DIFFER"
    return f"{row['peer_speedup']:.2f}x vs {row['counterpart']}, {same}"


def _row_cells(row: dict[str, Any]) -> list[str]:
    guarantee = row["guarantee"] + (" (peer)" if row["kind"] == "transformers" else "")
    em = fmt(row["exact_match"])
    if row["mismatched_prompts"]:
        em += f" (differ: {row['mismatched_prompts']})"
    if not row.get("stable_across_runs", True):
        em += " UNSTABLE"
    return [
        row["name"],
        guarantee,
        fmt(row["target_forwards_per_call"], 1),
        fmt(row["mean_accepted"]),
        fmt(row["step_compression"]),
        fmt(row["tokens_per_s"], 1),
        f"{row['speedup_vs_ar']:.2f}x",
        em,
        _peer_cell(row),
    ]


def format_markdown(result: dict[str, Any], header: bool = True) -> str:
    """Markdown tables (one per prompt set and batch mode), sweep, targets and skipped samplers."""
    st = result["settings"]
    out: list[str] = []
    if header:
        out.append("## Text benchmark\n")
        out.append(f"Machine: {machine_line(result['machine'])}.\n")
        out.append(
            f"Settings: pipeline `{st['pipeline']}`, {st['dtype']} on {st['device']}, {st['threads']} thread(s), greedy, "
            f"max_new_tokens={st['max_new_tokens']} (EOS stops), {st['n_prompts']} prompts per set, "
            f"median of {st['runs']} interleaved runs per prompt, wall = sum of per-prompt medians. "
            f"Peers: transformers `generate()` plain, `assistant_model=draft` ({_kv(st['hf_assisted'])}), "
            f"prompt lookup ({_kv(st['hf_prompt_lookup'])}).\n"
        )
    for sname, modes in result["results"].items():
        for mode, block in modes.items():
            title = {
                "heldout": "held-out stdlib snippets (free continuation)",
                "code-edit": "code editing (output mostly copies the prompt)",
            }.get(sname, sname)
            out.append(f"### {sname}: {title}, {mode.replace('batch', 'batch ')}\n")
            out.append(
                markdown_table(
                    COLUMNS if mode == "batch1" else COLUMNS[:-1],
                    [_row_cells(r)[: (None if mode == "batch1" else -1)] for r in block.values()],
                )
            )
            out.append("")
    if result.get("sweep"):
        sw = result["sweep"]
        out.append(
            f"### speculative draft-length sweep ({sw['n_prompts']} other held-out prompts, median of {sw['runs']} runs; best: "
            f"num_draft_tokens={sw['best']})\n"
        )
        out.append(
            markdown_table(
                ("num_draft_tokens", "wall s", "tokens/s", "step compression"),
                [
                    (
                        r["num_draft_tokens"],
                        fmt(r["wall_s"], 3),
                        fmt(r["tokens_per_s"], 1),
                        fmt(r["step_compression"]),
                    )
                    for r in sw["rows"]
                ],
            )
        )
        out.append("")
    if result.get("targets"):
        out.append("### targets\n")
        for t in result["targets"]:
            out.append(f"- [{'x' if t['passed'] else ' '}] {t['target']}: {fmt(t['value'])}")
        out.append("")
    if result.get("skipped"):
        out.append(
            "Skipped samplers: "
            + "; ".join(f"`{s['sampler']}` ({s['reason']})" for s in result["skipped"])
            + "\n"
        )
    return "\n".join(out).rstrip() + "\n"


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


__all__ = [
    "PROMPT_SETS",
    "code_edit_prompts",
    "code_edit_tasks",
    "format_markdown",
    "heldout_prompts",
    "run_text_bench",
    "sweep_draft_tokens",
]
