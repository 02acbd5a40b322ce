"""Typed, batch-first conditions: what a model is conditioned on, handed to it with its cache.

A pipeline builds one condition for the batch and passes it as ``sampler.generate(..., cond=)``;
every model of the call receives it in ``new_cache(batch, cond)`` and the cache carries it
(``KVCache.cond``), dropping rows with the cache when rows finish. Conditions never travel as
out-of-vocabulary token ids: a model that reads its condition from leading sequence slots (an
image GPT's class and text embeddings) declares how many with ``condition_slots(cond)``, and
the runtime feeds placeholders there.

Kinds (each a dataclass whose tensors have the batch first):

* :class:`ClassCondition`: class labels (``NULL_LABEL`` = none), optional text word ids, and the
  call's classifier-free :class:`Guidance` (scale and cutoff), so that a model keeps no per-call
  state;
* :class:`TextEmbeddings`: precomputed text embeddings ``[B, S, D]`` with their padding mask
  (a frozen text encoder's output, e.g. flan-T5 captions for text-to-image);
* :class:`EncoderInputs`: raw encoder inputs (token ids or input features) that each
  encoder-decoder model of a call encodes itself, once, when its cache is created (so a draft
  and a target with different encoders both work);
* :class:`EncoderState`: an encoder's output ``memory [B, S, D]`` with its padding mask, computed
  once by ``EncoderDecoderLM.encode`` (plus model-specific cached tensors in ``extra``);
* :class:`AudioPrompt`: an audio / speaker prompt as codec codes ``[B, K, T]`` or features
  ``[B, T, D]`` (+ mask), and an optional speaker embedding ``[B, D]``.

All share ``batch_size``, ``select_rows(rows)``, ``to(device)`` and ``repeat_interleave(n)``, and
validate their shapes when built (``InputError`` naming what was expected). Models check the
kind with :func:`expect_condition`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor

from ..errors import InputError

C = TypeVar("C", bound="Condition")

#: the label of a row with no class (the model's null class, used by classifier-free guidance)
NULL_LABEL = -1


def _is_int(t: Tensor) -> bool:
    return not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


#: the largest guidance scale or weight in magnitude, for pipelines (:func:`check_guidance_scale`) and
#: samplers (``samplers.masked.parts.guidance_scale``) alike: the papers use 1 to 10; past this
#: ``u + s (c - u)`` leaves float range (1e300 ended in a bare "probability tensor contains inf / nan"
#: RuntimeError, or, in the image-family pipelines, a NumericalError after the whole decode)
MAX_GUIDANCE_SCALE = 1000.0


def check_guidance_scale(scale: Any) -> None:
    """``InputError`` unless ``scale`` (a call's ``cfg_scale``) is a number in
    ``[0, MAX_GUIDANCE_SCALE]`` (1 = none)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale <= MAX_GUIDANCE_SCALE:
        raise InputError(
            f"guidance scale (cfg_scale) must be a number from 0 to {MAX_GUIDANCE_SCALE:g} (1 = no guidance; "
            f"the papers use 1 to 10), got {scale!r}"
        )


@dataclass(frozen=True)
class Guidance:
    """Classifier-free guidance of one call: logits = ``uncond + scale * (cond - uncond)``;
    ``interval`` is LlamaGen's cutoff (-1 = guide every token; see
    :func:`leapgen.models.guidance.cfg_logits`). ``scale = 1`` means no guidance (no doubled batch)."""

    scale: float = 1.0
    interval: int = -1

    def __post_init__(self) -> None:
        check_guidance_scale(self.scale)
        if isinstance(self.interval, bool) or not isinstance(self.interval, int) or self.interval < -1:
            raise InputError(f"guidance interval must be an int >= -1 (-1 = guide every token), got {self.interval!r}")
        object.__setattr__(self, "scale", float(self.scale))

    @property
    def active(self) -> bool:
        return self.scale != 1.0


@dataclass(kw_only=True)
class Condition:
    """Base of the typed conditions: row operations over the batch-first tensor fields.

    Subclasses list their batch-first tensor fields in ``batch_fields``; other tensor fields
    (none by default) only move with :meth:`to`. ``extra`` holds model-specific tensors with the
    batch first (e.g. cached cross-attention keys), which follow the rows too.
    """

    kind: ClassVar[str] = "condition"
    batch_fields: ClassVar[tuple[str, ...]] = ()
    extra: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ``InputError`` unless every batch field agrees on the batch size."""
        sizes = {}
        for name in self.batch_fields:
            t = getattr(self, name)
            if t is None:
                continue
            if not isinstance(t, Tensor):
                raise InputError(f"{type(self).__name__}.{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() == 0:
                raise InputError(f"{type(self).__name__}.{name} must have the batch as its first dimension, got a scalar")
            sizes[name] = t.shape[0]
        for k, t in self.extra.items():
            if not isinstance(t, Tensor) or t.dim() == 0:
                raise InputError(f"{type(self).__name__}.extra[{k!r}] must be a tensor with the batch first")
            sizes[f"extra[{k!r}]"] = t.shape[0]
        if len(set(sizes.values())) > 1:
            raise InputError(f"{type(self).__name__}: fields disagree on the batch size: {sizes}")
        if not sizes:
            raise InputError(f"{type(self).__name__} holds no tensor; give at least one of {self.batch_fields}")

    @property
    def batch_size(self) -> int:
        for name in self.batch_fields:
            t = getattr(self, name)
            if t is not None:
                return int(t.shape[0])
        return int(next(iter(self.extra.values())).shape[0])

    # ------------------------------------------------------------------ row operations
    def _map(self: C, fn: Any, all_tensors: bool = False) -> C:
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "extra":
                changes["extra"] = {k: fn(t) for k, t in v.items()}
            elif isinstance(v, Tensor) and (all_tensors or f.name in self.batch_fields):
                changes[f.name] = fn(v)
        return dataclasses.replace(self, **changes)

    def select_rows(self: C, rows: Tensor) -> C:
        """The condition of the given batch rows (``rows``: long indices), in that order."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        if rows.numel() and (int(rows.min()) < -self.batch_size or int(rows.max()) >= self.batch_size):
            raise InputError(f"row index out of range for a condition of batch size {self.batch_size}")
        return self._map(lambda t: t.index_select(0, rows.to(t.device)))

    def concat_rows(self: C, other: C) -> C:
        """The rows of ``self`` followed by those of ``other`` (e.g. a condition and its null
        counterpart for one guided forward over the doubled batch). Raises ``InputError`` when
        they do not stack: another type, batch fields present in one only or of other shapes,
        or differing fields outside the batch (such as the guidance)."""
        if type(other) is not type(self):
            raise InputError(f"cannot stack {type(self).__name__} with {type(other).__name__}")

        def cat(name: str, x: Tensor | None, y: Tensor | None) -> Tensor | None:
            if x is None and y is None:
                return None
            if x is None or y is None or x.shape[1:] != y.shape[1:] or x.dtype != y.dtype or x.device != y.device:
                def desc(t: Tensor | None) -> str:
                    return "None" if t is None else f"{tuple(t.shape)} {t.dtype}"

                raise InputError(f"{type(self).__name__}.{name} does not stack: {desc(x)} and {desc(y)}")
            return torch.cat([x, y])

        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            x, y = getattr(self, f.name), getattr(other, f.name)
            if f.name == "extra":
                if x.keys() != y.keys():
                    raise InputError(f"{type(self).__name__}.extra keys differ: {sorted(x)} and {sorted(y)}")
                changes["extra"] = {k: cat(f"extra[{k!r}]", x[k], y[k]) for k in x}
            elif f.name in self.batch_fields:
                changes[f.name] = cat(f.name, x, y)
            elif isinstance(x, Tensor) or isinstance(y, Tensor):
                if not (isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape == y.shape and bool(torch.equal(x, y))):
                    raise InputError(f"{type(self).__name__}.{f.name} differs between the two conditions")
            elif x != y:
                raise InputError(f"{type(self).__name__}.{f.name} differs between the two conditions")
        return dataclasses.replace(self, **changes)

    def to(self: C, device: torch.device | str) -> C:
        """The same condition with every tensor on ``device`` (dtypes unchanged)."""
        return self._map(lambda t: t.to(device), all_tensors=True)

    def repeat_interleave(self: C, n: int) -> C:
        """Each row repeated ``n`` times in place (``[a, b] -> [a, a, b, b]`` for n = 2), e.g. for
        several samples per prompt."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"repeat count must be a positive int, got {n!r}")
        return self._map(lambda t: t.repeat_interleave(n, dim=0))

    def __len__(self) -> int:
        return self.batch_size


@dataclass(kw_only=True)
class ClassCondition(Condition):
    """Class labels ``[B]`` (``NULL_LABEL`` = no class), optional text word ids ``[B, T]`` in the
    model's text vocabulary (the model's own null/pad ids mark rows without text), and the call's
    classifier-free guidance.

    ``neg_labels`` ``[B]`` / ``neg_text_ids`` ``[B, T]`` (both None by default) are a negative
    prompt: the condition of guidance's "unconditional" half in place of the null class / null
    text (``uncond + scale * (cond - uncond)`` then moves away from it). With ``neg_labels`` set,
    rows whose negative prompt is a text carry ``NULL_LABEL`` there, and ``neg_text_ids`` None
    means the null text for every row."""

    kind: ClassVar[str] = "class labels (+ text ids)"
    batch_fields: ClassVar[tuple[str, ...]] = ("labels", "text_ids", "neg_labels", "neg_text_ids")
    labels: Tensor
    text_ids: Tensor | None = None
    guidance: Guidance = field(default_factory=Guidance)
    neg_labels: Tensor | None = None
    neg_text_ids: Tensor | None = None

    def validate(self) -> None:
        super().validate()
        for name in ("labels", "neg_labels"):
            t = getattr(self, name)
            if t is None:
                continue
            if t.dim() != 1 or not _is_int(t):
                raise InputError(f"ClassCondition.{name} must be integer class ids of shape [B], got {self._desc(t)}")
            if t.numel() and int(t.min()) < NULL_LABEL:
                raise InputError(f"class labels must be >= 0, or {NULL_LABEL} for no class; got {int(t.min())}")
        if self.neg_text_ids is not None and self.neg_labels is None:
            raise InputError("ClassCondition.neg_text_ids needs neg_labels (NULL_LABEL for a text negative prompt)")
        for name in ("text_ids", "neg_text_ids"):
            t = getattr(self, name)
            if t is None:
                continue
            if t.dim() != 2 or not _is_int(t):
                raise InputError(f"ClassCondition.{name} must be integer word ids of shape [B, T], got {self._desc(t)}")
            if t.numel() and int(t.min()) < 0:
                raise InputError(f"text word ids must be >= 0, got {int(t.min())}")
        if not isinstance(self.guidance, Guidance):
            raise InputError(f"ClassCondition.guidance must be a Guidance, got {type(self.guidance).__name__}")

    @staticmethod
    def _desc(t: Tensor) -> str:
        return f"{tuple(t.shape)} {t.dtype}"

    def with_guidance(self, scale: float = 1.0, interval: int = -1) -> ClassCondition:
        return dataclasses.replace(self, guidance=Guidance(scale, interval))

    @property
    def has_negative(self) -> bool:
        """Whether a negative prompt replaces the null condition of guidance's unconditional half."""
        return self.neg_labels is not None

    def unguided(self) -> ClassCondition:
        """The same condition without guidance: the model's conditional logits only (metrics)."""
        return dataclasses.replace(self, guidance=Guidance(), neg_labels=None, neg_text_ids=None)


