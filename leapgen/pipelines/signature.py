"""What a pipeline's ``__call__`` takes, read from its class (no weights loaded).

A subclass that only changes a default (``ImageNARPipeline.__call__(prompt, sampler="nar",
**kwargs)``) hands the rest on to its parent's ``__call__``; :func:`call_signature` follows such
``**kwargs`` up the MRO, so the CLI, batch jobs and the demo see every parameter the call really
takes (a plain ``inspect.signature`` sees three)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

#: call parameters that only Python callers can pass (not a command line, a JSONL line or the demo)
PYTHON_ONLY = ("generator", "callback_on_step_end", "return_dict", "progress")


@dataclass(frozen=True)
class CallSignature:
    """A pipeline call's named parameters (with their defaults), the ones without a default, and
    whether other keywords go on to the sampler (``**sampler_params``)."""

    names: tuple[str, ...]
    required: tuple[str, ...]
    defaults: dict[str, Any]
    sampler_params: bool

    @property
    def input_name(self) -> str | None:
        """The call's first input (``prompt``, ``text``, ``audio``...), or None when it takes none."""
        return self.required[0] if self.required else None

    def describe(self) -> str:
        """The parameters a command line or a JSONL line can set."""
        names = [n for n in self.names if n not in PYTHON_ONLY]
        more = " and the sampler's parameters" if self.sampler_params else ""
        return ", ".join(names) + more


def call_signature(cls: type) -> CallSignature:
    """The parameters of ``cls.__call__``, following ``**kwargs`` that are only handed on to the
    parent class's ``__call__`` up the MRO."""
    names: list[str] = []
    defaults: dict[str, Any] = {}
    required: list[str] | None = None
    sampler_params = False
    for klass in cls.__mro__:
        fn = vars(klass).get("__call__")
        if fn is None or klass is object:
            continue
        params = list(inspect.signature(fn).parameters.values())[1:]  # without self
        named = [p for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        for p in named:
            if p.name not in names:
                names.append(p.name)
                if p.default is not p.empty:
                    defaults[p.name] = p.default
        if required is None:
            required = [p.name for p in named if p.default is p.empty]
        var = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
        if var is None:
            break
        if var.name != "kwargs":  # e.g. **sampler_params: the rest go to the sampler
            sampler_params = True
            break
    return CallSignature(tuple(names), tuple(required or ()), defaults, sampler_params)


def pipeline_signature(name: str) -> tuple[type, CallSignature]:
    """The class of a shipped pipeline (or a local folder) and its call, from its model_index.json."""
    from .base import pipeline_class, read_model_index, resolve_pretrained

    folder = resolve_pretrained(name)
    cls = pipeline_class(read_model_index(folder)["_class_name"], folder)
    return cls, call_signature(cls)


__all__ = ["PYTHON_ONLY", "CallSignature", "call_signature", "pipeline_signature"]
