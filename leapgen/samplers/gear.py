"""GEAR: KV-cache compression (quantisation + low-rank residual + sparse outliers) as a cache option.

Paper: Kang et al., "GEAR: An Efficient KV Cache Compression Recipe for Near-Lossless Generative
Inference of LLM", arXiv 2403.05527 (code ``HaoKang-Timmy/GEAR``).

The compression is a model option: :class:`~leapgen.models.text_variants.VariantLM` with
``gear=Gear(bits, rank, outlier, buffer)`` compresses every block of ``buffer`` slots once it has
left the streaming buffer of recent slots (``X ~ D + L + S``: ``bits``-bit uniform quantisation with
per-channel ranges, a rank-``rank`` residual, the ``outlier`` fraction of largest entries kept
exactly). Any sampler decodes over that model (it is a ``causal`` model); with ``buffer`` at least
the longest draft, speculative rollback only ever touches uncompressed slots. This registered
sampler is plain autoregressive decoding over it, and reports the cache's storage
(``stats.extra["kv_bytes_full"]``, ``["kv_bytes_gear"]``: uncompressed entries vs the compressed form).

Guarantee: ``lossy``. ``bits=0`` is no compression (``ar`` token for token). A model that is not a
Llama the lean runtime can run is refused. Defaults: ``bits=4``, ``rank=2``, ``outlier=0.02``,
``buffer=16``, ``block=64``. Storage is reported against the cache's own dtype (float32 on CPU)
and, in ``kv_ratio_vs_fp16``, against an fp16 cache.
"""

from __future__ import annotations

import threading

from ..errors import ConfigError
from ..models.lean import LeanCausalLM
from ..models.text_variants import Gear, VariantLM, cache_bytes
from .ar import NoDraft
from .base import DecodeResult, register_sampler
from .features import missing_feature
from .loops.chain import ChainSampler

_TWIN_LOCK = threading.Lock()


def lean_view(lm, name: str) -> LeanCausalLM:
    """The lean runtime for ``lm`` (itself, or built once from a transformers Llama adapter); which
    models have one is :func:`~leapgen.samplers.features.missing_feature`'s ``lean_cache`` rule."""
    if missing_feature(lm, "lean_cache") is not None:
        raise ConfigError(
            f"sampler {name!r} compresses the lean runtime's KV cache; {type(lm).__name__} is not a Llama the "
            "lean runtime can run (leapgen.models.lean.lean_supported says why)."
        )
    if isinstance(lm, VariantLM):
        return lm.base
    if isinstance(lm, LeanCausalLM):
        return lm
    if getattr(lm, "_lean_twin", None) is None:
        with _TWIN_LOCK:  # concurrent first calls build one twin (a copy of the weights), not one each
            if getattr(lm, "_lean_twin", None) is None:
                lm._lean_twin = LeanCausalLM.from_hf(lm.model)
    return lm._lean_twin


@register_sampler(
    "gear",
    family="ar-lossy",
    guarantee="lossy",
    needs=("model",),
    paper="Kang et al. 2024 (GEAR), arXiv 2403.05527",
    contracts=("causal",),
)
class GearAR(ChainSampler):
    """Autoregressive decoding over a GEAR-compressed KV cache."""

    defaults = {"bits": 4, "rank": 2, "outlier": 0.02, "buffer": 16, "block": 64}
    proposer = NoDraft
    reduces_to = ("ar", {"bits": 0})
    feature_hints = {"lean_cache": "run it on a Llama model (the shipped text models)"}

    def model_features(self) -> tuple[str, ...]:
        return ("lean_cache",)

    def gear(self) -> Gear:
        return Gear(bits=self.bits, rank=self.rank, outlier=self.outlier, buffer=self.buffer, block=self.block)

    def validate(self) -> None:
        self.gear().validate()

    def generate(self, models, prompts, config, generator=None, cond=None) -> DecodeResult:
        self.check_models(models)
        lm = models["model"]
        gear = self.gear()
        inner = VariantLM(lean_view(lm, self.name), gear=gear if gear.bits else None)
        res = super().generate({**models, "model": inner}, prompts, config, generator, cond)
        lm.forwards += inner.forwards
        c = inner.net.c
        longest = max((len(p) + len(s) for p, s in zip(prompts, res.sequences)), default=0)
        size = cache_bytes(longest, c.n_layers, c.kv_heads, c.head_dim, gear, full_bytes=inner.dtype.itemsize)
        res.stats.extra["kv_bytes_full"] = size["full"]
        res.stats.extra["kv_bytes_gear"] = size["compressed"]
        res.stats.extra["kv_ratio_vs_fp16"] = cache_bytes(longest, c.n_layers, c.kv_heads, c.head_dim, gear, full_bytes=2)["full"] / max(1.0, size["compressed"])
        return res
