"""Zero-shot text-to-speech: ``Pipeline.from_pretrained("leapgen/tts-en")(text, prompt_audio=...)``.

MaskGCT (Wang et al., ICLR 2025) at CPU scale: text -> phones (espeak-ng G2P) -> **T2S** (semantic
tokens: k-means over the shipped ASR encoder, 60 ms frames) -> **S2A** (codec tokens, 4 RVQ layers
at 50 Hz, coarse to fine) -> codec decoder -> 16 kHz audio. A few seconds of a voice (``prompt_audio``)
are the in-context prompt of both stages: its semantic tokens prefix the T2S sequence, its codec
codes prefix the S2A grid.

* ``sampler="maskgct"`` (default; alias ``maskgct_t2s``): masked T2S (``maskgct_t2s``).
  ``sampler="ar"``, ``"speculative"`` or any sampler of the causal contract: the AR T2S baseline
  (a small Llama, ``ar_t2s``; ``speculative`` drafts with ``ar_draft``). S2A is ``maskgct_s2a`` for
  every T2S sampler (``s2a_params`` overrides its parameters), so speedups compare T2S like for like.
* The prompt's trailing silence is trimmed (the target continues it; a prompt ending in silence reads
  as a finished utterance to both T2S models, which never saw one followed by more speech), and so is
  its leading silence but 100 ms (the speaking rate is read off the prompt's length).
* Target length (MaskGCT): ``round(#target phones * prompt frames / #prompt phones)``. The prompt's
  phones come from ``prompt_text`` or, when it is not given, from the prompt's transcript by the
  bundled ASR (Paraformer) (logged; the ASR is weak, so pass ``prompt_text`` when you know it).
* Without ``prompt_audio`` the asset's ``examples/prompt.wav`` (an unseen voice) is used, logged.
* :meth:`TTSPipeline.speak_semantic` runs the S2A stage alone on given semantic tokens (voice
  conversion: :meth:`~TTSPipeline.semantic_of` of one clip, spoken in the voice of another).
* Text is normalised first (:func:`~leapgen.tokenizers.text_normalize.normalize_text`: numbers,
  amounts, times, dates and abbreviations are written out as words).
* Bad input fails per item (``errors[i]``, ``audios[i] = None``): empty text, text with no letters or
  with characters the normaliser cannot read (an emoji, another script, an ambiguous date), a
  prompt shorter than ``min_prompt_seconds`` (1 s) or with fewer than 4 phones (too short to estimate
  the speaking rate), an unreadable file, a prompt and text together longer than the models' context
  (:meth:`TTSPipeline._check_context`: T2S 512 positions for phones and semantic frames, S2A 1,024
  codec frames, about 20 s of prompt and speech together). A quiet prompt is scaled up to the
  training level (:func:`~leapgen.pipelines.speech_audio.normalize_level`). A batch (``text`` a list)
  shares one prompt or takes one per text.

Output :class:`TTSOutput`: ``audios`` (float32 numpy at ``sample_rate`` 16000), ``stats``
(:class:`DecodeStats` of the T2S sampler; ``stats.extra``: ``t2s_time``, ``s2a_time``,
``codec_time``, ``prompt_time``, ``s2a_forwards``, ``semantic_frames``, ``audio_seconds``, ``silent``: the
rows whose audio came out silent, each also logged as a warning), ``errors``,
``semantic_tokens``, ``texts``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError, InputError, LeapgenError
from ..models.hf import HFCausalLM
from ..models.tts import AR_BOS, AR_EOS, AR_SEP, CODEC_PER_SEMANTIC, ar_phone_ids, ar_semantic_offset
from ..models.tts_lm import S2AMaskedLM, T2SMaskedLM
from ..samplers import DecodeConfig, DecodeStats, Sampler, get_sampler, sampler_info
from ..samplers.masked import MaskedInputs
from ..tokenizers.phones import phonemize
from .audio_output import AudioOutput
from .base import Pipeline
from .speech_audio import item_rates, load_audio, normalize_level, several
from .tts_text import LONG_TEXT_CHARS, check_prompt_rate, join_chunks, split_text
from .tts_text import warn_silent as warn_silent_texts
from .tts_text import with_example_voice as example_voice

logger = logging.getLogger(__name__)
HOP = 960  # samples per semantic frame


def _loud(wave: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the samples above ``threshold`` x the clip's peak."""
    return np.flatnonzero(np.abs(wave) > threshold * max(1e-6, float(np.abs(wave).max())))


