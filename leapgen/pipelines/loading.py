"""What ``from_pretrained`` and ``pipe.to`` take, checked before any weights load or move:
diffusers' device / dtype arguments (:func:`parse_to_args`), a device this machine really has
(:func:`check_available`) and a component passed in place of the folder's (:func:`checked_override`)."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..errors import ConfigError, InputError
from .folders import component_class


def parse_to_args(args: tuple[Any, ...], device: Any, dtype: Any) -> tuple[torch.device | None, torch.dtype | None]:
    """diffusers' ``to`` arguments: a device and/or a dtype, positional in any order or keywords."""
    for a in args:
        if isinstance(a, torch.dtype):
            if dtype is not None:
                raise InputError(f"pipe.to() got two dtypes ({dtype} and {a}); pass one.")
            dtype = a
        elif isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
            if device is not None:
                raise InputError(f"pipe.to() got two devices ({device} and {a}); pass one.")
            device = a
        else:
            raise InputError(
                f"pipe.to() takes a device (e.g. 'cuda') and/or a dtype (e.g. torch.float16), got {a!r}."
            )
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise InputError(f"dtype must be a torch.dtype such as torch.float16, got {dtype!r}.")
    if dtype is not None and not dtype.is_floating_point:
        raise ConfigError(
            f"the models cannot run in {dtype}: weights must be floating point; use torch.float32, torch.float16, "
            "torch.bfloat16 or torch.float64."
        )
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise InputError(f"pipe.to(): {device!r} is not a device ({err}); use e.g. 'cpu' or 'cuda:0'.") from err
    return device, dtype


def check_available(device: torch.device) -> None:
    """Refuse a device the models cannot run on here (before any weights move)."""
    if device.type == "meta":
        raise ConfigError("the 'meta' device holds no weights, so a pipeline cannot run on it; use 'cpu' or 'cuda'.")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {str(device)!r}: CUDA is not available on this machine; use 'cpu'.")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {str(device)!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                              f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}.")
    elif device.type != "cpu":
        checks = [getattr(getattr(root, device.type, None), "is_available", None) for root in (torch.backends, torch)]
        if not any(check is not None and check() for check in checks):  # e.g. torch.backends.mps, torch.xpu
            raise ConfigError(f"device {str(device)!r} is not available on this machine; use 'cpu' or 'cuda'.")


def checked_override(comp: str, value: Any, entry: Any, cls: type) -> Any:
    """A component passed to ``from_pretrained`` in place of the folder's: None (leave it out, where
    the pipeline allows it) or an object of its kind; a plain value (a name, a number) is refused."""
    if value is None:
        return None
    expected = component_class(comp, entry) if entry not in (None, [None, None]) else None
    module_like = expected is not None and (issubclass(expected, torch.nn.Module) or expected.__name__.startswith("AutoModel"))
    if isinstance(value, (str, bytes, int, float, bool, list, tuple, dict, os.PathLike)) or (
            module_like and not isinstance(value, torch.nn.Module)):
        kind = f"a loaded model (a torch.nn.Module such as {expected.__name__})" if module_like else (
            f"a loaded object such as {expected.__name__}" if expected is not None else "a loaded object")
        raise ConfigError(f"{cls.__name__}.from_pretrained({comp}=...) takes {kind} or None, got {type(value).__name__} "
                          f"{value!r:.60}; load it first (e.g. {comp}=SomeClass.from_pretrained(path)).")
    return value


__all__ = ["check_available", "checked_override", "parse_to_args"]
