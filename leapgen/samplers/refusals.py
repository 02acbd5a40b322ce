"""The settings of a :class:`~leapgen.samplers.base.DecodeConfig` a sampler cannot honour are refused,
not ignored: one table of rules (:data:`REFUSALS`) and one function that applies it (:func:`refuse`).

``Sampler.check_config`` calls :func:`refuse` before every ``generate`` (wired by
:func:`~leapgen.samplers.config_checks.checked_generate`, which reports a model of another contract
first). Each :class:`Refusal` row names

* ``fields``: the DecodeConfig field(s) it is about,
* ``is_set(config)``: whether the config turns the setting on,
* ``honours(cls)``: whether a sampler class honours it, read from what the class declares,
* ``message(sampler, config, able)``: the ConfigError's text, ``able`` being the registered samplers
  that honour it (joined by ", "; only looked up when a refusal fires).

The rows, in the order they are checked (the first that is set and not honoured raises):

1. ``min_new_tokens`` (with an end-of-sequence id): ``Sampler.honours_min_new_tokens()``, true for
   the lossless loop samplers, which ban EOS before the bound;
2. ``repetition_penalty`` other than 1: ``Sampler.honours_repetition_penalty``;
3. ``presence_penalty`` / ``frequency_penalty`` other than 0: ``Sampler.honours_penalties``
   (the coded context of :mod:`.penalties`);
4. ``temperature``, ``top_k``, ``top_p``, ``min_p`` other than their off value (:data:`OFF`), one row
   each: refused by a sampler that lists the setting in ``Sampler.ignores`` (setting -> why it never
   reads it, and what to use instead). The off values pass, so pipelines that pass them by default
   keep working.

A new sampler declares those class attributes; a new refusal is a new row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .penalties import PENALTIES, penalties_on

#: the settings a sampler may declare it ignores (``Sampler.ignores``), with the value that turns each off
OFF: dict[str, float] = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}

#: the usual reason a sampler ignores the filters, for the samplers that share it
NO_FILTERS = "its decode never filters a categorical distribution (no top-k / top-p / min-p step)"


@dataclass(frozen=True)
class Refusal:
    """One row of :data:`REFUSALS` (see the module docstring)."""

    fields: tuple[str, ...]
    is_set: Callable[[Any], bool]
    honours: Callable[[type], bool]
    message: Callable[[Any, Any, str], str]


def _min_new_tokens(sampler: Any, config: Any, able: str) -> str:
    return (
        f"sampler {sampler.name!r} ({sampler.guarantee}) cannot hold end-of-sequence back until min_new_tokens="
        f"{config.min_new_tokens}; the samplers that do (exactly, with their guarantee kept): {able}. "
        "Pick one of them, or leave min_new_tokens at 0."
    )


def _repetition_penalty(sampler: Any, config: Any, able: str) -> str:
    return (
        f"sampler {sampler.name!r} ({sampler.guarantee}) cannot apply repetition_penalty="
        f"{config.repetition_penalty}: its decode does not pass the tokens already in each row (prompt and "
        f"generated) to the distributions it draws from. The samplers that do: "
        f"{able}. Pick one of them, or leave repetition_penalty at 1."
    )


def _penalties(sampler: Any, config: Any, able: str) -> str:
    on = ", ".join(f"{n}={getattr(config, n)}" for n in PENALTIES if getattr(config, n) != 0.0)
    return (
        f"sampler {sampler.name!r} ({sampler.guarantee}) cannot apply {on}: its decode does not track the generated "
        f"tokens every distribution depends on. The samplers that do: {able}. Pick one "
        "of them, or leave presence_penalty and frequency_penalty at 0."
    )


def _ignored(name: str) -> Refusal:
    """The row of a setting a sampler may declare in ``Sampler.ignores``."""

    def message(sampler: Any, config: Any, able: str) -> str:
        return (
            f"sampler {sampler.name!r} ({sampler.guarantee}) ignores {name}={getattr(config, name)}: "
            f"{type(sampler).ignores[name]}. The samplers that accept {name}: {able}. Pick one of them, or leave "
            f"{name} at {OFF[name]:g}."
        )

    return Refusal((name,), lambda c: getattr(c, name) != OFF[name], lambda cls: name not in cls.ignores, message)


#: every refusal, in the order ``Sampler.check_config`` checks them
REFUSALS: tuple[Refusal, ...] = (
    Refusal(("min_new_tokens",), lambda c: bool(c.min_new_tokens and c.eos_ids),
            lambda cls: cls.honours_min_new_tokens(), _min_new_tokens),
    Refusal(("repetition_penalty",), lambda c: c.repetition_penalty != 1.0,
            lambda cls: cls.honours_repetition_penalty, _repetition_penalty),
    Refusal(PENALTIES, penalties_on, lambda cls: cls.honours_penalties, _penalties),
    *(_ignored(name) for name in OFF),
)


def refuse(sampler: Any, config: Any, registry: Callable[[], list[Any]]) -> None:
    """ConfigError for the first row of :data:`REFUSALS` that ``config`` sets and ``sampler``'s class
    does not honour; ``registry()`` (the registered samplers' infos, for the ones that do) is only
    asked then."""
    kind = type(sampler)
    for rule in REFUSALS:
        if rule.is_set(config) and not rule.honours(kind):
            able = ", ".join(s.name for s in registry() if rule.honours(s.cls))
            raise ConfigError(rule.message(sampler, config, able))


__all__ = ["NO_FILTERS", "OFF", "REFUSALS", "Refusal", "refuse"]
