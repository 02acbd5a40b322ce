"""Which pipelines and samplers the demo shows, found at run time (no list to edit).

Every shipped pipeline folder (:func:`leapgen.pipelines.base.list_shipped`) becomes one tab; its
``model_index.json`` ``_class_name`` picks the pipeline class from the pipeline registry, the class's
``contracts`` pick the samplers (:func:`leapgen.samplers.base.samplers_for`) and the signature of its
``__call__`` says what the input is:

* first parameter ``prompt`` (or any other string): a text box;
* ``images`` / ``image``: an image upload;
* ``audio`` / ``audios``: an audio upload;
* an integer (``num_samples``): a number (molecules are generated from nothing).

A pipeline may say it better with optional class attributes, all read with ``getattr``:
``demo_input`` (``"text" | "image" | "audio" | "number"``), ``demo_example`` (the input shown
first), ``demo_baseline`` (the sampler of the compare mode's left column), ``demo_size_param``
(the call argument that bounds the work, e.g. ``max_new_tokens``), ``demo_size`` (its value in
the demo) and ``demo_render`` (see :mod:`leapgen.demo.render`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LeapgenError
from ..pipelines.base import list_shipped, pipeline_class, read_model_index, resolve_pretrained
from ..pipelines.signature import CallSignature, call_signature
from ..samplers.base import sampler_info, samplers_for

logger = logging.getLogger(__name__)

INPUT_KINDS = ("text", "image", "audio", "number")
#: call arguments that bound the work of one request, first found wins; with the demo's (small) value
SIZE_PARAMS: dict[str, float] = {
    "max_new_tokens": 32,
    "num_images_per_prompt": 1,
    "duration": 1.0,
    "num_samples": 8,
}
#: inputs shown first when the pipeline names none
TEXT_EXAMPLE = "def fibonacci(n):"
OCR_EXAMPLE_WORD = "leapgen"
#: first inputs by call-parameter name, for inputs that are not free text (JSON in the text box)
PARAM_EXAMPLES: dict[str, str] = {
    "spectra": '{"mz": [147.11, 260.2, 373.28, 486.37], "intensity": [0.8, 1.0, 0.6, 0.4], '
               '"precursor_mz": 308.2, "charge": 2}',
}


@dataclass
class PipelineSpec:
    """One tab: a shipped pipeline and how the demo drives it."""

    name: str  # "leapgen/text-code"
    class_name: str
    cls: type
    folder: Path
    input_kind: str
    input_param: str
    samplers: list[str]
    baseline: str | None
    size_param: str | None = None
    size: float | None = None
    example: Any = None
    call_params: set[str] = field(default_factory=set)
    takes_kwargs: bool = False

    @property
    def tab(self) -> str:
        """Short name used for the tab label, element ids and screenshot files ("text-code")."""
        return self.name.split("/", 1)[-1]

    def accepts(self, param: str) -> bool:
        return param in self.call_params


def _input_of(cls: type, sig: CallSignature) -> tuple[str, str]:
    if not sig.names:
        return "text", "prompt"
    first = sig.names[0]
    declared = getattr(cls, "demo_input", None)
    if declared in INPUT_KINDS:
        return declared, first
    name = first.lower()
    if "image" in name:
        return "image", first
    if "audio" in name or name in ("waveform", "speech"):
        return "audio", first
    default = sig.defaults.get(first)
    if isinstance(default, int) and not isinstance(default, bool):
        return "number", first
    return "text", first


def _class_names(folder: Path) -> list[str]:
    """Class / prompt names a pipeline folder declares (model_index.json or a component config)."""
    for path in [folder / "model_index.json", *sorted(folder.glob("*/config.json"))]:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        names = data.get("class_names") if isinstance(data, dict) else None
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return names
    return []


def _example(cls: type, kind: str, folder: Path) -> Any:
    declared = getattr(cls, "demo_example", None)
    if declared is not None:
        return declared
    if kind == "text":
        names = _class_names(folder)
        if names:
            return names[0]
        if "audio" in cls.__name__.lower() or "music" in folder.name:
            return "a calm piano melody"
        return TEXT_EXAMPLE
    if kind == "number":
        return None
    if kind == "audio":
        clips = sorted(folder.glob("*.wav")) + sorted(folder.glob("*/*.wav"))
        return str(clips[0]) if clips else None
    return None  # images: made by the app (a rendered word)


def inspect_pipeline(name: str) -> PipelineSpec:
    """The spec of one shipped pipeline (its class is imported, its weights are not loaded)."""
    folder = resolve_pretrained(name)
    index = read_model_index(folder)
    cls = pipeline_class(index["_class_name"], folder)
    sig = call_signature(cls)  # with the parameters a subclass hands on to its parent's call (image-nar)
    kind, param = _input_of(cls, sig)
    cls_param = param
    runnable = getattr(cls, "runnable_samplers", None)
    names = runnable(index=index, folder=folder) if runnable else samplers_for(*getattr(cls, "contracts", ()))
    default = sig.defaults.get("sampler")
    baseline = getattr(cls, "demo_baseline", None) or (default if isinstance(default, str) else None)
    if baseline not in names:  # no default in the signature: a sampler named in the folder's name, else ar
        words = folder.name.split("-")
        baseline = next((n for n in names if n in words), "ar" if "ar" in names else (names[0] if names else None))
    call_params = set(sig.names)
    size_param = getattr(cls, "demo_size_param", None)
    if size_param is None:
        size_param = next((p for p in SIZE_PARAMS if p in call_params and p != param), None)
    size = getattr(cls, "demo_size", None)
    if size is None and size_param is not None:
        size = SIZE_PARAMS.get(size_param, 1)
    if kind == "number" and size_param is None:
        size = SIZE_PARAMS.get(param, 4)
    return PipelineSpec(
        name=name, class_name=cls.__name__, cls=cls, folder=folder, input_kind=kind, input_param=param,
        samplers=names, baseline=baseline, size_param=size_param, size=size, example=PARAM_EXAMPLES.get(cls_param) or _example(cls, kind, folder),
        call_params=call_params,
        takes_kwargs=sig.sampler_params,
    )


def discover(names: list[str] | None = None) -> list[PipelineSpec]:
    """One spec per shipped pipeline (or per name given); a folder that cannot be read is logged
    and left out, so one broken asset never hides the others."""
    specs = []
    for name in names if names is not None else list_shipped():
        try:
            specs.append(inspect_pipeline(name))
        except (LeapgenError, ImportError, OSError) as err:
            logger.warning("demo: %s left out (%s)", name, err)
    return specs


def sampler_defaults(name: str) -> dict[str, Any]:
    """A sampler's parameters with their defaults, JSON-friendly (tuples as lists; values that JSON
    cannot hold are left out and keep their default)."""
    out = {}
    for key, value in sampler_info(name).defaults.items():
        try:
            json.dumps(value)
        except TypeError:
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def sampler_label(name: str) -> str:
    info = sampler_info(name)
    return f"{name} ({info.guarantee})"


__all__ = ["PipelineSpec", "discover", "inspect_pipeline", "sampler_defaults", "sampler_label"]
