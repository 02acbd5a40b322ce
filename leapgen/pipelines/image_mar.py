"""Continuous-token image pipeline (MAR): KL-VAE tokenizer + MAR target (+ draft) with diffusion heads.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji-mar")
>>> out = pipe(["red apple", "animals"], sampler="cspd", cfg_scale=3.0, seed=0)
>>> out.images[0].save("apple.png"); print(out.stats)

Prompts are resolved as in :class:`~leapgen.pipelines.image.ImageARPipeline` (a class name of
``pipe.class_names``, a class id, or a text with Unicode emoji-name words); a prompt that cannot be
resolved fails alone (``out.errors[i]`` says why, ``out.images[i]`` is None) unless every prompt
fails. Samplers: ``mar`` (target alone; ``use_draft=True`` runs it on the draft alone) and
``cspd`` (draft proposes, target verifies); both run on the ``"mar"`` model contract.
Classifier-free guidance ``cfg_scale`` follows MAR's linear schedule by default
(``cfg_schedule="constant"`` to turn it off); ``temperature`` scales the diffusion head's noise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError, InputError
from ..models.condition import NULL_LABEL, ClassCondition, Guidance, check_guidance_scale
from ..models.mar import MARModel, MARNet
from ..samplers.base import DecodeConfig, DecodeStats, Sampler
from ..tokenizers.kl_image import KLImageTokenizer
from .base import Pipeline
from .image import ImageARPipeline
from .items import batch_list, check_items, check_num_images, repeat_each, scatter
from .outputs import PipelineOutput

logger = logging.getLogger(__name__)

Prompt = str | int


@dataclass(repr=False)
class ContinuousImageOutput(PipelineOutput):
    """Images (PIL; None where the prompt failed), the tokens of every image (``[B, N, D]``
    continuous tokens for MAR, ``[B, h, w]`` codes for DD; row ``i`` is image ``i``'s, NaN / -1 where
    its prompt failed), the decode statistics, the target forward that produced each token (``[]``
    where the prompt failed), the prompts and a per-image error message (None = fine)."""

    images: list
    tokens: Tensor
    stats: DecodeStats
    token_steps: list[list[int]] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"ContinuousImageOutput({len(self.images)} images, stats={self.stats.summary()})"


def resolve_prompts(pipe: Any, prompts: list[Any]) -> tuple[list[tuple[int | None, str | None] | None], list[str | None]]:
    """Per prompt ``(class id, text)`` or None with the error message (bad prompts fail alone)."""
    return check_items(prompts, lambda i, p: ImageARPipeline._resolve(pipe, p, i))  # the raster pipeline's rules


def continuous_output(images: list, tokens: Tensor, stats: DecodeStats, token_steps: list[list[int]],
                      prompts: list[Any], errors: list[str | None]) -> ContinuousImageOutput:
    """A :class:`ContinuousImageOutput` with one entry per requested image: the good rows' images,
    tokens and forward records (``tokens`` and ``token_steps`` hold only those) at their positions;
    a failed prompt's image is None, its token row NaN (float tokens) or -1 (codes), its steps []."""
    good = torch.tensor([e is None for e in errors], dtype=torch.bool)
    full = tokens.new_full((len(errors), *tokens.shape[1:]), float("nan") if tokens.is_floating_point() else -1)
    full[good] = tokens
    return ContinuousImageOutput(images=scatter(images, errors), tokens=full, stats=stats,
                                 token_steps=scatter(token_steps, errors, fill=[]), prompts=prompts, errors=errors)


def check_call_args(cfg_scale: Any, num_images_per_prompt: Any, temperature: Any) -> None:
    check_guidance_scale(cfg_scale)
    check_num_images(num_images_per_prompt)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise InputError(f"temperature must be a number >= 0, got {temperature!r}")
    top = torch.finfo(torch.float32).max  # the head's per-token guidance and noise scales are float32 tensors
    for name, value in (("cfg_scale", cfg_scale), ("temperature", temperature)):
        if value > top:
            raise InputError(f"{name} must be at most {top:.4g} (the diffusion head computes in float32), got {value!r}")


def prompts_per_image(pipe: Any, prompt: Any, num_images_per_prompt: int) -> tuple[
        list[Any], list[tuple[int | None, str | None] | None], list[str | None]]:
    """Every image's prompt, resolution and error: each prompt resolved once (a bad one fails alone,
    its message naming its index in the caller's list), then repeated ``num_images_per_prompt`` times."""
    prompts = batch_list(prompt)  # a list, a tuple, a 1-D array / tensor of class ids, or one prompt
    if not prompts:
        raise InputError("no prompt given; pass a class name, a class id, a text or a non-empty list of those")
    resolved, errors = resolve_prompts(pipe, prompts)
    n = num_images_per_prompt
    return repeat_each(prompts, n), repeat_each(resolved, n), repeat_each(errors, n)


