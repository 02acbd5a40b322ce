"""Audio input for the speech pipelines: load, validate, resample, downmix, split long audio on silences.

* :func:`load_audio` turns one item (a path, an array with its ``sampling_rate``, or a Hugging Face
  ``datasets`` audio dict ``{"array": ..., "sampling_rate": ...}``) into float32 mono at the model's
  rate: soundfile reads files; integer PCM is scaled to [-1, 1]; stereo
  (``[N, C]`` or ``[C, N]`` with C <= 8) is averaged; other rates are resampled with soxr (high
  quality). Every problem is an :class:`~leapgen.errors.InputError` naming the item and the fix:
  an unsupported type, a missing file or a directory, an unreadable file, a non-numeric or complex array, more than 2 dimensions, NaN/inf,
  float samples far outside [-1, 1] (integer PCM stored as floats: it decoded to garbage),
  an empty clip, a clip shorter than one 25 ms frame, an all-silent clip.
* :func:`split_on_silence` cuts audio longer than ``max_seconds`` at the quietest 10 ms frame of
  the last third of each window, so every segment fits the model and cuts fall between words;
  it always advances, so very long files cannot hang.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import InputError

MIN_SAMPLES = 400  # one 25 ms frame at 16 kHz
SILENCE = 1e-4  # peak amplitude below which a clip counts as silent
MAX_FLOAT_PEAK = 2.0  # float samples above this are not [-1, 1] audio (clipped float audio barely exceeds 1)


#: what one audio item may be (named when an item is none of them)
ACCEPTED = ("a file path (str / os.PathLike), a numpy array / torch tensor / list of samples with sampling_rate=, "
            "or a dict {'array': samples, 'sampling_rate': Hz} (the Hugging Face datasets Audio format)")


def _describe(item: Any) -> str:
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


def load_audio(item: Any, sampling_rate: int | None, target_rate: int = 16000) -> np.ndarray:
    """One clip as float32 mono at ``target_rate`` (see the module docstring)."""
    if isinstance(item, (str, os.PathLike)):
        import soundfile as sf

        path = os.fspath(item)
        if os.path.isdir(path):
            raise InputError(f"{path!r} is a directory, not an audio file; pass the path of a WAV/FLAC/OGG file "
                             "(or a list of them).")
        if not os.path.isfile(path):
            raise InputError(f"audio file {path!r} does not exist; check the path.")
        try:
            data, rate = sf.read(path, dtype="float32", always_2d=False)
        except Exception as err:  # noqa: BLE001 - soundfile raises several types for corrupt files
            raise InputError(f"cannot read {path!r} as audio ({err}); give a WAV/FLAC/OGG file.") from err
    else:
        if isinstance(item, dict):
            if "array" not in item or "sampling_rate" not in item:
                raise InputError(f"an audio dict needs the keys 'array' and 'sampling_rate' (the Hugging Face datasets "
                                 f"Audio format), got keys {sorted(map(str, item))}.")
            if sampling_rate is not None and item["sampling_rate"] != sampling_rate:
                raise InputError(f"the audio dict says sampling_rate={item['sampling_rate']!r} but the call gave "
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
    if rate != target_rate:
        import soxr

        data = soxr.resample(data, rate, target_rate, quality="HQ").astype(np.float32)
        peak = float(np.abs(data).max()) if data.size else 0.0
    if data.size < MIN_SAMPLES:
        raise InputError(
            f"{_describe(item)}: {data.size} samples at {target_rate} Hz is shorter than one 25 ms frame "
            f"({MIN_SAMPLES} samples); give at least 0.025 s of audio."
        )
    if peak < SILENCE:
        raise InputError(f"{_describe(item)}: the clip is silent (peak amplitude < {SILENCE}): there is no speech in it.")
    return data


def _as_array(item: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(item, torch.Tensor):
            item = item.detach().cpu().numpy()
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
        if data.shape[1] <= 8 and data.shape[0] > data.shape[1]:
            return data.mean(1).astype(np.float32)
        if data.shape[0] <= 8:
            return data.mean(0).astype(np.float32)
    raise InputError(f"{_describe(item)}: expected mono [N] or multi-channel [N, C] / [C, N] audio, got shape {data.shape}.")


def split_on_silence(wave: np.ndarray, max_seconds: float, rate: int = 16000) -> list[tuple[int, np.ndarray]]:
    """``[(start_sample, segment), ...]`` with every segment at most ``max_seconds`` long."""
    limit = int(max_seconds * rate)
    if wave.size <= limit:
        return [(0, wave)]
    hop = rate // 100
    frames = wave[: wave.size // hop * hop].reshape(-1, hop)
    energy = (frames.astype(np.float64) ** 2).mean(1)
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


__all__ = ["MAX_FLOAT_PEAK", "MIN_SAMPLES", "load_audio", "split_on_silence"]
