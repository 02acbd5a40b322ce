"""Modality pipelines: components + pre/post-processing around a sampler."""

from .asr import ASROutput, ASRPipeline
from .audio import AudioOutput, AudioPipeline
from .base import Pipeline, list_shipped, resolve_pretrained
from .image import ImageARPipeline, ImageOutput
from .image_ctf import ImageCTFPipeline
from .image_dd import ImageDDPipeline
from .image_mar import ContinuousImageOutput, ImageMARPipeline
from .image_nar import ImageNARPipeline
from .image_scale import ImageScalePipeline
from .molecule import MoleculeOutput, MoleculePipeline
from .ocr import OCROutput, OCRPipeline
from .peptide import PeptideOutput, PeptidePipeline
from .s2st import S2STOutput, S2STPipeline
from .text import TextOutput, TextPipeline
from .text_diffusion import DiffusionTextPipeline
from .tts import TTSOutput, TTSPipeline

__all__ = [
    "ASROutput", "ASRPipeline", "AudioOutput", "AudioPipeline", "ContinuousImageOutput", "DiffusionTextPipeline",
    "ImageARPipeline", "ImageCTFPipeline", "ImageDDPipeline", "ImageMARPipeline", "ImageNARPipeline", "ImageOutput",
    "ImageScalePipeline", "MoleculeOutput", "MoleculePipeline", "OCROutput", "OCRPipeline", "PeptideOutput",
    "PeptidePipeline", "Pipeline", "S2STOutput", "S2STPipeline", "TTSOutput", "TTSPipeline", "TextOutput", "TextPipeline", "list_shipped", "resolve_pretrained",
]