class ImageMARPipeline(Pipeline):
    """Class/text prompt(s) in, images out, with the ``mar`` or ``cspd`` sampler."""

    components = ("vae", "model", "draft", "text_tokenizer")
    optional_components = ("draft", "text_tokenizer")
    contracts = ("mar",)

    def __init__(self, vae: KLImageTokenizer, model: MARNet, draft: MARNet | None = None, text_tokenizer: Any = None,
                 class_names: tuple[str, ...] | None = None) -> None:
        super().__init__(vae=vae, model=model, draft=draft, text_tokenizer=text_tokenizer)
        if not isinstance(model, MARNet):
            raise TypeError(f"model must be a MARNet, got {type(model).__name__}")
        cfg = model.config
        self.class_names = tuple(class_names or cfg.class_names or (f"class {i}" for i in range(cfg.num_classes)))
        if len(self.class_names) != cfg.num_classes:
            raise ConfigError(f"{len(self.class_names)} class names given for a model with {cfg.num_classes} classes")
        if vae.token_dim != cfg.token_dim or vae.grid[0] != cfg.grid_size:
            raise ConfigError(
                f"the VAE gives {vae.grid[0]}x{vae.grid[1]} tokens of {vae.token_dim} channels but the model expects "
                f"{cfg.grid_size}x{cfg.grid_size} of {cfg.token_dim}"
            )
        if cfg.text_len and text_tokenizer is None:
            raise ConfigError("this model reads prompt words; pass its text_tokenizer (WordVocab)")
        self._on_change()

    def _on_change(self) -> None:
        self._models_ = {"model": MARModel(self.model)}
        if self.draft is not None:
            self._models_["draft"] = MARModel(self.draft)
            self._models_["model"].check_compatible(self._models_["draft"])

    def set_draft(self, draft: MARNet | None) -> None:
        self.draft = draft
        self._on_change()

    @property
    def mar_models(self) -> dict[str, MARModel]:
        """The :class:`MARModel` adapters the samplers run on (``model``, ``draft``)."""
        return self._models_

    def encode(self, resolved: list[tuple[int | None, str | None]], cfg_scale: float) -> ClassCondition:
        """The condition of resolved prompts: class labels (``NULL_LABEL`` for a text prompt) and word ids."""
        n = self.model.config.text_len
        labels, words = [], []
        for cls, text in resolved:
            labels.append(NULL_LABEL if cls is None else cls)
            w = self.text_tokenizer.encode(text) if (text is not None and n) else None
            words.append([1] * n if w is None else (w[:n] + [0] * n)[:n])
        text_ids = torch.tensor(words, dtype=torch.long) if n else None
        return ClassCondition(labels=torch.tensor(labels, dtype=torch.long), text_ids=text_ids,
                              guidance=Guidance(float(cfg_scale)))

    def __call__(
        self,
        prompt: Prompt | list[Prompt],
        sampler: str | Sampler = "mar",
        cfg_scale: float = 3.0,
        temperature: float = 1.0,
        seed: int | None = None,
        num_images_per_prompt: int = 1,
        use_draft: bool = False,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Any = None,
        return_dict: bool = True,
        negative_prompt: Any = None,
        **sampler_params: Any,
    ) -> ContinuousImageOutput | tuple:
        """Generate ``num_images_per_prompt`` images per prompt.

        ``cfg_scale`` (MAR's linear schedule unless ``cfg_schedule="constant"``), ``temperature``
        (head noise scale; 0 = deterministic heads), ``use_draft`` (decode with the draft model as the
        target: the bench's "draft alone" row), sampler parameters as keywords (``num_iter=16``,
        ``num_draft=4``, ...); ``generator``/``seed``, ``callback_on_step_end``, ``progress`` and
        ``return_dict`` as in diffusers."""
        if negative_prompt is not None:
            raise InputError("negative_prompt is not supported by the MAR family (its guidance uses the null "
                             "condition only); the raster pipeline (leapgen/image-emoji) takes it")
        # 1. check the arguments and pick the sampler
        check_call_args(cfg_scale, num_images_per_prompt, temperature)
        smp = self.make_sampler(sampler, sampler_params)
        models = dict(self._models_)
        if use_draft:
            if "draft" in getattr(smp, "needs", ()):
                raise ConfigError(f"use_draft=True decodes with the draft model alone (sampler 'mar'); sampler "
                                  f"{smp.name!r} already runs the draft next to the target: leave use_draft out")
            if "draft" not in models:
                raise ConfigError("use_draft=True needs a draft model; this pipeline has none")
            models = {"model": models["draft"]}
        # 2. resolve the prompts (bad ones fail alone) and build the condition
        prompts, resolved, errors = prompts_per_image(self, prompt, num_images_per_prompt)
        good = [r for r in resolved if r is not None]
        cond = self.encode(good, cfg_scale).to(self.device)
        # 3. decode the tokens
        n = self.model.config.seq_len
        config = DecodeConfig(max_new_tokens=n, temperature=float(temperature), seed=seed)
        generator = self.prepare_generator(generator, seed)
        with self.step_hooks(n, progress, callback_on_step_end) as config.step_callback, torch.inference_mode():
            result = smp.generate(models, [[] for _ in good], config, generator, cond=cond)
            # 4. decode the images
            pictures = self.vae.decode(result.values.to(self.vae.dtype))
        out = continuous_output(list(pictures), result.values.float().cpu(), result.stats, result.token_steps, prompts,
                                errors)
        return self._return(out, return_dict)

    def pipeline_config(self) -> dict[str, Any]:
        return {"class_names": list(self.class_names)}


__all__ = ["ContinuousImageOutput", "ImageMARPipeline", "continuous_output", "prompts_per_image", "resolve_prompts"]
