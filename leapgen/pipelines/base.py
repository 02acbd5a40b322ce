"""Pipeline base: components that save and load alike, on diffusers' pipeline conventions.

A pipeline folder holds ``model_index.json`` (``_class_name``, and ``name: [library, class]`` per
component) and one sub-folder per component written by that component's own
``save_pretrained`` (safetensors weights only). Components are transformers models and
tokenizers or diffusers ``ModelMixin`` + ``ConfigMixin`` classes.

``Pipeline.from_pretrained(x)`` resolves ``x`` as:

1. a shipped asset name ``leapgen/<name>``: loaded from the installed package (``leapgen_assets``),
   never from the network;
2. an existing local folder;
3. anything else: a Hugging Face Hub repo id through ``huggingface_hub.snapshot_download``; when that
   fails (e.g. offline) the error says what to do.

(We follow diffusers' layout but do not subclass ``DiffusionPipeline``: with diffusers 0.42 and
transformers 5 its saver skipped an optional model component and its loader passed the raw
``[library, class]`` entry to the constructor instead.)
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..errors import AssetNotFoundError

logger = logging.getLogger(__name__)

ASSET_PREFIX = "leapgen/"
_PIPELINES: dict[str, type[Pipeline]] = {}


def shipped_assets_dir() -> Path:
    """Folder holding the shipped pipelines (the installed ``leapgen_assets`` package)."""
    try:
        return Path(str(resources.files("leapgen_assets")))
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return Path(__file__).resolve().parents[2] / "assets"


def list_shipped() -> list[str]:
    root = shipped_assets_dir()
    if not root.is_dir():
        return []
    return sorted(ASSET_PREFIX + p.name for p in root.iterdir() if (p / "model_index.json").is_file())


def resolve_pretrained(name_or_path: str | os.PathLike) -> Path:
    """Turn an asset name, folder or hub id into a local folder with a model_index.json."""
    s = str(name_or_path)
    if s.startswith(ASSET_PREFIX):
        path = shipped_assets_dir() / s[len(ASSET_PREFIX) :]
        if not (path / "model_index.json").is_file():
            known = ", ".join(list_shipped()) or "none"
            raise AssetNotFoundError(
                f"shipped pipeline {s!r} is not installed (looked in {path}). Shipped pipelines here: {known}. "
                f"Build it with `leapgen train {s[len(ASSET_PREFIX):]}` or reinstall leapgen from a full checkout."
            )
        return path
    path = Path(s).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise AssetNotFoundError(
                f"{path} is a folder but has no model_index.json; point to a folder written by "
                "`Pipeline.save_pretrained`."
            )
        return path
    if path.suffix or s.startswith((".", "/", "~")) or s.count("/") > 1:
        raise AssetNotFoundError(f"no pipeline folder at {path}; check the path.")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s))
    except Exception as err:  # offline, unknown repo, auth ...
        raise AssetNotFoundError(
            f"could not fetch {s!r} from the Hugging Face Hub ({type(err).__name__}: {err}). "
            f"Without network use a shipped pipeline ({', '.join(list_shipped()) or 'none installed'}) or a local "
            "folder written by save_pretrained; to download, go online and unset HF_HUB_OFFLINE."
        ) from err


def _component_class(library: str, class_name: str) -> Any:
    module = importlib.import_module(library)
    cls = getattr(module, class_name, None)
    if cls is None and library == "transformers":
        # class names move between transformers releases (PreTrainedTokenizerFast / TokenizersBackend)
        import transformers

        cls = transformers.AutoTokenizer if "Tokeniz" in class_name else transformers.AutoModelForCausalLM
    if cls is None:
        raise AssetNotFoundError(f"component class {library}.{class_name} does not exist in this environment.")
    return cls


def _is_model(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module)


class Pipeline:
    """Base class: owns components, pre/post-processing; the decode loop belongs to the sampler."""

    components: ClassVar[tuple[str, ...]] = ()
    optional_components: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _PIPELINES[cls.__name__] = cls

    def __init__(self, **components: Any) -> None:
        unknown = set(components) - set(self.components)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no component(s) {sorted(unknown)}; it takes {self.components}")
        for name in self.components:
            setattr(self, name, components.get(name))
        missing = [n for n in self.components if n not in self.optional_components and getattr(self, n) is None]
        if missing:
            raise TypeError(f"{type(self).__name__} needs component(s) {missing}")

    # ------------------------------------------------------------------------------ load / save
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        **overrides: Any,
    ) -> Pipeline:
        """Load a pipeline; ``overrides`` replace components (e.g. ``draft=None``)."""
        folder = resolve_pretrained(name_or_path)
        _quiet_transformers()
        index = json.loads((folder / "model_index.json").read_text())
        target_cls = cls
        if cls is Pipeline:
            name = index.get("_class_name")
            if name not in _PIPELINES:
                _import_builtin_pipelines()
            if name not in _PIPELINES:
                raise AssetNotFoundError(f"{folder} holds a {name!r} pipeline, which leapgen does not know.")
            target_cls = _PIPELINES[name]
        parts: dict[str, Any] = {}
        for comp in target_cls.components:
            if comp in overrides:
                parts[comp] = overrides.pop(comp)
                continue
            entry = index.get(comp)
            if entry is None or entry[0] is None or not (folder / comp).is_dir():
                parts[comp] = None
                continue
            klass = _component_class(*entry)
            if issubclass_safe(klass, torch.nn.Module) or "Model" in entry[1]:
                parts[comp] = klass.from_pretrained(folder / comp, dtype=dtype).to(device)
            else:
                parts[comp] = klass.from_pretrained(folder / comp)
        if overrides:
            raise TypeError(f"unknown component override(s) {sorted(overrides)}; components: {target_cls.components}")
        pipe = target_cls(**parts)
        pipe.name_or_path = str(name_or_path)
        return pipe

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Write model_index.json and one folder per component (safetensors weights)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _quiet_transformers()
        index: dict[str, Any] = {"_class_name": type(self).__name__}
        try:
            import diffusers

            index["_diffusers_version"] = diffusers.__version__
        except ImportError:  # pragma: no cover
            pass
        for comp in self.components:
            obj = getattr(self, comp)
            if obj is None:
                index[comp] = [None, None]
                continue
            index[comp] = [type(obj).__module__.split(".")[0], type(obj).__name__]
            if _is_model(obj):
                obj.save_pretrained(folder / comp, safe_serialization=True)
            else:
                obj.save_pretrained(folder / comp)
        (folder / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")

    # ------------------------------------------------------------------------------ device / dtype
    def _models(self) -> list[torch.nn.Module]:
        return [getattr(self, c) for c in self.components if _is_model(getattr(self, c))]

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> Pipeline:
        for m in self._models():
            m.to(device=device, dtype=dtype)
        self._on_change()
        return self

    def _on_change(self) -> None:
        """Hook for subclasses that cache wrappers around components."""

    @property
    def device(self) -> torch.device:
        ms = self._models()
        return next(ms[0].parameters()).device if ms else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        ms = self._models()
        return next(ms[0].parameters()).dtype if ms else torch.float32

    def __repr__(self) -> str:
        parts = ", ".join(f"{c}={type(getattr(self, c)).__name__}" for c in self.components)
        return f"{type(self).__name__}({parts})"


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


def issubclass_safe(a: Any, b: type) -> bool:
    try:
        return issubclass(a, b)
    except TypeError:
        return False


def _import_builtin_pipelines() -> None:
    from . import image, molecule, text  # noqa: F401  (registration side effect)
