"""NAR next-neighbour image pipeline: the raster pipeline's VQ, prompts, guidance and outputs, with a
:class:`~leapgen.models.nar.NARGPT` whose anti-diagonals decode in one forward each.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji-nar")
>>> out = pipe(["red apple"], sampler="nar", cfg_scale=3.0, seed=0)   # 31 forwards for 16x16
>>> raster = pipe(["red apple"], sampler="ar", cfg_scale=3.0, seed=0)  # 256 forwards, right head

The model offers two contracts: ``next-neighbour`` (:class:`~leapgen.models.nar.NARLM`, for ``nar``)
and ``causal`` (the same network as a raster :class:`~leapgen.models.llamagen_lm.LlamaGenLM`, its
right head under a causal mask: ``ar`` and every causal sampler that needs only the model). Each call
hands the sampler the adapter of the contract it declares; everything else (prompt resolution,
``cfg_scale``, ``seed`` / ``generator``, progress, callbacks, :class:`ImageOutput`) is
:class:`~leapgen.pipelines.image.ImageARPipeline`'s.
"""

from __future__ import annotations

from typing import Any

from ..models.nar import NARGPT, NARLM
from ..samplers.base import Sampler
from .image import ImageARPipeline, Prompt
from .outputs import ImageOutput


class ImageNARPipeline(ImageARPipeline):
    """Class/text prompt(s) in, images out, decoded by anti-diagonals (``nar``) or in raster order."""

    contracts = ("next-neighbour", "causal")

    def __init__(self, vq, model, draft=None, text_tokenizer=None, class_names: tuple[str, ...] | None = None) -> None:
        if not isinstance(model, NARGPT):
            raise TypeError(f"model must be a NARGPT (a LlamaGen GPT with NAR's below head), got {type(model).__name__}")
        super().__init__(vq=vq, model=model, draft=draft, text_tokenizer=text_tokenizer, class_names=class_names)

    def models_for(self, sampler: Sampler) -> dict[str, Any]:
        if "next-neighbour" in sampler.contracts:
            return {"model": NARLM(self.model)}
        return super().models_for(sampler)

    def __call__(self, prompt: Prompt | list[Prompt], sampler: str | Sampler = "nar", **kwargs: Any) -> ImageOutput | tuple:
        """As :meth:`ImageARPipeline.__call__`, with ``nar`` as the default sampler."""
        return super().__call__(prompt, sampler=sampler, **kwargs)


__all__ = ["ImageNARPipeline"]
