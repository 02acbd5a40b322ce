"""Distilled Decoding image pipeline: VQ tokenizer + a generator distilled from the raster emoji GPT.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji-dd")
>>> out = pipe(["red apple", "animals"], num_steps=1, seed=0)     # sampler "dd"
>>> out.images[0].save("apple.png"); print(out.stats)

The generator (:class:`~leapgen.models.dd.DDGenerator`) was distilled from teacher trajectories
of the shipped ``leapgen/image-emoji`` GPT at the guidance scale and temperature stated in its
``train_metrics.json``; guidance and temperature are therefore built in: ``cfg_scale`` and
``temperature`` are not parameters (like any unknown keyword they raise a ConfigError that lists the
call's and the sampler's parameters), and the pipeline hands ``dd`` no temperature (it refuses one,
``Sampler.ignores``), as the MAR pipeline passes no filter its samplers refuse.
Prompts resolve as in :class:`~leapgen.pipelines.image.ImageARPipeline` (class name, class id or
emoji-name text); a prompt that cannot be resolved fails alone (``out.errors[i]``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InputError
from ..models.dd import DDGenerator, DDModel
from ..samplers.base import DecodeConfig, Sampler
from .image import ImageARPipeline
from .image_mar import ContinuousImageOutput, continuous_output, prompts_per_image
from .items import check_num_images


class ImageDDPipeline(ImageARPipeline):
    """Prompt(s) in, images out in one or two generator forwards (sampler ``dd``)."""

    components = ("vq", "model", "draft", "text_tokenizer")
    optional_components = ("draft", "text_tokenizer")
    contracts = ("dd",)
    model_lacks = {}  # its one sampler, dd, reads no model feature

    def __init__(self, vq, model: DDGenerator, draft=None, text_tokenizer=None, class_names: tuple[str, ...] | None = None) -> None:
        if not isinstance(model, DDGenerator):
            raise TypeError(f"model must be a DDGenerator, got {type(model).__name__}")
        super().__init__(vq=vq, model=model, draft=None, text_tokenizer=text_tokenizer, class_names=class_names)

    def _on_change(self) -> None:
        self._dd = DDModel(self.model)

    def __call__(  # type: ignore[override]
        self,
        prompt: Any,
        sampler: str | Sampler = "dd",
        num_steps: int = 1,
        seed: int | None = None,
        num_images_per_prompt: int = 1,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Any = None,
        return_dict: bool = True,
        negative_prompt: Any = None,
        **sampler_params: Any,
    ) -> ContinuousImageOutput | tuple:
        """Generate ``num_images_per_prompt`` images per prompt with ``num_steps`` (1 or 2) forwards;
        extra keywords are the sampler's parameters (an unknown one raises ConfigError)."""
        if negative_prompt is not None:
            raise InputError("negative_prompt is not supported by the DD family (it has no classifier-free "
                             "guidance); the raster pipeline (leapgen/image-emoji) takes it")
        # 1. pick the sampler (checked before num_steps reaches a sampler that has no such parameter)
        check_num_images(num_images_per_prompt)
        params = sampler_params if isinstance(sampler, Sampler) else {"num_steps": num_steps, **sampler_params}
        smp = self.make_sampler(sampler, params)
        self._dd.check_steps(smp.num_steps)
        # 2. resolve the prompts (bad ones fail alone) and build the condition
        prompts, resolved, errors = prompts_per_image(self, prompt, num_images_per_prompt)
        good = [p for p, r in zip(prompts, resolved) if r is not None]
        cond = self.encode(good).to(self.device)
        # 3. generate the tokens, 4. decode them
        n = self.model.config.num_tokens
        config = DecodeConfig(max_new_tokens=n, seed=seed)  # temperature at its off value: dd refuses any other
        generator = self.prepare_generator(generator, seed)
        with self.step_hooks(n, progress, callback_on_step_end) as config.step_callback, torch.inference_mode():
            result = smp.generate({"model": self._dd}, [[] for _ in good], config, generator, cond=cond)
            g = self.model.config.grid_size
            tokens = torch.tensor(result.sequences, dtype=torch.long).view(-1, g, g)
            pictures = self.vq.decode(tokens)
        out = continuous_output(list(pictures), tokens, result.stats, result.token_steps, prompts, errors)
        return self._return(out, return_dict)


__all__ = ["ImageDDPipeline"]
