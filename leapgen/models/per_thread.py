"""Per-thread attributes of shared model adapters (forward counters, last-forward outputs).

One loaded pipeline may serve several threads at once (a web server's worker pool). Its model
adapters are shared by those calls, and some of their attributes are not the model's but the
call's: the forward counters the samplers read twice to report a decode's ``target_forwards``
(``forwards``, ``head_calls`` ...), and the outputs of the latest forward that the same call reads
back right after it (``last_hidden``, ``last_logits`` ...). :class:`PerThread` keeps one value of
such an attribute per thread, so a call (which runs on one thread from start to end) sees only its
own forwards and its own outputs, and ``after - before`` is this call's count whatever other
threads do meanwhile. Code reads and writes the attribute as before (``self.forwards += 1``).

A consequence: ``model.forwards`` read in one thread does not include the forwards other threads
ran (each thread has its own count, starting at the class's default).
"""

from __future__ import annotations

import threading
from typing import Any

#: values of threads that are gone are dropped when an attribute holds more entries than this
_PRUNE_ABOVE = 64


class PerThread:
    """A data descriptor: an instance attribute with one value per thread (see the module docstring).

    ``default`` is what a thread reads before it sets the attribute (0 for a counter, None for the
    output of the latest forward). The values live in the instance's ``__dict__`` (a plain dict
    keyed by thread id), so the object still copies and pickles."""

    def __init__(self, default: Any = None) -> None:
        self.default = default
        self.name = "?"
        self.slot = "_per_thread"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = f"_{name}_per_thread"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        values = obj.__dict__.get(self.slot)
        return self.default if values is None else values.get(threading.get_ident(), self.default)

    def __set__(self, obj: Any, value: Any) -> None:
        values = obj.__dict__.get(self.slot)
        if values is None:
            values = obj.__dict__.setdefault(self.slot, {})
        values[threading.get_ident()] = value
        if len(values) > _PRUNE_ABOVE:  # a pool that keeps starting new threads: forget the finished ones
            alive = {t.ident for t in threading.enumerate()}
            for ident in [i for i in list(values) if i not in alive]:
                values.pop(ident, None)


__all__ = ["PerThread"]
