"""leapgen: fast generation across modalities, every parallel-decoding method a registered sampler."""

from __future__ import annotations

import logging

from .errors import (
    AssetNotFoundError,
    ConfigError,
    InputError,
    LeapgenError,
    ModelMismatchError,
    NumericalError,
    UnknownSamplerError,
)
from .samplers import (
    DecodeConfig,
    DecodeResult,
    DecodeStats,
    Sampler,
    get_sampler,
    list_samplers,
    register_sampler,
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())


_PIPELINE_EXPORTS = (
    "Pipeline", "TextPipeline", "TextOutput", "ImageARPipeline", "ImageOutput", "MoleculePipeline", "MoleculeOutput",
)


def __getattr__(name: str):
    # pipelines import transformers lazily-heavy modules; keep `import leapgen` cheap
    if name in _PIPELINE_EXPORTS:
        from . import pipelines

        return getattr(pipelines, name)
    raise AttributeError(name)


__all__ = [
    *_PIPELINE_EXPORTS,
    "DecodeConfig",
    "DecodeResult",
    "DecodeStats",
    "Sampler",
    "get_sampler",
    "list_samplers",
    "register_sampler",
    "LeapgenError",
    "ConfigError",
    "UnknownSamplerError",
    "InputError",
    "ModelMismatchError",
    "AssetNotFoundError",
    "NumericalError",
]
