"""What :class:`~leapgen.pipelines.audio.AudioPipeline` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..samplers.base import DecodeStats
from .outputs import PipelineOutput


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
        """Write clip ``index`` to ``path`` (16-bit PCM wav, through soundfile)."""
        import soundfile as sf

        if not 0 <= index < len(self.audios) or self.audios[index] is None:
            why = self.errors[index] if 0 <= index < len(self.errors) else None
            raise InputError(f"no audio at index {index} ({why or 'out of range'}).")
        path = Path(path)
        sf.write(str(path), self.audios[index], self.sample_rate, subtype="PCM_16")
        return path

    def __repr__(self) -> str:
        shapes = [None if a is None else a.shape[0] for a in self.audios]
        return f"AudioOutput(samples={shapes}, sample_rate={self.sample_rate}, stats={self.stats.summary()})"
