"""``maskgct_s2a``: MaskGCT semantic-to-acoustic masked decoding, RVQ layer by layer (ICLR 2025).

Reference: ``open-mmlab/Amphion`` ``models/tts/maskgct/maskgct_s2a.py`` ``reverse_diffusion`` and
``maskgct_utils.semantic2acoustic``. Runs on ``tts-acoustic`` models (e.g.
:class:`~leapgen.models.tts_lm.S2AMaskedLM`): the acoustic prompt's codes (every layer) are a known
prefix; the semantic tokens are the condition; layers are decoded coarse to fine
(``region="codebook_stages"``), each with its own step count.

Defaults (MaskGCT): ``steps_per_stage=(25, 10, 1, 1)`` (MaskGCT's ``[25, 10, 1, 1, ...]`` for 12
layers, cut to the codec's 4), ``sin`` schedule, confidence ``p + t_i * Gumbel``, linear temperature
anneal (``paper_config``: ``temperature=1.5``), top-k 2 % (``filter_thres=0.98``), embedding-space
CFG ``cfg_scale=2.5``, ``rescale_cfg=0.75``; the last step of a stage is argmax, a one-step stage
samples at ``single_step_temperature=0.2`` (MaskGCT's Gumbel at 0.2). Guarantee: lossy.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import register_sampler
from .maskgct_common import MASKGCT_DEFAULTS, MaskGCTSampler


@register_sampler("maskgct_s2a", family="masked", guarantee="lossy", needs=("model",),
                  paper="Wang et al. 2025 (MaskGCT, ICLR), S2A", contracts=("tts-acoustic",))
class MaskGCTS2A(MaskGCTSampler):
    """MaskGCT S2A: codebook stages coarse to fine with steps (25, 10, 1, 1), sin schedule, embedding-space CFG,
    Gumbel-on-probability confidence, last step argmax (one-step layers: temperature 0.2). Guarantee: lossy."""

    contract: ClassVar[str] = "tts-acoustic"
    defaults: ClassVar[dict[str, Any]] = {**MASKGCT_DEFAULTS, "region": "codebook_stages", "steps_per_stage": (25, 10, 1, 1),
                                          "single_step_temperature": 0.2}
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 1.5}
