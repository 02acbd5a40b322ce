"""Where pipeline folders live and how ``model_index.json`` names their parts.

:func:`resolve_pretrained` turns a shipped asset name (``leapgen/<name>``, from the installed
``leapgen_assets`` package, never the network), a local folder or a Hugging Face Hub repo id into a
folder; :func:`model_index` / :func:`write_model_index` / :func:`read_model_index` write and read
``model_index.json`` (``_class_name``, ``name: [library, class]`` per component, the pipeline's own
settings), and :func:`component_class` turns an entry back into a class. :mod:`.base` re-exports
them; the pipeline registry (``pipeline_class``) stays there.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import AssetNotFoundError, ConfigError, InputError

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


def _did_you_mean(name: str) -> str:
    """`` Did you mean 'leapgen/text-code'?`` for a name close to a shipped pipeline's ('' when none is)."""
    shipped = list_shipped()
    key = name.strip().lower()
    for candidate in (key, ASSET_PREFIX + key):  # another case, or the name without its "leapgen/"
        if candidate in shipped:
            return f" Did you mean {candidate!r}?"
    close = difflib.get_close_matches(key if key.startswith(ASSET_PREFIX) else ASSET_PREFIX + key, shipped, n=1, cutoff=0.8)
    return f" Did you mean {close[0]!r}?" if close else ""


def resolve_pretrained(name_or_path: str | os.PathLike) -> Path:
    """Turn an asset name, folder or hub id into a local folder with a model_index.json."""
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise InputError(f"from_pretrained takes a shipped pipeline name ('leapgen/text-code'), a folder or a Hub id, "
                         f"got {name_or_path!r}; shipped here: {', '.join(list_shipped()) or 'none'}.")
    s = str(name_or_path)
    if s.startswith(ASSET_PREFIX):
        path = shipped_assets_dir() / s[len(ASSET_PREFIX) :]
        if not (path / "model_index.json").is_file():
            known = ", ".join(list_shipped()) or "none"
            raise AssetNotFoundError(
                f"shipped pipeline {s!r} is not installed (looked in {path}).{_did_you_mean(s)} Shipped pipelines "
                f"here: {known}. Build it with `leapgen train {s[len(ASSET_PREFIX):]}` or reinstall leapgen from a "
                "full checkout."
            )
        return path
    path = Path(s).expanduser()
    if path.is_file():
        hint = (f"pass its folder, {str(path.parent)!r}" if path.name == "model_index.json"
                else "pass the folder that holds model_index.json (written by `Pipeline.save_pretrained`)")
        raise AssetNotFoundError(f"{path} is a file, not a pipeline folder; {hint}.")
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise AssetNotFoundError(
                f"{path} is a folder but has no model_index.json; point to a folder written by "
                "`Pipeline.save_pretrained`."
            )
        return path
    if path.suffix or s.startswith((".", "/", "~")) or s.count("/") > 1:
        raise AssetNotFoundError(f"no pipeline folder at {path}; check the path.{_did_you_mean(path.name)}")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s))
    except Exception as err:  # offline, unknown repo, auth ...
        raise AssetNotFoundError(
            f"could not fetch {s!r} from the Hugging Face Hub ({type(err).__name__}: {err}).{_did_you_mean(s)} "
            f"Without network use a shipped pipeline ({', '.join(list_shipped()) or 'none installed'}) "
            "or a local folder written by save_pretrained; to download, go online and unset HF_HUB_OFFLINE."
        ) from err


# ---------------------------------------------------------------------------------------- save_pretrained
def save_folder(folder: str | os.PathLike, class_name: str) -> Path:
    """The folder ``save_pretrained`` writes to, made if missing; a path that is a file is refused, and a
    folder holding another pipeline is written over with a warning naming what it leaves there."""
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"save_pretrained({str(path)!r}): that path is a file; pass a folder (it is created if missing).")
    old = path / "model_index.json"
    if old.is_file():
        try:
            previous = json.loads(old.read_text()).get("_class_name")
        except (json.JSONDecodeError, AttributeError):
            previous = None
        if previous != class_name:
            logger.warning("%s holds a %s; writing a %s over it (its other files stay: save to an empty folder "
                           "for a clean copy)", path, previous, class_name)
    path.parent.mkdir(parents=True, exist_ok=True)  # the folder itself comes from staged_folder, whole
    return path


