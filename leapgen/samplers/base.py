"""Sampler base class and the sampler registry, with per-row bookkeeping helpers.

A sampler is a decode loop registered by name. It declares what it guarantees
(``greedy-exact``, ``distribution-exact``, ``bounded`` or ``lossy``), which models it needs
and where it comes from, and it reports the same :class:`DecodeStats` as every other sampler
so that methods can be compared on one machine in one run.

The decode configuration lives in :mod:`.decode_config`, the parameter checks in
:mod:`.param_checks`, the statistics in :mod:`.stats`; all are re-exported here, so
``from leapgen.samplers.base import DecodeConfig, check_int, DecodeStats`` keeps working.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..errors import ConfigError, ModelMismatchError, UnknownSamplerError, a_type
from ..models.base import CausalLM
from ..models.encdec import EncoderDecoderLM
from ..models.masked_base import MaskedModel
from .config_checks import checked_generate
from .decode_config import MIN_SAMPLING_TEMPERATURE as MIN_SAMPLING_TEMPERATURE  # re-exported
from .decode_config import DecodeConfig
from .guarantees import StepBound
from .param_checks import _is_number, check_limits
from .param_checks import check_choice as check_choice  # re-exported
from .param_checks import check_int as check_int
from .param_checks import check_token_ids as check_token_ids
from .refusals import refuse
from .stats import DecodeResult, DecodeStats

GUARANTEES = ("greedy-exact", "distribution-exact", "bounded", "lossy")


# --------------------------------------------------------------------------------------------
# registry


#: the model contracts a sampler may declare it runs on (``register_sampler(contracts=...)``); a
#: family adds its own with :func:`register_contract` (the list grows in place, so imports stay live)
CONTRACTS: list[str] = ["causal", "encoder-decoder", "masked"]
#: contract -> test recognising a model that implements it; :func:`model_contract` tries the newest
#: first, so a family contract (more specific) wins over the generic one its model may also satisfy
_CONTRACT_TESTS: dict[str, Callable[[Any], bool]] = {}


def register_contract(name: str, implemented_by: Callable[[Any], bool]) -> None:
    """Declare a model contract ``name`` (e.g. ``"ctc"``), recognised by ``implemented_by(model)``.

    Call it in the module that defines the contract's model base class, before a sampler declares
    it in ``register_sampler(contracts=...)``. Re-registering the same name replaces the test."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a contract name must be a non-empty string, got {name!r}")
    if name not in CONTRACTS:
        CONTRACTS.append(name)
    _CONTRACT_TESTS[name] = implemented_by


@dataclass(frozen=True)
class SamplerInfo:
    name: str
    family: str
    guarantee: str
    needs: tuple[str, ...]
    paper: str
    cls: type[Sampler]
    defaults: dict[str, Any]
    summary: str
    #: model contracts the sampler runs on: ``causal`` (a CausalLM), ``encoder-decoder`` (its
    #: decoder is one, after ``encode``), ``masked`` (a MaskedModel)
    contracts: tuple[str, ...] = ("causal",)

    def as_row(self) -> dict[str, str]:
        return {"name": self.name, "family": self.family, "guarantee": self.guarantee,
                "needs": ", ".join(self.needs), "paper": self.paper}  # fmt: skip


_REGISTRY: dict[str, SamplerInfo] = {}
_SORTED: list[SamplerInfo] = []  # list_samplers()'s answer, emptied by every registration