def trim_trailing_silence(wave: np.ndarray, threshold: float = 0.02, keep: int = 160) -> np.ndarray:
    """``wave`` without its trailing silence (samples below ``threshold`` x peak), ``keep`` samples kept:
    the target continues the prompt, and a prompt ending in silence reads as a finished utterance."""
    loud = _loud(wave, threshold)
    return wave[: min(wave.size, int(loud[-1]) + 1 + keep)] if loud.size else wave


def trim_leading_silence(wave: np.ndarray, threshold: float = 0.02, keep: int = 1600) -> np.ndarray:
    """``wave`` from ``keep`` samples (100 ms: the bench's prompts, up to 55 ms, stay as they are) before
    its first sample above ``threshold`` x peak: the speaking rate is read off the prompt's length,
    and 3 s of silence before a 2 s prompt stretched the target from 2.5 to 6.9 s."""
    loud = _loud(wave, threshold)
    return wave[max(0, int(loud[0]) - keep) :] if loud.size else wave


#: the speaking-rate factors a call may ask for (``speed=``): beyond them the masked T2S gets far fewer or
#: more frames than the phones of its training data ever had
SPEEDS = (0.5, 2.0)
#: the shortest target (semantic frames, 0.54 s): at 3-5 frames (a one-word text) the masked T2S wrote only
#: silence for every seed; the training sentences have 3 words or more
MIN_TARGET_FRAMES = 9