@dataclass(kw_only=True)
class TextEmbeddings(Condition):
    """Precomputed text embeddings ``[B, S, D]`` and their mask ``[B, S]`` (True = a real token),
    with the call's classifier-free guidance."""

    kind: ClassVar[str] = "text embeddings"
    batch_fields: ClassVar[tuple[str, ...]] = ("embeddings", "mask")
    embeddings: Tensor
    mask: Tensor | None = None
    guidance: Guidance = field(default_factory=Guidance)

    def validate(self) -> None:
        super().validate()
        e = self.embeddings
        if e.dim() != 3 or not e.is_floating_point():
            raise InputError(f"TextEmbeddings.embeddings must be float [B, S, D], got {tuple(e.shape)} {e.dtype}")
        _check_mask(self.mask, e.shape[:2], "TextEmbeddings.mask")

    def unguided(self) -> TextEmbeddings:
        return dataclasses.replace(self, guidance=Guidance())


@dataclass(kw_only=True)
class EncoderInputs(Condition):
    """Raw inputs of an encoder-decoder model's encoder: token ids ``[B, S]`` (+ ``attention_mask``
    ``[B, S]``, 1 = real) or input features ``[B, F, T]`` (Whisper's log-mel frames). Every model
    of a call encodes them itself, once, when its cache is created."""

    kind: ClassVar[str] = "encoder inputs"
    batch_fields: ClassVar[tuple[str, ...]] = ("input_ids", "attention_mask", "input_features")
    input_ids: Tensor | None = None
    attention_mask: Tensor | None = None
    input_features: Tensor | None = None

    def validate(self) -> None:
        super().validate()
        if (self.input_ids is None) == (self.input_features is None):
            raise InputError("EncoderInputs needs exactly one of input_ids [B, S] or input_features [B, F, T]")
        if self.input_ids is not None:
            if self.input_ids.dim() != 2 or not _is_int(self.input_ids):
                raise InputError(f"EncoderInputs.input_ids must be integer ids [B, S], got {tuple(self.input_ids.shape)}")
            _check_mask(self.attention_mask, self.input_ids.shape, "EncoderInputs.attention_mask")
        elif self.input_features.dim() != 3 or not self.input_features.is_floating_point():
            raise InputError(
                f"EncoderInputs.input_features must be float [B, F, T], got {tuple(self.input_features.shape)}"
            )


