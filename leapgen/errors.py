"""Exceptions with messages that say what is wrong and how to fix it."""

from __future__ import annotations


class LeapgenError(Exception):
    """Base class of every leapgen error."""


class ConfigError(LeapgenError, ValueError):
    """A parameter is out of range, unknown or inconsistent."""


class UnknownSamplerError(ConfigError):
    """No sampler is registered under the requested name."""


class InputError(LeapgenError, ValueError):
    """A prompt or other user input cannot be generated from."""


class ModelMismatchError(ConfigError):
    """Two models that must work together do not fit (e.g. a draft with another vocabulary)."""


class AssetNotFoundError(LeapgenError, FileNotFoundError):
    """A pipeline name or folder could not be resolved to files."""


class NumericalError(LeapgenError, FloatingPointError):
    """A model produced NaN or infinite logits."""


def a_type(obj: object) -> str:
    """``obj``'s type name with its article, for messages: ``"an int"``, ``"a str"``, ``"an ndarray"``."""
    if obj is None:
        return "None"
    name = type(obj).__name__
    return ("an " if name[:1].lower() in "aeiou" or name.startswith("nd") else "a ") + name
