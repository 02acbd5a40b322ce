"""Next-scale (VAR) and next-frequency (NFIG) image pipeline: a multi-scale residual tokenizer
(:class:`~leapgen.tokenizers.multiscale_vq.MultiScaleVQ`) and a :class:`~leapgen.models.var.ScaleGPT`.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji-var")          # or "leapgen/image-emoji-nfig"
>>> out = pipe(["red apple", "animals"], sampler="var", cfg_scale=3.0, seed=0)   # 9 forwards per image
>>> out.images[0].save("apple.png"); print(out.stats)

Prompts, guidance (``cfg_scale``; VAR's schedule grows it linearly over the levels, see
:mod:`leapgen.samplers.scale.var`), ``seed`` / ``generator``, progress and callbacks behave as in
:class:`~leapgen.pipelines.image.ImageARPipeline`. The pipeline offers the ``next-scale`` contract
when its tokenizer splits by space (VAR) and ``next-frequency`` when it splits by frequency band
(NFIG): ``var`` runs on the first, ``nfig`` on the second, and token-level samplers (``ar``, ``sjd``
...) on neither (each level is already decoded in parallel). ``out.token_ids`` holds the last
(full-resolution) level's codes ``[B, 16, 16]``; ``out.stats.extra["codes"]`` every level's, flat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, InputError, ModelMismatchError
from ..models.condition import check_guidance_scale
from ..models.var import ScaleGPT, ScaleLM
from ..samplers.base import DecodeConfig, Sampler
from ..tokenizers.multiscale_vq import MultiScaleVQ
from .base import Pipeline
from .image import ImageARPipeline, Prompt, image_output, sampling_temperature
from .items import check_num_images
from .outputs import ImageOutput


class ImageScalePipeline(Pipeline):
    """Class/text prompt(s) in, images out, one forward per scale (VAR) or frequency band (NFIG)."""

    components = ("vq", "model", "text_tokenizer")
    optional_components = ("text_tokenizer",)
    contracts = ("next-scale", "next-frequency")

    def __init__(self, vq, model, text_tokenizer=None, class_names: tuple[str, ...] | None = None) -> None:
        super().__init__(vq=vq, model=model, text_tokenizer=text_tokenizer)
        if not isinstance(model, ScaleGPT) or not isinstance(vq, MultiScaleVQ):
            raise TypeError(f"ImageScalePipeline needs a ScaleGPT and a MultiScaleVQ, got {type(model).__name__} and "
                            f"{type(vq).__name__}")
        cfg = model.config
        class_names = class_names or cfg.class_names or tuple(f"class {i}" for i in range(cfg.num_classes))
        if len(class_names) != cfg.num_classes:
            raise ConfigError(f"{len(class_names)} class names given for a model with {cfg.num_classes} classes")
        self.class_names = tuple(class_names)
        if tuple(vq.scales) != tuple(cfg.scales) or vq.codebook_size != cfg.vocab_size:
            raise ModelMismatchError("the tokenizer's scales/codebook and the transformer's do not match")
        if cfg.text_len and text_tokenizer is None:
            raise ConfigError("this model has a text encoder; pass its text_tokenizer (WordVocab)")

    _resolve = ImageARPipeline._resolve
    contract_hint = ImageARPipeline.contract_hint
    encode = ImageARPipeline.encode
    condition = ImageARPipeline.condition
    batch_condition = ImageARPipeline.batch_condition
    _condition_rows = ImageARPipeline._condition_rows
    _resolve_negative = ImageARPipeline._resolve_negative
    _negatives = ImageARPipeline._negatives

    @property
    def family(self) -> str:
        return "nfig" if self.vq.band == "frequency" else "var"

    def model_contracts(self) -> tuple[str, ...]:
        return ("next-frequency",) if self.vq.band == "frequency" else ("next-scale",)

    @classmethod
    def folder_contracts(cls, folder: Path) -> tuple[str, ...]:
        """The contract of the folder's tokenizer (``vq/config.json``'s ``band``), read without loading it."""
        try:
            band = json.loads((Path(folder) / "vq" / "config.json").read_text()).get("band", "spatial")
        except (OSError, ValueError, AttributeError):
            return cls.contracts
        return ("next-frequency",) if band == "frequency" else ("next-scale",)

    @property
    def grid(self) -> tuple[int, int]:
        n = self.vq.latent_grid
        return (n, n)

    def __call__(
        self,
        prompt: Prompt | list[Prompt],
        sampler: str | Sampler | None = None,
        cfg_scale: float = 3.0,
        cfg_interval: int = -1,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        num_images_per_prompt: int = 1,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Any = None,
        return_dict: bool = True,
        negative_prompt: Any = None,
        **sampler_params: Any,
    ) -> ImageOutput | tuple:
        """Generate ``num_images_per_prompt`` images per prompt with ``sampler`` (default: ``var`` or
        ``nfig``, by the tokenizer). Arguments as :meth:`ImageARPipeline.__call__`;
        ``cfg_interval`` must stay -1: the level schedule is the sampler's ``cfg_schedule``."""
        if negative_prompt is not None:
            raise InputError(f"negative_prompt is not supported by the {self.family.upper()} family (its guidance "
                             "uses the null condition only); the raster pipeline (leapgen/image-emoji) takes it")
        if cfg_interval != -1:
            raise InputError("cfg_interval is a raster-model setting; next-scale guidance follows the sampler's "
                             "cfg_schedule ('linear' or 'constant'), so pass cfg_interval=-1")
        check_guidance_scale(cfg_scale)
        check_num_images(num_images_per_prompt)
        # 1. sampler, checked against the contract this tokenizer offers
        sampler = self.family if sampler is None else sampler
        smp = self.make_sampler(sampler, sampler_params)
        # 2. conditions
        cond, prompts, errors = self.batch_condition(prompt, cfg_scale, -1, num_images_per_prompt)
        rows = len(cond.labels)
        # 3. decode every level
        lm = ScaleLM(self.model, self.vq)
        config = DecodeConfig(max_new_tokens=lm.num_tokens, temperature=sampling_temperature(temperature), top_k=top_k, top_p=top_p,
                              eos_token_id=None, pad_token_id=0, seed=seed)
        generator = self.prepare_generator(generator, seed)
        with self.step_hooks(lm.num_tokens, progress, callback_on_step_end) as config.step_callback, torch.inference_mode():
            result = smp.generate({"model": lm}, [[] for _ in range(rows)], config, generator, cond=cond)
        # 4. residual sum -> images
        flat = torch.tensor(result.sequences, dtype=torch.long)
        images = self.vq.decode(flat)
        n = self.vq.latent_grid
        last = flat[:, -n * n :].view(-1, n, n)
        result.stats.extra["codes"] = result.sequences
        steps = [s[-n * n :] for s in result.token_steps]
        out = image_output(images, last, result.stats, steps, prompts, errors)
        return self._return(out, return_dict)

    def pipeline_config(self) -> dict[str, Any]:
        return {"class_names": list(self.class_names)}


__all__ = ["ImageScalePipeline"]
