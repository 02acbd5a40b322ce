"""Sampling settings a sampler never reads are refused, not ignored.

A sampler lists the :class:`~leapgen.samplers.base.DecodeConfig` settings its decode never reads in
``Sampler.ignores`` (setting -> why, and what to use instead); ``Sampler.check_config`` (and so every
``generate``) refuses a value other than the setting's off value (:data:`OFF`) with a ConfigError
that says why and names the registered samplers that read it (:func:`refuse_ignored`). The off
values pass, so pipelines that pass them by default keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

#: the settings a sampler may declare it ignores, with the value that turns each off
OFF: dict[str, float] = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}

#: the usual reasons, for the samplers that share them
NO_FILTERS = "its decode never filters a categorical distribution (no top-k / top-p / min-p step)"


def refuse_ignored(sampler: Any, config: Any, registry: Callable[[], list[Any]]) -> None:
    """ConfigError for the first setting of ``config`` that ``sampler`` ignores (``type(sampler).ignores``)
    and that is not at its off value; ``registry()`` (the registered samplers' infos) is only asked then."""
    ignores: dict[str, str] = type(sampler).ignores
    on = [name for name in ignores if getattr(config, name) != OFF[name]]
    if not on:
        return
    name = on[0]
    able = ", ".join(s.name for s in registry() if name not in s.cls.ignores)
    raise ConfigError(
        f"sampler {sampler.name!r} ({sampler.guarantee}) ignores {name}={getattr(config, name)}: {ignores[name]}. "
        f"The samplers that accept {name}: {able}. Pick one of them, or leave {name} at {OFF[name]:g}."
    )


__all__ = ["NO_FILTERS", "OFF", "refuse_ignored"]
