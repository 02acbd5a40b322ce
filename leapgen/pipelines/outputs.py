"""What the pipelines return: ``BaseOutput`` dataclasses, as in diffusers.

Each output is a :class:`diffusers.utils.BaseOutput` dataclass: fields are attributes
(``out.texts``), string keys (``out["texts"]``) and integer positions (``out[0]``, the non-None
fields in order, diffusers' ``to_tuple``). ``pipe(..., return_dict=False)`` returns
:meth:`PipelineOutput.as_tuple` instead: **every** field in declaration order, None included, so the
positions do not move with the content (``texts, token_ids, stats, prompt_token_ids =
pipe(prompt, return_dict=False)``).
"""

from __future__ import annotations

import colorsys
import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from diffusers.utils import BaseOutput
from torch import Tensor

from ..errors import InputError
from ..samplers.base import DecodeStats

Prompt = str | int


class PipelineOutput(BaseOutput):
    """Base of the leapgen outputs: a diffusers ``BaseOutput`` plus :meth:`as_tuple`."""

    def as_tuple(self) -> tuple[Any, ...]:
        """Every field in declaration order (None included): what ``return_dict=False`` returns."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


@dataclass(repr=False)
class TextOutput(PipelineOutput):
    """Generated continuations: ``texts[i]`` (decoded, special tokens skipped), ``token_ids[i]``
    (new tokens only), the decode statistics, the prompts' token ids and ``errors[i]``: why prompt
    ``i`` failed (its text, ids and prompt ids are then None), None for the prompts that ran."""

    texts: list[str | None]
    token_ids: list[list[int] | None]
    stats: DecodeStats
    prompt_token_ids: list[list[int] | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    #: why each row ended (vLLM's ``finish_reason``): ``"stop"`` or ``"length"`` (max_new_tokens); None for a failed prompt
    finish_reasons: list[str | None] = field(default_factory=list)
    #: what stopped a ``"stop"`` row (vLLM's ``stop_reason``): the stop string, or the end-of-sequence token id; else None
    stop_reasons: list[str | int | None] = field(default_factory=list)
    #: with ``logprobs=k``: per row, each token's log-probability under the model's raw distribution
    #: (``leapgen.pipelines.text_logprobs``); None when not asked for (and for a failed prompt)
    logprobs: list[list[float] | None] | None = None
    #: with ``logprobs=k``: per row and token, the k most likely tokens there, ``{token_id: logprob}``
    top_logprobs: list[list[dict[int, float]] | None] | None = None

    def __repr__(self) -> str:
        return f"TextOutput(texts={self.texts!r}, stats={self.stats.summary()})"


@dataclass(repr=False)
class ImageOutput(PipelineOutput):
    """Generated images (PIL), their token grids ``[B, h, w]``, the decode statistics, the target
    forward that produced each token (``token_steps``), the prompt of each image and ``errors[i]``:
    why image ``i``'s prompt failed (its image is then None and its token row -1), None otherwise."""

    images: list  # PIL.Image.Image | None
    token_ids: Tensor  # long [B, h, w]
    stats: DecodeStats
    token_steps: list[list[int]] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    def acceptance_map(self, i: int = 0, with_image: bool = True, scale: int | None = None):
        """A picture of which target forward produced each token of image ``i``.

        Tokens committed by the same forward share a colour (hues cycle with the forward index);
        tokens that were the only one of their forward (plain AR steps) are grey, so runs of
        accepted drafts (> 1 token per forward) stand out. Upscaled to the image size and, with
        ``with_image``, shown to the right of the image.
        """
        from PIL import Image

        try:
            if isinstance(i, (bool, np.bool_)):
                raise TypeError
            i = operator.index(i)  # an int or a numpy integer
        except TypeError:
            raise InputError(f"the image index must be an integer, got {i!r} ({type(i).__name__})") from None
        n = len(self.images)
        if not -n <= i < n:
            raise InputError(f"image index {i} out of range; this output has {n} images")
        i %= n  # -1: the last image, as a list
        if self.images[i] is None:
            raise InputError(f"image {i} was not generated: {self.errors[i] if i < len(self.errors) else 'no image'}")
        h, w = self.token_ids.shape[1:]
        steps = np.asarray(self.token_steps[i] if i < len(self.token_steps) else [], dtype=np.int64)
        if steps.size != h * w:
            raise InputError(f"no per-token forward record for image {i}; the sampler did not report token_steps")
        counts = np.bincount(steps)
        rgb = np.empty((h * w, 3), dtype=np.uint8)
        for k, s in enumerate(steps):
            if counts[s] <= 1:
                rgb[k] = (200, 200, 200) if s % 2 else (170, 170, 170)
            else:
                hue = (s * 0.618033988749895) % 1.0
                r, g, b = colorsys.hsv_to_rgb(hue, 0.75, 0.95)
                rgb[k] = (int(r * 255), int(g * 255), int(b * 255))
        img = self.images[i]
        size = scale * w if scale else img.size[0]
        grid = Image.fromarray(rgb.reshape(h, w, 3)).resize((size, size * h // w), Image.NEAREST)
        if not with_image:
            return grid
        canvas = Image.new("RGB", (img.size[0] + grid.size[0] + 4, max(img.size[1], grid.size[1])), (255, 255, 255))
        canvas.paste(img.convert("RGB"), (0, 0))
        canvas.paste(grid, (img.size[0] + 4, 0))
        return canvas

    def __repr__(self) -> str:
        return f"ImageOutput(images={len(self.images)}, prompts={self.prompts!r}, stats={self.stats.summary()})"


@dataclass(repr=False)
class MoleculeOutput(PipelineOutput):
    """Generated molecules, one entry per sample (per input molecule for ``lead_opt``).

    ``smiles[i]`` is canonical SMILES or None (not a molecule, or removed by the fragment filter);
    ``valid[i]`` is ``smiles[i] is not None``; ``errors[i]`` says why an entry is None;
    ``safe[i]`` is the SAFE string the model wrote (fragment part included; "" if none).
    """

    smiles: list[str | None]
    valid: list[bool]
    safe: list[str]
    errors: list[str | None]
    stats: DecodeStats
    task: str = "de_novo"
    token_ids: list[list[int]] = field(default_factory=list)
    num_filtered: int = 0
    unfiltered_smiles: list[str | None] = field(default_factory=list)
    scores: list[float | None] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def validity(self) -> float:
        return sum(self.valid) / len(self.valid) if self.valid else float("nan")

    def __repr__(self) -> str:
        return (
            f"MoleculeOutput(task={self.task!r}, n={len(self.smiles)}, valid={sum(self.valid)}, "
            f"filtered={self.num_filtered}, stats={self.stats.summary()})"
        )


__all__ = ["PipelineOutput", "TextOutput", "ImageOutput", "MoleculeOutput"]
