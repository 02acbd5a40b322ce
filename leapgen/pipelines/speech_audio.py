"""Audio input for the speech pipelines: load, validate, resample, downmix, split long audio on silences.

* :func:`load_audio` turns one item (a path, the bytes of an encoded file or an open binary file, an
  array with its ``sampling_rate``, or a Hugging Face ``datasets`` audio dict ``{"array": ...,
  "sampling_rate": ...}``, or ``{"bytes": ..., "path": ...}`` of ``Audio(decode=False)``) into float32 mono at the model's
  rate: soundfile reads files; integer PCM is scaled to [-1, 1]; stereo
  (``[N, C]`` or ``[C, N]`` with C <= 8) is averaged; other rates are resampled with soxr (high
  quality). Every problem is an :class:`~leapgen.errors.InputError` naming the item and the fix:
  an unsupported type, a missing file or a directory, an unreadable file, a non-numeric or complex array, more than 2 dimensions, NaN/inf,
  float samples far outside [-1, 1] (integer PCM stored as floats: it decoded to garbage),
  an empty clip, a clip shorter than one 25 ms frame, an all-silent clip. Integer PCM is 8/16/32-bit:
  an int64 array (what ``np.array`` makes of a list of Python ints) is refused, naming the cast.
* :func:`normalize_level` scales a quiet clip (peak below :data:`QUIET_PEAK`) up to
  :data:`TARGET_PEAK`, logged: the speech models were trained on clips peaking at 0.42-0.99, and a
  clip at a tenth of that level read as different words (ASR, peak 0.03: 'return the if if b' for
  'return a tuple of the actual values if no argument is given').
* :func:`speech_segments` cuts audio longer than ``max_seconds`` at its pauses (``min_pause`` s of
  quiet), so every segment is one stretch of speech that starts at the speech and ends at most
  ``TAIL_S`` after it, as the models were trained on (``trim``: a short clip's silence before and
  after the speech is cut the same way; 50 ms of leading silence garbled S2ST); a stretch still
  longer than ``max_seconds`` is cut by :func:`split_on_silence` (at the quietest 10 ms frame of the
  last third of each window, so cuts fall between words; it always advances, so very long files
  cannot hang).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ..errors import InputError

logger = logging.getLogger(__name__)

MIN_SAMPLES = 400  # one 25 ms frame at 16 kHz
SILENCE = 1e-4  # peak amplitude below which a clip counts as silent
LOW_RATE = 8000  # a rate below telephone speech's is logged: it has lost most of the speech band
MAX_FLOAT_PEAK = 2.0  # float samples above this are not [-1, 1] audio (clipped float audio barely exceeds 1)
#: a clip peaking below this is scaled up to TARGET_PEAK (the speech corpora's clips peak at 0.42-0.99, median 0.7)
QUIET_PEAK = 0.35
#: a clip whose mean is beyond this has a DC offset, removed before the silences are found (espeak corpus clips: |mean| <= 0.0036)
DC_OFFSET = 0.01
TARGET_PEAK = 0.7
CLIPPED_SHARE = 0.1  # more samples than this at the clip's peak: clipped (logged)
VERY_QUIET_PEAK = 0.003  # below it (50 dB under full scale) the scaling is logged as a warning, not as info
#: quiet that long (seconds) between two stretches of speech is a pause speech_segments may cut at
MIN_PAUSE = 0.3


#: what one audio item may be (named when an item is none of them)
ACCEPTED = ("a file path (str / os.PathLike), the bytes of a WAV/FLAC/OGG file or an open binary file, a numpy "
            "array / torch tensor / list of samples with sampling_rate=, or a dict {'array': samples, 'sampling_rate': "
            "Hz} (the Hugging Face datasets Audio format; {'bytes': ..., 'path': ...} of Audio(decode=False) too)")


def _describe(item: Any) -> str:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"encoded audio of {len(item)} bytes"
    if hasattr(item, "read"):
        return f"audio file object {getattr(item, 'name', type(item).__name__)!r}"
    if isinstance(item, (str, os.PathLike)):
        return f"file {os.fspath(item)!r}"
    if isinstance(item, dict):
        item = item.get("array")
    return f"array of shape {getattr(item, 'shape', '?')}"


def _is_samples(item: Any) -> bool:
    if isinstance(item, (np.ndarray, list, tuple)):
        return True
    try:
        import torch

        return isinstance(item, torch.Tensor)
    except ImportError:  # pragma: no cover
        return False


def is_rate_pair(item: Any) -> bool:
    """``(samples, rate)``: what ``soundfile.read``, ``librosa.load`` and ``torchaudio.load`` return (one clip;
    it used to be taken for two items, the samples without their rate and an int)."""
    return (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], (int, np.integer))
            and not isinstance(item[1], bool) and _is_samples(item[0]) and not isinstance(item[0], tuple))


def several(item: Any) -> bool:
    """A list / tuple of audio items (one per text), not one ``(samples, rate)`` pair."""
    return isinstance(item, (list, tuple)) and not is_rate_pair(item)


def item_rates(sampling_rate: Any, n: int) -> list[Any]:
    """``sampling_rate`` per item: one rate for every item, or a list / tuple of one per item (arrays at
    different rates in one batch; it used to fail every item with "must be an integer number of Hz")."""
    if not isinstance(sampling_rate, (list, tuple)):
        return [sampling_rate] * n
    if len(sampling_rate) != n:
        raise InputError(f"sampling_rate holds {len(sampling_rate)} rates for {n} audio items; give one rate for every "
                         "item, or one per item (None for a file, which is read at its header's rate).")
    return list(sampling_rate)


def load_audio(item: Any, sampling_rate: int | None, target_rate: int = 16000) -> np.ndarray:
    """One clip as float32 mono at ``target_rate`` (see the module docstring)."""
    if is_rate_pair(item):
        item = {"array": item[0], "sampling_rate": item[1]}
    if isinstance(item, dict) and "array" not in item and (item.get("bytes") or item.get("path")):
        item = item.get("bytes") or item.get("path")  # datasets' Audio(decode=False): the encoded file or its path
    if isinstance(item, (bytes, bytearray, memoryview)) or hasattr(item, "read"):
        data, rate = _read_encoded(item)
    elif isinstance(item, (str, os.PathLike)):
        import soundfile as sf

        path = os.fspath(item)
        if os.path.isdir(path):
            raise InputError(f"{path!r} is a directory, not an audio file; pass the path of a WAV/FLAC/OGG file "
                             "(or a list of them).")
        if not os.path.isfile(path):
            raise InputError(f"audio file {path!r} does not exist; {_path_hint(path)}")
        try:
            data, rate = sf.read(path, dtype="float32", always_2d=False)
        except Exception as err:  # noqa: BLE001 - soundfile raises several types for corrupt files
            raise InputError(f"cannot read {path!r} as audio ({err}); give a WAV/FLAC/OGG file.") from err
        if sampling_rate is not None and sampling_rate != rate:
            logger.warning("%r is %d Hz by its header; sampling_rate=%r applies to arrays only and is ignored for it",
                           path, rate, sampling_rate)
    else:
        if isinstance(item, dict):
            if "array" not in item or "sampling_rate" not in item:
                raise InputError(f"an audio dict needs the keys 'array' and 'sampling_rate' (the Hugging Face datasets "
                                 f"Audio format), got keys {sorted(map(str, item))}.")
            if sampling_rate is not None and item["sampling_rate"] != sampling_rate:
                raise InputError(f"the audio dict (or (samples, rate) pair) says sampling_rate={item['sampling_rate']!r} "
                                 "but the call gave "
                                 f"sampling_rate={sampling_rate!r}; leave the call's out (the dict's own is used).")
            samples, sampling_rate = item["array"], item["sampling_rate"]
        elif _is_samples(item):
            samples = item
        else:
            raise InputError(f"unsupported audio item of type {type(item).__name__}; give {ACCEPTED}.")
        if sampling_rate is None:
            raise InputError("arrays need their sampling_rate=, e.g. pipe(wave, sampling_rate=16000).")
        if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, np.integer)) or sampling_rate < 1000:
            raise InputError(f"sampling_rate must be an integer number of Hz (>= 1000), got {sampling_rate!r}.")
        data, rate = _as_array(samples), int(sampling_rate)
    data = _mono(data, item)
    if data.size == 0:
        raise InputError(f"{_describe(item)}: the clip is empty.")
    if not np.isfinite(data).all():
        raise InputError(f"{_describe(item)}: the audio contains NaN or inf samples.")
    peak = float(np.abs(data).max())
    if peak > MAX_FLOAT_PEAK:
        raise InputError(f"{_describe(item)}: float samples must lie in [-1, 1], but this clip peaks at {peak:g} (integer PCM "
                         "stored as floats?); divide by 32768 for 16-bit PCM, or pass the integer array itself.")
    _warn_clipped(data, peak, item)
    if rate < LOW_RATE < target_rate:  # 4 kHz espeak speech read 'run one in an an' for a ten-word sentence
        logger.warning("%s is sampled at %d Hz, so it holds nothing above %d Hz; the models were trained on %d Hz audio "
                       "(%d Hz telephone speech at the least): expect a poor result, or pass the original recording",
                       _describe(item), rate, rate // 2, target_rate, LOW_RATE)
    if rate != target_rate:
        import soxr

        data = soxr.resample(data, rate, target_rate, quality="HQ").astype(np.float32)
        peak = float(np.abs(data).max()) if data.size else 0.0
    if data.size < MIN_SAMPLES:
        raise InputError(
            f"{_describe(item)}: {data.size} samples at {target_rate} Hz is shorter than one 25 ms frame "
            f"({MIN_SAMPLES} samples); give at least 0.025 s of audio."
        )
    if peak < SILENCE or float(np.abs(data - np.float32(data.mean())).max()) < SILENCE:  # a constant (DC) is silence too
        raise InputError(f"{_describe(item)}: the clip is silent (peak amplitude < {SILENCE} around its mean): there is "
                         "no speech in it.")
    return data


def _warn_clipped(data: np.ndarray, peak: float, item: Any) -> None:
    """Log a clip whose samples sit at its peak (flat tops) for more than :data:`CLIPPED_SHARE` of its
    length: espeak speech driven 8x into the rails (17 % of samples) read 'error url error object is
    returned by function', with nothing said (4x, 7 %, still read right)."""
    if data.size and peak >= SILENCE and float(np.ptp(data)) >= SILENCE:
        share = float(np.count_nonzero(np.abs(data) >= 0.999 * peak)) / data.size
        if share > CLIPPED_SHARE:
            logger.warning("%s is clipped: %.0f %% of its samples sit at its peak (%.3g); the result may be wrong: "
                           "record or export it with less gain", _describe(item), 100 * share, peak)