@dataclass(kw_only=True)
class EncoderState(Condition):
    """An encoder's output: ``memory [B, S, D]`` and its padding ``mask [B, S]`` (True = real),
    computed once per call. ``extra`` may hold model-specific tensors (batch first) derived from
    it; ``source`` names the encoder that produced it (checked by the decoder)."""

    kind: ClassVar[str] = "encoder state"
    batch_fields: ClassVar[tuple[str, ...]] = ("memory", "mask")
    memory: Tensor
    mask: Tensor | None = None
    source: str | None = None

    def validate(self) -> None:
        super().validate()
        if self.memory.dim() != 3 or not self.memory.is_floating_point():
            raise InputError(f"EncoderState.memory must be float [B, S, D], got {tuple(self.memory.shape)} {self.memory.dtype}")
        _check_mask(self.mask, self.memory.shape[:2], "EncoderState.mask")


@dataclass(kw_only=True)
class AudioPrompt(Condition):
    """An audio / speaker prompt: codec ``codes [B, K, T]`` or ``features [B, T, D]`` (+ ``mask``
    ``[B, T]``, True = real frame), and an optional ``speaker`` embedding ``[B, D]``."""

    kind: ClassVar[str] = "audio prompt"
    batch_fields: ClassVar[tuple[str, ...]] = ("codes", "features", "mask", "speaker")
    codes: Tensor | None = None
    features: Tensor | None = None
    mask: Tensor | None = None
    speaker: Tensor | None = None

    def validate(self) -> None:
        super().validate()
        if self.codes is not None and self.features is not None:
            raise InputError("AudioPrompt takes codes [B, K, T] or features [B, T, D], not both")
        if self.codes is not None:
            if self.codes.dim() != 3 or not _is_int(self.codes):
                raise InputError(f"AudioPrompt.codes must be integer codes [B, K, T], got {tuple(self.codes.shape)}")
            _check_mask(self.mask, (self.codes.shape[0], self.codes.shape[2]), "AudioPrompt.mask")
        elif self.features is not None:
            if self.features.dim() != 3 or not self.features.is_floating_point():
                raise InputError(f"AudioPrompt.features must be float [B, T, D], got {tuple(self.features.shape)}")
            _check_mask(self.mask, self.features.shape[:2], "AudioPrompt.mask")
        elif self.speaker is None:
            raise InputError("AudioPrompt needs codes [B, K, T], features [B, T, D] or a speaker embedding [B, D]")
        if self.speaker is not None and (self.speaker.dim() != 2 or not self.speaker.is_floating_point()):
            raise InputError(f"AudioPrompt.speaker must be a float embedding [B, D], got {tuple(self.speaker.shape)}")

    @property
    def num_codebooks(self) -> int | None:
        return None if self.codes is None else int(self.codes.shape[1])


