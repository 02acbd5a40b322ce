"""One loaded pipeline called from several threads at once (a web server's worker pool).

* Calls from a thread pool give what the same calls give one after another (same seed: same
  tokens, images, transcripts, SMILES) and each call's own statistics (``target_forwards`` counts
  that call's forwards, not those another thread ran meanwhile): text (``ar``, ``speculative``),
  images (``image-emoji-dd``, ``image-emoji-var``), ASR, OCR (with CPPD's per-character
  confidences), molecules.
  The text samplers that read what the target's latest forward left on the shared model (hidden
  states, hidden transfer's logits, judge offsets, superposed's input embeddings) too.
* A fixed interleaving (a second call run to its end, on another thread, from the first call's
  ``callback_on_step_end``) pins the per-call statistics without depending on the scheduler.
* The counters and last-forward outputs of the shared model adapters are per-thread attributes.
* A Sampler *instance* runs one call at a time: a second thread gets a ConfigError that says what
  to do, never a mixed decode.
* What a first call builds lazily (the text heads, gear's lean twin) is built once when first calls
  come at once.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from leapgen import Pipeline
from leapgen.errors import ConfigError
from leapgen.models.per_thread import PerThread
from leapgen.samplers.base import DecodeStats, get_sampler

torch.set_num_threads(1)

ASSETS = Path(__file__).resolve().parents[1] / "assets"
THREADS = 4
#: stats fields that measure time (differ between any two runs)
TIMED = ("time", "wall", "rtf", "latency", "per_s")


def canon(x):
    """An output as plain comparable data: tensors, arrays and images as bytes, times left out."""
    if isinstance(x, DecodeStats):
        d = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if f.name not in ("wall_time", "extra")}
        d["extra"] = {k: canon(v) for k, v in x.extra.items() if not any(t in k for t in TIMED)}
        return d
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.detach().cpu().contiguous().numpy().tobytes())
    if isinstance(x, np.ndarray):
        return ("array", x.shape, np.ascontiguousarray(x).tobytes())
    if hasattr(x, "mode") and hasattr(x, "tobytes"):  # a PIL image
        return ("image", x.size, x.tobytes())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: canon(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {k: canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    return x


def assert_threads_match_sequential(pipe, calls, reps: int = 2) -> None:
    """Every call from a pool of THREADS threads (each call ``reps`` times) gives its sequential output."""
    ref = [canon(pipe(*args, **kw)) for args, kw in calls]
    with ThreadPoolExecutor(THREADS) as pool:
        jobs = [(i, pool.submit(pipe, *calls[i][0], **calls[i][1])) for _ in range(reps) for i in range(len(calls))]
        got = [(i, canon(job.result())) for i, job in jobs]
    for i, out in got:
        assert out == ref[i], f"call {i} ({calls[i][1]}) under {THREADS} threads differs from its sequential run"


def interleaved(pipe, first: tuple, second: tuple):
    """Run ``first``; after its first step, run ``second`` to its end on another thread (and wait).
    Returns both outputs: a fixed interleaving of two calls on one pipeline."""
    box: dict[str, object] = {}

    def run_second():
        try:
            box["second"] = pipe(*second[0], **second[1])
        except Exception as err:  # re-raised in the caller's thread
            box["error"] = err

    def callback(p, step, info):
        if "started" not in box:
            box["started"] = True
            t = threading.Thread(target=run_second)
            t.start()
            t.join()

    out = pipe(*first[0], **first[1], callback_on_step_end=callback)
    if "error" in box:
        raise box["error"]
    return out, box["second"]


@pytest.fixture(scope="module")
def text_pipe():
    return Pipeline.from_pretrained("leapgen/text-code")


# ------------------------------------------------------------------------------ text
@pytest.mark.parametrize("sampler", ["ar", "speculative", "chimera", "judge", "hidden_transfer", "superposed"])
def test_text_threads_match_sequential(text_pipe, sampler):
    """(The last four read what the target's latest forward left on the shared model: its hidden
    states, hidden transfer's logits, judge offsets; superposed sets its next input embeddings.)"""
    calls = [((p,), dict(sampler=sampler, max_new_tokens=10, seed=i, temperature=0.0 if i == 0 else 0.8))
             for i, p in enumerate(["def parse_args(", "import os\nfor", "class Stack:"])]
    assert_threads_match_sequential(text_pipe, calls)


@pytest.mark.parametrize("sampler", ["ar", "speculative", "chimera", "first"])
def test_text_call_interrupted_by_another_keeps_its_output_and_stats(text_pipe, sampler):
    """The second call runs its forwards between two steps of the first, on the same shared model:
    the first keeps its tokens and counts only its own forwards (and reads its own hidden states)."""
    first = (("def parse_args(",), dict(sampler=sampler, max_new_tokens=10, seed=0))
    second = ((["class Stack:", "import os\nfor x in"],), dict(sampler=sampler, max_new_tokens=12, seed=1))
    ref_first, ref_second = (canon(text_pipe(*c[0], **c[1])) for c in (first, second))
    out_first, out_second = interleaved(text_pipe, first, second)
    assert canon(out_second) == ref_second
    assert canon(out_first) == ref_first


# ------------------------------------------------------------------------------ other pipelines
def test_image_threads_match_sequential():
    dd = Pipeline.from_pretrained("leapgen/image-emoji-dd")
    assert_threads_match_sequential(dd, [((["red apple"],), dict(num_steps=n, seed=s)) for n, s in ((1, 0), (2, 1), (1, 2))])
    var = Pipeline.from_pretrained("leapgen/image-emoji-var")
    assert_threads_match_sequential(var, [((["red apple"],), dict(sampler="var", seed=0)), ((["animals"],), dict(sampler="var", seed=1))],
                                    reps=1)


def test_asr_threads_match_sequential():
    pipe = Pipeline.from_pretrained("leapgen/asr-en")
    clip = str(ASSETS / "asr-en" / "examples" / "clip.wav")
    calls = [(([clip],), dict(sampler=s, seed=0)) for s in ("paraformer", "ar", "speculative", "ctc_greedy")]
    assert_threads_match_sequential(pipe, calls)


def test_ocr_threads_match_sequential_with_cppd_confidences():
    from PIL import Image, ImageDraw

    images = []
    for word in ("hello", "world", "stack"):
        im = Image.new("L", (128, 32), 255)
        ImageDraw.Draw(im).text((5, 8), word, fill=0)
        images.append(im)
    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    calls = [(([im],), dict(sampler=s)) for s in ("cppd", "ar") for im in images]
    assert_threads_match_sequential(pipe, calls, reps=3)


def test_molecule_threads_match_sequential():
    pipe = Pipeline.from_pretrained("leapgen/molecule-safe")
    calls = [((), dict(num_samples=3, sampler="genmol", seed=s)) for s in range(3)]
    assert_threads_match_sequential(pipe, calls, reps=1)


# ------------------------------------------------------------------------------ the mechanisms
#: attributes of shared model adapters that one call writes and reads back: one value per thread
PER_THREAD = {
    "leapgen.models.base:CausalLM": ("forwards",),
    "leapgen.models.masked_base:MaskedModel": ("forwards",),
    "leapgen.models.net_views:NetworkView": ("forwards", "encoder_time"),
    "leapgen.models.dd:DDModel": ("forwards",),
    "leapgen.models.nar:NARLM": ("forwards",),
    "leapgen.models.ctf:CoarseFineLM": ("forwards",),
    "leapgen.models.var:ScaleLM": ("forwards",),
    "leapgen.models.mar:MARModel": ("forwards", "head_calls"),
    "leapgen.models.peptide_lm:PeptideBiARLM": ("forwards", "nar_forwards"),
    "leapgen.models.ocr_lm:CPPDLM": ("forwards", "last_logits"),
    "leapgen.models.tts_lm:T2SMaskedLM": ("forwards", "last_hidden"),
    "leapgen.models.tts_lm:S2AMaskedLM": ("forwards", "last_hidden"),
    "leapgen.models.text_variants:VariantLM": ("forwards", "last_hidden", "next_embeds", "layers_run"),
    "leapgen.models.text_heads:HeadedLM": ("transfer_cols", "transfer_states", "transfer_logits", "judge_offsets"),
}


@pytest.mark.parametrize("where", sorted(PER_THREAD))
def test_shared_adapter_state_is_per_thread(where):
    import importlib

    module, name = where.split(":")
    cls = getattr(importlib.import_module(module), name)
    for attr in PER_THREAD[where]:
        assert isinstance(inspect.getattr_static(cls, attr), PerThread), f"{name}.{attr} is shared by every thread"


class _Counter:
    n = PerThread(0)


def test_per_thread_attribute():
    c = _Counter()
    c.n += 5
    seen = []
    t = threading.Thread(target=lambda: (seen.append(c.n), setattr(c, "n", 2), seen.append(c.n)))
    t.start()
    t.join()
    assert seen == [0, 2] and c.n == 5
    import copy
    import pickle

    assert copy.deepcopy(c).n == 5 and pickle.loads(pickle.dumps(c)).n == 5


def test_a_sampler_instance_runs_one_call_at_a_time(text_pipe):
    smp = get_sampler("speculative", num_draft_tokens=3)
    ref = canon(text_pipe("def parse_args(", sampler=smp, max_new_tokens=8))
    with pytest.raises(ConfigError, match="running in another thread's call.*by name"):
        interleaved(text_pipe, (("def parse_args(",), dict(sampler=smp, max_new_tokens=8)),
                    (("class Stack:",), dict(sampler=smp, max_new_tokens=8)))
    # the refused call changed nothing; the instance is free again once its call ends
    assert canon(text_pipe("def parse_args(", sampler=smp, max_new_tokens=8)) == ref
    # the same instance on one thread after another is fine, and so are names from every thread
    with ThreadPoolExecutor(2) as pool:
        pool.submit(text_pipe, "x = ", sampler="speculative", max_new_tokens=4).result()
    first, second = interleaved(text_pipe, (("def f(",), dict(sampler=smp, max_new_tokens=6)),
                                (("def f(",), dict(sampler="speculative", num_draft_tokens=3, max_new_tokens=6)))
    assert canon(first) == canon(second)


class _Slow:
    """Wraps a builder: counts its calls and holds each one long enough for the other threads to arrive."""

    def __init__(self, build):
        self.build, self.calls = build, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        time.sleep(0.3)
        return self.build(*args, **kwargs)


def _at_once(fn, n: int = THREADS):
    barrier = threading.Barrier(n)

    def run(_):
        barrier.wait()
        return fn()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def test_text_heads_load_once_when_first_calls_come_at_once(monkeypatch):
    import leapgen.pipelines.text as text_module

    pipe = Pipeline.from_pretrained("leapgen/text-code")
    slow = _Slow(text_module.HeadedLM)
    monkeypatch.setattr(text_module, "HeadedLM", slow)
    outs = _at_once(lambda: pipe("def f(", sampler="chimera", max_new_tokens=4))
    assert slow.calls == 1
    assert len({tuple(o.token_ids[0]) for o in outs}) == 1


def test_gear_builds_one_lean_twin_when_first_calls_come_at_once(monkeypatch):
    import leapgen.samplers.gear as gear_module

    pipe = Pipeline.from_pretrained("leapgen/text-code", runtime="transformers")
    slow = _Slow(gear_module.LeanCausalLM.from_hf)
    monkeypatch.setattr(gear_module.LeanCausalLM, "from_hf", slow)
    outs = _at_once(lambda: pipe("def f(", sampler="gear", max_new_tokens=4))
    assert slow.calls == 1
    assert len({tuple(o.token_ids[0]) for o in outs}) == 1