def register_sampler(
    name: str,
    *,
    family: str,
    guarantee: str,
    needs: Sequence[str] = ("model",),
    paper: str = "",
    contracts: Sequence[str] | None = None,
):
    """Class decorator: register a :class:`Sampler` subclass under ``name``.

    ``contracts``: the model contracts it runs on (see :data:`CONTRACTS`). Default: ``("masked",)``
    for the ``masked`` family, otherwise the class's ``contracts`` (the two autoregressive loops
    declare ``("causal", "encoder-decoder")``: an encoder-decoder's decoder is a CausalLM)."""
    if guarantee not in GUARANTEES:
        raise ValueError(f"guarantee must be one of {GUARANTEES}, got {guarantee!r}")
    declared = tuple(contracts) if contracts is not None else None

    def wrap(cls: type[Sampler]) -> type[Sampler]:
        contracts = declared or (("masked",) if family == "masked" else tuple(cls.contracts))
        if any(c not in CONTRACTS for c in contracts):
            raise ValueError(
                f"contracts must be a non-empty subset of {tuple(CONTRACTS)}, got {contracts!r} "
                "(a new contract is declared with register_contract first)"
            )
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise ValueError(f"a sampler named {name!r} is already registered ({_REGISTRY[name].cls})")
        cls.name = name
        cls.guarantee = guarantee
        cls.needs = tuple(needs)
        cls.contracts = contracts
        doc = (cls.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = SamplerInfo(
            name=name, family=family, guarantee=guarantee, needs=tuple(needs), paper=paper, cls=cls,
            defaults=dict(cls.defaults), summary=doc[0] if doc else "", contracts=contracts,
        )  # fmt: skip
        _SORTED.clear()
        return cls

    return wrap


_DISCOVERED = False


def _ensure_builtin_samplers() -> None:
    """Import every module of :mod:`leapgen.samplers` and its subpackages once, so that each
    sampler registers itself: adding a sampler is adding a module, with no list to edit."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    import importlib
    import pkgutil

    from .. import samplers as package

    for mod in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(mod.name)
    _DISCOVERED = True


def list_samplers() -> list[SamplerInfo]:
    """All registered samplers, sorted by family then name."""
    _ensure_builtin_samplers()
    if len(_SORTED) != len(_REGISTRY):
        _SORTED[:] = sorted(_REGISTRY.values(), key=lambda s: (s.family, s.name))
    return list(_SORTED)


def sampler_info(name: str) -> SamplerInfo:
    _ensure_builtin_samplers()
    if name not in _REGISTRY:
        import difflib

        key = str(name).strip().lower().replace("-", "_")
        close = [n for n in sorted(_REGISTRY) if key and n.startswith(key)][:3]
        close = close or difflib.get_close_matches(key, list(_REGISTRY), n=1, cutoff=0.6)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise UnknownSamplerError(
            f"unknown sampler {name!r}{hint}; registered samplers: {', '.join(sorted(_REGISTRY))}. "
            "See `leapgen samplers` for what each one guarantees."
        )
    return _REGISTRY[name]


def get_sampler(name: str, **params: Any) -> Sampler:
    """Instantiate the sampler registered as ``name`` with validated parameters."""
    return sampler_info(name).cls(**params)


def model_contract(model: Any) -> str | None:
    """The model contract (:data:`CONTRACTS`) an object implements, or None when it implements none."""
    for name in reversed(list(_CONTRACT_TESTS)):
        if _CONTRACT_TESTS[name](model):
            return name
    if isinstance(model, MaskedModel):
        return "masked"
    if isinstance(model, EncoderDecoderLM):
        return "encoder-decoder"
    if isinstance(model, CausalLM):
        return "causal"
    return None


def samplers_for(*contracts: str) -> list[str]:
    """Names of the registered samplers that run on a model of any of ``contracts``."""
    return [s.name for s in list_samplers() if set(s.contracts) & set(contracts)]


# --------------------------------------------------------------------------------------------
# sampler base


class Sampler:
    """Base class of every decode loop.

    Subclasses set ``defaults`` (parameter name -> default from the paper / reference code) and
    may override :meth:`validate` for range checks. Parameters are available as attributes.
    """

    name: ClassVar[str] = "base"
    guarantee: ClassVar[str] = "lossy"
    needs: ClassVar[tuple[str, ...]] = ("model",)
    contracts: ClassVar[tuple[str, ...]] = ("causal",)
    defaults: ClassVar[dict[str, Any]] = {}
    #: a setting under which this sampler is another registered one token for token (same seed,
    #: any temperature): ``(name, params)``, e.g. gsd with ``rank_window=0`` is sjd; None if none
    reduces_to: ClassVar[tuple[str, dict[str, Any]] | None] = None
    #: model feature -> how to run without it (the refusal of :meth:`check_features` says it)
    feature_hints: ClassVar[dict[str, str]] = {}
    #: parameter -> (the largest magnitude it takes, why): a count that allocates or loops in
    #: proportion to its value, or a scale that overflows the logits past it; refused at
    #: construction with a ConfigError naming the range (:func:`check_limits`)
    limits: ClassVar[dict[str, tuple[float, str]]] = {}
    #: whether every distribution it processes gets the coded context (:mod:`.penalties`), so it applies presence /
    #: frequency penalties (and the repetition penalty: ``honours_repetition_penalty``); else check_config refuses them
    #: (:mod:`.refusals`)
    honours_penalties: ClassVar[bool] = False
    honours_repetition_penalty: ClassVar[bool] = False
    ignores: ClassVar[dict[str, str]] = {}  #: sampling settings it never reads -> why (refused: :mod:`.refusals`)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every ``generate`` a subclass defines first refuses a config it cannot honour, or a model
        of another contract (:func:`~leapgen.samplers.config_checks.checked_generate`)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("generate")
        if own is not None and not getattr(own, "_checks_config", False):
            cls.generate = checked_generate(own, DecodeConfig)  # type: ignore[method-assign]

    @classmethod
    def honours_min_new_tokens(cls) -> bool:
        """Whether this sampler holds EOS back until ``DecodeConfig.min_new_tokens`` exactly (the
        decode loops' lossless samplers do; see :class:`~leapgen.samplers.loops.common.LoopSampler`)."""
        return False

    def check_config(self, config: DecodeConfig) -> None:
        """Refuse the settings of ``config`` this sampler cannot honour (a ``ConfigError`` naming the
        samplers that can), before anything runs: the rules of :data:`~.refusals.REFUSALS`."""
        refuse(self, config, list_samplers)

    def __init__(self, **params: Any) -> None:
        unknown = set(params) - set(self.defaults)
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "none"
            raise ConfigError(
                f"sampler {self.name!r} got unknown parameter(s) {sorted(unknown)}; its parameters are: {valid}."
            )
        nan = sorted(k for k, v in params.items() if isinstance(v, float) and math.isnan(v))
        if nan:  # never a valid setting, and it passes every `x < low` range check
            raise ConfigError(f"sampler {self.name!r}: parameter(s) {nan} are NaN; pass numbers (its defaults: "
                              f"{ {k: self.defaults[k] for k in nan} }).")
        flags = sorted(k for k, v in params.items() if isinstance(v, bool) and _is_number(self.defaults[k]))
        if flags:  # True would pass every `x >= 1` check as 1 (and False as 0): never meant as a count or scale
            raise ConfigError(f"sampler {self.name!r}: parameter(s) {flags} take a number, got a bool; pass numbers "
                              f"(its defaults: { {k: self.defaults[k] for k in flags} }).")
        self.params = {**self.defaults, **params}
        check_limits(self.name, self.params, self.limits)
        for k, v in self.params.items():
            setattr(self, k, v)
        self.validate()

    def validate(self) -> None:  # pragma: no cover - default accepts everything
        pass

    def step_bound(self) -> StepBound | None:
        """What a ``bounded`` sampler promises at every verification step with its parameters
        (:class:`StepBound`); None for the other guarantees."""
        return None

    def model_features(self) -> tuple[str, ...]:
        """What this sampler needs from its target model beyond the contract, with its settings (keys
        of :data:`~leapgen.samplers.features.MODEL_FEATURES`; none by default)."""
        return ()

    def check_features(self, models: dict[str, Any]) -> None:
        """Refuse a target model that lacks one of :meth:`model_features` (part of :meth:`check_models`)."""
        from .features import MODEL_FEATURES, missing_feature

        for feature in self.model_features():
            why = missing_feature(models["model"], feature)
            if why is not None:
                hint = self.feature_hints.get(feature, "choose another sampler")
                raise ConfigError(f"sampler {self.name!r} needs {MODEL_FEATURES[feature]}, but {why}; {hint}.")

    def check_models(self, models: dict[str, Any]) -> None:
        """Refuse missing models, models of a contract this sampler does not run on, and a target
        without a feature this sampler needs (:meth:`check_features`)."""
        missing = [n for n in self.needs if models.get(n) is None]
        if missing:
            raise ConfigError(
                f"sampler {self.name!r} needs model(s) {missing}, but the pipeline has none. "
                f"Load a pipeline that ships them or pass them explicitly (e.g. `pipe.draft = ...`)."
            )
        expected = " or ".join(self.contracts)
        for role in self.needs:
            model = models[role]
            contract = model_contract(model)
            if contract is None and isinstance(model, torch.nn.Module):
                raise ModelMismatchError(
                    f"sampler {self.name!r} runs on {expected} models, but {role!r} is a bare {type(model).__name__} "
                    "module; wrap it in its contract: leapgen.models.hf.as_causal_lm (causal), "
                    "leapgen.models.hf_seq2seq.as_seq2seq_lm (encoder-decoder) or leapgen.models.TorchMaskedLM (masked)."
                )
            if contract is not None and contract not in self.contracts:
                raise ModelMismatchError(
                    f"sampler {self.name!r} runs on {expected} models, but {role!r} is {a_type(model)} "
                    f"({contract} model). Samplers that run on {contract} models: {', '.join(samplers_for(contract))}."
                )
        self.check_features(models)

    def generate(
        self,
        models: dict[str, Any],
        prompts: list[list[int]],
        config: DecodeConfig,
        generator: torch.Generator | None = None,
        cond: Any = None,
    ) -> DecodeResult:
        """Decode a continuation of every prompt. ``cond`` is the typed condition of the batch
        (``leapgen.models.condition``: class labels, text, encoder state, audio prompt), handed to
        each model when its cache is created; prompts may then be empty (the model's condition
        slots start the sequence)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def new_stats(sampler: Sampler, batch_size: int) -> DecodeStats:
    return DecodeStats(sampler=sampler.name, batch_size=batch_size)


def make_generator(config: DecodeConfig, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded with ``config.seed`` (random when None): where every pipeline's seed becomes one."""
    g = torch.Generator(device=device)
    if config.seed is not None:
        if not -(2**63) <= int(config.seed) < 2**64:  # the range torch.Generator.manual_seed takes
            raise ConfigError(f"seed must be an integer in [-2**63, 2**64) (what torch.Generator.manual_seed takes), got "
                              f"{config.seed!r}; pass one in that range, e.g. seed % 2**64.")
        g.manual_seed(int(config.seed))
    else:
        g.seed()
    return g
