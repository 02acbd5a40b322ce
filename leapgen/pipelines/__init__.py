"""Modality pipelines: components + pre/post-processing around a sampler."""

from .base import Pipeline, list_shipped, resolve_pretrained
from .image import ImageARPipeline, ImageOutput
from .molecule import MoleculeOutput, MoleculePipeline
from .text import TextOutput, TextPipeline

__all__ = ["Pipeline", "TextPipeline", "TextOutput", "ImageARPipeline", "ImageOutput", "MoleculePipeline", "MoleculeOutput", "list_shipped", "resolve_pretrained"]
