"""Helpers shared by the subcommands: ``KEY=VALUE`` parsing, recipe options, pipeline loading
with an error that names the expected kind of pipeline."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

DEFAULT_TEXT_PIPELINE = "leapgen/text-code"
DEFAULT_IMAGE_PIPELINE = "leapgen/image-emoji"
DEFAULT_MOLECULE_PIPELINE = "leapgen/molecule-safe"


def parse_value(s: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"``/``"false"`` -> bool, ``"none"`` -> None, else the string."""
    low = s.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{"k": parse_value(v)}``."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--param expects key=value (e.g. --param num_draft_tokens=4), got {item!r}.")
        out[key] = parse_value(value)
    return out


def parse_extra_args(argv: list[str]) -> dict[str, Any]:
    """``["--target-tokens", "20000", "--flag", "--x=1"]`` -> ``{"target_tokens": 20000, "flag": True, "x": 1}``."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"unexpected argument {arg!r}; recipe options look like --name value.")
        name, sep, value = arg[2:].partition("=")
        key = name.replace("-", "_")
        if sep:
            out[key] = parse_value(value)
            i += 1
        elif i + 1 < len(argv) and not (argv[i + 1].startswith("--") and len(argv[i + 1]) > 2):
            out[key] = parse_value(argv[i + 1])
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def load_text_pipeline(name: str):
    from ..pipelines import Pipeline, TextPipeline

    pipe = Pipeline.from_pretrained(name)
    if not isinstance(pipe, TextPipeline):
        raise ConfigError(
            f"{name} is a {type(pipe).__name__}, not a text pipeline; pass --pipeline with a text pipeline."
        )
    return pipe


def load_image_pipeline(name: str):
    from ..pipelines import Pipeline

    pipe = Pipeline.from_pretrained(name)
    if not hasattr(pipe, "class_names") or not hasattr(pipe, "vq"):
        raise ConfigError(
            f"{name} is a {type(pipe).__name__}, not an image pipeline; pass --pipeline {DEFAULT_IMAGE_PIPELINE} "
            "or a folder saved by ImageARPipeline."
        )
    return pipe


__all__ = [
    "DEFAULT_IMAGE_PIPELINE",
    "DEFAULT_MOLECULE_PIPELINE",
    "DEFAULT_TEXT_PIPELINE",
    "load_image_pipeline",
    "load_text_pipeline",
    "parse_extra_args",
    "parse_params",
    "parse_value",
]


def split_list(spec: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (comma-separated CLI lists)."""
    return [x.strip() for x in (spec or "").split(",") if x.strip()]


def sampler_runs(spec: str, param_items: list[str] | None) -> list[tuple[Any, dict[str, Any]]]:
    """The samplers named in ``--sampler a,b`` with the ``--param`` values each one takes.

    With several samplers every parameter goes to the samplers that have it, and one that no sampler
    takes is an error; unknown names raise UnknownSamplerError listing the registered ones."""
    from ..samplers import sampler_info

    names = split_list(spec)
    if not names:
        raise ConfigError("--sampler needs at least one sampler name (see `leapgen samplers`).")
    params = parse_params(param_items)
    infos = [sampler_info(n) for n in names]
    if len(infos) == 1:
        return [(infos[0], params)]
    unused = [k for k in params if not any(k in i.defaults for i in infos)]
    if unused:
        raise ConfigError(f"no sampler among {names} takes parameter(s) {unused}.")
    return [(i, {k: v for k, v in params.items() if k in i.defaults}) for i in infos]


def run_registered(kind: str, name: str, fn, extra: list[str], out: str | None, seed: int | None) -> int:
    """Run a registered recipe or corpus builder ``fn`` with the ``--options`` in ``extra`` (checked
    against its signature), ``out_dir`` and ``seed``; print its JSON summary. ``kind`` names it in errors."""
    import inspect
    import json
    import logging

    kwargs = parse_extra_args(extra)
    if out is not None:
        kwargs["out_dir"] = out
    if seed is not None:
        kwargs["seed"] = seed
    sig = inspect.signature(fn)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        unknown = [k for k in kwargs if k not in sig.parameters]
        if unknown:
            opts = ", ".join("--" + p.replace("_", "-") for p in sig.parameters)
            raise ConfigError(f"{kind} {name!r} has no option(s) {unknown}; its options: {opts}.")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = fn(**kwargs)
    if result is not None:
        print(json.dumps(result, indent=2, default=str))
    return 0
