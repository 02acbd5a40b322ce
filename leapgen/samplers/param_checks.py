"""Checks of a sampler's parameters: the helpers its ``validate`` calls and the declared limits.

:func:`check_int`, :func:`check_choice` and :func:`check_token_ids` refuse a value of the wrong kind
or range with a ``ConfigError`` naming the parameter; :func:`check_limits` is the one check behind
every sampler's :attr:`~leapgen.samplers.base.Sampler.limits`. Re-exported from :mod:`.base`.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError


def check_int(name: str, value: Any, low: int = 1, hint: str = "") -> None:
    """Raise ConfigError unless ``value`` is an integer >= ``low`` (bools refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}{hint}, got {value!r}.")


def check_limits(sampler: str, params: dict[str, Any], limits: dict[str, tuple[float, str]]) -> None:
    """Refuse a numeric parameter past its declared limit (``limits``: name -> (largest magnitude,
    why)): the one check behind every sampler's :attr:`Sampler.limits`. Values of another kind are
    left to the sampler's own validation."""
    for name, (high, why) in limits.items():
        value = params.get(name)
        if _is_number(value) and abs(value) > high:
            span = f"<= {high:g}" if isinstance(value, int) else f"in [-{high:g}, {high:g}]"
            raise ConfigError(f"sampler {sampler!r}: {name} must be {span} ({why}), got {value!r}.")


def check_token_ids(name: str, ids: Any, allow_none: bool = True) -> tuple[int, ...]:
    """``ids`` (a list, tuple or set of integers >= 0; None for none when ``allow_none``) as a tuple of
    ints; anything else (a bare id such as 0, which would otherwise read as "none", a float, a bool,
    a negative id) is refused with a ConfigError naming ``name``."""
    if ids is None and allow_none:
        return ()
    if not isinstance(ids, (list, tuple, set, frozenset)) or not all(
        isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 0 for t in ids
    ):
        raise ConfigError(f"{name} must be a list or tuple of token ids (integers >= 0), e.g. {name}=(0, 2), got {ids!r}.")
    return tuple(int(t) for t in ids)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise ConfigError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {tuple(choices)}, got {value!r}.")


def _is_number(default: Any) -> bool:
    """Whether a parameter with this default takes a number (an int or float default, not a bool)."""
    return isinstance(default, (int, float)) and not isinstance(default, bool)
