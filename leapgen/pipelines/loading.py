"""What ``from_pretrained`` and ``pipe.to`` take, checked before any weights load or move:
diffusers' device / dtype arguments (:func:`parse_to_args`; a dtype may also be named, ``"float16"``),
a device this machine really has (:func:`check_available`), a component passed in place of the
folder's (:func:`checked_override`), the keywords ``from_pretrained`` takes (:func:`check_keywords`);
and one component loaded from its folder (:func:`load_component`), where a damaged or incomplete
folder raises an error naming the file instead of a raw one from deep inside (or a silently
re-initialised weight)."""

from __future__ import annotations

import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import AssetNotFoundError, ConfigError, InputError, LeapgenError
from .folders import component_class

logger = logging.getLogger(__name__)

#: dtype names taken where a torch.dtype is expected (transformers' ``torch_dtype="float16"``)
DTYPE_NAMES = {"float32": torch.float32, "float": torch.float32, "fp32": torch.float32, "float16": torch.float16,
               "half": torch.float16, "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
               "float64": torch.float64, "double": torch.float64, "fp64": torch.float64}


def as_dtype(dtype: Any) -> torch.dtype | None:
    """A torch.dtype, or its name (``"float16"``, ``"torch.bfloat16"``, ``"fp16"``); None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key in DTYPE_NAMES:
            return DTYPE_NAMES[key]
        if key == "auto":
            raise ConfigError("dtype='auto' is not supported: leapgen loads the weights in float32 unless told; pass "
                              "dtype=torch.float16, torch.bfloat16, torch.float32 or torch.float64.")
    raise InputError(f"dtype must be a torch.dtype such as torch.float16 (or its name, e.g. 'float16'), got {dtype!r}.")


def parse_to_args(args: tuple[Any, ...], device: Any, dtype: Any) -> tuple[torch.device | None, torch.dtype | None]:
    """diffusers' ``to`` arguments: a device and/or a dtype, positional in any order or keywords."""
    for a in args:
        if isinstance(a, str) and a.strip().lower().removeprefix("torch.") in DTYPE_NAMES:
            a = as_dtype(a)  # pipe.to("float16"): a dtype's name, not a device
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
    dtype = as_dtype(dtype)
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


def load_args(device: Any, dtype: Any, overrides: dict[str, Any]) -> tuple[torch.device | None, torch.dtype]:
    """``from_pretrained``'s device and dtype (``torch_dtype`` popped from ``overrides``: transformers'
    older name; both at once only if they agree), checked; the dtype defaults to float32."""
    if "torch_dtype" in overrides:
        torch_dtype = as_dtype(overrides.pop("torch_dtype"))
        if dtype is not None and torch_dtype is not None and as_dtype(dtype) != torch_dtype:
            raise InputError(f"from_pretrained got dtype={dtype} and torch_dtype={torch_dtype}; pass one (dtype=).")
        dtype = torch_dtype if dtype is None else dtype
    device, dtype = parse_to_args((), device, dtype)
    if device is not None:
        check_available(device)
    note_precision(device, dtype)
    return device, dtype or torch.float32


def note_precision(device: torch.device | None, dtype: torch.dtype | None) -> None:
    """Warn that float16 / bfloat16 weights on the CPU run, and give sane outputs, but far slower than
    float32 (torch has no fast half-precision matrix product on most CPUs: on a 2-core AVX2 server on
    2026-11-29, 54-82x per product, 35x for a text decode with a 794-token prompt), so a habit from GPUs
    (``torch_dtype=torch.float16``) does not cost that unnoticed."""
    if dtype in (torch.float16, torch.bfloat16) and (device is None or device.type == "cpu"):
        logger.warning("%s weights on the CPU: they run, but torch's half-precision matrix products on most CPUs are "
                       "many times slower than float32 (35x for a text decode on an AVX2 CPU); use float32 on the CPU "
                       "unless memory is the limit.", dtype)


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


def check_keywords(cls: type, overrides: dict[str, Any]) -> None:
    """Refuse, before any weights load, a ``from_pretrained`` keyword that is neither a component nor a
    setting of pipeline class ``cls`` (a TypeError, as Python's for an unknown keyword)."""
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "components"}
    unknown = sorted(set(overrides) - set(cls.components) - params)
    if unknown:
        settings = sorted(params - set(cls.components))
        raise TypeError(
            f"{cls.__name__}.from_pretrained() got unknown keyword(s) {unknown}; it takes dtype (or torch_dtype), "
            f"device, the components ({', '.join(cls.components)}) and the settings ({', '.join(settings) or 'none'}). "
            "Hub options (revision=, cache_dir= ...) are not taken: download with huggingface_hub.snapshot_download "
            "and pass the folder."
        )