@dataclass(repr=False)
class TTSOutput(AudioOutput):
    """Generated speech (see the module docstring); ``errors[i]`` is item i's reason, None when it succeeded."""

    semantic_tokens: list[list[int] | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"TTSOutput(n={len(self.audios)}, sample_rate={self.sample_rate}, errors={self.errors}, stats={self.stats.summary()})"


@dataclass
class _Item:
    text: str
    phones: list[int]
    prompt_phones: list[int]
    prompt_sem: list[int]
    prompt_codes: torch.Tensor  # [K, 3 * Tp]
    target_len: int


def _check_s2a_params(params: Any, *temperatures: float | None) -> None:
    """Refuse bad S2A parameters and temperatures when the call starts: a misspelt ``s2a_params`` key or a
    negative temperature used to raise only after every prompt was encoded and the T2S stage had run."""
    if params is not None and not isinstance(params, dict):
        raise InputError(f"s2a_params must be a dict of maskgct_s2a parameters (e.g. {{'steps_per_stage': [8, 4, 1, 1]}}), got "
                         f"{type(params).__name__}.")
    get_sampler("maskgct_s2a", **(params or {}))  # ConfigError naming an unknown or bad parameter
    for t in temperatures:
        if t is not None:
            DecodeConfig(temperature=t)  # ConfigError: not a finite number >= 0


class TTSPipeline(Pipeline):
    """MaskGCT zero-shot TTS with an AR T2S baseline (see the module docstring)."""

    components = ("t2s", "s2a", "ar_t2s", "ar_draft", "codec", "semantic", "speaker", "asr_model", "frontend",
                  "asr_vocab", "phones")
    optional_components = ("ar_t2s", "ar_draft", "speaker")
    draft_components = ("ar_draft",)
    contracts = ("tts-semantic", "tts-acoustic", "causal")
    stage_contracts = ("tts-acoustic",)  # maskgct_s2a is the built-in S2A stage, never a sampler= choice
    demo_input = "text"
    demo_example = "the value of the object is returned"
    demo_baseline = "ar"

    def __init__(self, frames_per_phone: float = 1.0, min_prompt_seconds: float = 1.0, max_seconds: float = 20.0,
                 **components: Any) -> None:
        super().__init__(**components)
        self.frames_per_phone = float(frames_per_phone)
        self.min_prompt_seconds = float(min_prompt_seconds)
        self.max_seconds = float(max_seconds)
        self._asr: Any = None

    def pipeline_config(self) -> dict[str, Any]:
        return {"frames_per_phone": self.frames_per_phone, "min_prompt_seconds": self.min_prompt_seconds,
                "max_seconds": self.max_seconds}

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    def model_contracts(self) -> tuple[str, ...]:
        return ("tts-semantic", "tts-acoustic") + (("causal",) if self.ar_t2s is not None else ())

    def _example_prompt(self, prompt_text: Any) -> tuple[str, Any]:
        """The asset's ``examples/prompt.wav`` (and its text) when no prompt is given, logged; else InputError."""
        import json
        from pathlib import Path

        from .base import resolve_pretrained

        name = getattr(self, "name_or_path", None)
        folder = None
        if name is not None:
            try:
                folder = Path(resolve_pretrained(name)) / "examples"
            except LeapgenError:
                folder = None
        if folder is None or not (folder / "prompt.wav").is_file():
            raise InputError("prompt_audio is required: a few seconds of the voice to speak with (a path or an array).")
        logger.info("no prompt_audio: using the shipped example voice %s", folder / "prompt.wav")
        if prompt_text is None and (folder / "prompt.json").is_file():
            try:  # a damaged file is named, not a raw JSONDecodeError
                prompt_text = json.loads((folder / "prompt.json").read_text()).get("text")
            except (OSError, ValueError, AttributeError) as err:
                raise ConfigError(f"{folder / 'prompt.json'} cannot be read ({type(err).__name__}: {err}); restore it or "
                                  "pass prompt_audio= and prompt_text= yourself.") from err
        return str(folder / "prompt.wav"), prompt_text

    # ------------------------------------------------------------------------------ prompt
    @torch.no_grad()
    def semantic_of(self, wave: np.ndarray) -> list[int]:
        """Semantic tokens of a 16 kHz waveform (ASR encoder -> k-means)."""
        x, lengths = self.frontend([wave])
        mem, _ = self.asr_model.encode(x.to(self.device), lengths)
        return self.semantic.encode(mem)[0].tolist()

    def transcribe(self, wave: np.ndarray) -> str:
        """Transcript of the prompt by the bundled ASR (Paraformer, through :class:`ASRPipeline`)."""
        if self._asr is None or self._asr.model is not self.asr_model:
            from .asr import ASRPipeline

            self._asr = ASRPipeline(model=self.asr_model, frontend=self.frontend, vocab=self.asr_vocab)
        out = self._asr(wave, sampling_rate=self.sample_rate, sampler="paraformer")
        if out.errors and out.errors[0]:
            raise InputError(f"the bundled ASR could not read the prompt clip to find its speaking rate ({out.errors[0]}); "
                             "pass a clip with speech in it, and prompt_text= (what it says).")
        return out.texts[0] or ""

    def _prompt_tokens(self, prompt: Any, sampling_rate: int | None) -> tuple[np.ndarray, list[int], torch.Tensor]:
        """The prompt clip (leading and trailing silence trimmed, padded to whole semantic frames), its
        semantic tokens and its codec codes ``[K, CODEC_PER_SEMANTIC * len(semantic)]``."""
        if prompt is None:  # a None in a per-text list, and the pipeline folder has no example voice
            raise InputError("prompt_audio is None for this text and there is no example voice; give a clip of the voice.")
        try:
            wave = normalize_level(load_audio(prompt, sampling_rate, self.sample_rate), "the prompt clip")
        except InputError as err:
            raise InputError(f"prompt_audio: {err}") from None
        wave = trim_leading_silence(wave)
        if wave.size < self.min_prompt_seconds * self.sample_rate:
            raise InputError(f"the prompt clip is {wave.size / self.sample_rate:.2f} s (from its first sound); at least "
                             f"{self.min_prompt_seconds:g} s of speech is needed to estimate the speaking rate.")
        wave = trim_trailing_silence(wave)
        wave = np.pad(wave, (0, (-wave.size) % HOP))
        sem = self.semantic_of(wave)
        codes = self.codec.encode(wave)[0][:, : len(sem) * CODEC_PER_SEMANTIC].cpu()
        n = min(len(sem), codes.shape[1] // CODEC_PER_SEMANTIC)
        return wave, sem[:n], codes[:, : n * CODEC_PER_SEMANTIC]

    def _check_context(self, item: _Item, ar: bool | None) -> None:
        """InputError unless the prompt and the text fit every model of the path: the T2S model's
        positions (phones + semantic frames; the AR T2S (``ar``) also its 1.5x generation budget; ``ar``
        None: no T2S, :meth:`speak_semantic`) and the S2A model's codec frames. A long prompt used to fail
        the whole call inside the model."""
        n_sem = len(item.prompt_sem) + item.target_len
        n_ph = len(item.prompt_phones) + 1 + len(item.phones)
        checks = [(CODEC_PER_SEMANTIC * n_sem, self.s2a.config.max_frames, "codec frames", "S2A")]
        if ar and self.ar_t2s is not None:
            need = n_ph + 2 + len(item.prompt_sem) + int(item.target_len * 1.5) + 4
            checks.append((need, self.ar_t2s.config.max_position_embeddings, "positions", "AR T2S"))
        elif ar is False:
            checks.append((n_ph + n_sem, self.t2s.config.max_positions, "positions", "T2S"))
        for need, have, unit, model in checks:
            if need > have:
                prompt_s = len(item.prompt_sem) * HOP / self.sample_rate
                raise InputError(
                    f"the prompt clip ({prompt_s:.1f} s) and the text (about {item.target_len * HOP / self.sample_rate:.1f} s "
                    f"of speech) need {need} {unit}, more than the {model} model's {have}; use a prompt of a few "
                    "seconds (3-10 s) or a shorter text.")

    def _prepare(self, text: str, prompt: Any, prompt_text: str | None, sampling_rate: int | None,
                 ar: bool = False, speed: float = 1.0) -> _Item:
        ipa = phonemize([text])[0]
        phones = self.phones.encode(ipa)
        if prompt_text is not None and (not isinstance(prompt_text, str) or not prompt_text.strip()):
            raise InputError(f"prompt_text is {prompt_text!r}: give what the prompt clip says, or leave it out (None) "
                             "to have the bundled ASR transcribe it.")
        wave, sem, codes = self._prompt_tokens(prompt, sampling_rate)
        heard = prompt_text is None
        if heard:
            prompt_text = self.transcribe(wave)
            logger.info("no prompt_text: the bundled ASR heard %r in the prompt (pass prompt_text= when known)", prompt_text)
            if not prompt_text:
                raise InputError("the ASR heard no words in the prompt clip; pass prompt_text= (what the prompt says).")
        p_phones = self.phones.encode(phonemize([prompt_text])[0])
        if len([p for p in p_phones if p > 1]) < 4:
            raise InputError(f"the prompt has {len(p_phones)} phones; at least 4 are needed to estimate the speaking rate.")
        check_prompt_rate(len(sem), len(p_phones), prompt_text, heard, HOP / self.sample_rate)
        rate = len(sem) / len(p_phones)
        target = max(MIN_TARGET_FRAMES, int(round(len(phones) * rate / speed)))
        max_frames = int(self.max_seconds * self.sample_rate / HOP)
        if target > max_frames:
            raise InputError(f"the text needs about {target * HOP / self.sample_rate:.1f} s of speech; the limit is "
                             f"{self.max_seconds:g} s (split it into sentences).")
        item = _Item(text, phones, p_phones, sem, codes, target)
        self._check_context(item, ar)
        return item

    # ------------------------------------------------------------------------------ call
    def __call__(self, text: str | list[str], prompt_audio: Any = None, prompt_text: str | list[str] | None = None,
                 sampler: str | Sampler = "maskgct", *, sampling_rate: int | None = None, seed: int | None = None,
                 generator: torch.Generator | None = None, temperature: float | None = None,
                 s2a_params: dict[str, Any] | None = None, s2a_temperature: float | None = None,
                 speed: float = 1.0, return_dict: bool = True, **sampler_params: Any) -> Any:
        """Speak ``text`` (a string or a list) in the voice of ``prompt_audio`` (a path or an array with
        ``sampling_rate=``; one for all texts or one per text). ``speed`` scales the speaking rate read
        off the prompt (MaskGCT's target length: 2.0 is twice as fast, 0.5 half; the masked T2S only,
        the AR T2S ends where it writes its end token)."""
        if prompt_audio is None:
            prompt_audio, prompt_text = self._example_prompt(prompt_text)
        t2s = "maskgct_t2s" if isinstance(sampler, str) and sampler == "maskgct" else sampler
        if (t2s.name if isinstance(t2s, Sampler) else t2s) == "maskgct_s2a":
            raise InputError("'maskgct_s2a' is the S2A stage (always run); choose the T2S sampler: 'maskgct', 'ar' or 'speculative'.")
        _check_s2a_params(s2a_params, temperature, s2a_temperature)
        smp = self.make_sampler(t2s, sampler_params)  # a name (with the call's extra keywords) or a Sampler
        info = sampler_info(smp.name)
        ar_path = "tts-semantic" not in info.contracts
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not SPEEDS[0] <= speed <= SPEEDS[1]:
            raise InputError(f"speed must be a number in [{SPEEDS[0]:g}, {SPEEDS[1]:g}] (1 = the prompt's rate), got {speed!r}.")
        if ar_path and speed != 1:
            raise InputError(f"speed={speed:g} sets the length of the masked T2S ('maskgct'); the {info.name!r} T2S "
                             "ends at its own end token. Use sampler='maskgct', or leave speed at 1.")
        if not isinstance(text, (str, list, tuple)):
            raise InputError(f"text must be a string or a list of strings, got {type(text).__name__}.")
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise InputError("no text given.")
        prompts = list(prompt_audio) if several(prompt_audio) else [prompt_audio] * len(texts)
        ptexts = list(prompt_text) if isinstance(prompt_text, (list, tuple)) else [prompt_text] * len(texts)
        if len(prompts) != len(texts) or len(ptexts) != len(texts):
            raise InputError(f"{len(texts)} texts need one prompt (and prompt_text) each or one for all; got {len(prompts)} / {len(ptexts)}.")
        prompts, ptexts = example_voice(prompts, ptexts, self._example_prompt)  # None in a list: the example voice
        gen = self.prepare_generator(generator, seed)
        t0 = time.perf_counter()
        # a long text is spoken in chunks of whole sentences, joined afterwards (tts_text)
        parts = [split_text(tx, int(LONG_TEXT_CHARS * min(1.0, speed))) for tx in texts]  # slower: shorter chunks
        owners, chunks = [i for i, p in enumerate(parts) for _ in p], [c for p in parts for c in p]
        rates = [item_rates(sampling_rate, len(texts))[i] for i in owners]  # one rate, or one per text's prompt
        prompts, ptexts = [prompts[i] for i in owners], [ptexts[i] for i in owners]
        items: list[_Item | None] = []
        errors: list[str | None] = []
        for tx, pa, pt, sr in zip(chunks, prompts, ptexts, rates):
            try:
                items.append(self._prepare(tx, pa, pt, sr, ar_path, float(speed)))
            except LeapgenError as err:
                errors.append(str(err))
                items.append(None)
                continue
            errors.append(None)
        prompt_time = time.perf_counter() - t0
        ok = [i for i, it in enumerate(items) if it is not None]
        sems: list[list[int] | None] = [None] * len(chunks)
        audios: list[np.ndarray | None] = [None] * len(chunks)
        stats = DecodeStats(sampler=info.name, batch_size=len(ok))
        t2s_time = s2a_time = codec_time = 0.0
        s2a_forwards = 0
        if ok:
            batch = [items[i] for i in ok]
            t1 = time.perf_counter()
            if ar_path:
                res_sem, stats = self._t2s_ar(smp, batch, temperature, gen)
            else:
                res_sem, stats = self._t2s_masked(smp, batch, temperature, gen)
            t2s_time = time.perf_counter() - t1
            t1 = time.perf_counter()
            codes, s2a_stats = self._s2a(batch, res_sem, s2a_params or {}, s2a_temperature, gen)
            s2a_time = time.perf_counter() - t1
            s2a_forwards = s2a_stats.target_forwards
            t1 = time.perf_counter()
            for j, i in enumerate(ok):
                sems[i] = res_sem[j]
                audios[i] = self.codec.decode(codes[j][None])[0].cpu().numpy().astype(np.float32)
            codec_time = time.perf_counter() - t1
            stats.extra["silent"] = warn_silent_texts(audios, ok, owners, info.name)
        if len(chunks) != len(texts):
            audios, sems, errors = join_chunks(owners, chunks, audios, sems, errors, len(texts), self.sample_rate)
            stats.extra["chunks"] = len(chunks)
        stats.extra.update(t2s_time=t2s_time, s2a_time=s2a_time, codec_time=codec_time, prompt_time=prompt_time,
                           s2a_forwards=s2a_forwards, semantic_frames=sum(len(s) for s in sems if s),
                           audio_seconds=sum(a.size for a in audios if a is not None) / self.sample_rate)
        stats.wall_time = time.perf_counter() - t0
        out = TTSOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, codes=[], prompts=texts, errors=errors,
                        semantic_tokens=sems, texts=texts)
        return self._return(out, return_dict)

    def speak_semantic(self, semantic_tokens: list[int] | list[list[int]], prompt_audio: Any = None, *,
                       sampling_rate: int | None = None, seed: int | None = None, generator: torch.Generator | None = None,
                       s2a_params: dict[str, Any] | None = None, s2a_temperature: float | None = None,
                       return_dict: bool = True) -> Any:
        """The S2A stage alone: speak given semantic tokens (one list, or one list per item, e.g.
        :meth:`semantic_of` of a clip) in the voice of ``prompt_audio`` (one clip for all items or
        one per item; default the asset's example prompt). This is MaskGCT's voice conversion
        (semantic tokens of one speaker, acoustics of another) and what ``leapgen bench speech``'s
        stage ablation runs on the real speech's tokens. Returns a :class:`TTSOutput` whose ``codes[i]``
        are the generated codec codes ``[K, frames]`` (prompt excluded) and ``audios[i]`` their audio."""
        _check_s2a_params(s2a_params, s2a_temperature)
        if prompt_audio is None:
            prompt_audio, _ = self._example_prompt(None)
        sems = [list(semantic_tokens)] if semantic_tokens and not isinstance(semantic_tokens[0], (list, tuple)) \
            else [list(s) for s in semantic_tokens]
        if not sems:
            raise InputError("no semantic tokens given.")
        prompts = list(prompt_audio) if several(prompt_audio) else [prompt_audio] * len(sems)
        if len(prompts) != len(sems):
            raise InputError(f"{len(sems)} token lists need one prompt each or one for all; got {len(prompts)}.")
        prompts = example_voice(prompts, [None] * len(prompts), self._example_prompt)[0]
        rates = item_rates(sampling_rate, len(sems))  # one rate, or one per item's prompt
        size = self.t2s.config.semantic_size
        gen = self.prepare_generator(generator, seed)
        t0 = time.perf_counter()
        items: list[_Item | None] = []
        errors: list[str | None] = []
        for i, (sem, pa) in enumerate(zip(sems, prompts)):
            try:
                if not sem or not all(isinstance(t, (int, np.integer)) and 0 <= t < size for t in sem):
                    raise InputError(f"semantic tokens must be a non-empty list of ints in [0, {size}); item {i} is not.")
                _, p_sem, p_codes = self._prompt_tokens(pa, rates[i])
                item = _Item("", [], [], p_sem, p_codes, len(sem))
                self._check_context(item, None)
                items.append(item)
            except LeapgenError as err:
                errors.append(str(err))
                items.append(None)
                continue
            errors.append(None)
        ok = [i for i, it in enumerate(items) if it is not None]
        audios: list[np.ndarray | None] = [None] * len(sems)
        codes_out: list[torch.Tensor | None] = [None] * len(sems)
        stats = DecodeStats(sampler="maskgct_s2a", batch_size=len(ok))
        if ok:
            codes, stats = self._s2a([items[i] for i in ok], [[int(t) for t in sems[i]] for i in ok], s2a_params or {},
                                     s2a_temperature, gen)
            for j, i in enumerate(ok):
                codes_out[i] = codes[j].cpu()
                audios[i] = self.codec.decode(codes[j][None])[0].cpu().numpy().astype(np.float32)
        stats.wall_time = time.perf_counter() - t0
        out = TTSOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, codes=codes_out, prompts=[""] * len(sems),
                        errors=errors, semantic_tokens=[list(s) for s in sems], texts=[""] * len(sems))
        return self._return(out, return_dict)

    # ------------------------------------------------------------------------------ stages
    def _t2s_masked(self, smp: Sampler, batch: list[_Item], temperature: float | None,
                    gen: torch.Generator) -> tuple[list[list[int]], DecodeStats]:
        model = T2SMaskedLM(self.t2s)
        b = len(batch)
        lens = [len(it.prompt_sem) + it.target_len for it in batch]
        tokens = torch.full((b, max(lens)), model.mask_id, dtype=torch.long)
        am = torch.zeros(b, max(lens), dtype=torch.bool)
        pmax = max(len(it.prompt_phones) + 1 + len(it.phones) for it in batch)
        phones = torch.zeros(b, pmax, dtype=torch.long)
        space = self.phones.stoi.get(" ", 1)
        for r, it in enumerate(batch):
            tokens[r, : len(it.prompt_sem)] = torch.tensor(it.prompt_sem)
            am[r, : lens[r]] = True
            ph = it.prompt_phones + [space] + it.phones
            phones[r, : len(ph)] = torch.tensor(ph)
        cond = {"phones": phones.to(self.device), "prompt_len": torch.tensor([len(it.prompt_sem) for it in batch], device=self.device),
                "uncond": False}
        temp = smp.paper_config.get("temperature", 0.9) if temperature is None else temperature
        res = smp.generate({"model": model}, MaskedInputs(tokens.to(self.device), cond=cond, attention_mask=am.to(self.device)),
                           DecodeConfig(max_new_tokens=1, temperature=temp), gen)
        out = [res.tokens[r, len(it.prompt_sem) : lens[r]].tolist() for r, it in enumerate(batch)]
        return out, res.stats

    def _t2s_ar(self, smp: Sampler, batch: list[_Item], temperature: float | None,
                gen: torch.Generator) -> tuple[list[list[int]], DecodeStats]:
        if self.ar_t2s is None:
            raise InputError("this pipeline ships no AR T2S model (ar_t2s); use sampler='maskgct'.")
        v = self.t2s.config.semantic_size
        off = ar_semantic_offset(len(self.phones))
        space = self.phones.stoi.get(" ", 1)
        prompts = [[AR_BOS, *ar_phone_ids(it.prompt_phones + [space] + it.phones), AR_SEP, *[off + s for s in it.prompt_sem]]
                   for it in batch]
        models: dict[str, Any] = {"model": HFCausalLM(self.ar_t2s)}
        if "draft" in sampler_info(smp.name).needs:
            if self.ar_draft is None:
                raise InputError(f"sampler {smp.name!r} needs a draft; this pipeline ships no ar_draft.")
            models["draft"] = HFCausalLM(self.ar_draft)
        longest = max(it.target_len for it in batch)
        temp = 0.9 if temperature is None else temperature
        top_k = max(1, int(np.ceil(0.02 * v))) if temp > 0 else 0
        cfg = DecodeConfig(max_new_tokens=int(longest * 1.5) + 4, temperature=temp, top_k=top_k, eos_token_id=AR_EOS)
        res = smp.generate(models, prompts, cfg, gen)
        out = []
        for r, it in enumerate(batch):
            seq = list(res.sequences[r])
            if len(seq) >= len(prompts[r]) and seq[: len(prompts[r])] == prompts[r]:
                seq = seq[len(prompts[r]) :]
            sem = []
            for t in seq:
                if t == AR_EOS:
                    break
                if off <= t < off + v:
                    sem.append(t - off)
            out.append(sem or [it.prompt_sem[-1]])
        return out, res.stats

    def _s2a(self, batch: list[_Item], sems: list[list[int]], params: dict[str, Any], temperature: float | None,
             gen: torch.Generator) -> tuple[list[torch.Tensor], DecodeStats]:
        smp = get_sampler("maskgct_s2a", **params)
        model = S2AMaskedLM(self.s2a)
        k = model.num_codebooks
        b = len(batch)
        n_sem = [len(it.prompt_sem) + len(s) for it, s in zip(batch, sems)]
        frames = [n * CODEC_PER_SEMANTIC for n in n_sem]
        tokens = torch.full((b, k, max(frames)), model.mask_id, dtype=torch.long)
        am = torch.zeros(b, max(frames), dtype=torch.bool)
        sem = torch.zeros(b, max(n_sem), dtype=torch.long)
        for r, (it, s) in enumerate(zip(batch, sems)):
            p = it.prompt_codes.shape[1]
            tokens[r, :, :p] = it.prompt_codes
            am[r, : frames[r]] = True
            sem[r, : n_sem[r]] = torch.tensor(it.prompt_sem + s)
        cond = {"semantic": sem.to(self.device), "uncond": False,
                "prompt_len": torch.tensor([it.prompt_codes.shape[1] for it in batch], device=self.device)}
        temp = smp.paper_config.get("temperature", 1.5) if temperature is None else temperature
        res = smp.generate({"model": model}, MaskedInputs(tokens.to(self.device), cond=cond, attention_mask=am.to(self.device)),
                           DecodeConfig(max_new_tokens=1, temperature=temp), gen)
        out = [res.tokens[r, :, it.prompt_codes.shape[1] : frames[r]] for r, it in enumerate(batch)]
        return out, res.stats


__all__ = ["TTSOutput", "TTSPipeline"]