def _path_hint(path: str) -> str:
    """How to fix a path that names no file: '~' is not expanded and URLs are not fetched (both used to
    get a bare 'check the path'), stray spaces or newlines (a line read from a file list)."""
    if "://" in path:
        return "URLs are not fetched: download the file and pass its local path (or its bytes)."
    if path.startswith("~"):
        return f"'~' is not expanded: pass os.path.expanduser({path!r}) ({os.path.expanduser(path)!r})."
    if path != path.strip() and os.path.isfile(path.strip()):
        return f"the path has spaces or a newline around it; {path.strip()!r} exists: strip the path."
    return "check the path."


def _read_encoded(item: Any) -> tuple[np.ndarray, int]:
    """The samples and rate of an encoded file's bytes (an upload, ``datasets``' ``Audio(decode=False)``)
    or of an open binary file object."""
    import io

    import soundfile as sf

    what = f"{len(item)} bytes" if isinstance(item, (bytes, bytearray, memoryview)) else type(item).__name__
    if getattr(item, "closed", False) is True:  # soundfile printed cffi tracebacks, then "Format not recognised"
        raise InputError(f"{_describe(item)} is closed; pass it while it is open (inside its "
                         "`with open(path, 'rb') as f:` block) or pass the path.")
    if isinstance(item, io.TextIOBase) or "b" not in str(getattr(item, "mode", "b")):
        raise InputError(f"{_describe(item)} is open in text mode; open it in binary mode, "
                         "open(path, 'rb'), or pass the path.")
    source = io.BytesIO(bytes(item)) if isinstance(item, (bytes, bytearray, memoryview)) else item
    start = _tell(source)  # a file object is left where it was, so one can serve several items (a TTS
    try:  # prompt for every text and chunk, a clip twice in a batch): the second read used to find it at its end
        return sf.read(source, dtype="float32", always_2d=False)
    except Exception as err:  # noqa: BLE001 - soundfile raises several types for data it cannot decode
        raise InputError(f"cannot decode the audio ({what}: {err}); give the bytes of a WAV/FLAC/OGG file, an open "
                         "binary file, or the samples with sampling_rate=.") from err
    finally:
        if start is not None:
            source.seek(start)


