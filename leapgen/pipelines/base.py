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

``model_index.json`` is written in one place (:meth:`Pipeline.save_pretrained`) and read back to
choose the classes: ``_class_name`` picks the pipeline class from the registry of pipelines (every
subclass registers itself), each component entry ``[library, class]`` picks the component class
(``library`` is the top-level package when it exports the class, as ``transformers``, else the
defining module, as ``leapgen.tokenizers.vq_image``); other keys are the pipeline's own settings
(e.g. the image pipeline's ``class_names``), passed back to its constructor. An unknown or wrong
entry raises :class:`~leapgen.errors.ConfigError` naming the entry and what would fit.
The folder helpers (:func:`resolve_pretrained`, ``model_index.json``) live in :mod:`.folders`.

The call conventions of diffusers are shared here: ``pipe.to(device, dtype)`` in any order or as
keywords, ``set_progress_bar_config(**tqdm_kwargs)`` / ``progress_bar``, ``generator=`` (checked to
be on the pipeline's device; ``seed=`` stays as a shortcut), ``callback_on_step_end(pipe, step,
info)`` called after each target step, and ``return_dict=False`` for a tuple
(:mod:`leapgen.pipelines.outputs`). Every subclass's ``__call__`` takes numpy scalar arguments
(``max_new_tokens=np.int64(64)``) as the Python numbers they hold.

(We follow diffusers' layout but do not subclass ``DiffusionPipeline``: with diffusers 0.42 and
transformers 5 its saver skipped an optional model component and its loader passed the raw
``[library, class]`` entry to the constructor instead.)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..errors import ConfigError, InputError, ModelMismatchError
from ..samplers.base import DecodeConfig, Sampler, get_sampler, make_generator, sampler_info, samplers_for
from . import loading
from .folders import (  # noqa: F401  (re-exported: the folder helpers were defined here first)
    ASSET_PREFIX,
    component_class,
    component_entry,
    copy_folder_files,
    list_shipped,
    model_index,
    read_model_index,
    resolve_pretrained,
    save_folder,
    shipped_assets_dir,
    staged_folder,
    write_model_index,
)
from .freshness import follows_components, records_components
from .items import with_plain_scalars
from .outputs import PipelineOutput
from .threads import one_call_per_sampler

logger = logging.getLogger(__name__)

_PIPELINES: dict[str, type[Pipeline]] = {}


def pipeline_class(name: Any, folder: Path) -> type[Pipeline]:
    """The registered pipeline class named by a model_index.json ``_class_name``."""
    if name not in _PIPELINES:
        _import_builtin_pipelines()
    if not isinstance(name, str) or name not in _PIPELINES:
        raise ConfigError(
            f"{folder / 'model_index.json'} names the pipeline class {name!r}, which leapgen does not know; "
            f"known pipelines: {', '.join(sorted(_PIPELINES))}."
        )
    return _PIPELINES[name]


def _is_model(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module)


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _present(pipe: Any, index: dict[str, Any] | None, component: str) -> bool:
    """Whether ``component`` is there: loaded on ``pipe``, or (no pipe) a non-null ``model_index.json`` entry."""
    if pipe is not None:
        return getattr(pipe, component, None) is not None
    entry = (index or {}).get(component)
    return isinstance(entry, list) and bool(entry) and entry[0] is not None


class _class_or_instance:
    """A method that runs on the class (``Cls.f(...)``: ``pipe`` is None) or on an instance
    (``pipe.f(...)``: ``pipe`` is it); either way the first argument is the class."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type) -> Callable[..., Any]:
        return functools.partial(self.fn, owner, obj)


class Pipeline:
    """Base class: owns components, pre/post-processing; the decode loop belongs to the sampler.

    **Threads.** One loaded pipeline may be called from several threads at once: each call gives
    what it gives alone, with statistics of its own forwards (:mod:`.threads` says how). Not
    thread-safe: one :class:`Sampler` *instance* in calls on two threads at once (refused with a
    ConfigError: pass the sampler by name), one ``generator=`` shared by concurrent calls, and
    ``to()`` / ``set_draft`` / ``set_compile`` / ``set_progress_bar_config`` while calls run.
    """

    components: ClassVar[tuple[str, ...]] = ()
    optional_components: ClassVar[tuple[str, ...]] = ()
    #: the model contracts (``leapgen.samplers.base.CONTRACTS``) this pipeline's models implement;
    #: a sampler runs here only if it declares one of them (:meth:`check_sampler`)
    contracts: ClassVar[tuple[str, ...]] = ()
    #: components that serve as the ``draft`` of draft-needing samplers (``speculative``, ``gad`` ...),
    #: and whether the pipeline builds a draft itself (a NAR head of its own model)
    draft_components: ClassVar[tuple[str, ...]] = ("draft",)
    builds_draft: ClassVar[bool] = False

    #: contracts of a stage the pipeline always runs with a sampler of its own (e.g. a TTS pipeline's
    #: acoustic stage): samplers of only these contracts are not a choice for the call's ``sampler=``
    stage_contracts: ClassVar[tuple[str, ...]] = ()
    #: model features (:data:`~leapgen.samplers.features.MODEL_FEATURES`) the target models of this
    #: pipeline lack, with why: a sampler needing one with its settings is neither offered
    #: (:meth:`runnable_samplers`) nor run (:meth:`check_sampler`, :meth:`make_sampler`); a pipeline
    #: whose models vary (the text pipeline: any causal LM) sets it per instance
    model_lacks: ClassVar[dict[str, str]] = {}

    @_class_or_instance
    def runnable_samplers(cls, pipe: Pipeline | None = None, index: dict[str, Any] | None = None,
                          folder: Path | None = None) -> list[str]:
        """The registered samplers this pipeline can really run: one of its model contracts (less its
        :attr:`stage_contracts`) and every model the sampler needs (:attr:`SamplerInfo.needs`) present.

        On a loaded pipeline (``pipe.runnable_samplers()``) the components and :meth:`model_contracts`
        decide; on the class, a folder's ``model_index.json`` (``index``; None: no component known) and
        :meth:`folder_contracts` (``folder``) decide, without loading weights (what the demo offers).
        :meth:`check_sampler` names this list when it refuses a sampler."""
        if pipe is not None:
            contracts = pipe.model_contracts()
        else:
            contracts = cls.folder_contracts(folder) if folder is not None else cls.contracts
        has = functools.partial(_present, pipe, index)
        offered = set(contracts) - set(cls.stage_contracts)
        lacks = (pipe if pipe is not None else cls).model_lacks
        return [n for n in samplers_for(*offered)
                if not cls._missing_needs(sampler_info(n).needs, has) and not set(_default_features(n)) & set(lacks)]

    @classmethod
    def _missing_needs(cls, needs: tuple[str, ...], has: Callable[[str], bool]) -> list[str]:
        """The sampler needs (``draft``, ``ar_model`` ...) this pipeline cannot meet: ``model`` always is;
        ``draft`` by one of :attr:`draft_components` or a draft the pipeline builds (:attr:`builds_draft`);
        any other need by the component of that name."""
        missing = []
        for need in needs:
            if need == "model" or (need == "draft" and (cls.builds_draft or any(has(c) for c in cls.draft_components))):
                continue
            if need == "draft" or need not in cls.components or not has(need):
                missing.append(need)
        return missing

    @classmethod
    def folder_contracts(cls, folder: Path) -> tuple[str, ...]:
        """The model contracts a pipeline folder's components offer, read without loading weights
        (default: the class's :attr:`contracts`; pipelines whose offer depends on a component override it)."""
        return cls.contracts

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _PIPELINES[cls.__name__] = cls
        if "_on_change" in cls.__dict__:  # adapters rebuilt when a component changed, however (.freshness)
            cls._on_change = records_components(cls.__dict__["_on_change"])  # type: ignore[method-assign]
        call = cls.__dict__.get("__call__")
        if call is not None:
            cls.__call__ = one_call_per_sampler(with_plain_scalars(follows_components(call)))  # type: ignore[method-assign]

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
        dtype: torch.dtype | None = None,
        device: str | torch.device = "cpu",
        **overrides: Any,
    ) -> Pipeline:
        """Load a pipeline; ``overrides`` replace components (e.g. ``draft=None``) or settings.

        ``dtype`` (alias ``torch_dtype``, default float32) and ``device`` apply to the model
        components. Called on :class:`Pipeline`, ``_class_name`` picks the class; called on a
        subclass, the folder must hold that pipeline (or a subclass of it).
        """
        device, dtype = loading.load_args(device, dtype, overrides)
        folder = resolve_pretrained(name_or_path)
        _quiet_transformers()
        index = read_model_index(folder)
        target_cls = pipeline_class(index["_class_name"], folder)
        if cls is not Pipeline and not issubclass(target_cls, cls):
            raise ConfigError(
                f"{folder} holds a {target_cls.__name__}, not a {cls.__name__}; load it with "
                f"{target_cls.__name__}.from_pretrained or Pipeline.from_pretrained."
            )
        parts = loading.pipeline_parts(target_cls, folder, index, overrides, dtype, device)
        pipe = target_cls(**parts)
        pipe.name_or_path, pipe.source_folder = str(name_or_path), folder
        return pipe

    def pipeline_config(self) -> dict[str, Any]:
        """The pipeline's own settings, saved in model_index.json and passed back to ``__init__``."""
        return {}

    def save_pretrained(self, folder: str | os.PathLike, dtype: torch.dtype | None = None) -> None:
        """Write model_index.json and one folder per component (safetensors weights); ``dtype``
        (e.g. ``torch.float16``) stores the weights smaller."""
        dtype = loading.parse_to_args((), None, dtype)[1]  # a floating dtype (or its name), else a clear error
        final = save_folder(folder, type(self).__name__)  # a file or another pipeline's folder: said
        _quiet_transformers()
        index = model_index(type(self), {c: getattr(self, c) for c in self.components}, **self.pipeline_config())
        with staged_folder(final) as folder:  # all or nothing: a failure leaves the old folder as it was
            for comp in self.components:
                obj = getattr(self, comp)
                if obj is None:
                    continue
                if _is_model(obj) and hasattr(obj, "config_dict"):  # a leapgen PretrainedMixin module
                    obj.save_pretrained(folder / comp, dtype=dtype)
                elif _is_model(obj):  # a transformers model
                    src = copy.deepcopy(obj).to(dtype) if dtype is not None else obj
                    src.save_pretrained(folder / comp, safe_serialization=True)
                else:
                    obj.save_pretrained(folder / comp)
            copy_folder_files(getattr(self, "source_folder", None), folder, self.components, dest=final)  # heads/ ...
            self._save_extra(folder)
            write_model_index(folder, index)

    def _save_extra(self, folder: Path) -> None:
        """Hook: files beside model_index.json that a pipeline keeps (e.g. pipeline_config.json)."""

    # ------------------------------------------------------------------------------ device / dtype
    def _models(self) -> list[torch.nn.Module]:
        return [getattr(self, c) for c in self.components if _is_model(getattr(self, c))]

    def to(self, *args: Any, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> Pipeline:
        """Move / cast the model components like diffusers: ``pipe.to("cuda")``,
        ``pipe.to(torch.float64)``, ``pipe.to("cuda", torch.float16)``, ``pipe.to(device=..., dtype=...)``."""
        device, dtype = loading.parse_to_args(args, device, dtype)
        if device is not None:
            loading.check_available(device)
        loading.note_precision(device or self.device, dtype)
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

    # ------------------------------------------------------------------------------ samplers
    def model_contracts(self) -> tuple[str, ...]:
        """The model contracts the current components offer (default: the class's ``contracts``)."""
        return self.contracts

    def contract_hint(self, contract: str) -> str:
        """How to make this pipeline offer ``contract`` (e.g. a component to load); '' when it cannot."""
        return ""

    def check_sampler(self, sampler: str | Sampler, features: bool = True) -> None:
        """Refuse, when the call starts, a sampler this pipeline cannot run: one that runs on none of its
        model contracts (``maskgit`` on a causal LM, ``ar`` on a masked model), one of a stage the
        pipeline runs itself (:attr:`stage_contracts`), one that needs a model the pipeline lacks
        (``speculative`` without a draft) or, unless ``features`` is False, a model feature it lacks
        (:attr:`model_lacks`: ``gsd``'s embeddings; a name is judged with the sampler's defaults).
        The error names :meth:`runnable_samplers`. Anything but a name or a Sampler is left to the caller."""
        if isinstance(sampler, str):
            info = sampler_info(sampler)
            name, theirs, needs = info.name, tuple(info.contracts), tuple(info.needs)
        elif isinstance(sampler, Sampler):
            name, theirs, needs = sampler.name, tuple(sampler.contracts), tuple(sampler.needs)
        else:
            return
        offered = self.model_contracts()
        cls = type(self).__name__
        listing = f"samplers that can run on it: {', '.join(self.runnable_samplers()) or 'none'}."
        if not set(theirs) & set(offered):
            hints = " ".join(h for h in (self.contract_hint(c) for c in theirs) if h)
            raise ModelMismatchError(
                f"sampler {name!r} runs on {' or '.join(theirs)} models, but {cls} has "
                f"{' and '.join(offered) or 'no'} model(s); {listing}" + (f" {hints}" if hints else "")
            )
        if not (set(theirs) & set(offered)) - set(self.stage_contracts):
            raise ConfigError(f"sampler {name!r} runs {cls}'s {' / '.join(theirs)} stage, which the pipeline always "
                              f"runs itself; it is not a choice for sampler=. {listing}")
        missing = self._missing_needs(needs, functools.partial(_present, self, None))
        if missing:
            where = [c for c in (self.draft_components if "draft" in missing else ()) if c in self.components]
            where += [m for m in missing if m != "draft" and m in self.components]
            fix = (f"load one with from_pretrained(..., {'=..., '.join(where)}=...)" if where
                   else f"it takes no {' or '.join(missing)} model")
            raise ConfigError(f"sampler {name!r} needs a {' and a '.join(missing)} model, which this {cls} does not "
                              f"have ({fix}); {listing}")
        if features:
            self._check_features(sampler if isinstance(sampler, Sampler) else get_sampler(name), listing)

    def _check_features(self, smp: Sampler, listing: str = "") -> None:
        from ..samplers.features import MODEL_FEATURES

        for feature in [f for f in smp.model_features() if f in self.model_lacks]:
            hint = smp.feature_hints.get(feature, "choose another sampler")
            raise ConfigError(f"sampler {smp.name!r} needs {MODEL_FEATURES[feature]}, which {type(self).__name__}'s "
                              f"models lack ({self.model_lacks[feature]}); {hint}. "
                              + (listing or f"samplers that can run on it: {', '.join(self.runnable_samplers()) or 'none'}."))

    def make_sampler(self, sampler: str | Sampler, params: dict[str, Any],
                     defaults: dict[str, Any] | None = None) -> Sampler:
        """The call's sampler, checked (:meth:`check_sampler`) before it is built: a registered name
        built with ``params`` (the call's extra keywords) over the pipeline's own ``defaults`` for it,
        or a Sampler instance (then ``params`` must be empty). A keyword that is neither the call's nor
        the sampler's raises ConfigError listing both."""
        self.check_sampler(sampler, features=False)
        if isinstance(sampler, Sampler):
            if params:
                raise InputError(f"pass sampler parameters to the Sampler instance, not to the call (got {sorted(params)}).")
            self._check_features(sampler)
            return sampler
        if not isinstance(sampler, str):
            raise InputError(f"sampler must be a registered sampler name or a Sampler, got {type(sampler).__name__}.")
        info = sampler_info(sampler)
        unknown = sorted(set(params) - set(info.defaults))
        if unknown:
            raise ConfigError(
                f"{type(self).__name__}() got unknown keyword(s) {unknown}; the call's parameters are: "
                f"{', '.join(self._call_parameters())}; the parameters of sampler {info.name!r} are: "
                f"{', '.join(sorted(info.defaults)) or 'none'}."
            )
        smp = get_sampler(sampler, **{**(defaults or {}), **params})
        self._check_features(smp)  # with the call's settings (gsd with dist_threshold=None needs no embeddings)
        return smp

    def _call_parameters(self) -> list[str]:
        """The named parameters of the pipeline's ``__call__``, through a ``**kwargs`` that forwards to
        the parent class's call (``**sampler_params`` are the sampler's, listed apart)."""
        from .signature import call_signature

        return list(call_signature(type(self)).names)

    # ------------------------------------------------------------------------------ call conventions
    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """tqdm keyword arguments for this pipeline's progress bars (``disable=True`` hides them even
        with ``progress=True``; ``disable=False`` shows them without it)."""
        self._progress_bar_config = dict(kwargs)

    def progress_bar(self, iterable: Any = None, total: int | None = None, **kwargs: Any) -> Any:
        """A tqdm bar over ``iterable`` or of ``total`` steps, with :meth:`set_progress_bar_config`."""
        from tqdm.auto import tqdm

        cfg = {"leave": False, "desc": type(self).__name__, **getattr(self, "_progress_bar_config", {}), **kwargs}
        if iterable is not None:
            return tqdm(iterable, **cfg)
        if total is not None:
            return tqdm(total=total, **cfg)
        raise InputError("progress_bar needs an iterable or a total.")

    def _show_progress(self, progress: bool) -> bool:
        return not getattr(self, "_progress_bar_config", {}).get("disable", not progress)

    def prepare_generator(self, generator: torch.Generator | None, seed: int | None, device: torch.device | None = None) -> torch.Generator:
        """The call's random generator: the user's (checked to live on the pipeline's device), or a
        new one seeded with ``seed`` (random when None)."""
        device = torch.device(device) if device is not None else self.device
        if generator is None:
            return make_generator(DecodeConfig(seed=seed), device)
        if isinstance(generator, (list, tuple)):
            raise InputError(
                f"generator= takes one torch.Generator for the whole call here ({type(self).__name__}); one per "
                "prompt (diffusers' list form) is not supported, because a row's random draws depend on its batch. "
                "Pass one generator (or seed=), or, for per-prompt reproducibility, call once per prompt with its own "
                "generator or seed (as `leapgen generate --input` does: seed + line number). The raster image "
                "pipelines (ImageARPipeline: leapgen/image-emoji, and ImageNARPipeline) take a list, one per image."
            )
        if not isinstance(generator, torch.Generator):
            raise InputError(f"generator must be a torch.Generator, got {type(generator).__name__}.")
        if seed is not None:
            raise InputError("pass either seed= or generator=, not both (seed=s is generator=torch.Generator().manual_seed(s)).")
        if not _same_device(torch.device(generator.device), device):
            raise InputError(
                f"the generator is on {generator.device} but the pipeline runs on {device}; create it there: "
                f"torch.Generator(device={str(device)!r}).manual_seed(...)."
            )
        return generator

    @contextlib.contextmanager
    def step_hooks(self, total: int, progress: bool, callback: Callable[..., Any] | None) -> Iterator[Callable[..., None] | None]:
        """``DecodeConfig.step_callback`` for one decode: advances the pipeline's progress bar (by the
        longest row's new tokens) and calls ``callback(pipe, step, {"stats": stats})``; None when
        neither is wanted."""
        if callback is not None and not callable(callback):
            raise InputError(f"callback_on_step_end must be callable as callback(pipe, step, info), got {callback!r}.")
        bar = self.progress_bar(total=total) if self._show_progress(progress) else None

        def step_callback(step: int, stats: Any) -> None:
            if bar is not None:
                last = stats.accepted_per_step[-1] if stats.accepted_per_step else 0
                bar.update(max(last, default=0) if isinstance(last, (list, tuple)) else int(last))
            if callback is not None:
                callback(self, step, {"stats": stats})

        try:
            yield step_callback if (bar is not None or callback is not None) else None
        finally:
            if bar is not None:
                bar.close()

    @staticmethod
    def _return(output: PipelineOutput, return_dict: bool) -> Any:
        return output if return_dict else output.as_tuple()

    def __repr__(self) -> str:
        parts = ", ".join(f"{c}={type(getattr(self, c)).__name__}" for c in self.components)
        return f"{type(self).__name__}({parts})"


@functools.cache
def _default_features(name: str) -> tuple[str, ...]:
    """The model features sampler ``name`` needs with its defaults."""
    return tuple(get_sampler(name).model_features())


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


def _import_builtin_pipelines() -> None:
    from . import image, molecule, text  # noqa: F401  (registration side effect)
