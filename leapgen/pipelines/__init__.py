"""Modality pipelines: components + pre/post-processing around a sampler."""

from .base import Pipeline, list_shipped, resolve_pretrained
from .text import TextOutput, TextPipeline

__all__ = ["Pipeline", "TextPipeline", "TextOutput", "list_shipped", "resolve_pretrained"]
