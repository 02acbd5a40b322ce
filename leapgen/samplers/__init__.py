"""Decode loops (samplers), their registry and the shared acceptance machinery."""

from .base import (
    DecodeConfig,
    DecodeResult,
    DecodeStats,
    Sampler,
    SamplerInfo,
    get_sampler,
    list_samplers,
    register_contract,
    register_sampler,
    sampler_info,
)

__all__ = [
    "DecodeConfig",
    "DecodeResult",
    "DecodeStats",
    "Sampler",
    "SamplerInfo",
    "get_sampler",
    "list_samplers",
    "register_contract",
    "register_sampler",
    "sampler_info",
]
