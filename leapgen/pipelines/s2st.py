"""Speech-to-speech translation: ``Pipeline.from_pretrained("leapgen/s2st-en-de")(audio) -> audios, texts, stats``.

Components: ``model`` (:class:`~leapgen.models.s2st.S2STModel`: speech encoder, DAG translator, AR
baseline translator, acoustic decoder), ``frontend`` (the ASR front end: fbank, LFR, CMVN),
``vocab`` (German phoneme symbols, ``|`` between words), ``mel`` (log-mel settings and the
Griffin-Lim vocoder, :class:`~leapgen.tokenizers.mel.MelSpectrogram`) and the optional
``language_id`` (:class:`~leapgen.models.language_id.LanguageID`, a spoken language identifier).

Language check (issue #16's bad-input rule): with a ``language_id`` component and
``check_language=True`` (default), an item whose probability of the source language
(:attr:`S2STPipeline.source_language`, ``"en"``) is below ``language_threshold`` (default 0.5) is
not translated: ``errors[i]`` says which language it sounds like, with its probability, and that
``check_language=False`` translates it anyway; the other items still translate. The detected
language per item is ``stats.extra["languages"]`` (None where not checked). Without the component
nothing is checked (logged once at load).

Steps per batch: encode once; the sampler translates to phonemes (``dag_lookahead`` (default),
``dag_greedy``, ``dag_viterbi`` on the DAG decoder: one decoder pass + a path search; ``ar`` and
every other chain sampler on the AR baseline decoder); the acoustic decoder turns the phonemes
(+ the chosen DAG vertices' states; zeros for the AR decoder, which has no vertices) into log-mel
frames with predicted durations; Griffin-Lim (``gl_iters``, default 32) makes the waveform
(``vocode=False`` skips it: ``audios[i]`` is then None and ``mels[i]`` the output).

``texts[i]``: the German phonemes as IPA words (``"ɪç zeːə"``). ``stats``: the sampler's merged
statistics (``target_forwards`` = translator decoder forwards) with ``extra``: ``encoder_time``,
``decoder_time``, ``acoustic_time``, ``vocoder_time``, ``latency`` (whole call, seconds),
``acoustic_forwards``, ``segments``. A quiet clip is scaled up to the training level
(:func:`~leapgen.pipelines.speech_audio.normalize_level`). A clip longer than
``max_segment_seconds`` (6 s; the model was trained on single sentences of at most 2.7 s, and a
minute of speech came out as 2 s of babble after 2 s of work, five minutes took 7.6 GB) is cut at its
pauses (:func:`~leapgen.pipelines.speech_audio.speech_segments`, logged); the segments are translated
one by one and joined (texts by a space, log-mels with :data:`GAP_S` of silence between). One bad item (missing file, empty, shorter than ``MIN_SECONDS``, silent,
bad array or sampling rate) gets ``audios[i] = None``, ``texts[i] = None`` and ``errors[i]``; the
others still return.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError, InputError, NumericalError
from ..models.condition import EncoderInputs
from ..models.language_id import LanguageID, language_name
from ..models.s2st import EOS, PAD, S2STModel
from ..models.s2st_lm import s2st_views
from ..samplers import DecodeConfig, DecodeStats
from ..samplers.base import Sampler
from ..tokenizers.asr_vocab import ASRVocab
from ..tokenizers.mel import MelSpectrogram
from ..tokenizers.speech_features import SpeechFrontend, pad_features
from .audio_output import AudioOutput
from .base import Pipeline
from .items import check_count
from .outputs import PipelineOutput
from .speech_audio import SILENCE, is_rate_pair, item_rates, load_audio, normalize_level, speech_segments

logger = logging.getLogger(__name__)

MIN_SECONDS = 0.3
#: the speaking-rate factors the acoustic decoder is asked for (durations are divided by ``speed``;
#: 1e-3 asked for 40 GB of frames)
SPEED_RANGE = (0.25, 4.0)
#: seconds of silence between the translations of two segments of a long clip
GAP_S = 0.25


@dataclass(repr=False)
class S2STOutput(PipelineOutput):
    """``audios[i]`` (float32 waveform at ``sample_rate``; None when item i failed, see ``errors[i]``, and
    for every item when the call had ``vocode=False``),
    ``texts[i]`` (target phonemes as IPA words), ``stats``, ``token_ids``, ``mels`` (log-mel ``[T, 80]``)."""

    audios: list[np.ndarray | None]
    sample_rate: int
    texts: list[str | None]
    stats: DecodeStats
    errors: list[str | None] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    mels: list[torch.Tensor | None] = field(default_factory=list)

    def save(self, index: int, path: Any) -> Any:
        """Write translation ``index`` to ``path`` as :meth:`AudioOutput.save` does (the format its extension
        names); InputError for a failed item or a call with ``vocode=False`` (there was no ``save`` at all:
        an AttributeError, where the TTS and music outputs have one)."""
        ok = isinstance(index, (int, np.integer)) and not isinstance(index, bool) and 0 <= index < len(self.audios)
        if ok and self.audios[index] is None and not (index < len(self.errors) and self.errors[index]):
            raise InputError(f"no audio at index {index}: the call had vocode=False (only mels[{index}]); translate "
                             "with vocode=True to save it.")
        return AudioOutput(audios=self.audios, sample_rate=self.sample_rate, stats=self.stats,
                           errors=self.errors).save(index, path)

    def __repr__(self) -> str:
        return f"S2STOutput(texts={self.texts!r}, stats={self.stats.summary()})"


class S2STPipeline(Pipeline):
    """English speech -> German speech (see the module docstring)."""

    components = ("model", "frontend", "vocab", "mel", "language_id")
    optional_components = ("language_id",)
    #: the language of the speech the model translates (checked by ``language_id``)
    source_language = "en"
    contracts = ("dag", "encoder-decoder")
    #: the attention decoder reads phonemes through its own embedding; it exposes no embedding table or latents
    model_lacks = {"embeddings": "S2STDecoderLM.embeddings() returns None", "token_latents": "S2STDecoderLM.token_latents() returns None"}

    def __init__(self, model: S2STModel, frontend: SpeechFrontend, vocab: ASRVocab, mel: MelSpectrogram,
                 max_segment_seconds: float = 6.0, language_id: LanguageID | None = None) -> None:
        super().__init__(model=model, frontend=frontend, vocab=vocab, mel=mel, language_id=language_id)
        self.max_segment_seconds = float(max_segment_seconds)
        self._views: dict[str, Any] | None = None
        if language_id is None:
            logger.info("S2ST pipeline without a language_id component: the input language is not checked")
        elif self.source_language not in language_id.languages:
            raise ConfigError(f"the language_id component knows {language_id.languages}, not the model's source "
                              f"language {self.source_language!r}")

    def pipeline_config(self) -> dict[str, Any]:
        return {"max_segment_seconds": self.max_segment_seconds}

    def _reset_wrappers(self) -> None:
        self._views = None

    @property
    def views(self) -> dict[str, Any]:
        if self._views is None or self._views["ar"].net is not self.model:
            self._views = s2st_views(self.model)
        return self._views

    def phonemes_to_text(self, ids: list[int]) -> str:
        """Phoneme ids -> IPA words (``|`` splits words)."""
        return "".join(self.vocab.words(ids)).replace("|", " ").strip()

    def __call__(self, audio: Any, sampling_rate: int | None = None, sampler: str | Sampler = "dag_lookahead", *,
                 batch_size: int = 8, max_new_tokens: int | None = None, temperature: float = 0.0,
                 seed: int | None = None, generator: torch.Generator | None = None, vocode: bool = True,
                 gl_iters: int = 32, speed: float = 1.0, check_language: bool = True, language_threshold: float = 0.5,
                 return_dict: bool = True, **sampler_params: Any) -> Any:
        """Translate ``audio``: a path, an array (with ``sampling_rate=``), a Hugging Face datasets audio
        dict ``{"array", "sampling_rate"}`` or a list of them. ``check_language`` / ``language_threshold``:
        the language check (see the module docstring)."""
        t_start = time.perf_counter()
        smp = self.make_sampler(sampler, sampler_params)
        check_count("batch_size", batch_size)
        lo, hi = SPEED_RANGE
        if isinstance(speed, bool) or not (isinstance(speed, (int, float)) and lo <= speed <= hi):
            raise InputError(f"speed must be a number in [{lo}, {hi}] (1 = the model's pace), got {speed!r}")
        check_count("max_new_tokens", max_new_tokens, optional=True)
        if isinstance(gl_iters, bool) or not (isinstance(gl_iters, int) and gl_iters >= 0):
            raise InputError(f"gl_iters must be an integer >= 0 (Griffin-Lim iterations, default 32), got {gl_iters!r}")
        if not isinstance(check_language, bool):
            raise InputError(f"check_language must be True or False, got {check_language!r}")
        if isinstance(language_threshold, bool) or not (isinstance(language_threshold, (int, float))
                                                        and 0.0 <= language_threshold <= 1.0):
            raise InputError(f"language_threshold must be a number in [0, 1] (the least probability of "
                             f"{self.source_language!r} speech that is translated; default 0.5), got {language_threshold!r}")
        gen = self.prepare_generator(generator, seed)
        multi = isinstance(audio, (list, tuple)) and not _is_sample_list(audio) and not is_rate_pair(audio)
        items = list(audio) if multi else [audio]
        if not items:
            raise InputError("no audio given; pass a path, an array (with sampling_rate=) or a list of them.")
        rate = self.frontend.config.sample_rate
        rates = item_rates(sampling_rate, len(items))
        errors: list[str | None] = [None] * len(items)
        segments: list[tuple[int, torch.Tensor]] = []  # (item, features) per segment, in order
        languages: list[str | None] = [None] * len(items)
        check = check_language and self.language_id is not None
        for i, item in enumerate(items):
            try:
                wave = normalize_level(load_audio(item, rates[i], rate), f"audio item {i}")
                if wave.size < MIN_SECONDS * rate:
                    raise InputError(f"item {i}: {wave.size / rate:.3f} s of audio is too short to translate; "
                                     f"give at least {MIN_SECONDS} s.")
                if float(np.abs(wave).max()) < SILENCE:
                    raise InputError(f"item {i}: the clip is silent.")
                kept = [seg for _, seg in speech_segments(wave, self.max_segment_seconds, rate, trim=True)
                        if seg.size >= MIN_SECONDS * rate and float(np.abs(seg).max()) >= SILENCE]
                if not kept:
                    raise InputError(f"item {i}: no stretch of speech between its pauses lasts {MIN_SECONDS} s; "
                                     "there is nothing to translate.")
                if check:
                    languages[i], refusal = self._check_language(i, np.concatenate(kept), language_threshold)
                    if refusal:
                        raise InputError(refusal)
                segments += [(i, self.frontend.features(seg)) for seg in kept]
            except InputError as err:
                errors[i] = str(err)
        ids_out: list[list[int]] = [[] for _ in items]
        seg_mels: list[list[torch.Tensor]] = [[] for _ in items]
        seg_texts: list[list[str]] = [[] for _ in items]  # one per segment, joined by a space (a segment's
        # last word and the next one's first ran together into one word when their ids were joined)
        parts: list[DecodeStats] = []
        times = {"encoder_time": 0.0, "decoder_time": 0.0, "acoustic_time": 0.0, "vocoder_time": 0.0}
        acoustic_forwards = 0
        for s in range(0, len(segments), batch_size):
            chunk = segments[s : s + batch_size]
            try:
                res, hidden = self._translate(smp, [f for _, f in chunk], max_new_tokens, temperature, gen, times)
            except (InputError, NumericalError) as err:  # the call's own errors (ConfigError) raise
                for i, _ in chunk:
                    errors[i] = str(err)
                continue
            parts.append(res.stats)
            seqs = [[t for t in seq if t not in (PAD, EOS)] for seq in res.sequences]
            for (i, _), seq in zip(chunk, seqs):
                ids_out[i] += seq
                seg_texts[i].append(self.phonemes_to_text(seq))
            t0 = time.perf_counter()
            out = self._acoustic(seqs, hidden, speed)
            acoustic_forwards += 1
            times["acoustic_time"] += time.perf_counter() - t0
            for (i, _), m in zip(chunk, out):
                seg_mels[i].append(m)
        gap = GAP_S / self.mel.frame_seconds
        mels: list[torch.Tensor | None] = [None if errors[i] else _join_mels(seg_mels[i], self.mel.config.n_mels, gap)
                                           for i in range(len(items))]
        audios: list[np.ndarray | None] = [None] * len(items)  # vocode=False: None, the mels are the output
        t0 = time.perf_counter()
        for i, m in enumerate(mels):
            if m is not None and vocode:
                audios[i] = self.mel.griffin_lim(m, iters=gl_iters).numpy()
        times["vocoder_time"] = time.perf_counter() - t0 if vocode else 0.0
        stats = DecodeStats.merged(parts, smp.name)
        stats.extra.update(times, acoustic_forwards=acoustic_forwards, segments=len(segments), languages=languages,
                           latency=time.perf_counter() - t_start)
        texts = [None if errors[i] else " ".join(t for t in seg_texts[i] if t) for i in range(len(items))]
        out_obj = S2STOutput(audios=audios, sample_rate=self.mel.config.sample_rate, texts=texts, stats=stats,
                             errors=errors, token_ids=ids_out, mels=mels)
        return self._return(out_obj, return_dict)

    def _check_language(self, i: int, wave: np.ndarray, threshold: float) -> tuple[str, str | None]:
        """The detected language of item ``i``'s speech and, when the source language's probability is below
        ``threshold``, the message that refuses it (else None)."""
        lid = self.language_id
        probs = lid.probabilities([wave])[0]
        best = lid.languages[int(probs.argmax())]
        p_src = float(probs[lid.languages.index(self.source_language)])
        if p_src < threshold:
            src = language_name(self.source_language)
            heard = (f"this sounds like {language_name(best)} speech ({best!r}, probability {float(probs.max()):.2f}; "
                     f"{src} {p_src:.2f}" if best != self.source_language else f"this is not clearly {src} speech "
                     f"(probability {p_src:.2f}")
            return best, (f"item {i}: {heard}, below language_threshold {threshold}); this model translates {src} "
                          "speech only. Pass check_language=False (CLI: --no-language-check) to translate it anyway.")
        return best, None

    @torch.inference_mode()
    def _translate(self, smp: Sampler, feats: list[torch.Tensor], max_new_tokens: int | None, temperature: float,
                   gen: torch.Generator, times: dict[str, float]) -> tuple[Any, list[torch.Tensor | None]]:
        """Encode once and run the sampler: ``(result, per-row vertex states of the tokens or None)``."""
        views = self.views
        x, lengths = pad_features([self.frontend.normalize(f) for f in feats])
        mask = torch.arange(x.shape[1])[None] < lengths[:, None]
        inputs = EncoderInputs(input_features=x.transpose(1, 2).to(self.device, self.dtype), attention_mask=mask.long())
        t0 = time.perf_counter()
        state = views["dag"].encode(inputs)
        t1 = time.perf_counter()
        limit = self.model.config.max_tokens if max_new_tokens is None else max_new_tokens
        config = DecodeConfig(max_new_tokens=limit, temperature=temperature, eos_token_id=EOS, pad_token_id=PAD)
        is_dag = "dag" in smp.contracts
        models = {"model": views["dag"] if is_dag else views["ar"]}
        res = smp.generate(models, [[EOS]] * len(feats), config, gen, cond=state)
        times["encoder_time"] += t1 - t0
        times["decoder_time"] += time.perf_counter() - t1
        hidden: list[torch.Tensor | None] = [None] * len(feats)
        if is_dag and getattr(smp, "last_graph", None) is not None:
            h = smp.last_graph["hidden"]
            for r, verts in enumerate(res.alignment):
                hidden[r] = h[r, torch.tensor(verts[: len(res.sequences[r])], dtype=torch.long, device=h.device)]
        return res, hidden

    @torch.inference_mode()
    def _acoustic(self, seqs: list[list[int]], hidden: list[torch.Tensor | None], speed: float) -> list[torch.Tensor | None]:
        """Phonemes (+ vertex states) -> log-mel ``[T, n_mels]`` per row (None for an empty translation)."""
        rows = [r for r, s in enumerate(seqs) if s]
        out: list[torch.Tensor | None] = [None] * len(seqs)
        if not rows:
            return [torch.zeros(0, self.mel.config.n_mels) for _ in seqs]
        n = max(len(seqs[r]) for r in rows)
        d = self.model.config.d_model
        tok = torch.zeros(len(rows), n, dtype=torch.long, device=self.device)
        hid = torch.zeros(len(rows), n, d, device=self.device, dtype=self.dtype)
        for k, r in enumerate(rows):
            tok[k, : len(seqs[r])] = torch.tensor(seqs[r], device=self.device)
            if hidden[r] is not None and hidden[r].shape[0] == len(seqs[r]):
                hid[k, : len(seqs[r])] = hidden[r].to(self.dtype)
        mask = tok != PAD
        mel, frames, _ = self.model.tts.generate(tok, hid, mask, speed=speed)
        for k, r in enumerate(rows):
            out[r] = mel[k, : int(frames[k])].float().cpu()
        return [o if o is not None else torch.zeros(0, self.mel.config.n_mels) for o in out]


def _join_mels(mels: list[torch.Tensor], n_mels: int, gap_frames: float) -> torch.Tensor:
    """The log-mels of one clip's segments in order, ``gap_frames`` frames of its quietest level between two."""
    mels = [m for m in mels if m.shape[0]]
    if len(mels) <= 1:
        return mels[0] if mels else torch.zeros(0, n_mels)
    floor = float(min(m.min() for m in mels))
    gap = torch.full((max(1, round(gap_frames)), n_mels), floor)
    out = [mels[0]]
    for m in mels[1:]:
        out += [gap, m]
    return torch.cat(out)


def _is_sample_list(x: Any) -> bool:
    return bool(x) and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in x[:16])


__all__ = ["S2STOutput", "S2STPipeline"]
