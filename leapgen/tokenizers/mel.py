"""80-bin log-mel spectrogram and a Griffin-Lim vocoder, written in torch (the S2ST acoustic target).

``MelSpectrogram``: magnitude STFT (Hann window ``n_fft``, hop ``hop``) -> HTK mel filters
(:func:`~leapgen.tokenizers.audio_codec.mel_filterbank`) -> ``log(mel + 1e-5)``, frames first ``[T, n_mels]``.

``griffin_lim``: Griffin & Lim (1984), "Signal estimation from modified short-time Fourier
transform", with the momentum of Perraudin et al. (2013, "fast Griffin-Lim", momentum 0.99):
the mel magnitudes are mapped back to linear frequency by the filters' pseudo-inverse (clamped at
0), then phases are estimated by ``iters`` (default 32) STFT / inverse-STFT rounds. Deterministic
(phases start at 0). Quality is that of Griffin-Lim: intelligible, buzzy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ..configuration import ConfigMixin
from .audio_codec import mel_filterbank


@dataclasses.dataclass
class MelConfig:
    sample_rate: int = 16000
    n_fft: int = 1024
    hop: int = 256
    n_mels: int = 80


class MelSpectrogram(ConfigMixin):
    """Log-mel front end of the target speech and its Griffin-Lim inverse (see the module docstring)."""

    config_name = "mel.json"

    def __init__(self, config: MelConfig | None = None) -> None:
        self.config = config or MelConfig()
        c = self.config
        self.fb = mel_filterbank(c.sample_rate, c.n_fft, c.n_mels)
        self.window = torch.hann_window(c.n_fft)

    @property
    def frame_seconds(self) -> float:
        return self.config.hop / self.config.sample_rate

    def __call__(self, wav: Tensor) -> Tensor:
        """``wav [n]`` float -> log-mel ``[T, n_mels]``."""
        c = self.config
        spec = torch.stft(wav.float(), c.n_fft, c.hop, window=self.window, return_complex=True).abs()
        return torch.log(self.fb @ spec + 1e-5).T

    def griffin_lim(self, logmel: Tensor, iters: int = 32, momentum: float = 0.99) -> Tensor:
        """Log-mel ``[T, n_mels]`` -> waveform ``[(T - 1) * hop]`` (float32, peak <= 0.95)."""
        c = self.config
        if logmel.shape[0] < 1:
            return torch.zeros(0)
        mag = (torch.linalg.pinv(self.fb) @ logmel.float().exp().T).clamp_min(0.0)  # [F, T]
        short = c.n_fft // c.hop + 1 - mag.shape[1]
        if short > 0:  # too short for one STFT window: pad with silence
            mag = torch.nn.functional.pad(mag, (0, short))
        angles = torch.ones_like(mag, dtype=torch.complex64)
        prev = torch.zeros_like(angles)
        length = (mag.shape[1] - 1) * c.hop
        for _ in range(iters):
            wav = torch.istft(mag * angles, c.n_fft, c.hop, window=self.window, length=length)
            rebuilt = torch.stft(wav, c.n_fft, c.hop, window=self.window, return_complex=True)
            nxt = rebuilt - momentum / (1 + momentum) * prev
            prev = rebuilt
            angles = nxt / nxt.abs().clamp_min(1e-8)
        wav = torch.istft(mag * angles, c.n_fft, c.hop, window=self.window, length=length)
        return wav / wav.abs().max().clamp_min(1e-6) * 0.95 if wav.numel() else wav

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> MelSpectrogram:
        return cls(MelConfig(**{**config, **overrides}))


__all__ = ["MelConfig", "MelSpectrogram"]
