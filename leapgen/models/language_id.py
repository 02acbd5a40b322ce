"""Spoken language identification: which language a clip is spoken in.

Approach: an x-vector classifier (Snyder et al., "Spoken Language Recognition using X-vectors",
Odyssey 2018): the same network as the speaker verifier :class:`~leapgen.models.tts.SpeakerNet`
(TDNN of dilated 1-D convolutions over per-clip mean-normalised 80-dim kaldi fbank, mean + std
pooling over time, a 128-dim embedding), whose softmax runs over languages instead of speakers. It
is reused as is (``LanguageID.xvector``), so both share one implementation.

:class:`LanguageIDConfig` holds the language codes (default ``("en", "de")``; more languages are
more classes) and the analysed length (``max_seconds``, default 8 s: the first 8 s of a clip).
:meth:`LanguageID.probabilities` gives per-clip language probabilities ``[N, len(languages)]``;
:meth:`LanguageID.detect` the most likely language and its probability. ``leapgen train
language-id`` trains it; the S2ST pipeline uses it to refuse speech in another language than its
source language.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError
from .tts import SpeakerConfig, SpeakerNet

#: display names of language codes (an unknown code is shown as itself)
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "nl": "Dutch"}
SAMPLE_RATE = 16000


def language_name(code: str) -> str:
    """``"de"`` -> ``"German"`` (the code itself when unknown)."""
    return LANGUAGE_NAMES.get(code, code)


@dataclasses.dataclass
class LanguageIDConfig(ComponentConfig):
    languages: tuple[str, ...] = ("en", "de")
    n_mels: int = 80
    channels: int = 128
    embed_dim: int = 128
    #: seconds of a clip that are analysed (its start)
    max_seconds: float = 8.0


class LanguageID(PretrainedMixin, nn.Module):
    """x-vector spoken language identifier (see the module docstring)."""

    config_class = LanguageIDConfig

    def __init__(self, config: LanguageIDConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or LanguageIDConfig()
        if len(c.languages) < 2 or len(set(c.languages)) != len(c.languages):
            raise ConfigError(f"LanguageID needs at least two distinct languages, got {c.languages!r}")
        self.xvector = SpeakerNet(SpeakerConfig(n_mels=c.n_mels, channels=c.channels, embed_dim=c.embed_dim,
                                                num_speakers=len(c.languages)))

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(self.config.languages)

    def features(self, wave: Any) -> Tensor:
        """Mean-normalised fbank ``[T, n_mels]`` of the first ``max_seconds`` of a 16 kHz waveform."""
        return self.xvector.features(np.asarray(wave, dtype=np.float32)[: int(self.config.max_seconds * SAMPLE_RATE)])

    def forward(self, feats: Tensor, lengths: Tensor) -> Tensor:
        """Language logits ``[B, len(languages)]`` of fbank ``[B, T, n_mels]`` (zero-padded, ``lengths``)."""
        return self.xvector.classify(self.xvector(feats, lengths))

    @torch.no_grad()
    def probabilities(self, waves: list[Any]) -> Tensor:
        """Language probabilities ``[N, len(languages)]`` of 16 kHz waveforms (one clip at a time, so a
        clip's result does not depend on the others)."""
        device = next(self.parameters()).device
        dtype = next(self.parameters()).dtype
        out = []
        for w in waves:
            f = self.features(w)
            logits = self(f[None].to(device, dtype), torch.tensor([f.shape[0]], device=device))
            out.append(logits.float().softmax(-1).cpu())
        return torch.cat(out) if out else torch.zeros(0, len(self.languages))

    def detect(self, waves: list[Any]) -> list[tuple[str, float]]:
        """``(language code, probability)`` of the most likely language per clip."""
        probs = self.probabilities(waves)
        return [(self.languages[int(p.argmax())], float(p.max())) for p in probs]


__all__ = ["LANGUAGE_NAMES", "LanguageID", "LanguageIDConfig", "language_name"]