def _check_mask(mask: Tensor | None, shape: Any, name: str) -> None:
    if mask is None:
        return
    if tuple(mask.shape) != tuple(shape):
        raise InputError(f"{name} must have shape {tuple(shape)} (batch, length), got {tuple(mask.shape)}")
    if mask.is_floating_point():
        raise InputError(f"{name} must be bool or integer (True/1 = real), got {mask.dtype}")


def expect_condition(
    cond: Any,
    kinds: type[Condition] | tuple[type[Condition], ...],
    model: str,
    batch_size: int | None = None,
    required: bool = False,
) -> Any:
    """Check that ``cond`` is one of ``kinds`` (or None unless ``required``) and, when
    ``batch_size`` is given, has that many rows; raise ``InputError`` naming what ``model``
    expects otherwise. Returns ``cond``."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    want = " or ".join(f"a {k.__name__} ({k.kind})" for k in kinds)
    if cond is None:
        if required:
            raise InputError(f"{model} needs a condition: {want}; got none")
        return None
    if not isinstance(cond, kinds):
        got = type(cond).__name__
        hint = " (conditions are typed objects of leapgen.models.condition, not raw tensors or token ids)"
        raise InputError(f"{model} takes {want} as its condition, got a {got}" + ("" if isinstance(cond, Condition) else hint))
    if batch_size is not None and cond.batch_size != batch_size:
        raise InputError(f"{model}: the condition has {cond.batch_size} rows but the batch has {batch_size}; give one row per prompt")
    return cond


__all__ = [
    "MAX_GUIDANCE_SCALE",
    "check_guidance_scale",
    "NULL_LABEL",
    "Guidance",
    "Condition",
    "ClassCondition",
    "TextEmbeddings",
    "EncoderInputs",
    "EncoderState",
    "AudioPrompt",
    "expect_condition",
]