def _tell(source: Any) -> int | None:
    """The position of a seekable file object (None for a stream that cannot seek back)."""
    try:
        return source.tell() if source.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def _as_array(item: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(item, torch.Tensor):
            item = item.detach().cpu()
            # numpy has no bfloat16 (tensor.numpy() raises TypeError); float16 converts but is widened anyway
            item = (item.float() if item.is_floating_point() else item).numpy()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(item, (list, tuple)):
        try:
            item = np.asarray(item)
        except ValueError as err:
            raise InputError(f"a list of samples must be rectangular numbers ({err}).") from err
    if not isinstance(item, np.ndarray):
        raise InputError(f"audio must be a file path or a numpy array / torch tensor of samples, got {type(item).__name__}.")
    kind = item.dtype.kind
    if kind == "f":
        return item.astype(np.float32)
    if kind in "iu":
        if item.dtype.itemsize > 4:
            raise InputError(
                f"integer samples of dtype {item.dtype}: no audio format stores 64-bit PCM, so the full scale is "
                "unknown (a list of Python ints becomes int64); cast to the type the samples were recorded in, "
                "e.g. np.asarray(samples, dtype=np.int16) for 16-bit PCM, or pass floats in [-1, 1].")
        info = np.iinfo(item.dtype)
        if kind == "u":
            return ((item.astype(np.float64) - (info.max + 1) / 2) / ((info.max + 1) / 2)).astype(np.float32)
        return (item.astype(np.float64) / (info.max + 1)).astype(np.float32)
    raise InputError(
        f"unsupported audio dtype {item.dtype} (kind {kind!r}); give float32/float64 samples in [-1, 1] or "
        "integer PCM (int16 / int32 / uint8)."
    )


def _mono(data: np.ndarray, item: Any) -> np.ndarray:
    if data.ndim == 1:
        return data
    if data.ndim == 2:
        channels, axis = (data.shape[1], 1) if data.shape[1] <= 8 and data.shape[0] > data.shape[1] else (data.shape[0], 0)
        if channels <= 8:
            if channels > 2 and (_is_samples(item) or isinstance(item, dict)):  # a batch stacked into one array
                logger.warning("%s is read as one clip of %d channels, averaged to mono; for a batch of clips pass a "
                               "list of 1-D arrays (list(batch))", _describe(item), channels)
            return data.mean(axis).astype(np.float32)
    raise InputError(f"{_describe(item)}: expected mono [N] or multi-channel [N, C] / [C, N] audio, got shape {data.shape}"
                     "; for a batch of clips pass a list of 1-D arrays (list(batch)).")


def normalize_level(wave: np.ndarray, what: str = "the clip") -> np.ndarray:
    """``wave`` without its DC offset (when its mean is beyond :data:`DC_OFFSET`, logged), scaled up to a
    peak of :data:`TARGET_PEAK` when it peaks below :data:`QUIET_PEAK` around its mean (logged); clean,
    loud clips unchanged. The front ends' log-mel features are not gain invariant, and the models never
    heard a clip quieter than 0.4 peak. A DC offset (a cheap sound card) is no loudness, and it hid the
    silences that :func:`speech_segments` trims and cuts at: 0.2 on a padded S2ST clip turned 'voː ɪst
    dɛɾ blaʊə ʃlysəl' into 'ɛ tf ɪeːn baʊə ʃlysəl', and on a minute of ASR speech cost 24 of 180 words."""
    if not wave.size:
        return wave
    mean = float(wave.mean())
    centred = (wave - np.float32(mean)).astype(np.float32)
    peak = float(np.abs(centred).max())
    if peak >= QUIET_PEAK or peak < SILENCE:
        if abs(mean) > DC_OFFSET and peak >= SILENCE:
            logger.info("%s has a DC offset of %.3g: removed", what, mean)
            return centred
        return wave
    if peak < VERY_QUIET_PEAK:  # 16-bit speech at peak 1.5e-4 (+-5 steps) read 'parse the object between python function'
        logger.warning("%s peaks at %.3g (%.0f dB below full scale): scaled by %.3g to peak %.2g; a recording this quiet "
                       "keeps few bits of the speech, so the result may be wrong: record or export it louder",
                       what, peak, -20 * np.log10(peak), TARGET_PEAK / peak, TARGET_PEAK)
    else:
        logger.info("%s peaks at %.3g (quiet): scaled by %.3g to peak %.2g, the level the model was trained on",
                    what, peak, TARGET_PEAK / peak, TARGET_PEAK)
    return (centred * (TARGET_PEAK / peak)).astype(np.float32)


def _frame_energy(wave: np.ndarray, rate: int) -> np.ndarray:
    """Mean square of every 10 ms frame around its own mean (as Kaldi's ``remove_dc_offset``): a DC
    offset, even one too small for :func:`normalize_level` to remove (0.005 on a padded clip), is
    no energy, so silence stays silence."""
    hop = rate // 100
    frames = wave[: wave.size // hop * hop].reshape(-1, hop).astype(np.float64)
    return frames.var(1) if frames.size else np.zeros(0)


def _frame_db(wave: np.ndarray, rate: int) -> np.ndarray:
    """Energy (dB) of every 10 ms frame (:func:`_frame_energy`)."""
    return 10 * np.log10(_frame_energy(wave, rate) + 1e-12)


def _quiet_frames(db: np.ndarray, below: float = 35.0) -> np.ndarray:
    """Per 10 ms frame (energies from :func:`_frame_db`): True when it is ``below`` dB under the
    clip's loud frames (their 95th percentile energy) or under -60 dBFS."""
    if not db.size:
        return np.zeros(0, dtype=bool)
    return db < max(float(np.percentile(db, 95)) - below, -60.0)


def _pauses(quiet: np.ndarray, hop: int, min_pause: float) -> list[tuple[int, int]]:
    """``(start, end)`` samples of every run of at least ``min_pause`` s of quiet frames between two
    stretches of speech."""
    runs, run = [], 0
    need = max(1, int(round(min_pause * 100)))
    for k, q in enumerate(np.append(quiet, False)):
        if q:
            run += 1
            continue
        if run >= need and run < k < quiet.size:  # between two stretches of speech (not leading / trailing quiet)
            runs.append(((k - run) * hop, k * hop))
        run = 0
    return runs


#: The models were trained on clips that start at the speech (at most about 0.05 s of silence before
#: it) and end 0.25-0.45 s after it. Silence added before 40 S2ST test clips took them from 129 to 341
#: phoneme edits at 0.03 s and to 150 when trimmed to none; 0.2 s took ASR from 12 to 20 % WER; 1 s
#: after the speech took S2ST from 150 to 234. So a segment starts at its first loud frame (a clip's
#: own lead of up to KEEP_LEAD_S is left as it is) and keeps at most TAIL_S of the quiet after it.
KEEP_LEAD_S, TAIL_S = 0.06, 0.5
#: The ASR's tail (``speech_segments(tail_s=)``): with TAIL_S, 0.3 s of silence appended to 200 test_seen /
#: test_unseen_voice clips took Paraformer from 10.7 to 13.5 % WER (espeak's 'the value of the object is
#: returned by the function' lost 'function' at 0.15 s) and 0.5 s took the timing split's boundaries from 20
#: to 49 ms; at 0.25 s: 10.7 and 10.8 %, 20 and 20 ms (the clean clips: Paraformer 10.73 -> 10.67 %, AR 17.1
#: -> 17.5 %, the timing split's words and boundaries unchanged). On the bench's own splits (`leapgen bench
#: asr`, 300 + 300 clean clips, 2026-11-29) 0.25 s cost clean accuracy, so 0.35 s is kept: Paraformer WER
#: test_seen / test_unseen_voice 11.24 / 14.00 % at 0.5 s, 11.33 / 14.05 at 0.35, 11.59 / 14.57 at 0.25; with
#: 0.3 s of silence appended to 200 test_seen clips 12.91, 11.66 and 11.13 %. S2ST keeps TAIL_S.
ASR_TAIL_S = 0.35


def speech_segments(wave: np.ndarray, max_seconds: float, rate: int = 16000, min_pause: float = MIN_PAUSE,
                    trim: bool = False, lead: float = 0.0, tail_s: float = TAIL_S) -> list[tuple[int, np.ndarray]]:
    """``[(start_sample, segment), ...]``. A clip of at most ``max_seconds`` is one segment (``trim``:
    without its leading silence when that is longer than ``KEEP_LEAD_S``, and with at most ``tail_s``
    (:data:`TAIL_S`) of trailing silence). A longer clip gives one segment per stretch of speech between pauses of
    ``min_pause`` s or more (from ``lead`` s before its first loud frame to ``tail_s`` into the pause),
    each still longer than ``max_seconds`` cut further by :func:`split_on_silence`. Pieces shorter than
    one frame are dropped; a clip with no loud frame is returned whole."""
    hop, tail = rate // 100, int(tail_s * rate)
    if wave.size <= int(max_seconds * rate) and not trim:
        return [(0, wave)]
    db = _frame_db(wave, rate)
    quiet = _quiet_frames(db)
    loud = np.flatnonzero(~_quiet_frames(db, 50.0))  # only plain silence is trimmed, never a soft onset
    if not loud.size:
        return [(0, wave)]
    first, last = int(loud[0]) * hop, min(wave.size, (int(loud[-1]) + 1) * hop + tail)
    first = 0 if first <= KEEP_LEAD_S * rate else first - int(lead * rate)
    if last - first <= int(max_seconds * rate):
        return [(first, wave[first:last])] if last - first >= MIN_SAMPLES else [(0, wave)]
    pauses = _pauses(quiet, hop, min_pause)
    starts = [first] + [max(a, b - int(lead * rate)) for a, b in pauses]
    ends = [min(b, a + tail) for a, b in pauses] + [last]
    out = []
    for a, b in zip(starts, ends):
        out += [(a + s, seg) for s, seg in split_on_silence(wave[a:b], max_seconds, rate) if seg.size >= MIN_SAMPLES]
    logger.info("%.1f s of audio cut into %d segments at its pauses (segments of at most %g s)",
                wave.size / rate, len(out), max_seconds)
    return out


def split_on_silence(wave: np.ndarray, max_seconds: float, rate: int = 16000) -> list[tuple[int, np.ndarray]]:
    """``[(start_sample, segment), ...]`` with every segment at most ``max_seconds`` long."""
    limit = int(max_seconds * rate)
    if wave.size <= limit:
        return [(0, wave)]
    hop = rate // 100
    energy = _frame_energy(wave, rate)
    out, start = [], 0
    while wave.size - start > limit:
        lo, hi = (start + limit * 2 // 3) // hop, (start + limit) // hop
        cut = (lo + int(np.argmin(energy[lo:hi]))) * hop if hi > lo else start + limit
        cut = max(cut, start + hop)
        out.append((start, wave[start:cut]))
        start = cut
    if wave.size - start >= MIN_SAMPLES:
        out.append((start, wave[start:]))
    return out


__all__ = ["MAX_FLOAT_PEAK", "MIN_SAMPLES", "QUIET_PEAK", "TARGET_PEAK", "load_audio", "normalize_level", "speech_segments",
           "split_on_silence"]
