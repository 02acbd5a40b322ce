"""The values of a recipe's (or corpus builder's) command-line options, checked against its signature.

``leapgen train NAME --target-tokens abc`` used to reach the recipe as the string ``"abc"`` and fail
deep inside it with a TypeError; ``--minutes nan`` trained for ever (a NaN budget never runs out);
``--target-tokens -5`` or ``--masked-minutes -1`` started a run that could not be meant. Each value
is now checked before anything loads, from the parameter's annotation (``int``, ``float``, ``bool``,
optionally ``| None``; strings, paths and tuples pass as given):

* an integer option takes an integer (``3``, or ``3.0``), a float option any finite number, a
  boolean option ``true`` / ``false``; ``none`` only where the default is None;
* every number is finite and not negative;
* a budget or a size (tokens, steps, minutes, batch sizes, layers, learning rates, ...) is above 0:
  every numeric option except those whose name says that 0 means "off" or "none" (fractions, weights,
  dropouts, ratios, warm-up, temperatures, thresholds, ...: :data:`ZERO_ALLOWED`).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from ..errors import ConfigError

#: parts of option names for which 0 is a meaningful value
ZERO_ALLOWED = ("frac", "dropout", "weight", "ratio", "distill", "gapped", "start", "end", "final", "agreement",
                "threshold", "masks", "warmup", "temperature", "cfg_scale", "decay", "seed", "eval", "heldout")


def _kinds(annotation: Any) -> set[str]:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return {part.strip() for part in text.split("|")}


def check_option_values(name: str, fn: Any, options: dict[str, Any], kind: str = "recipe") -> dict[str, Any]:
    """Refuse a value of ``options`` that ``fn``'s parameter cannot take (see the module docstring)
    with a ConfigError naming the option; returns the options with integral floats of integer
    options made ints."""
    params = inspect.signature(fn).parameters
    out = dict(options)
    for key, value in options.items():
        p = params.get(key)
        if p is None or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        kinds = _kinds(p.annotation)
        flag = "--" + key.replace("_", "-")
        if value is None:
            if "None" not in kinds and p.default is not None:
                raise ConfigError(f"{kind} {name!r}: {flag} cannot be none; give a value (default {p.default!r}).")
            continue
        numeric = kinds & {"int", "float"}
        if not numeric or kinds & {"str", "Any", "Path", "os.PathLike"} or any(k.startswith("tuple") for k in kinds):
            if "bool" in kinds and not isinstance(value, bool):
                raise ConfigError(f"{kind} {name!r}: {flag} takes true or false, got {value!r}.")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            want = "an integer" if numeric == {"int"} else "a number"
            raise ConfigError(f"{kind} {name!r}: {flag} takes {want}, got {value!r}.")
        if not math.isfinite(value):
            raise ConfigError(f"{kind} {name!r}: {flag} must be a finite number, got {value!r}.")
        if numeric == {"int"}:
            if float(value) != int(value):
                raise ConfigError(f"{kind} {name!r}: {flag} takes an integer, got {value!r}.")
            value = out[key] = int(value)
        zero_ok = any(part in key for part in ZERO_ALLOWED)
        if value < 0 or (value == 0 and not zero_ok):
            bound = "0 or more" if zero_ok else "above 0"
            raise ConfigError(f"{kind} {name!r}: {flag} must be {bound}, got {value!r}"
                              + (f" (default {p.default!r})." if p.default is not inspect.Parameter.empty else "."))
    return out


__all__ = ["ZERO_ALLOWED", "check_option_values"]
