"""CTF coarse-to-fine image pipeline: the shipped emoji VQ, a coarse GPT over k-means cluster labels of
its codebook (+ an optional coarse draft) and the one-pass fine model.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji-ctf")
>>> out = pipe(["red apple"], sampler="ctf", cfg_scale=3.0, seed=0)        # coarse ar + 1 fine pass
>>> fast = pipe(["red apple"], sampler="sjd", cfg_scale=3.0, seed=0)       # sjd on the coarse stage

A causal sampler given by name (``ar``, ``speculative``, ``sjd``, ``lantern``, ``gsd`` ...) decodes the
coarse stage unchanged (``ctf`` with ``coarse_sampler=<it>``; its parameters go to it); ``ctf`` itself
takes ``coarse_sampler``. Every call therefore runs CTF, and ``out.stats.sampler`` says which coarse
sampler it ran with: ``"ctf+ar"`` for ``sampler="ctf"`` and ``sampler="ar"`` alike (the same images),
``"ctf+sjd"`` for ``sampler="sjd"``. Prompts, guidance, seeds, progress and outputs as
:class:`~leapgen.pipelines.image.ImageARPipeline`; ``out.stats.extra["coarse"]`` holds the coarse labels.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError, ModelMismatchError
from ..models.condition import check_guidance_scale
from ..models.ctf import CoarseFineLM, CTFFineGPT
from ..models.llamagen import LlamaGenGPT
from ..samplers.base import DecodeConfig, Sampler
from ..samplers.scale.ctf import CoarseToFine
from .base import Pipeline
from .image import ImageARPipeline, Prompt, image_output, sampling_temperature
from .items import check_num_images
from .outputs import ImageOutput


class ImageCTFPipeline(Pipeline):
    """Class/text prompt(s) in, images out: coarse labels autoregressively, fine codes in one pass."""

    components = ("vq", "model", "fine", "draft", "text_tokenizer")
    optional_components = ("draft", "text_tokenizer")
    contracts = ("coarse-fine", "causal")
    #: the coarse stage's LlamaGen GPT is not a transformers Llama, so the lean runtime's cache (gear) is not there
    model_lacks = {"lean_cache": "LlamaGenLM is not a Llama the lean runtime can run"}

    def __init__(self, vq, model, fine, draft=None, text_tokenizer=None, class_names: tuple[str, ...] | None = None) -> None:
        super().__init__(vq=vq, model=model, fine=fine, draft=draft, text_tokenizer=text_tokenizer)
        if not isinstance(model, LlamaGenGPT) or not isinstance(fine, CTFFineGPT):
            raise TypeError("ImageCTFPipeline needs a coarse LlamaGenGPT and a CTFFineGPT")
        cfg = model.config
        class_names = class_names or cfg.class_names or tuple(f"class {i}" for i in range(cfg.num_classes))
        if len(class_names) != cfg.num_classes:
            raise ConfigError(f"{len(class_names)} class names given for a model with {cfg.num_classes} classes")
        self.class_names = tuple(class_names)
        if vq.codebook_size != fine.config.fine_vocab_size:
            raise ModelMismatchError(f"the VQ has {vq.codebook_size} codes, the fine model predicts {fine.config.fine_vocab_size}")
        if draft is not None and draft.config.vocab_size != cfg.vocab_size:
            raise ModelMismatchError("the coarse draft must share the coarse model's cluster vocabulary")
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
    def grid(self) -> tuple[int, int]:
        g = self.model.config.grid_size
        return (g, g)

    def centroids(self) -> torch.Tensor:
        """Mean VQ code vector of every cluster ``[K, d]`` (what each coarse label means)."""
        cb = self.vq.codebook().float().cpu()
        lab = self.fine.cluster_of.cpu()
        k = self.model.config.vocab_size
        sums = torch.zeros(k, cb.shape[1]).index_add_(0, lab, cb)
        return sums / torch.bincount(lab, minlength=k).clamp_min(1)[:, None].float()

    def adapter(self) -> CoarseFineLM:
        return CoarseFineLM(self.model, self.fine, self.draft, self.centroids())

    def __call__(
        self,
        prompt: Prompt | list[Prompt],
        sampler: str | Sampler = "ctf",
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
        negative_prompt: Prompt | list[Prompt | None] | None = None,
        **sampler_params: Any,
    ) -> ImageOutput | tuple:
        """Generate images: ``sampler`` is ``ctf`` (its ``coarse_sampler=`` picks the coarse stage's) or
        any causal sampler, which then decodes the coarse stage. Arguments as :meth:`ImageARPipeline.__call__`
        (``negative_prompt`` guides both the coarse stage and the fine pass)."""
        check_guidance_scale(cfg_scale)
        check_num_images(num_images_per_prompt)
        # 1. sampler: ctf, or a causal sampler wrapped as ctf's coarse stage
        smp = self.make_sampler(sampler, sampler_params)
        if "coarse-fine" not in smp.contracts:
            smp = CoarseToFine(coarse_sampler=smp)
        lm = self.adapter()
        missing = [n for n in getattr(smp.coarse_sampler, "needs", ()) if n != "model" and getattr(lm, n, None) is None]
        if missing:
            raise ConfigError(f"the coarse sampler needs {missing}; this CTF pipeline has no coarse draft")
        # 2. conditions
        cond, prompts, errors = self.batch_condition(prompt, cfg_scale, cfg_interval, num_images_per_prompt,
                                                     negative_prompt)
        rows = len(cond.labels)
        # 3. coarse stage + fine pass
        h, w = self.grid
        config = DecodeConfig(max_new_tokens=h * w, temperature=sampling_temperature(temperature), top_k=top_k, top_p=top_p,
                              eos_token_id=None, pad_token_id=0, seed=seed)
        generator = self.prepare_generator(generator, seed)
        with self.step_hooks(h * w, progress, callback_on_step_end) as config.step_callback, torch.inference_mode():
            result = smp.generate({"model": lm}, [[] for _ in range(rows)], config, generator, cond=cond)
        # 4. fine codes -> images
        tokens = torch.tensor(result.sequences, dtype=torch.long).view(-1, h, w)
        out = image_output(self.vq.decode(tokens), tokens, result.stats, result.token_steps, prompts, errors)
        return self._return(out, return_dict)

    def pipeline_config(self) -> dict[str, Any]:
        return {"class_names": list(self.class_names)}


__all__ = ["ImageCTFPipeline"]
