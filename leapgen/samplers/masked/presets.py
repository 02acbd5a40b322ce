"""Registered masked samplers: each paper is a parameter set for the one loop (``loop.py``, ``sampler.py``).

Every preset accepts all of :class:`~leapgen.samplers.masked.sampler.MaskedSampler`'s parameters
(so e.g. ``get_sampler("maskgit", region="blocks", block_length=16)`` works); only the defaults
differ. Token proposals use ``DecodeConfig.temperature / top_k / top_p`` (temperature 0 =
argmax); each preset's ``paper_config`` gives the value the paper used, for pipelines to apply.

Later presets drop in the same way (see masked.md §11.2): ``magnet`` = ``region="codebook_stages",
steps_per_stage=[20, 10, 10, 10], span_len=3, scorer="prob", span_score="max", guidance="cfg",
cfg_scale=10, cfg_min_scale=1, cfg_anneal="mask_rate", temperature_anneal="linear"`` (temperature
3.0, top_p 0.9); ``maskgct_t2s`` = ``schedule="sin", scorer="prob_gumbel", choice_temperature=1``;
``llada`` = ``region="blocks", block_length=32, schedule="per_block", scorer="prob"``;
``fast_dllm`` = llada + ``policy="threshold", threshold=0.9``; ``prophet`` = llada +
``hooks=("early_exit",)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import register_sampler
from .sampler import MaskedSampler


@register_sampler(
    "maskgit",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Chang et al. 2022 (MaskGIT, CVPR)",
)
class MaskGIT(MaskedSampler):
    """MaskGIT iterative confidence decoding: cosine schedule, log-prob + annealed Gumbel, commit-only.

    Paper: Chang et al., "MaskGIT: Masked Generative Image Transformer", CVPR 2022; defaults from
    google-research/maskgit ``libml/parallel_decode.decode``. Guarantee: lossy (parallel
    commits from per-position marginals; no exactness claim).

    Each step samples a token for every masked position, scores it by
    ``log p + choice_temperature * (1 - (i+1)/T) * Gumbel``, and keeps the
    ``floor(N * cos(pi/2 * (i+1)/T))`` least confident masked (at least one revealed, at least one
    kept until the last step). Committed and given tokens never change.

    Defaults: ``steps=12`` (``decode(num_iter=12)``; paper uses 8 at 256^2, ``generate_samples`` 16),
    ``choice_temperature=4.5``, ``schedule="cosine"``, ``noise_anneal="maskgit"``.
    ``paper_config``: proposals sampled at temperature 1.0.
    """

    defaults: ClassVar[dict[str, Any]] = {
        **MaskedSampler.defaults,
        "steps": 12,
        "schedule": "cosine",
        "scorer": "logprob_gumbel",
        "choice_temperature": 4.5,
        "noise_anneal": "maskgit",
        "policy": "topk",
        "region": "full",
    }
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 1.0}


@register_sampler(
    "mask_predict",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Ghazvininejad et al. 2019 (Mask-Predict, EMNLP)",
)
class MaskPredict(MaskedSampler):
    """Mask-Predict: linear schedule, re-mask the least probable tokens anywhere (revises commits).

    Paper: Ghazvininejad et al., "Mask-Predict: Parallel Decoding of Conditional Masked Language
    Models", EMNLP 2019; facebookresearch/Mask-Predict ``strategies/mask_predict.py``.
    Guarantee: lossy.

    Iteration 0 predicts every masked token (argmax, its probability is its score); iteration
    t = 1..T-1 re-masks the ``floor(N (T-t)/T)`` lowest-scoring generated tokens, including ones
    committed earlier, and re-predicts them (the others keep their old scores). Given tokens are
    never touched. Exactly ``steps`` forwards when there are at least ``steps`` masks (as the
    reference, it runs its steps with fewer masks too, re-predicting; hence ``steps`` <= 1000).

    Defaults: ``steps=10`` (``--decoding-iterations 10``), ``schedule="linear"``,
    ``scorer="prob"``, ``policy="remask_lowest"``. ``paper_config``: argmax (temperature 0).
    Not included: the length beam (top-l target lengths, l = 5 in the paper) -- the input fixes
    the length; run several lengths and keep the best mean log-prob.
    """

    defaults: ClassVar[dict[str, Any]] = {
        **MaskedSampler.defaults,
        "steps": 10,
        "schedule": "linear",
        "scorer": "prob",
        "choice_temperature": 0.0,
        "policy": "remask_lowest",
        "region": "full",
    }
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 0.0}


@register_sampler(
    "genmol",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Lee et al. 2025 (GenMol, ICML)",
)
class GenMol(MaskedSampler):
    """GenMol confidence sampling: one token per step, log-prob + annealed Gumbel ("randomness").

    Paper: Lee et al., "GenMol: A Drug Discovery Generalist with Discrete Diffusion", ICML 2025;
    NVIDIA-Digital-Bio/genmol ``sampler.py`` + bionemo-moco ``MDLM.step_confidence``.
    Guarantee: lossy.

    Each step: the mask logit is ruled out, tokens are sampled from ``softmax(logits / softmax_temp)``
    (= ``DecodeConfig.temperature``), the confidence is ``log p(x) + randomness * (1 - i/(S-1)) *
    Gumbel`` under that tempered distribution (``randomness`` = ``choice_temperature``), and the
    single most confident masked position is committed; S = the row's number of masks, so a row
    takes exactly S forwards (GenMol uses ``max(#masks, 2)`` for the whole batch; here each row
    anneals over its own count). Optional molecular context guidance:
    ``guidance="context", context_gamma=γ, context_weight=2`` (``w * full + (1 - w) * poor``).

    Defaults (de novo, GenMol v1 task recipe): ``choice_temperature=0.5`` (randomness 0.5),
    ``paper_config`` temperature 0.5 (softmax_temp; ``de_novo_generation``'s own signature
    default is 0.8). Fragment tasks use softmax_temp 1.2 with randomness 3 (linker), 1.2 (motif
    extension) or 2 (scaffold decoration, superstructure) and γ = 0.3 / 0.3 / 0.4 for the last
    three. The SAFE length sampling, fragment remasking and ``fix=True`` largest-fragment
    post-processing belong to the molecule pipeline, not to this sampler.
    """

    defaults: ClassVar[dict[str, Any]] = {
        **MaskedSampler.defaults,
        "steps": None,
        "schedule": "one_per_step",
        "scorer": "logprob_gumbel",
        "choice_temperature": 0.5,
        "noise_anneal": "genmol",
        "policy": "topk",
        "region": "full",
        "guidance": "none",
        "context_gamma": 0.0,
        "context_weight": 2.0,
    }
    paper_config: ClassVar[dict[str, Any]] = {"temperature": 0.5}
