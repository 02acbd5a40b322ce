"""Speech recognition: ``Pipeline.from_pretrained("leapgen/asr-en")(audio) -> texts, timestamps, stats``.

Components: ``model`` (:class:`~leapgen.models.asr.ASRModel`: one encoder, Paraformer, CTC and AR
decoders), ``frontend`` (:class:`~leapgen.tokenizers.speech_features.SpeechFrontend`: Kaldi fbank,
LFR 7/6, CMVN) and ``vocab`` (:class:`~leapgen.tokenizers.asr_vocab.ASRVocab`).

Samplers (any registered sampler whose contract the model offers):

* ``paraformer`` (default): CIF + one non-causal decoder pass;
* ``ctc_greedy`` / ``ctc_prefix_beam``: the CTC head;
* ``ar`` / ``ar_beam`` and every other chain sampler: the AR attention decoder with its KV cache;
* ``speculative``: the AR decoder verifies a NAR draft (``draft="paraformer"`` (default) or
  ``"ctc"``) — up to 32 hypothesis tokens per step (``num_draft_tokens``), cut after the first
  one the draft gives less than 0.6 (``confidence_threshold``, the best of a sweep on unseen-voice
  utterances) and never past the hypothesis' end, re-aligned after an inserted or dropped word
  (``anchor_window`` 2), so a correct confident draft is checked in one forward; greedy output
  is identical to ``ar`` (GAD / SpecDec with beta = 1, tau = 0).

Every utterance is encoded once; draft and verifier share that encoder state. Word timestamps come
from the CIF weights over the encoder (``paraformer``: always; other samplers: when their word
count equals CIF's), optionally snapped onto the edges of speech within ``ts_snap_s`` seconds
(:func:`~leapgen.pipelines.asr_timing.snap_to_speech`; the recipe calibrates it). A quiet clip is
scaled up to the training level (:func:`~leapgen.pipelines.speech_audio.normalize_level`). Audio
longer than ``max_segment_seconds`` is cut at its pauses into stretches of speech (each at most
``max_segment_seconds``, 7.5 s; :func:`~leapgen.pipelines.speech_audio.speech_segments`): the model
was trained on single sentences of at most 7.4 s, and a minute of speech decoded in 12 s windows had
3x the word errors of the same sentences decoded one by one. The segments' words are stitched back. One bad item (missing file, silent clip, bad array)
gets ``texts[i] = None`` and ``errors[i]``; the others still return.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import InputError, NumericalError
from ..models.asr import EOS, ASRModel
from ..models.asr_lm import NARDraftLM, asr_views
from ..models.cif import cif_weights
from ..models.condition import EncoderInputs, EncoderState
from ..samplers import DecodeConfig, DecodeStats, sampler_info
from ..samplers.base import Sampler
from ..tokenizers.asr_vocab import ASRVocab
from ..tokenizers.speech_features import SpeechFrontend, pad_features
from .asr_timing import snap_to_speech, speech_frames, without_overlap
from .base import Pipeline
from .items import check_count
from .outputs import PipelineOutput
from .speech_audio import (
    ASR_TAIL_S,
    SILENCE,
    is_rate_pair,
    item_rates,
    load_audio,
    normalize_level,
    speech_segments,
)

Word = tuple[str, float, float]


@dataclass(repr=False)
class ASROutput(PipelineOutput):
    """``texts[i]`` (None when item i failed, see ``errors[i]``), ``timestamps[i]`` (``[(word, start_s,
    end_s), ...]`` or None when the sampler's words do not match CIF's), the merged decode statistics
    (``stats.extra``: ``encoder_time``, ``decoder_time``, ``frontend_time``, ``audio_seconds``, ``rtf``),
    ``token_ids`` and ``durations`` (seconds of audio per item)."""

    texts: list[str | None]
    timestamps: list[list[Word] | None]
    stats: DecodeStats
    errors: list[str | None] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"ASROutput(texts={self.texts!r}, stats={self.stats.summary()})"


class ASRPipeline(Pipeline):
    """Speech to text with word timestamps (see the module docstring)."""

    components = ("model", "frontend", "vocab")
    contracts = ("encoder-decoder", "paraformer", "ctc")
    builds_draft = True  # the Paraformer or CTC hypothesis (NARDraftLM)
    #: the attention decoder reads word ids through its own embedding; it exposes no embedding table or latents
    model_lacks = {"embeddings": "ASRDecoderLM.embeddings() returns None", "token_latents": "ASRDecoderLM.token_latents() returns None"}
    #: sampler parameters the pipeline sets unless the caller does
    SAMPLER_DEFAULTS: dict[str, dict[str, Any]] = {
        "speculative": {"num_draft_tokens": 32, "schedule": "confidence", "confidence_threshold": 0.6},
    }

    def __init__(self, model: ASRModel, frontend: SpeechFrontend, vocab: ASRVocab, max_segment_seconds: float = 7.5,
                 ts_start_threshold: float = 0.1, ts_end_offset: float = 1.0, ts_snap_s: float = 0.0) -> None:
        super().__init__(model=model, frontend=frontend, vocab=vocab)
        self.max_segment_seconds = float(max_segment_seconds)
        self.ts_start_threshold = float(ts_start_threshold)
        self.ts_end_offset = float(ts_end_offset)
        self.ts_snap_s = float(ts_snap_s)
        self._views: dict[str, Any] | None = None

    def pipeline_config(self) -> dict[str, Any]:
        return {"max_segment_seconds": self.max_segment_seconds, "ts_start_threshold": self.ts_start_threshold,
                "ts_end_offset": self.ts_end_offset, "ts_snap_s": self.ts_snap_s}

    def _reset_wrappers(self) -> None:
        self._views = None

    @property
    def views(self) -> dict[str, Any]:
        """The model's contract views (``ar``, ``paraformer``, ``ctc``), built once."""
        if self._views is None or self._views["ar"].net is not self.model:
            self._views = asr_views(self.model)
        return self._views

    # ------------------------------------------------------------------------------ call
    def __call__(self, audio: Any, sampling_rate: int | None = None, sampler: str | Sampler = "paraformer", *,
                 draft: str = "paraformer", batch_size: int = 16, max_new_tokens: int | None = None,
                 temperature: float = 0.0, seed: int | None = None, generator: torch.Generator | None = None,
                 progress: bool = False, return_dict: bool = True, **sampler_params: Any) -> Any:
        """Transcribe ``audio``: a path, a numpy array / tensor (with ``sampling_rate=``), a Hugging Face
        datasets audio dict ``{"array", "sampling_rate"}``, or a list of them."""
        # 1. the sampler, checked against the model's contracts
        ts = sampler_params.pop("return_timestamps", None)  # transformers' ASR keyword: it was "unknown keyword"
        if ts not in (None, True, False, "word"):
            raise InputError(f"return_timestamps={ts!r}: this pipeline gives word timestamps (out.timestamps[i], always "
                             "filled); pass True / 'word' or leave it out.")
        smp = self.make_sampler(sampler, sampler_params, self._sampler_defaults(sampler))
        if draft not in ("paraformer", "ctc"):
            raise InputError(f"draft must be 'paraformer' or 'ctc', got {draft!r}")
        if draft != "paraformer" and "draft" not in smp.needs:  # it used to be ignored without a word
            raise InputError(f"draft={draft!r} is the hypothesis a draft sampler verifies (e.g. gad, speculative, specdec); "
                             f"sampler {smp.name!r} reads no draft. Leave draft out, or use one of those samplers.")
        check_count("batch_size", batch_size)
        check_count("max_new_tokens", max_new_tokens, optional=True)
        gen = self.prepare_generator(generator, seed)
        # 2. audio -> 16 kHz mono segments; a bad item fails alone
        multi = isinstance(audio, (list, tuple)) and not _is_sample_list(audio) and not is_rate_pair(audio)
        items = list(audio) if multi else [audio]
        if not items:
            raise InputError("no audio given; pass a path, an array (with sampling_rate=) or a list of them.")
        rate = self.frontend.config.sample_rate
        rates = item_rates(sampling_rate, len(items))
        errors: list[str | None] = [None] * len(items)
        durations = [0.0] * len(items)
        segments: list[tuple[int, int, np.ndarray]] = []  # (item, start sample, wave)
        t0 = time.perf_counter()
        for i, item in enumerate(self.progress_bar(items, desc="audio") if self._show_progress(progress) else items):
            try:
                wave = normalize_level(load_audio(item, rates[i], rate), f"audio item {i}")
            except InputError as err:
                errors[i] = str(err)
                continue
            durations[i] = wave.size / rate
            for start, seg in speech_segments(wave, self.max_segment_seconds, rate, trim=True, lead=0.02, tail_s=ASR_TAIL_S):
                segments.append((i, start, seg))
        # 3. features once per segment (silent segments of a long clip give no words)
        feats: list[torch.Tensor | None] = []
        for _, _, seg in segments:
            feats.append(self.frontend.features(seg) if float(np.abs(seg).max()) >= SILENCE else None)
        frontend_time = time.perf_counter() - t0
        # 4. decode in batches: encode once, then the sampler (draft and verifier share the state)
        words: list[list[Word]] = [[] for _ in items]
        ids_out: list[list[int]] = [[] for _ in items]
        timed = [True] * len(items)
        parts: list[DecodeStats] = []
        enc_time = dec_time = 0.0
        todo = [k for k, f in enumerate(feats) if f is not None]
        for s in range(0, len(todo), batch_size):
            chunk = todo[s : s + batch_size]
            x, lengths = pad_features([self.frontend.normalize(feats[k]) for k in chunk])
            try:
                res, ts, et, dt = self._decode(smp, x, lengths, draft, max_new_tokens, temperature, gen)
            except (InputError, NumericalError) as err:  # the call's own errors (ConfigError) raise
                for k in chunk:
                    errors[segments[k][0]] = str(err)
                continue
            enc_time, dec_time = enc_time + et, dec_time + dt
            parts.append(res.stats)
            for row, k in enumerate(chunk):
                item, start, seg = segments[k]
                raw = list(res.sequences[row])
                if raw and raw[-1] == EOS:
                    raw = raw[:-1]
                seq = [t for t in raw if t >= 2]
                ids_out[item] += seq
                offset = start / rate
                spans = ts[row]
                if spans and self.ts_snap_s > 0:
                    spans = snap_to_speech(spans, speech_frames(seg, rate), self.ts_snap_s)
                if spans:
                    spans = without_overlap(spans)
                if spans is not None and len(spans) == len(raw):
                    words[item] += [(self.vocab.itos[t], round(a + offset, 3), round(b + offset, 3))
                                    for t, (a, b) in zip(raw, spans) if t >= 2]
                else:
                    timed[item] = False
                    words[item] += [(w, float("nan"), float("nan")) for w in self.vocab.words(seq)]
        # 5. outputs
        name = smp.name
        stats = DecodeStats.merged(parts, name)
        audio_s = sum(durations)
        stats.extra.update(encoder_time=enc_time, decoder_time=dec_time, frontend_time=frontend_time,
                           audio_seconds=audio_s, segments=len(segments),
                           rtf=(enc_time + dec_time + frontend_time) / audio_s if audio_s else float("nan"))
        texts = [None if errors[i] else " ".join(w for w, _, _ in words[i]) for i in range(len(items))]
        stamps = [None if errors[i] or not timed[i] else words[i] for i in range(len(items))]
        out = ASROutput(texts=texts, timestamps=stamps, stats=stats, errors=errors, token_ids=ids_out, durations=durations)
        return self._return(out, return_dict)

    # ------------------------------------------------------------------------------ steps
    def _sampler_defaults(self, sampler: str | Sampler) -> dict[str, Any]:
        """The pipeline's settings of a sampler named by the call (what the call's keywords override)."""
        return {} if isinstance(sampler, Sampler) else dict(self.SAMPLER_DEFAULTS.get(sampler_info(sampler).name, {}))

    @torch.inference_mode()
    def _decode(self, smp: Sampler, x: torch.Tensor, lengths: torch.Tensor, draft: str, max_new_tokens: int | None,
                temperature: float, gen: torch.Generator) -> tuple[Any, list[list[tuple[float, float]] | None], float, float]:
        """One batch: ``(result, word spans per row, encoder seconds, decoder seconds)``."""
        views = self.views
        mask = torch.arange(x.shape[1])[None] < lengths[:, None]
        inputs = EncoderInputs(input_features=x.transpose(1, 2).to(self.device, self.dtype), attention_mask=mask.long())
        t0 = time.perf_counter()
        state = views["ar"].encode(inputs)
        t1 = time.perf_counter()
        limit = max_new_tokens if max_new_tokens is not None else min(self.model.config.max_tokens - 2, int(lengths.max()) + 4)
        config = DecodeConfig(max_new_tokens=limit, temperature=temperature, eos_token_id=EOS, pad_token_id=0)
        contracts = set(smp.contracts)
        if "paraformer" in contracts:
            models = {"model": views["paraformer"]}
        elif "ctc" in contracts:
            models = {"model": views["ctc"]}
        else:
            models = {"model": views["ar"]}
            if "draft" in smp.needs:
                models["draft"] = NARDraftLM(views[draft])
        res = smp.generate(models, [[EOS]] * x.shape[0], config, gen, cond=state)
        t2 = time.perf_counter()
        spans = self._word_spans(state)
        return res, spans, t1 - t0, t2 - t1

    def _word_spans(self, state: EncoderState) -> list[list[tuple[float, float]]]:
        """Per row, ``(start_s, end_s)`` of every CIF token: start = first frame whose weight for the
        token reaches ``ts_start_threshold``; end = its fire frame + ``ts_end_offset`` frames. The
        CIF is the decode's when the sampler ran it (paraformer, or a Paraformer draft)."""
        fired = self.views["paraformer"].fired(state)
        if "cif_weights" in fired:
            w, fires = fired["cif_weights"], fired["cif_fires"]
        else:
            w, fires = cif_weights(fired["alphas"])
        step = self.model.config.frame_seconds
        above = w >= self.ts_start_threshold  # [B, N, T]
        # first frame whose weight for the token reaches the threshold (-1: none does)
        first = torch.where(above.any(-1), above.to(torch.uint8).argmax(-1), -1).tolist()
        counts = fired["token_num"].tolist()
        fire_frames: list[list[int]] = [[] for _ in range(fires.shape[0])]
        for r, f in fires.nonzero().tolist():  # row-major: each row's fire frames in order
            fire_frames[r].append(f)
        out = []
        for r, frames in enumerate(fire_frames):
            n = min(int(counts[r]), len(frames))
            out.append([((first[r][k] if first[r][k] >= 0 else frames[k]) * step, (frames[k] + self.ts_end_offset) * step)
                        for k in range(n)])
        return out


def _is_sample_list(x: Any) -> bool:
    """A flat list of numbers is one clip's samples, not a list of clips."""
    return bool(x) and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in x[:16])


__all__ = ["ASROutput", "ASRPipeline"]
