"""What drafting costs per accepted token, measured from outside the samplers.

:class:`DraftCostProfiler` is a context manager that, for the duration of one profiled pass (never
the timed runs: its clocks synchronise a CUDA device and add a little Python per call), wraps

* the proposer class's ``propose`` / ``iterate`` / ``update`` (class attributes, restored on exit),
* the draft model's forwards (time inside calls of the draft ``CausalLM`` adapter, whatever
  runtime serves it -- the class's ``__call__`` is wrapped and only calls on the draft instance
  are timed -- plus forward hooks on any plain ``nn.Module`` given; attributed to the proposer
  phase that ran them), and
* the tree loop's tree layout helpers (``tree_layout``, ``ancestor_mask``, ``DraftTree.from_lists``
  as the loop module sees them: the ancestor masks and depths of every tree it verifies).

Columns it yields (:func:`cost_row`), every time in milliseconds per **accepted draft token**
(drafts the target kept, ``DecodeStats.accepted_draft_tokens``; the target's own token per step
is not a draft):

* ``draft forwards`` per accepted token and ``draft fwd ms``: the draft model's forwards;
* ``propose ms``: the rest of ``propose`` (draft sampling, n-gram / pool lookups, building trees);
* ``upkeep ms``: ``update`` + ``iterate`` minus draft forwards (n-gram pool, tri-gram table,
  Jacobi guesses, draft-length controller);
* ``loop tree ms``: the tree loop's layout of the proposed trees;
* ``draft share``: all of the above over the sampler's decode wall time in the same pass.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .common import fmt, synchronize

PHASES = ("propose", "iterate", "update")
#: names of the tree loop module whose calls are "loop tree building"
TREE_LOOP_FUNCS = ("tree_layout", "ancestor_mask")


class DraftCostProfiler:
    """Accumulate the time of one sampler's drafting (see the module docstring).

    ``proposer_cls``: the class the sampler's loop instantiates (``type(sampler).proposer``);
    ``draft_modules``: draft models whose forwards to time: ``CausalLM`` adapters (their calls) or
    ``nn.Module`` objects (forward hooks); None entries are ignored;
    ``device``: synchronised around every clock reading when it is CUDA.
    """

    def __init__(self, proposer_cls: type | None, draft_modules: Sequence[Any] = (), device: Any = None) -> None:
        self.proposer_cls = proposer_cls
        self.modules = [m for m in draft_modules if isinstance(m, torch.nn.Module)]
        self.adapters = [m for m in draft_modules if m is not None and not isinstance(m, torch.nn.Module)]
        self.device = device
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self.draft_fwd_s = dict.fromkeys((*PHASES, "other"), 0.0)
        self.draft_forwards = 0
        self.tree_s = 0.0
        self._phase: list[str] = []
        self._t_fwd: list[float] = []
        self._stack = contextlib.ExitStack()

    # ------------------------------------------------------------------ clocks
    def _now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def _wrap_phase(self, phase: str, fn: Any) -> Any:
        prof = self

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            prof._phase.append(phase)
            t0 = prof._now()
            try:
                return fn(*args, **kwargs)
            finally:
                prof.phase_s[phase] += prof._now() - t0
                prof._phase.pop()

        wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapped

    def _wrap_tree(self, fn: Any) -> Any:
        prof = self

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                prof.tree_s += time.perf_counter() - t0

        return wrapped

    def _wrap_call(self, fn: Any) -> Any:
        prof = self

        def wrapped(lm: Any, *args: Any, **kwargs: Any) -> Any:
            if not any(lm is a for a in prof.adapters):
                return fn(lm, *args, **kwargs)
            prof._pre()
            try:
                return fn(lm, *args, **kwargs)
            finally:
                prof._post()

        return wrapped

    def _pre(self, *_: Any) -> None:
        self._t_fwd.append(self._now())

    def _post(self, *_: Any) -> None:
        t0 = self._t_fwd.pop() if self._t_fwd else self._now()
        self.draft_fwd_s[self._phase[-1] if self._phase else "other"] += self._now() - t0
        self.draft_forwards += 1

    # ------------------------------------------------------------------ context
    @contextlib.contextmanager
    def _patch_attr(self, owner: Any, name: str, value: Any) -> Iterator[None]:
        had = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, value)
        try:
            yield
        finally:
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

    def __enter__(self) -> DraftCostProfiler:
        st = self._stack
        cls = self.proposer_cls
        if cls is not None:
            for phase in PHASES:
                fn = getattr(cls, phase, None)
                if callable(fn):
                    st.enter_context(self._patch_attr(cls, phase, self._wrap_phase(phase, fn)))
        from ..samplers.loops import tree as tree_loop

        for name in TREE_LOOP_FUNCS:
            fn = getattr(tree_loop, name, None)
            if callable(fn):
                st.enter_context(self._patch_attr(tree_loop, name, self._wrap_tree(fn)))
        dt = getattr(tree_loop, "DraftTree", None)
        if dt is not None and "from_lists" in vars(dt):
            orig = dt.from_lists
            st.enter_context(self._patch_attr(dt, "from_lists", staticmethod(self._wrap_tree(orig))))
        for cls in dict.fromkeys(type(a) for a in self.adapters):
            st.enter_context(self._patch_attr(cls, "__call__", self._wrap_call(cls.__call__)))
        for m in self.modules:
            h1 = m.register_forward_pre_hook(self._pre)
            h2 = m.register_forward_hook(self._post)
            st.callback(h1.remove)
            st.callback(h2.remove)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    # ------------------------------------------------------------------ totals
    def totals(self) -> dict[str, float]:
        """Seconds: ``draft_fwd``, ``propose`` (without draft forwards), ``upkeep`` (update +
        iterate without draft forwards), ``loop_tree``; and the ``draft_forwards`` count."""
        f = self.draft_fwd_s
        return {
            "draft_fwd_s": sum(f.values()),
            "propose_s": max(0.0, self.phase_s["propose"] - f["propose"]),
            "upkeep_s": max(0.0, self.phase_s["update"] + self.phase_s["iterate"] - f["update"] - f["iterate"]),
            "loop_tree_s": self.tree_s,
            "draft_forwards": float(self.draft_forwards),
        }


def cost_row(name: str, totals: dict[str, float], accepted: int, decode_s: float, new_tokens: int) -> dict[str, Any]:
    """Per-accepted-token figures of one sampler's profiled pass (NaN when nothing was accepted)."""
    acc = accepted if accepted else float("nan")
    ms = 1000.0 / acc
    drafting = totals["draft_fwd_s"] + totals["propose_s"] + totals["upkeep_s"] + totals["loop_tree_s"]
    return {
        "name": name,
        "accepted_draft_tokens": accepted,
        "new_tokens": new_tokens,
        "decode_s": decode_s,
        **totals,
        "draft_forwards_per_accepted": totals["draft_forwards"] / acc,
        "draft_fwd_ms_per_accepted": totals["draft_fwd_s"] * ms,
        "propose_ms_per_accepted": totals["propose_s"] * ms,
        "upkeep_ms_per_accepted": totals["upkeep_s"] * ms,
        "loop_tree_ms_per_accepted": totals["loop_tree_s"] * ms,
        "drafting_ms_per_accepted": drafting * ms,
        "draft_share": drafting / decode_s if decode_s else float("nan"),
    }


def merge_totals(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    keys = ("draft_fwd_s", "propose_s", "upkeep_s", "loop_tree_s", "draft_forwards")
    return {k: sum(p.get(k, 0.0) for p in parts) for k in keys}


COLUMNS = (
    "sampler",
    "accepted drafts",
    "draft fwd / accepted",
    "draft fwd ms / accepted",
    "propose ms / accepted",
    "upkeep ms / accepted",
    "loop tree ms / accepted",
    "drafting ms / accepted",
    "drafting share of decode",
)


def cost_cells(row: dict[str, Any]) -> list[str]:
    return [
        row["name"],
        str(row["accepted_draft_tokens"]),
        fmt(row["draft_forwards_per_accepted"]),
        fmt(row["draft_fwd_ms_per_accepted"], 3),
        fmt(row["propose_ms_per_accepted"], 3),
        fmt(row["upkeep_ms_per_accepted"], 3),
        fmt(row["loop_tree_ms_per_accepted"], 3),
        fmt(row["drafting_ms_per_accepted"], 3),
        f"{100 * row['draft_share']:.0f}%" if row["draft_share"] == row["draft_share"] else "-",
    ]


__all__ = ["COLUMNS", "DraftCostProfiler", "cost_cells", "cost_row", "merge_totals"]
