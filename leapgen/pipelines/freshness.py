"""A pipeline's model adapters follow its components, however they change.

What a pipeline derives from its model components in ``_on_change`` (the lean runtime's copy of a
Llama's weights, masked-model wrappers, contract views) was rebuilt only by ``pipe.to()``. A change
made another way left it stale, and the text pipeline then decoded, without a word, with the weights
it had copied at load time: ``pipe.model.load_state_dict(finetuned)``, a training step,
``pipe.model.half()``, a component shared with another pipeline whose ``to()`` cast it, or a
component replaced (``pipe.draft = other``).

Every pipeline's ``_on_change`` now records a key of its components (:func:`records_components`):
which objects they are and, per parameter and buffer, its storage, dtype, device and in-place version
counter (buffers since hostile sweep 5: an adapter copied a VQ codebook held as a buffer, as EMA
codebooks are, and an in-place update of it left the adapters stale; walking them costs about 3 %
of the key: 0.384 -> 0.396 ms on text-code, 0.518 -> 0.529 ms on image-emoji, interleaved medians of
100, one thread, loaded 2-core CPU, 2026-11-29);
every call compares it first (:func:`follows_components`) and rebuilds the adapters when it differs.
The key costs one pass over the parameter list per call (no tensor data is read). Measured
(``timeit``, median of 200, one thread, on a loaded 2-core CPU machine, 2026-11-29): 0.24 ms per
call on ``leapgen/text-code`` (96 parameters) and 0.61 ms on ``leapgen/image-emoji`` (276
parameters), layout check included; walking the modules' dicts instead of ``module.parameters()``
(:func:`_tensors`, which walks the buffers too): 0.27 -> 0.19 ms and 0.65 -> 0.42 ms (same
session, interleaved), about 1.6 % of a 1-token text-code call (12 ms). The check takes no lock; a rebuild does (one module-level
lock, checked again inside), so threads that find the same change rebuild the adapters once.

A component may decode in a memory format of its own: the VQ image decoder switched to
channels-last on its first decode, which changed its parameters' storage, so every image pipeline
rebuilt its adapters once, on its second call. Such a component has a ``decoding_layout()``
method, and :func:`settle_layouts` calls it before every key is taken, so the key is recorded in
the layout decoding uses (the VQ training forward never calls it). :func:`rebuild_count` says how
many times a call rebuilt a pipeline's adapters.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: one rebuild at a time: threads that find the same change wait for the first one's rebuild instead
#: of each rebuilding (module-level: a lock attribute would make a pipeline refuse deepcopy and pickle)
_REBUILD_LOCK = threading.RLock()


def _version(p: torch.Tensor) -> int:
    try:
        return p._version
    except RuntimeError:  # an inference tensor keeps no version counter (and cannot be changed in place)
        return -1


def _tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Every parameter and buffer of ``module`` and its submodules, by a plain walk of their
    ``_parameters`` / ``_buffers`` / ``_modules`` dicts, cheaper than ``module.parameters()``'s
    generator chain (see the module docstring). Buffers count: an adapter may copy one (an EMA VQ
    codebook is a buffer, the lean runtime copies the rotary ``original_inv_freq``). A tensor shared
    by two modules appears twice: the key only has to be the same walk each time."""
    seen: set[int] = set()
    stack = [module]
    while stack:
        mod = stack.pop()
        if id(mod) in seen:  # a submodule shared, or a cycle: walked once
            continue
        seen.add(id(mod))
        for p in mod._parameters.values():
            if p is not None:
                yield p
        if mod._buffers:  # most modules hold none: skip the empty dict's loop
            for b in mod._buffers.values():
                if b is not None:
                    yield b
        stack.extend(m for m in mod._modules.values() if m is not None)


def settle_layouts(pipe: Any) -> None:
    """Put every component that decodes in a memory format of its own there first (a VQ decoder's
    ``decoding_layout``: channels-last), so that its first decode does not change the key."""
    for name in pipe.components:
        settle = getattr(getattr(pipe, name, None), "decoding_layout", None)
        if callable(settle):
            settle()


def rebuild_count(pipe: Any) -> int:
    """How many times a call found the components changed and rebuilt ``pipe``'s adapters."""
    return int(pipe.__dict__.get("_components_rebuilds", 0))


def components_key(pipe: Any) -> tuple[Any, ...]:
    """What the adapters were built from: each component's identity and, for a torch module, every
    parameter's and buffer's storage, dtype, device and version counter (bumped by any in-place change)."""
    key: list[Any] = []
    for name in pipe.components:
        obj = getattr(pipe, name, None)
        key.append(id(obj))
        if isinstance(obj, torch.nn.Module):
            key.extend((p.data_ptr(), p.dtype, p.device, _version(p)) for p in _tensors(obj))
    return tuple(key)


def records_components(on_change: Callable[[Any], None]) -> Callable[[Any], None]:
    """``_on_change`` that records :func:`components_key` once the adapters are rebuilt."""

    @functools.wraps(on_change)
    def wrapped(self: Any) -> None:
        on_change(self)
        settle_layouts(self)
        self._components_key = components_key(self)

    return wrapped


def follows_components(call: Callable[..., Any]) -> Callable[..., Any]:
    """``__call__`` that first rebuilds the adapters (``_on_change``) when a component changed since
    they were built; the first call of a pipeline whose adapters are built lazily records the key."""

    @functools.wraps(call)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        settle_layouts(self)
        if self.__dict__.get("_components_key") != components_key(self):
            with _REBUILD_LOCK:  # checked again inside: another thread may have rebuilt them meanwhile
                seen, now = self.__dict__.get("_components_key"), components_key(self)
                if seen is None:
                    self._components_key = now
                elif seen != now:
                    logger.info("%s: a model component changed since its adapters were built; rebuilding them",
                                type(self).__name__)
                    self._on_change()
                    self._components_key = now
                    self._components_rebuilds = rebuild_count(self) + 1
        return call(self, *args, **kwargs)

    return wrapped


__all__ = ["components_key", "follows_components", "rebuild_count", "records_components", "settle_layouts"]
