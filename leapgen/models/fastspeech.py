"""A FastSpeech 2-style non-autoregressive acoustic decoder: phonemes (+ translator hidden states) -> mel.

Paper: Ren et al., "FastSpeech 2: Fast and High-Quality End-to-End Text to Speech", ICLR 2021; used
after the DAG decoder in DASpeech (Fang et al., NeurIPS 2023). This one is sized for CPU:

* input per phoneme: ``embed(phoneme) + adaptor(hidden)`` where ``hidden`` is the translator's
  state for that phoneme (the chosen DAG vertex; zeros when there is none, e.g. the AR baseline);
  training zeroes ``hidden`` for a share ``hidden_dropout`` of utterances, so both inputs are in
  distribution;
* ``layers`` Transformer encoder layers -> duration predictor (2 x Conv1d(k=3) + ReLU + LayerNorm ->
  Linear, MSE on ``log(1 + frames)``) -> length regulator (each phoneme state repeated ``duration``
  times; ground-truth durations in training, ``round(exp(pred) - 1)`` clamped to >= 1 at inference,
  scaled by ``speed``) -> + sinusoidal positions -> ``layers`` Transformer layers -> Linear to
  ``n_mels`` log-mel bins; L1 loss. No pitch / energy predictors (optional in the issue), no postnet.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .speech_encoder import lengths_to_mask, sinusoid
from .torch_lean import encoder_forward


class DurationPredictor(nn.Module):
    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv1d(d, d, 3, padding=1), nn.Conv1d(d, d, 3, padding=1)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d, 1)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x [B, N, d]`` -> log(1 + frames) ``[B, N]`` (0 on padding)."""
        h = x * mask[..., None]
        h = self.drop(self.n1(F.relu(self.c1(h.transpose(1, 2))).transpose(1, 2)))
        h = self.drop(self.n2(F.relu(self.c2(h.transpose(1, 2))).transpose(1, 2)))
        return self.out(h).squeeze(-1).float() * mask


class AcousticDecoder(nn.Module):
    """Phonemes + hidden states -> durations -> log-mel (see the module docstring)."""

    def __init__(self, vocab_size: int, d_hidden: int, d: int = 128, heads: int = 2, ff: int = 384, layers: int = 2,
                 n_mels: int = 80, dropout: float = 0.1) -> None:
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(vocab_size, d)
        self.adaptor = nn.Sequential(nn.Linear(d_hidden, d), nn.ReLU(), nn.Linear(d, d))
        enc = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, layers, enable_nested_tensor=False)
        self.duration = DurationPredictor(d, dropout)
        dec = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerEncoder(dec, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, n_mels)

    def encode(self, tokens: Tensor, hidden: Tensor | None, mask: Tensor) -> Tensor:
        x = self.embed(tokens)
        if hidden is not None:
            x = x + self.adaptor(hidden.to(x.dtype))
        x = x + sinusoid(torch.arange(x.shape[1], device=x.device), self.d)[None].to(x.dtype)
        return encoder_forward(self.encoder, x, ~mask) * mask[..., None]

    def regulate(self, x: Tensor, durations: Tensor) -> tuple[Tensor, Tensor]:
        """Length regulator: ``x [B, N, d]``, integer ``durations [B, N]`` -> ``([B, T, d], mask [B, T])``."""
        frames = durations.sum(-1)
        t = max(1, int(frames.max())) if frames.numel() else 1
        out = x.new_zeros(x.shape[0], t, x.shape[2])
        for r in range(x.shape[0]):
            rep = x[r].repeat_interleave(durations[r].clamp_min(0), 0)
            out[r, : rep.shape[0]] = rep
        return out, lengths_to_mask(frames, t)

    def decode(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x + sinusoid(torch.arange(x.shape[1], device=x.device), self.d)[None].to(x.dtype)
        x = encoder_forward(self.decoder, x, ~mask)
        return self.out(self.norm(x)).float()

    def loss(self, tokens: Tensor, hidden: Tensor | None, mask: Tensor, durations: Tensor, mel: Tensor,
             mel_lengths: Tensor) -> dict[str, Tensor]:
        """``mel_l1`` and ``duration`` (MSE of log(1 + frames)) with ground-truth ``durations [B, N]``."""
        x = self.encode(tokens, hidden, mask)
        pred_dur = self.duration(x, mask)
        dur_loss = ((pred_dur - torch.log1p(durations.float())) ** 2)[mask].mean()
        reg, mmask = self.regulate(x, durations)
        pred = self.decode(reg, mmask)
        t = min(pred.shape[1], mel.shape[1])
        m = mmask[:, :t] & lengths_to_mask(mel_lengths, mel.shape[1])[:, :t]
        mel_loss = (pred[:, :t] - mel[:, :t].float()).abs()[m].mean()
        return {"mel_l1": mel_loss, "duration": dur_loss}

    @torch.no_grad()
    def generate(self, tokens: Tensor, hidden: Tensor | None, mask: Tensor, speed: float = 1.0
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log-mel [B, T, n_mels], frame lengths [B], durations [B, N])`` at inference."""
        x = self.encode(tokens, hidden, mask)
        dur = torch.round((self.duration(x, mask).exp() - 1.0) / speed).clamp_min(1).long() * mask
        reg, mmask = self.regulate(x, dur)
        return self.decode(reg, mmask), mmask.sum(-1), dur


__all__ = ["AcousticDecoder", "DurationPredictor"]
