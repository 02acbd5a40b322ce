"""Masked / discrete-diffusion decoding: one generic loop with pluggable parts, and its presets.

* ``parts.py``: the part interfaces (:class:`Schedule`, :class:`ConfidenceScorer`,
  :class:`UnmaskPolicy`, :class:`Region`, :class:`Guidance`, :class:`Hook`, :class:`CachePolicy`),
  their registries and :class:`Stage`.
* ``state.py``: :class:`MaskedInputs`, :class:`MaskedDecodeState` (wrapping the model-side
  :class:`~leapgen.models.masked_base.MaskedState`: ids ``[B, K, T]`` or vectors ``[B, T, D]`` with
  a known-mask), :class:`MaskedDecodeResult`.
* ``step.py``: proposals (tokens, or vectors from a continuous model's head), units, commit logic.
* ``loop.py``: :func:`masked_decode`, the loop; ``sampler.py``: :class:`MaskedSampler` (parts by name).
* ``schedules.py``, ``scoring.py``, ``policies.py``, ``regions.py``, ``guidance.py``,
  ``hooks.py``, ``cache.py``: the registered parts.
* ``presets.py``: the registered samplers ``maskgit``, ``mask_predict``, ``genmol``.
"""

from ...models.masked_base import ContinuousMaskedModel, MaskedCache, MaskedModel, MaskedState
from . import cache, guidance, hooks, policies, regions, schedules, scoring  # noqa: F401  (register parts)
from .loop import MaskedParts, masked_decode
from .parts import (
    CACHES,
    GUIDANCES,
    HOOKS,
    POLICIES,
    REGIONS,
    SCHEDULES,
    SCORERS,
    CachePolicy,
    ConfidenceScorer,
    Guidance,
    Hook,
    Region,
    Schedule,
    Stage,
    UnmaskPolicy,
)
from .presets import GenMol, MaskGIT, MaskPredict
from .sampler import MaskedSampler
from .state import MaskedDecodeResult, MaskedDecodeState, MaskedInputs
from .step import TokenProposer

__all__ = [
    "CACHES",
    "GUIDANCES",
    "HOOKS",
    "POLICIES",
    "REGIONS",
    "SCHEDULES",
    "SCORERS",
    "CachePolicy",
    "ConfidenceScorer",
    "ContinuousMaskedModel",
    "GenMol",
    "Guidance",
    "Hook",
    "MaskGIT",
    "MaskPredict",
    "MaskedCache",
    "MaskedDecodeResult",
    "MaskedDecodeState",
    "MaskedInputs",
    "MaskedModel",
    "MaskedParts",
    "MaskedSampler",
    "MaskedState",
    "Region",
    "Schedule",
    "Stage",
    "TokenProposer",
    "UnmaskPolicy",
    "masked_decode",
]
