"""What :class:`~leapgen.pipelines.audio.AudioPipeline` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..samplers.base import DecodeStats
from .outputs import PipelineOutput

#: extensions :meth:`AudioOutput.save` writes, with the soundfile format and subtype of each
AUDIO_FORMATS: dict[str, tuple[str, str]] = {
    ".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"), ".mp3": ("MP3", "MPEG_LAYER_III"),
    ".aiff": ("AIFF", "PCM_16"), ".aif": ("AIFF", "PCM_16"),
}


def audio_file_format(path: str | Path) -> tuple[str, str]:
    """``(format, subtype)`` soundfile writes ``path`` with, from its extension; :class:`InputError`
    for a folder or an extension that is not an audio format (soundfile raised a bare TypeError, and
    16-bit PCM in an .ogg or .mp3 a ValueError, after the audio was generated)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"{path} is a folder; pass a file path such as {path / 'clip.wav'}.")
    fmt = AUDIO_FORMATS.get(path.suffix.lower())
    if fmt is None:
        why = f"the extension {path.suffix!r} names no audio format" if path.suffix else "the name has no extension"
        raise InputError(f"cannot write audio to {path}: {why}; end the name with one of {', '.join(AUDIO_FORMATS)} "
                         "(e.g. .wav).")
    return fmt


@dataclass(repr=False)
class AudioOutput(PipelineOutput):
    """Generated clips: ``audios[i]`` float32 mono numpy arrays in [-1, 1] (None for a prompt that
    failed; the reason is ``errors[i]``, None for the others, as in every pipeline output), their ``sample_rate``, the decode statistics
    (``stats.extra``: frames, duration, audio_seconds), the codes ``[K, frames]`` and the prompts."""

    audios: list[np.ndarray | None]
    sample_rate: int
    stats: DecodeStats
    codes: list[Any] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    def save(self, index: int, path: str | Path) -> Path:
        """Write clip ``index`` to ``path`` through soundfile, in the format its extension names
        (:func:`audio_file_format`: 16-bit PCM for .wav / .flac / .aiff, Vorbis for .ogg, MP3 for .mp3);
        missing parent folders are created."""
        import soundfile as sf

        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise InputError(f"index must be an integer position in audios, got {index!r} ({type(index).__name__}).")
        if not 0 <= index < len(self.audios) or self.audios[index] is None:
            why = self.errors[index] if 0 <= index < len(self.errors) else None
            raise InputError(f"no audio at index {index} ({why or 'out of range'}).")
        path = Path(path).expanduser()
        fmt, subtype = audio_file_format(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            sf.write(str(path), self.audios[index], self.sample_rate, format=fmt, subtype=subtype)
        except (OSError, RuntimeError) as err:  # a parent that is a file, no permission (soundfile: RuntimeError)
            raise InputError(f"cannot write audio to {path} ({err}); pass a path in a folder you can write to.") from err
        return path

    def __repr__(self) -> str:
        shapes = [None if a is None else a.shape[0] for a in self.audios]
        return f"AudioOutput(samples={shapes}, sample_rate={self.sample_rate}, stats={self.stats.summary()})"
