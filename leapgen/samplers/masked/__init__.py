"""Masked / discrete-diffusion decoding: one generic loop with pluggable parts, and its presets.

* ``loop.py``: :class:`MaskedInputs`, :class:`MaskedDecodeState`, the part interfaces and their
  registries, :func:`masked_decode` (the loop) and :class:`MaskedSampler` (parts by name).
* ``schedules.py``, ``scoring.py``, ``policies.py``, ``regions.py``, ``guidance.py``,
  ``hooks.py``: the registered parts.
* ``presets.py``: the registered samplers ``maskgit``, ``mask_predict``, ``genmol``.
"""

from . import guidance, hooks, policies, regions, schedules, scoring  # noqa: F401  (register parts)
from .loop import (
    GUIDANCES,
    HOOKS,
    POLICIES,
    REGIONS,
    SCHEDULES,
    SCORERS,
    ConfidenceScorer,
    Guidance,
    Hook,
    MaskedDecodeResult,
    MaskedDecodeState,
    MaskedInputs,
    MaskedParts,
    MaskedSampler,
    Region,
    Schedule,
    Stage,
    TokenProposer,
    UnmaskPolicy,
    masked_decode,
)
from .presets import GenMol, MaskGIT, MaskPredict

__all__ = [
    "GUIDANCES",
    "HOOKS",
    "POLICIES",
    "REGIONS",
    "SCHEDULES",
    "SCORERS",
    "ConfidenceScorer",
    "GenMol",
    "Guidance",
    "Hook",
    "MaskGIT",
    "MaskPredict",
    "MaskedDecodeResult",
    "MaskedDecodeState",
    "MaskedInputs",
    "MaskedParts",
    "MaskedSampler",
    "Region",
    "Schedule",
    "Stage",
    "TokenProposer",
    "UnmaskPolicy",
    "masked_decode",
]
