"""What the text benchmark times: our samplers and transformers' ``generate()`` peers, behind one
:class:`Entry` interface, and the measurement of one call (wall time plus forward counts).

Peers, through transformers ``model.generate`` (``do_sample=False``, same ``max_new_tokens`` and
EOS): ``hf_generate`` (plain), ``hf_assisted`` (``assistant_model=draft`` with the draft length
matched to ours, :data:`HF_ASSISTED_PARAMS`) and ``hf_prompt_lookup``
(:data:`HF_PROMPT_LOOKUP_PARAMS`). :data:`COUNTERPART` pairs each of ours with its peer.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..samplers.base import DecodeConfig, get_sampler, sampler_info
from .common import ForwardCounter, stats_record, timed

HF_ASSISTED_PARAMS = {
    "num_assistant_tokens": 5,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.0,
}
HF_PROMPT_LOOKUP_PARAMS = {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 3}
COUNTERPART = {"ar": "hf_generate", "speculative": "hf_assisted", "prompt_lookup": "hf_prompt_lookup"}


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
    sampler: str = ""  # our registered sampler's name ("" for peers)


def our_entry(pipe: Any, name: str, label: str, params: dict[str, Any], config: DecodeConfig) -> Entry:
    sampler = get_sampler(name, **params)
    lms = pipe._lms
    info = sampler_info(name)

    def run(ids: list[list[int]]):
        with torch.inference_mode():
            gen = torch.Generator(device=getattr(pipe, "device", "cpu")).manual_seed(0)
            res = sampler.generate(lms, ids, config, gen)
        return res.sequences, stats_record(res.stats)

    return Entry(
        name=label,
        kind="leapgen",
        guarantee=info.guarantee,
        run=run,
        params=dict(sampler.params),
        counterpart=COUNTERPART.get(label),
        sampler=name,
    )


def hf_entry(
    pipe: Any, name: str, max_new_tokens: int, eos: int | None, pad: int, extra: dict[str, Any]
) -> Entry:
    model = pipe.model
    batched = not extra  # plain generate() takes a left-padded batch; assisted / prompt lookup take one row

    def run(ids: list[list[int]]):
        if len(ids) != 1 and not batched:
            raise ValueError(f"transformers' {name} runs at batch 1")
        width = max(len(r) for r in ids)
        x = torch.tensor([[pad] * (width - len(r)) + list(r) for r in ids], dtype=torch.long, device=model.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids], dtype=torch.long, device=model.device)
        with torch.inference_mode():
            out = model.generate(
                x,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
                use_cache=True,
                **extra,
            )
        seqs = []
        for row in out[:, width:].tolist():  # finished rows are padded after their EOS: cut there
            seqs.append(row[: row.index(eos) + 1] if eos is not None and eos in row else row)
        n = sum(len(r) for r in seqs)
        record = {"new_tokens": n, "baseline_steps": max(len(r) for r in seqs), "accepted_sum": n}
        if batched:  # one token per row and step, as ar's rows
            record["accepted_steps"] = n
        return seqs, record

    params = {k: (v if k != "assistant_model" else "draft") for k, v in extra.items()}
    if name == "hf_assisted":
        params.update(HF_ASSISTED_PARAMS)
    return Entry(
        name=name, kind="transformers", guarantee="greedy-exact", run=run, params=params, batch=batched
    )


@contextlib.contextmanager
def assistant_config(draft: Any, params: dict[str, Any]):
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
def quiet_transformers():
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


def measure(entry: Entry, ids: list[list[int]], pipe: Any) -> tuple[list[list[int]], dict[str, Any], float]:
    lm = pipe._lms["model"]
    before = getattr(lm, "forwards", 0)
    with ForwardCounter(pipe.model) as ct, ForwardCounter(pipe.draft) as cd:
        (seqs, st), wall = timed(lambda: entry.run(ids), device=getattr(pipe, "device", None))
    st = dict(st)
    # ours: the target adapter's own call counter (whatever runtime serves it); peers: a forward
    # pre-hook on the transformers module they call
    st["hook_target_forwards"] = getattr(lm, "forwards", 0) - before if entry.kind == "leapgen" else ct.count
    st.setdefault("target_forwards", ct.count)
    if entry.kind == "transformers":
        st["draft_forwards"] = cd.count
        st.setdefault("accepted_steps", ct.count)
    return seqs, st, wall


def first_sentence(err: BaseException) -> str:
    msg = str(err).split(". ")[0].split("; ")[0].rstrip(".")
    return f"{type(err).__name__}: {msg[:160]}"


__all__ = [
    "COUNTERPART",
    "HF_ASSISTED_PARAMS",
    "HF_PROMPT_LOOKUP_PARAMS",
    "Entry",
    "assistant_config",
    "first_sentence",
    "hf_entry",
    "measure",
    "our_entry",
    "quiet_transformers",
]
