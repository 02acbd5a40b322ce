"""What a sampler may need from its target model beyond the contract, and whether a model offers it.

A contract (``causal``, ``encoder-decoder`` ...) says how a model is called; a few samplers also
read something only some models of a contract have. Each such sampler says which with its current
settings (:meth:`Sampler.model_features`), refuses a model without one before decoding
(:meth:`Sampler.check_features`, part of ``check_models``), and a pipeline whose models lack one
says so in ``Pipeline.model_lacks``, so that ``runnable_samplers()`` does not offer the sampler
and the call refuses it with the reason.
"""

from __future__ import annotations

from typing import Any

#: feature -> what it is
MODEL_FEATURES: dict[str, str] = {
    "embeddings": "an input embedding table with one row per output token (CausalLM.embeddings(); "
    "gsd groups tokens by their distance)",
    "token_latents": "one latent vector per output token (CausalLM.token_latents(): an image model's VQ "
    "codebook; lantern's proximity sets)",
    "lean_cache": "the lean runtime's KV cache (a Llama model that leapgen.models.lean runs; gear compresses it)",
}


def missing_feature(lm: Any, feature: str) -> str | None:
    """None when ``lm`` offers ``feature`` (a key of :data:`MODEL_FEATURES`), else why not."""
    if feature not in MODEL_FEATURES:
        raise ValueError(f"unknown model feature {feature!r}; known: {sorted(MODEL_FEATURES)}")
    name = type(lm).__name__
    if feature == "embeddings":
        emb = lm.embeddings() if hasattr(lm, "embeddings") else None
        if emb is None:
            return f"{name}.embeddings() returns None"
        vocab = getattr(lm, "vocab_size", emb.shape[0])
        return None if emb.shape[0] >= vocab else f"{name}'s embedding table has {emb.shape[0]} rows for {vocab} tokens"
    if feature == "token_latents":
        return None if hasattr(lm, "token_latents") and lm.token_latents() is not None else f"{name}.token_latents() returns None"
    # the models gear's lean_view takes (it builds the lean twin of a transformers Llama; this does not)
    from ..models.lean import LeanCausalLM
    from ..models.text_variants import VariantLM

    if isinstance(lm, (VariantLM, LeanCausalLM)) or getattr(lm, "_lean_twin", None) is not None:
        return None
    src = getattr(lm, "model", None)
    if src is not None and LeanCausalLM.supported(src) is None:
        return None
    return f"{name} is not a Llama the lean runtime can run"


__all__ = ["MODEL_FEATURES", "missing_feature"]
