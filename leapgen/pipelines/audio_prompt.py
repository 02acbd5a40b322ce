"""Audio continuation for :class:`~leapgen.pipelines.audio.AudioPipeline` (``audio_prompt=``).

As audiocraft's ``MusicGen.generate_continuation`` and MAGNeT's prompted generation: the prompt
audio is loaded like every other audio input of the library (:func:`~leapgen.pipelines.speech_audio.load_audio`:
a path, bytes, an array with ``sampling_rate=``, a datasets dict; resampled to the codec's rate and
downmixed to mono; a missing file, NaN / inf, silence ... are :class:`~leapgen.errors.InputError`),
encoded by the codec, and its ``P = n_samples // hop`` whole frames (a partial last frame, whose
codes would encode padding, is dropped) are the first P frames of the returned clip, which is
``duration`` long in all (prompt included, as audiocraft returns it). The prompt must hold at
least one frame and fewer frames than the clip.

* masked samplers (``magnet``, ``magnet_rescored``, ``magnet_hybrid``): the first P frames of the
  code grid, every codebook, hold the prompt's codes instead of masks; the masked loop never writes
  or re-masks a given (non-mask) cell, so they come back unchanged. ``magnet_hybrid``'s AR part
  continues the prompt by the AR rule below up to its ``ar_seconds`` (none when the prompt covers
  them), then MAGNeT fills the rest.
* AR samplers (``ar``, ``speculative`` ... on the codebook-pattern stream): the exact rule. A
  stream position holds a *prompt cell* when its grid cell (k, t) has ``t < P``. The input is BOS
  followed by the longest stream prefix made only of prompt cells and empty cells (delay pattern:
  the first ``P * K`` positions, steps ``0..P-1``; for a batch, the shortest row's), and every
  later prompt cell (delay pattern: codebook k of frames ``P-k..P-1`` for k >= 1, which the stream
  places after codebook 0 of frame P) is *forced*: the pipeline names these cells in the condition's
  ``extra[FORCED_KEY]`` and :class:`~leapgen.models.musicgen.MusicGenLM` puts all the mass of
  that position on the prompt's code (as audiocraft keeps the known cells of ``gen_sequence``), so
  every AR sampler runs unchanged, the draft of ``speculative`` is forced alike (its proposals
  there are always accepted) and greedy ``speculative`` equals greedy ``ar``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..models.musicgen import continuation_plan as ar_plan
from .speech_audio import load_audio

_ONE_ITEM = (str, os.PathLike, bytes, bytearray, memoryview, dict, np.ndarray, torch.Tensor)


def _is_item(x: Any) -> bool:
    return x is None or isinstance(x, (*_ONE_ITEM, list, tuple)) or hasattr(x, "read")


def split_prompts(audio_prompt: Any, n: int) -> tuple[list[Any], bool]:
    """``(one item per description, shared)``: a list / tuple of ``n`` audio items (None = no
    prompt for that description) is one per description; anything else (a path, an array, a list
    of samples ...) is one prompt for every description."""
    if isinstance(audio_prompt, (list, tuple)) and audio_prompt and all(_is_item(x) and not isinstance(x, (int, float)) for x in audio_prompt):
        if len(audio_prompt) == n:
            return list(audio_prompt), False
        if all(x is None or isinstance(x, _ONE_ITEM) for x in audio_prompt):
            raise InputError(f"audio_prompt holds {len(audio_prompt)} items for {n} descriptions; give one audio prompt "
                             "for all of them or one per description (None for a description without one).")
    return [audio_prompt] * n, True


def prompt_codes(codec: Any, item: Any, sampling_rate: int | None, frames: int, what: str) -> Tensor:
    """The prompt's codes ``[K, P]`` (long, on the host); InputError naming ``what`` when the
    audio is bad, shorter than one codec frame or not shorter than the clip's ``frames``."""
    try:
        wave = load_audio(item, sampling_rate, codec.sample_rate)
    except InputError as err:
        raise InputError(f"{what}: {err}") from err
    hop, rate = codec.hop_length, codec.sample_rate
    p = wave.size // hop
    if p < 1:
        raise InputError(f"{what} is {wave.size / rate:g} s, shorter than one codec frame ({hop / rate:g} s); give a longer prompt.")
    if p >= frames:
        raise InputError(f"{what} is {p / codec.frame_rate:g} s ({p} frames) but the clip is {frames / codec.frame_rate:g} s "
                         f"({frames} frames) with the prompt included; ask for a longer duration or cut the prompt.")
    with torch.inference_mode():
        return codec.encode(wave)[0, :, :p].cpu().long()


def masked_grid(codes: list[Tensor | None], num_codebooks: int, frames: int, mask_id: int, device: Any) -> Tensor:
    """The masked samplers' input grid ``[B, K, frames]``: each row's prompt codes, masks after."""
    grid = torch.full((len(codes), num_codebooks, frames), mask_id, dtype=torch.long)
    for r, c in enumerate(codes):
        if c is not None:
            grid[r, :, : c.shape[1]] = c
    return grid.to(device)


__all__ = ["ar_plan", "masked_grid", "prompt_codes", "split_prompts"]
