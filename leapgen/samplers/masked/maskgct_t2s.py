"""``maskgct_t2s``: MaskGCT text-to-semantic masked decoding (Wang et al., ICLR 2025).

Reference: ``open-mmlab/Amphion`` ``models/tts/maskgct/maskgct_t2s.py`` ``reverse_diffusion``.
Runs on ``tts-semantic`` models (e.g. :class:`~leapgen.models.tts_lm.T2SMaskedLM`): the prompt's
semantic tokens are a known prefix (never written), the target frames are masked; the phones of
prompt text + target text are the condition.

Defaults (MaskGCT): ``steps=25`` (``maskgct_inference``; ``text2semantic`` uses 50), ``sin`` mask
schedule, confidence ``p + choice_temperature * t_i * Gumbel`` with ``choice_temperature=1.0``,
sampling temperature annealed linearly ``temp * t_i`` (``paper_config``: ``temperature=0.9``),
top-k ``ceil(0.02 V)`` (``filter_thres=0.98``), CFG in embedding space ``cfg_scale=2.5`` with
``rescale_cfg=0.75``, last step argmax. Guarantee: lossy (sampling).
Mechanics shared with ``maskgct_s2a``: :mod:`leapgen.samplers.masked.maskgct_common`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import register_sampler
from .maskgct_common import MASKGCT_DEFAULTS, MaskGCTSampler


@register_sampler("maskgct_t2s", family="masked", guarantee="lossy", needs=("model",),
                  paper="Wang et al. 2025 (MaskGCT, ICLR), T2S", contracts=("tts-semantic",))
class MaskGCTT2S(MaskGCTSampler):
    """MaskGCT T2S: sin schedule, embedding-space CFG (2.5, rescale 0.75), Gumbel-on-probability confidence,
    linear temperature anneal, top-k 2 %, 25 steps, last step argmax. Guarantee: lossy."""

    contract: ClassVar[str] = "tts-semantic"
    defaults: ClassVar[dict[str, Any]] = {**MASKGCT_DEFAULTS, "steps": 25, "region": "full"}
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 0.9}