@contextlib.contextmanager
def staged_folder(path: Path) -> Iterator[Path]:
    """Write a pipeline folder all or nothing: yields a new sibling folder to write into; when the
    block ends without error, what ``path`` holds that was not written (other files, another
    pipeline's components, a saved-in-place pipeline's ``heads/``...) is linked (else copied) into
    it, as writing over the folder kept it, and it is swapped in for ``path`` (two renames; the old
    folder is then removed). When the block fails, the new folder is removed and ``path`` is left as
    it was: never an old ``model_index.json`` beside new, partial components."""
    path = Path(os.path.abspath(path))  # "." has no name to stage beside
    if path.is_symlink():  # a link to a folder: the folder it names is replaced, the link stays
        path = path.resolve()
    stage = path.parent / f".{path.name}.saving-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stage.mkdir()  # made with the umask, like the folder it replaces
    try:
        yield stage
        if path.is_dir():
            _carry_leftovers(path, stage)
        _swap_in(stage, path)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the old folder is removed after the swap: a link costs no copy
    except OSError:
        shutil.copy2(src, dst)


def _carry_leftovers(old: Path, new: Path) -> None:
    for entry in sorted(old.iterdir()):
        target = new / entry.name
        if target.exists() or target.is_symlink():
            continue  # written by this save
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))


def _swap_in(stage: Path, path: Path) -> None:
    if not path.exists():
        os.rename(stage, path)
        return
    old = path.parent / f".{path.name}.replaced-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    cwd = Path.cwd()
    os.rename(path, old)
    try:
        os.rename(stage, path)
    except BaseException:
        os.rename(old, path)
        raise
    if cwd.is_relative_to(path):  # the process was in the old folder: it is now in the new one
        with contextlib.suppress(OSError):
            os.chdir(path / cwd.relative_to(path))
    shutil.rmtree(old, ignore_errors=True)


#: files of a pipeline folder that are its record, not something it reads, left out of a saved copy
NOT_COPIED = ("model_index.json", "train_metrics.json")


def copy_folder_files(source: Path | None, folder: Path, components: tuple[str, ...],
                      dest: Path | None = None) -> list[str]:
    """Copy what the pipeline's own folder holds beside its components (a text target's trained
    ``heads/``, the Learn2PD filter, the TTS example voice, the image metrics' classifier) from the
    folder it was loaded from into ``folder``: the pipeline reads them from its folder, so a saved
    copy without them would run differently. Component folders are written by their components.
    ``dest``: where ``folder`` (a :func:`staged_folder`) goes once written, when not ``folder``."""
    final = (dest or folder).resolve()
    if source is None or not source.is_dir() or source.resolve() == final:
        return []  # saved in place: staged_folder keeps what sits beside the components
    copied = []
    for entry in sorted(source.iterdir()):
        if entry.name in components or entry.name in NOT_COPIED or entry.name.startswith("."):
            continue
        if any(p.is_relative_to(entry.resolve()) for p in (final, folder.resolve())):  # saving inside the source
            continue
        if entry.is_dir():
            shutil.copytree(entry, folder / entry.name, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, folder / entry.name)
        copied.append(entry.name)
    if copied:
        logger.info("save_pretrained: copied %s from %s", ", ".join(copied), source)
    return copied


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


__all__ = ["ASSET_PREFIX", "component_class", "component_entry", "copy_folder_files", "list_shipped", "model_index",
           "read_model_index", "resolve_pretrained", "save_folder", "shipped_assets_dir", "staged_folder",
           "write_model_index"]
