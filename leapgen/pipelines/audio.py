"""Text-to-music pipeline: codec + text encoder + MAGNeT-style masked model + MusicGen-style AR model (+ draft).

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/audio-music")
>>> out = pipe(["calm piano melody in C major"], sampler="magnet", duration=5.0, seed=0)
>>> out.save(0, "clip.wav"); print(out.sample_rate, out.stats)

A prompt is a text description ("slow sad piano melody in A minor with soft drums"). It becomes a
:class:`~leapgen.models.condition.TextEmbeddings` condition (the shared text encoder, computed once
per call) that every model reads by cross-attention. Samplers:

* masked (``audio-masked`` contract): ``magnet``, ``magnet_rescored`` (+ the AR model as rescorer),
  ``magnet_hybrid`` (AR prefix, then MAGNeT) over a grid of ``[K, frames]`` masked codes;
* autoregressive (``causal`` contract): ``ar``, ``speculative`` (the draft) and the other chain
  samplers run unchanged on the delay-pattern AR model from a BOS prompt; the stream is turned back
  into codes by the AR model's codebook pattern.

``duration`` (seconds, ``0 < duration <= max_duration``, at least half a frame) fixes ``frames``, the
whole number nearest ``duration * frame_rate`` (a half rounded up); the codes are decoded by the codec
to ``frames * hop`` samples (float32 numpy, ``sample_rate`` Hz). ``cfg_scale`` is the guidance of the
AR samplers (default MusicGen's 3.0); for the masked samplers it is the start of their annealed
guidance (the sampler's ``cfg_scale``, default MAGNeT's 10, annealed to ``cfg_min_scale``; the call's
keyword used to shadow the sampler's, so MAGNeT's guidance could not be set and was silently 10). ``temperature`` / ``top_k`` / ``top_p`` default to the sampler's
paper values (MAGNeT: 3.0 annealed, top-p 0.9; AR: 1.0). Rows that fail (a bad prompt) fail alone: their audio is None and the reason is
in ``out.errors``.

``audio_prompt`` (a path, bytes, an array with ``sampling_rate=``, ...; one for every description or a
list of one per description) continues that audio: the clip, ``duration`` long with the prompt
included, starts with the prompt's codec codes (``audio_prompt.py`` has the rule for each sampler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError, InputError, LeapgenError, ModelMismatchError, a_type
from ..models.audio_lm import MagnetMaskedLM, MagnetTransformer
from ..models.condition import Guidance, TextEmbeddings, check_guidance_scale
from ..models.musicgen import FORCED_KEY, MAX_TEMPERATURE, MusicGenLM, MusicGenTransformer
from ..samplers.base import DecodeConfig, Sampler, sampler_info
from .audio_output import AudioOutput
from .audio_prompt import ar_plan, masked_grid, prompt_codes, split_prompts
from .base import Pipeline
from .speech_audio import item_rates

logger = logging.getLogger(__name__)

#: the guidance of the AR samplers when the call gives none (MusicGen's)
AR_CFG_SCALE = 3.0


class AudioPipeline(Pipeline):
    """Text description(s) in, waveforms out, with masked (MAGNeT) or autoregressive samplers."""

    components = ("codec", "text_encoder", "text_tokenizer", "model", "ar_model", "draft")
    optional_components = ("ar_model", "draft")
    contracts = ("audio-masked", "causal")
    #: the AR model is not a Llama, so the lean runtime's cache (gear) is not there
    model_lacks = {"lean_cache": "MusicGenLM is not a Llama the lean runtime can run"}

    def __init__(self, codec, text_encoder, text_tokenizer, model, ar_model=None, draft=None, max_duration: float = 10.0) -> None:
        super().__init__(codec=codec, text_encoder=text_encoder, text_tokenizer=text_tokenizer, model=model, ar_model=ar_model, draft=draft)
        if not isinstance(model, MagnetTransformer):
            raise TypeError(f"model must be a MagnetTransformer, got {type(model).__name__}")
        c = model.config
        if (codec.num_codebooks, codec.codebook_size) != (c.num_codebooks, c.codebook_size):
            raise ModelMismatchError(f"the codec has {codec.num_codebooks}x{codec.codebook_size} codes, the model {c.num_codebooks}x{c.codebook_size}")
        for name in ("ar_model", "draft"):
            net = getattr(self, name)
            if net is not None:
                a = net.config
                if not isinstance(net, MusicGenTransformer) or (a.num_codebooks, a.codebook_size) != (c.num_codebooks, c.codebook_size):
                    raise ModelMismatchError(f"{name} must be a MusicGenTransformer over the codec's {c.num_codebooks}x{c.codebook_size} codes")
        self.max_duration = min(float(max_duration), c.max_frames / codec.frame_rate)
        self._on_change()

    def _on_change(self) -> None:
        self._masked = MagnetMaskedLM(self.model)
        self._ar = MusicGenLM(self.ar_model) if self.ar_model is not None else None
        self._draft = MusicGenLM(self.draft) if self.draft is not None else None

    def pipeline_config(self) -> dict[str, Any]:
        return {"max_duration": self.max_duration}

    def model_contracts(self) -> tuple[str, ...]:
        return ("audio-masked", "causal") if self.ar_model is not None else ("audio-masked",)

    def contract_hint(self, contract: str) -> str:
        return "Load a pipeline with an ar_model for the autoregressive samplers." if contract == "causal" else ""

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    @property
    def frame_rate(self) -> int:
        return self.codec.frame_rate

    # ------------------------------------------------------------------ inputs
    def frames_for(self, duration: Any) -> int:
        """Code frames of ``duration`` seconds; InputError outside ``(0, max_duration]``."""
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not np.isfinite(duration):
            raise InputError(f"duration must be a number of seconds, got {duration!r}.")
        if duration <= 0 or duration > self.max_duration + 1e-9:
            raise InputError(f"duration must be in (0, {self.max_duration:g}] seconds (the model's maximum), got {duration!r}.")
        # the nearest whole frame, a half rounded up (round() rounds half to even: exactly half a frame,
        # which the message below asks for, gave no frame)
        frames = math.floor(duration * self.frame_rate + 0.5)
        if frames < 1:  # rounding it up to a whole frame would return more audio than asked for
            raise InputError(f"duration {duration!r} s is shorter than half a code frame; give at least "
                             f"{0.5 / self.frame_rate:g} s (a frame is {1 / self.frame_rate:g} s).")
        return frames

    def check_prompt(self, p: Any, i: int) -> str:
        if not isinstance(p, str):
            raise InputError(f"prompt {i} is {a_type(p)}; give a text description such as 'calm piano melody in C major'.")
        if not p.strip():
            raise InputError(f"prompt {i} is empty; give a text description such as 'calm piano melody in C major'.")
        words = self.text_tokenizer.split(p)
        unknown = self.text_tokenizer.unknown_words(p)
        if len(unknown) == len(words):
            raise InputError(f"prompt {i} ({p!r}) has no word the model knows (it was trained on descriptions such as "
                             "'slow sad piano melody in A minor with soft drums').")
        if unknown:
            logger.warning("prompt %r: unknown words %s are ignored", p, unknown)
        max_len = getattr(self.text_tokenizer, "max_len", None)
        if max_len and len(words) > max_len:  # the tokenizer cuts it there; the rest was dropped without a word
            logger.warning("prompt %r has %d words and punctuation marks; the text encoder reads the first %d, so %s are "
                           "ignored: shorten the description", p, len(words), max_len, words[max_len:])
        return p

    def encode(self, prompts: list[str], cfg_scale: float = 1.0) -> TextEmbeddings:
        """The text condition of ``prompts`` (one row each) with the AR guidance ``cfg_scale``."""
        cond = self.text_encoder.embed(self.text_tokenizer, prompts)
        return dataclasses.replace(cond, guidance=Guidance(float(cfg_scale)))

    @staticmethod
    def _is_masked(sampler: str | Sampler) -> bool:
        """Whether ``sampler`` (a name or a Sampler) runs on the masked model; False for anything else
        (:meth:`make_sampler` refuses it)."""
        if isinstance(sampler, Sampler):
            return "audio-masked" in sampler.contracts
        return isinstance(sampler, str) and "audio-masked" in sampler_info(sampler).contracts

    def models_for(self, sampler: Sampler) -> dict[str, Any]:
        if "audio-masked" in sampler.contracts:
            return {"model": self._masked, "ar_model": self._ar}
        return {"model": self._ar, "draft": self._draft}

    @contextlib.contextmanager
    def masked_steps(self, smp: Sampler, progress: bool, callback: Any) -> Iterator[Any]:
        """Step callback of a masked decode: one progress-bar tick per decoding step (total: the
        sampler's ``steps_per_stage`` sum) and the user's ``callback_on_step_end``."""
        if callback is not None and not callable(callback):
            raise InputError(f"callback_on_step_end must be callable as callback(pipe, step, info), got {callback!r}.")
        steps = getattr(smp, "params", {}).get("steps_per_stage")
        bar = self.progress_bar(total=sum(steps) if steps else None, desc=smp.name) if self._show_progress(progress) else None

        def step_callback(step: int, stats: Any) -> None:
            if bar is not None:
                bar.update(1)
            if callback is not None:
                callback(self, step, {"stats": stats})

        try:
            yield step_callback if (bar is not None or callback is not None) else None
        finally:
            if bar is not None:
                bar.close()

    def audio_prompts(self, audio_prompt: Any, sampling_rate: int | None, n: int, frames: int) -> list[Any]:
        """Per description: the codes ``[K, P]`` of its audio prompt, None, or the InputError of a bad
        one (a bad prompt shared by every description raises it)."""
        if audio_prompt is None:
            if sampling_rate is not None:
                raise InputError("sampling_rate= is the rate of an audio_prompt array; no audio_prompt was given.")
            return [None] * n
        items, shared = split_prompts(audio_prompt, n)
        if shared:
            return [prompt_codes(self.codec, audio_prompt, sampling_rate, frames, "audio_prompt")] * n
        out: list[Any] = []
        rates = item_rates(sampling_rate, len(items))  # one rate, or one per description's prompt
        for i, item in enumerate(items):
            try:
                out.append(None if item is None else prompt_codes(self.codec, item, rates[i], frames, f"audio_prompt {i}"))
            except InputError as err:
                out.append(err)
        return out

    # ------------------------------------------------------------------ generation
    def __call__(
        self,
        prompt: str | list[str],
        sampler: str | Sampler = "magnet",
        duration: float = 5.0,
        cfg_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        progress: bool = False,
        callback_on_step_end: Any = None,
        return_dict: bool = True,
        audio_prompt: Any = None,
        sampling_rate: int | None = None,
        **sampler_params: Any,
    ) -> AudioOutput | tuple:
        """Generate one clip per prompt (see the module docstring). Extra keyword arguments are the
        sampler's parameters (``steps_per_stage=[10, 5, 5, 5]``, ``num_draft_tokens=4`` ...).
        ``audio_prompt`` / ``sampling_rate``: audio to continue and the rate of an array (see the module docstring)."""
        # 1. sampler, duration, prompts
        masked = self._is_masked(sampler)
        if cfg_scale is not None:
            check_guidance_scale(cfg_scale)
            if masked and isinstance(sampler, Sampler):
                raise InputError("cfg_scale of a masked sampler is that sampler's parameter: pass it to the Sampler "
                                 "instance (get_sampler('magnet', cfg_scale=...)), not to the call.")
            if masked:  # the start of the sampler's annealed guidance
                sampler_params = {**sampler_params, "cfg_scale": cfg_scale}
        smp = self.make_sampler(sampler, sampler_params)
        frames = self.frames_for(duration)
        prompts = list(prompt) if isinstance(prompt, (list, tuple)) else [prompt]
        if not prompts:
            raise InputError("no prompt given; pass a text description or a non-empty list of them.")
        errors: list[str | None] = [None] * len(prompts)
        good: list[int] = []
        audio = self.audio_prompts(audio_prompt, sampling_rate, len(prompts), frames)
        for i, p in enumerate(prompts):
            try:
                self.check_prompt(p, i)
                if isinstance(audio[i], InputError):
                    raise audio[i]
                good.append(i)
            except InputError as err:
                if len(prompts) == 1:
                    raise
                errors[i] = str(err)
                logger.warning("prompt %d skipped: %s", i, err)
        if not good:
            raise InputError("no prompt could be used: " + "; ".join(e.rstrip(".") for e in errors if e) + ".")

        # 2. condition, sampling settings, generator
        paper = getattr(smp, "paper_config", {}) if masked else {}
        config = DecodeConfig(
            max_new_tokens=1 if masked else self.ar_model.config.stream_tokens(frames),
            # not coerced: DecodeConfig refuses a non-number with a clear error (float('x') raised a bare
            # ValueError, and int() turned top_k=2.7 into 2 without a word)
            temperature=paper.get("temperature", 1.0) if temperature is None else temperature,
            top_k=paper.get("top_k", 0) if top_k is None else top_k,
            top_p=paper.get("top_p", 1.0) if top_p is None else top_p,
            eos_token_id=None, pad_token_id=0, seed=seed,
        )
        if not masked and config.temperature > MAX_TEMPERATURE:
            raise InputError(f"temperature must be <= {MAX_TEMPERATURE:g} for the AR samplers: the MusicGen model rules "
                             f"stream cells out with finite logits, which a larger one brings back; got {config.temperature!r}.")
        cond = self.encode([prompts[i] for i in good], 1.0 if masked else (AR_CFG_SCALE if cfg_scale is None else cfg_scale))
        models = self.models_for(smp)
        generator = self.prepare_generator(generator, seed)
        b = len(good)
        given = [audio[i] for i in good]
        rows = [[self.ar_model.config.bos_id] for _ in range(b)] if not masked else None
        if not masked and any(c is not None for c in given):  # prompt prefix + forced prompt cells
            rows, forced = ar_plan(self.ar_model.config, given, frames)
            config.max_new_tokens -= len(rows[0]) - 1
            cond = dataclasses.replace(cond, extra={**cond.extra, FORCED_KEY: forced.to(cond.embeddings.device)})

        # 3. decode codes (the progress bar counts tokens for AR samplers, steps for masked ones)
        hooks = self.step_hooks(config.max_new_tokens, progress, callback_on_step_end) if not masked else self.masked_steps(smp, progress, callback_on_step_end)
        with hooks as config.step_callback, torch.inference_mode():
            if masked:
                grid = masked_grid(given, self.codec.num_codebooks, frames, self.model.config.mask_id, self.device)
                result = smp.generate(models, grid, config, generator, cond=cond)
                codes = result.tokens
            else:
                result = smp.generate(models, rows, config, generator, cond=cond)
                stream = torch.tensor([r[1:] + s for r, s in zip(rows, result.sequences)], dtype=torch.long)
                codes = self.ar_model.config.codes_from_stream(stream, frames)

        # 4. waveforms
        wav = self.codec.decode(codes.to(self.device)).cpu().numpy().astype(np.float32)
        audios: list[np.ndarray | None] = [None] * len(prompts)
        code_list: list[torch.Tensor | None] = [None] * len(prompts)
        for r, i in enumerate(good):
            audios[i] = wav[r]
            code_list[i] = codes[r].cpu()
        stats = result.stats
        stats.extra.update(frames=frames, duration=frames / self.frame_rate, audio_seconds=b * frames / self.frame_rate)
        if audio_prompt is not None:
            stats.extra["prompt_frames"] = [0 if c is None else int(c.shape[1]) for c in given]
        out = AudioOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, codes=code_list, prompts=prompts, errors=errors)
        return self._return(out, return_dict)


__all__ = ["AudioPipeline", "AudioOutput", "LeapgenError", "ConfigError"]
