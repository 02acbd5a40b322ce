"""Pipelines under threads: what is per call, what is refused.

One loaded pipeline may serve several threads at once (a thread pool, a FastAPI app, Gradio with a
concurrency limit above 1). A call builds its own sampler from a name, its own KV caches and its own
generator, so it returns what it returns alone. What the shared model adapters keep for the call
that runs them (forward counters, the outputs of the latest forward) is per thread
(:class:`~leapgen.models.per_thread.PerThread`), so a call's statistics count its own forwards only.
What a first call builds lazily and is costly (the text heads, ``gear``'s lean twin) is built once,
under a lock, and so are the adapters rebuilt after a component changed
(:func:`~leapgen.pipelines.freshness.follows_components`: the threads that find the change wait for
the first one's rebuild).

Not thread-safe, and refused here rather than mixed: a :class:`Sampler` *instance* that calls on two
threads run at once (:func:`one_call_per_sampler`). Left to the caller: one ``torch.Generator`` per
call (a shared one interleaves its draws), and no ``pipe.to()``, ``set_draft``, ``set_compile``,
``set_progress_bar_config`` or ``leapgen.kernels.set_backend`` while calls run (they change what
every call uses).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..samplers.base import Sampler

#: id of a Sampler instance passed to a running call -> the thread running it (see one_call_per_sampler)
_SAMPLERS_IN_USE: dict[int, int] = {}
_SAMPLERS_LOCK = threading.Lock()


def one_call_per_sampler(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` refusing a :class:`Sampler` instance that a call on another thread is running.

    A sampler named by the call (``sampler="speculative"``) is built for that call alone; an instance
    is the caller's, and some samplers keep the state of the call they run on it (masked samplers'
    parts and hooks, ``gad``'s draft, ``ctc_pmc``'s scores, the DAG samplers' ``last_graph``). Two
    threads running one instance at once would mix their decodes, so the second one gets a
    ConfigError instead. The same thread may use it again inside the call (a pipeline calling another)."""

    @functools.wraps(call)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        samplers = [a for a in (*args, *kwargs.values()) if isinstance(a, Sampler)]
        if not samplers:
            return call(self, *args, **kwargs)
        me = threading.get_ident()
        with _SAMPLERS_LOCK:
            for smp in samplers:
                if _SAMPLERS_IN_USE.get(id(smp), me) != me:
                    raise ConfigError(
                        f"this {type(smp).__name__} instance (sampler {smp.name!r}) is running in another thread's call; "
                        "a Sampler instance runs one call at a time. Pass the sampler by name "
                        f"(sampler={smp.name!r} plus its parameters as keywords: each call builds its own) or give each "
                        "thread its own instance."
                    )
            claimed = [id(s) for s in samplers if id(s) not in _SAMPLERS_IN_USE]
            _SAMPLERS_IN_USE.update(dict.fromkeys(claimed, me))
        try:
            return call(self, *args, **kwargs)
        finally:
            with _SAMPLERS_LOCK:
                for key in claimed:
                    _SAMPLERS_IN_USE.pop(key, None)

    return wrapped


__all__ = ["one_call_per_sampler"]
