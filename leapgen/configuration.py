"""The one way a leapgen-defined component saves and loads its configuration.

This is diffusers' ``ConfigMixin`` contract (``config_name``, ``save_config``, ``load_config``,
``from_config``, a ``_class_name`` entry in the saved JSON) with the configuration held as a typed
dataclass instead of a ``FrozenDict``: the models read derived fields of their configs
(``GPTConfig.cls_token_num``, ``VQConfig.downsample``), validate them in ``__post_init__``, and are
built as ``VQModel(VQConfig(...))``, which diffusers' ``register_to_config`` (it turns ``.config``
into a read-only dict of the ``__init__`` arguments) would break. transformers models keep their
own ``PretrainedConfig``.

* :class:`ComponentConfig` — base of the config dataclasses: ``from_dict`` (unknown keys raise
  :class:`~leapgen.errors.ConfigError` naming the known ones; JSON lists become tuples) and
  ``to_dict``.
* :class:`ConfigMixin` — ``save_config(folder)`` writes ``folder/<config_name>`` as
  ``{"_class_name": ..., "_leapgen_version": ..., **config}``; ``load_config(folder)`` reads it
  back and refuses a file written by another class; ``from_config(config)`` builds the component;
  ``save_pretrained`` / ``from_pretrained`` default to these (components without weights: the word
  vocabulary, the SAFE tokenizer).
* :class:`PretrainedMixin` — ``nn.Module`` components: the config plus ``model.safetensors``.

Every subclass registers itself by class name (:func:`component_class`), so a pipeline's
``model_index.json`` entry can be checked against what leapgen defines.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, ClassVar

import torch

from .errors import AssetNotFoundError, ConfigError, a_type

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_COMPONENTS: dict[str, type] = {}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("leapgen")
    except Exception:  # noqa: BLE001 - a source tree that was not installed
        return "unknown"


class ComponentConfig:
    """Base of the configuration dataclasses (``@dataclass class VQConfig(ComponentConfig)``)."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Any:
        """Build the config from a JSON dict; keys starting with ``_`` (metadata) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        raw = {k: v for k, v in raw.items() if not k.startswith("_")}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} field(s) {unknown}; known: {sorted(names)}")
        raw = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


class ConfigMixin:
    """Save / load a component's configuration one way (see the module docstring).

    Subclasses set ``config_class`` (a :class:`ComponentConfig` dataclass, held as ``self.config``)
    or override :meth:`config_dict` / :meth:`from_config` when their configuration is their data
    (a vocabulary). ``config_name`` is the JSON file's name inside the component folder.
    """

    config_name: ClassVar[str] = CONFIG_NAME
    config_class: ClassVar[type | None] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__name__ not in ("PretrainedMixin",):
            _COMPONENTS[cls.__name__] = cls

    # ------------------------------------------------------------------ config
    def config_dict(self) -> dict[str, Any]:
        """The JSON-able configuration this component is rebuilt from."""
        return self.config.to_dict()  # type: ignore[attr-defined]

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> Any:
        """Build the component from a config dataclass or dict (``overrides`` replace fields)."""
        if cls.config_class is None:
            raise NotImplementedError(f"{cls.__name__} must define config_class or override from_config")
        if isinstance(config, cls.config_class):
            config = config.to_dict()
        return cls(cls.config_class.from_dict({**dict(config), **overrides}))  # type: ignore[attr-defined,call-arg]

    def save_config(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        data = {"_class_name": type(self).__name__, "_leapgen_version": _version(), **self.config_dict()}
        path = folder / self.config_name
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def config_path(cls, folder: str | Path) -> Path:
        path = Path(folder)
        return path / cls.config_name if path.is_dir() or not path.suffix else path

    @classmethod
    def load_config(cls, folder: str | Path) -> dict[str, Any]:
        """The saved configuration (metadata keys removed). ``folder`` may also be the file itself.

        A ``_class_name`` naming another component raises ConfigError; files written before the
        entry existed (no ``_class_name``) are read as they are."""
        path = cls.config_path(folder)
        if not path.is_file():
            raise AssetNotFoundError(
                f"no {cls.config_name} at {path}; point to a folder written by {cls.__name__}.save_pretrained."
            )
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path} is not valid JSON ({err}); rewrite it with {cls.__name__}.save_pretrained.") from err
        if not isinstance(data, dict):
            raise ConfigError(f"{path} holds {a_type(data)}, expected a JSON object.")
        name = data.get("_class_name")
        if name is not None and name != cls.__name__:
            other = _COMPONENTS.get(name)
            if other is None or not issubclass(other, cls):
                raise ConfigError(
                    f"{path} was written by a {name}, not a {cls.__name__}; load it with {name}.from_pretrained "
                    "(or point to the right component folder)."
                )
        return {k: v for k, v in data.items() if not k.startswith("_")}

    # ------------------------------------------------------------------ pipeline component protocol
    def save_pretrained(self, folder: str | Path, **_: Any) -> Path:
        """Components without weights: the config file is everything."""
        return self.save_config(folder)

    @classmethod
    def from_pretrained(cls, folder: str | Path, **overrides: Any) -> Any:
        overrides = {k: v for k, v in overrides.items() if k not in ("dtype", "torch_dtype")}
        return cls.from_config(cls.load_config(folder), **overrides)


class PretrainedMixin(ConfigMixin):
    """``save_pretrained`` / ``from_pretrained`` for an ``nn.Module`` built from a config dataclass:
    ``config.json`` (:class:`ConfigMixin`) + ``model.safetensors``."""

    config: Any

    def save_pretrained(  # type: ignore[override]
        self, folder: str | Path, safe_serialization: bool = True, dtype: torch.dtype | None = None
    ) -> Path:
        """Write the config and the weights (``dtype``: e.g. ``torch.float16`` to ship smaller files)."""
        from safetensors.torch import save_file

        if not safe_serialization:
            raise ConfigError("leapgen components save safetensors only; drop safe_serialization=False.")
        folder = Path(folder)
        self.save_config(folder)
        state = {}
        for k, v in self.state_dict().items():  # type: ignore[attr-defined]
            v = v.detach().cpu()
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
            state[k] = v.contiguous()
        save_file(state, str(folder / WEIGHTS_NAME))
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype: torch.dtype | None = torch.float32, **overrides: Any) -> Any:
        """Load config + weights (weights are read in float32, then cast to ``dtype``)."""
        from safetensors.torch import load_file

        folder = Path(folder)
        dtype = overrides.pop("torch_dtype", dtype)
        if not (folder / WEIGHTS_NAME).is_file():
            raise AssetNotFoundError(
                f"{folder} has no {CONFIG_NAME} + {WEIGHTS_NAME}; point to a folder written by {cls.__name__}.save_pretrained."
            )
        model = cls.from_config(cls.load_config(folder), **overrides)
        state = load_file(str(folder / WEIGHTS_NAME))
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
        model.eval()
        if dtype is not None:
            model.to(dtype=dtype)
        return model


def component_class(name: str) -> type | None:
    """The leapgen component class registered under ``name`` (None when there is none)."""
    return _COMPONENTS.get(name)


def registered_components() -> list[str]:
    return sorted(_COMPONENTS)


# ------------------------------------------------------------------------------------------ JSON
def json_safe(obj: Any) -> Any:
    """``obj`` as plain JSON values: NaN / inf as None, tuples and sets as lists, numpy arrays and
    scalars and torch tensors as lists / numbers, paths as text, anything else as its ``str``. The one
    converter behind every JSON the project writes (bench records, the CLI's ``--json``, batch jobs'
    rows); here, in the lowest layer, so that every layer can use it (``leapgen.bench.common``
    re-exports it)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return json_safe(obj.tolist())
    return str(obj)


__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "json_safe",
    "ComponentConfig",
    "ConfigMixin",
    "PretrainedMixin",
    "component_class",
    "registered_components",
]