def pipeline_parts(cls: type, folder: Path, index: dict[str, Any], overrides: dict[str, Any], dtype: torch.dtype,
                   device: torch.device | None) -> dict[str, Any]:
    """The ``__init__`` arguments of pipeline class ``cls`` from its folder: each component loaded
    (:func:`load_component`) unless ``overrides`` replaces it, and the settings of ``model_index.json``
    unless ``overrides`` replaces them. An unknown keyword is refused before any weights load."""
    check_keywords(cls, overrides)
    parts: dict[str, Any] = {}
    for comp in cls.components:
        if comp in overrides:
            parts[comp] = checked_override(comp, overrides.pop(comp), index.get(comp), cls)
            continue
        entry = index.get(comp)
        if entry is None or entry == [None, None]:
            parts[comp] = None
            continue
        klass = component_class(comp, entry)
        if not (folder / comp).is_dir():
            raise AssetNotFoundError(
                f"{folder / 'model_index.json'} lists the component {comp!r} but {folder / comp} does not exist; "
                f"restore the folder or set {comp!r} to [null, null]."
            )
        parts[comp] = load_component(folder, comp, klass, dtype, device)
    params = inspect.signature(cls.__init__).parameters
    for key, value in index.items():
        if key.startswith("_") or key in cls.components:
            continue
        if key in params:
            parts.setdefault(key, overrides.pop(key, value))
        else:
            logger.warning("%s: model_index.json key %r is not a %s setting; ignored", folder, key, cls.__name__)
    parts.update({key: overrides.pop(key) for key in list(overrides) if key in params and key not in ("self", "components")})
    return parts


def load_component(folder: Path, comp: str, klass: type, dtype: torch.dtype, device: torch.device | None) -> Any:
    """Component ``comp`` of the pipeline folder ``folder``, loaded by ``klass.from_pretrained`` (a model in
    ``dtype`` on ``device``). Its files are checked first, so that a damaged or incomplete folder raises a
    leapgen error naming the file and the way out: an empty folder, a transformers model without its
    ``config.json`` (transformers would build a default-sized model, several GB, instead), JSON that does not
    parse, a truncated safetensors file; then any load error, and weights missing from the file or of
    another shape (transformers would re-initialise them at random and only print a report)."""
    path = folder / comp
    model = issubclass(klass, torch.nn.Module) or klass.__name__.startswith("AutoModel")
    hf_model = model and klass.__module__.split(".")[0] == "transformers"
    _check_files(path, comp, klass, hf_model)
    try:
        if hf_model:
            obj, info = klass.from_pretrained(path, dtype=dtype, output_loading_info=True)
        else:
            obj, info = (klass.from_pretrained(path, dtype=dtype) if model else klass.from_pretrained(path)), {}
    except LeapgenError:
        raise
    except Exception as err:  # noqa: BLE001 - any library's load error becomes one that names the folder
        first = " ".join(str(err).split())[:300]
        raise ConfigError(f"{klass.__name__}.from_pretrained could not load component {comp!r} from {path} "
                          f"({type(err).__name__}: {first}); {_FIX}") from err
    bad = {k: sorted(map(str, v))[:5] for k in ("missing_keys", "mismatched_keys") if (v := info.get(k))}
    if bad:
        raise ConfigError(f"the weights in {path} do not fit {klass.__name__} ({bad}): those tensors would be "
                          f"random; {_FIX}")
    if info.get("unexpected_keys"):
        logger.warning("%s: weights %s are not used by %s", path, sorted(info["unexpected_keys"])[:5], klass.__name__)
    return obj.to(device) if model and device is not None else obj


_FIX = ("the folder is damaged, incomplete or of another model: restore it (a shipped pipeline: reinstall leapgen; "
        "a saved one: save it again with save_pretrained).")


def _check_files(path: Path, comp: str, klass: type, needs_config: bool) -> None:
    files = sorted(p.name for p in path.iterdir())
    if not files:
        raise AssetNotFoundError(f"{path} (component {comp!r}) is empty; {_FIX}")
    if needs_config and "config.json" not in files:
        raise AssetNotFoundError(f"{path / 'config.json'} is missing: {klass.__name__} cannot be built without it "
                                 f"(component {comp!r}); {_FIX}")
    for name in files:
        file = path / name
        try:
            if name.endswith(".json"):
                json.loads(file.read_text())
            elif name.endswith(".safetensors"):
                from safetensors import safe_open

                with safe_open(str(file), "pt"):
                    pass
        except Exception as err:  # noqa: BLE001 - JSON, UnicodeDecodeError, SafetensorError
            raise ConfigError(f"{file} cannot be read ({type(err).__name__}: {err}); {_FIX}") from err


__all__ = ["DTYPE_NAMES", "as_dtype", "check_available", "check_keywords", "checked_override", "load_args",
           "load_component", "note_precision", "parse_to_args", "pipeline_parts"]
