"""Where pipeline folders live and how ``model_index.json`` names their parts.

:func:`resolve_pretrained` turns a shipped asset name (``leapgen/<name>``, from the installed
``leapgen_assets`` package, never the network), a local folder or a Hugging Face Hub repo id into a
folder; :func:`model_index` / :func:`write_model_index` / :func:`read_model_index` write and read
``model_index.json`` (``_class_name``, ``name: [library, class]`` per component, the pipeline's own
settings), and :func:`component_class` turns an entry back into a class. :mod:`.base` re-exports
them; the pipeline registry (``pipeline_class``) stays there.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import AssetNotFoundError, ConfigError

logger = logging.getLogger(__name__)

ASSET_PREFIX = "leapgen/"


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


# ---------------------------------------------------------------------------------------- model_index.json
def component_entry(obj: Any) -> list[str | None]:
    """``[library, class]`` for a component, the one way model_index.json names them: the top-level
    package when it exports the class (``transformers``), else the module that defines it."""
    if obj is None:
        return [None, None]
    cls = type(obj)
    top = cls.__module__.split(".")[0]
    try:
        exported = getattr(importlib.import_module(top), cls.__name__, None) is cls
    except ImportError:  # pragma: no cover
        exported = False
    return [top if exported else cls.__module__, cls.__name__]


def model_index(pipeline: str | type, components: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """The content of ``model_index.json`` for a pipeline (its class or class name), its
    components (objects, or None for an absent optional one) and its own settings: what
    :meth:`Pipeline.save_pretrained` writes (training recipes that save components themselves
    can write the same file with it)."""
    from ..configuration import _version

    name = pipeline if isinstance(pipeline, str) else pipeline.__name__
    index: dict[str, Any] = {"_class_name": name, "_leapgen_version": _version(), **settings}
    index.update({comp: component_entry(obj) for comp, obj in components.items()})
    return index


def write_model_index(folder: str | os.PathLike, index: dict[str, Any]) -> Path:
    path = Path(folder) / "model_index.json"
    path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return path


def component_class(name: str, entry: Any) -> type:
    """The class a model_index.json entry ``[library, class]`` names; ConfigError when it names none."""
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
        raise ConfigError(
            f"model_index.json entry {name!r} is {entry!r}; expected [library, class] such as "
            '["transformers", "LlamaForCausalLM"] or [null, null] for an absent optional component.'
        )
    library, class_name = entry
    try:
        module = importlib.import_module(library)
    except ImportError as err:
        raise ConfigError(
            f"model_index.json entry {name!r} = {list(entry)}: the library {library!r} cannot be imported ({err}); "
            "install it or fix the entry."
        ) from err
    cls = getattr(module, class_name, None)
    if cls is None and library == "transformers" and "Tokeniz" in class_name:
        # tokenizer classes are renamed between transformers releases (PreTrainedTokenizerFast / TokenizersBackend)
        import transformers

        logger.info("%s: transformers has no %s here; loading the tokenizer with AutoTokenizer", name, class_name)
        cls = transformers.AutoTokenizer
    if not isinstance(cls, type):
        raise ConfigError(
            f"model_index.json entry {name!r} = {list(entry)}: {library} has no class {class_name!r}; "
            "fix the entry (the class must exist in the installed version)."
        )
    if not callable(getattr(cls, "from_pretrained", None)):
        raise ConfigError(
            f"model_index.json entry {name!r} = {list(entry)}: {class_name} has no from_pretrained, so it cannot be a "
            "pipeline component."
        )
    return cls


def read_model_index(folder: Path) -> dict[str, Any]:
    path = folder / "model_index.json"
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); rewrite it with Pipeline.save_pretrained.") from err
    if not isinstance(index, dict) or "_class_name" not in index:
        raise ConfigError(f"{path} has no _class_name; it was not written by Pipeline.save_pretrained.")
    return index


__all__ = ["ASSET_PREFIX", "component_class", "component_entry", "list_shipped", "model_index", "read_model_index",
           "resolve_pretrained", "shipped_assets_dir", "write_model_index"]
