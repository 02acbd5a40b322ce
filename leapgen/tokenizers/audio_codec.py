"""Neural audio codec: transformers' ``EncodecModel`` (SEANet encoder/decoder + residual VQ), small.

Paper: Défossez et al., "High Fidelity Neural Audio Compression" (EnCodec), 2022; the network is
``transformers.EncodecModel`` with a small :class:`~transformers.EncodecConfig` (its
``encoder`` / ``quantizer`` / ``decoder`` submodules are used as they are). MAGNeT and MusicGen
generate its residual-VQ codes.

Defaults (the shipped ``audio-music`` codec): 16 kHz mono, ``upsampling_ratios=(2, 4, 5, 8)`` ->
hop 320 = **50 Hz frames** (the encoder downsamples by 8 first, so little runs at the full rate),
**K = 4 codebooks of 256 entries** (1.6 kbps), ``num_filters=16``, ``hidden_size=64``, one LSTM
layer, non-causal convolutions, a fixed input gain of 10 (the corpus is quiet). transformers' quantizer is
inference-only (codebooks are buffers); :meth:`AudioCodec.quantize_train` adds the training side
(straight-through residual VQ with a commitment loss; codebooks follow EMA updates,
:meth:`AudioCodec.ema_update`, with dead codes re-seeded from the batch).

API (a tokenizer, reused by the speech family):

* ``encode(wav, sample_rate=None) -> LongTensor [B, K, T]`` with ``T = ceil(n / hop)``: ``wav`` is a
  numpy array / tensor ``[n]``, ``[B, n]``, ``[n, C]`` (C <= 8 channels, n > 8: soundfile's layout) or
  ``[B, C, n]`` (or a list of samples, or a list of 1-D arrays of one length).
  Another sample rate is resampled with soxr and more than one channel is averaged, both logged;
* ``decode(codes [B, K, T] or [K, T]) -> float32 Tensor [B, T * hop]`` in [-1, 1];
* ``frames_for(seconds)``, ``sample_rate``, ``frame_rate``, ``hop_length``, ``num_codebooks``,
  ``codebook_size``; ``save_pretrained`` / ``from_pretrained`` (config.json + model.safetensors).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError, InputError

logger = logging.getLogger(__name__)


@dataclass
class AudioCodecConfig(ComponentConfig):
    sample_rate: int = 16000
    channels: int = 1
    num_codebooks: int = 4
    codebook_size: int = 256
    upsampling_ratios: tuple[int, ...] = (2, 4, 5, 8)
    num_filters: int = 16
    hidden_size: int = 64
    num_lstm_layers: int = 1
    num_residual_layers: int = 1
    use_causal_conv: bool = False
    commitment: float = 0.25
    ema_decay: float = 0.95
    #: fixed gain applied before the encoder (and undone after the decoder): the corpus is quiet
    input_gain: float = 10.0

    def __post_init__(self) -> None:
        self.upsampling_ratios = tuple(int(r) for r in self.upsampling_ratios)
        if self.channels != 1:
            raise ConfigError("the codec is mono (channels=1); downmix inputs instead.")
        if self.num_codebooks < 1 or self.codebook_size < 2 or self.codebook_size & (self.codebook_size - 1):
            raise ConfigError("num_codebooks >= 1 and a power-of-two codebook_size >= 2 are required.")
        if self.sample_rate % self.hop_length:
            raise ConfigError(f"sample_rate {self.sample_rate} must be a multiple of the hop {self.hop_length}.")

    @property
    def hop_length(self) -> int:
        return int(np.prod(self.upsampling_ratios))

    @property
    def frame_rate(self) -> int:
        return self.sample_rate // self.hop_length

    def encodec_config(self):
        from transformers import EncodecConfig

        bw = self.num_codebooks * math.log2(self.codebook_size) * self.frame_rate / 1000.0
        return EncodecConfig(
            target_bandwidths=[bw], sampling_rate=self.sample_rate, audio_channels=self.channels,
            hidden_size=self.hidden_size, num_filters=self.num_filters, num_residual_layers=self.num_residual_layers,
            upsampling_ratios=list(self.upsampling_ratios), num_lstm_layers=self.num_lstm_layers,
            codebook_size=self.codebook_size, use_causal_conv=self.use_causal_conv, normalize=False,
        )


class AudioCodec(PretrainedMixin, nn.Module):
    """EnCodec-style codec (see the module docstring)."""

    config_class = AudioCodecConfig

    def __init__(self, config: AudioCodecConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = AudioCodecConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = config
        from transformers import EncodecModel

        self.model = EncodecModel(config.encodec_config())
        if self.model.quantizer.num_quantizers != config.num_codebooks:  # pragma: no cover - config arithmetic
            raise ConfigError(f"EncodecConfig gave {self.model.quantizer.num_quantizers} quantizers, wanted {config.num_codebooks}")
        g = torch.Generator().manual_seed(0)
        for layer in self.model.quantizer.layers:  # uniform random codebooks until training seeds them
            cb = layer.codebook
            cb.embed.copy_(torch.randn(cb.embed.shape, generator=g) * 0.1)
            cb.embed_avg.copy_(cb.embed)
            cb.cluster_size.fill_(1.0)

    # ------------------------------------------------------------------ properties
    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def frame_rate(self) -> int:
        return self.config.frame_rate

    @property
    def hop_length(self) -> int:
        return self.config.hop_length

    @property
    def num_codebooks(self) -> int:
        return self.config.num_codebooks

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def frames_for(self, seconds: float) -> int:
        """Code frames of ``seconds`` of audio (``round(seconds * frame_rate)``)."""
        return int(round(float(seconds) * self.frame_rate))

    # ------------------------------------------------------------------ input checks
    def to_batch(self, wav: Any, sample_rate: int | None = None) -> Tensor:
        """``wav`` as float32 ``[B, n]`` at the codec's rate, mono (resampled / downmixed with a log line)."""
        if isinstance(wav, (list, tuple)) and wav and all(isinstance(v, (int, float, np.number)) for v in wav):
            wav = np.asarray(wav, dtype=np.float32)  # a list of samples is one waveform, not a list of waveforms
        if isinstance(wav, (list, tuple)):
            arrs = [np.asarray(w.detach().cpu() if isinstance(w, Tensor) else w, dtype=np.float32) for w in wav]
            if not arrs or any(a.ndim != 1 for a in arrs) or len({a.size for a in arrs}) != 1:
                raise InputError("a list of waveforms must hold 1-D arrays of one length; pad them or encode one at a time.")
            x = torch.from_numpy(np.stack(arrs))
        elif isinstance(wav, np.ndarray):
            x = torch.from_numpy(np.ascontiguousarray(wav))
        elif isinstance(wav, Tensor):
            x = wav.detach()
        else:
            raise InputError(f"wav must be a numpy array, a torch tensor or a list of 1-D arrays, got {type(wav).__name__}.")
        if not (x.is_floating_point() or x.dtype == torch.int16):
            raise InputError(f"wav must hold float samples in [-1, 1] (or int16), got dtype {x.dtype}.")
        x = x.float() / 32768.0 if x.dtype == torch.int16 else x.float()
        if x.dim() == 1:
            x = x[None]
        if x.dim() == 2 and x.shape[1] <= 8 < x.shape[0]:  # [n, C] (soundfile's layout), not B rows of C samples
            logger.warning("audio of shape %s read as [samples, channels]; averaging its %d channels to mono for the "
                           "codec", tuple(x.shape), x.shape[1])
            x = x.mean(1)[None]
        if x.dim() == 3:
            if x.shape[1] > 8 and x.shape[2] <= 8:  # [B, n, C] layout (soundfile's)
                x = x.transpose(1, 2)
            if x.shape[1] != 1:
                logger.warning("audio has %d channels; averaging them to mono for the codec", x.shape[1])
            x = x.mean(1)
        if x.dim() != 2 or x.shape[-1] == 0:
            raise InputError(f"wav must be [n], [B, n] or [B, C, n] with n > 0 samples, got shape {tuple(x.shape)}.")
        if not torch.isfinite(x).all():
            raise InputError("wav holds NaN or infinite samples.")
        if sample_rate is not None and (isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer))
                                        or sample_rate < 1000):  # True was 1 Hz, 16000.7 was taken for 16000
            raise InputError(f"sample_rate must be an integer number of Hz (>= 1000), got {sample_rate!r}.")
        if sample_rate is not None and int(sample_rate) != self.sample_rate:
            import soxr

            logger.warning("resampling audio from %d Hz to the codec's %d Hz", sample_rate, self.sample_rate)
            x = torch.from_numpy(np.stack([soxr.resample(r.numpy(), int(sample_rate), self.sample_rate) for r in x.cpu()]).astype(np.float32))
        return x.to(self.device)

    # ------------------------------------------------------------------ codec
    def encode_latents(self, x: Tensor) -> Tensor:
        """Encoder output ``[B, D, T]`` of float audio ``[B, n]`` (padded to a multiple of the hop)."""
        pad = (-x.shape[-1]) % self.hop_length
        if pad:
            x = F.pad(x, (0, pad))
        x = x.to(next(self.model.parameters()).dtype)  # float32 audio; the codec may have been cast
        return self.model.encoder(x[:, None] * self.config.input_gain)

    def decode_latents(self, z: Tensor) -> Tensor:
        """Audio ``[B, T * hop]`` from quantized latents ``[B, D, T]``."""
        return self.model.decoder(z)[:, 0] / self.config.input_gain

    @torch.no_grad()
    def encode(self, wav: Any, sample_rate: int | None = None) -> Tensor:
        """Codes ``[B, K, T]`` (long) of ``wav`` (see the module docstring for accepted inputs)."""
        x = self.to_batch(wav, sample_rate)
        z = self.encode_latents(x)
        return self.model.quantizer.encode(z).transpose(0, 1).contiguous()

    def check_codes(self, codes: Tensor) -> Tensor:
        if not isinstance(codes, Tensor):
            codes = torch.as_tensor(np.asarray(codes))
        if codes.dim() == 2:
            codes = codes[None]
        if codes.dim() != 3 or codes.shape[1] != self.num_codebooks or codes.is_floating_point():
            raise InputError(f"codes must be integer [B, {self.num_codebooks}, T] (or [{self.num_codebooks}, T]), got {codes.dtype} {tuple(codes.shape)}.")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise InputError(f"codes must lie in [0, {self.codebook_size}).")
        return codes.long().to(self.device)

    @torch.no_grad()
    def decode(self, codes: Tensor) -> Tensor:
        """Float32 audio ``[B, T * hop]`` in [-1, 1] from codes ``[B, K, T]``."""
        codes = self.check_codes(codes)
        if codes.shape[-1] == 0:  # no frames: no samples (the decoder's convolutions cannot run on zero frames)
            return torch.zeros(codes.shape[0], 0, device=codes.device)
        z = self.model.quantizer.decode(codes.transpose(0, 1))
        return self.decode_latents(z).float().clamp(-1.0, 1.0)

    # ------------------------------------------------------------------ training side
    def codebooks(self) -> list[Tensor]:
        return [layer.codebook.embed for layer in self.model.quantizer.layers]

    def quantize_train(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """Residual VQ with straight-through gradients: ``(z_q, codes [B, K, T], commit_loss,
        residuals)`` (the residual each codebook saw, for :meth:`ema_update`)."""
        residual = z
        zq = torch.zeros_like(z)
        codes, residuals = [], []
        loss = z.new_zeros(())
        for layer in self.model.quantizer.layers:
            r = residual.detach()
            residuals.append(r)
            idx = layer.encode(r)  # [B, T]
            q = layer.decode(idx)  # [B, D, T]
            loss = loss + F.mse_loss(residual, q.detach())
            zq = zq + q
            residual = residual - q.detach()
            codes.append(idx)
        zq_st = z + (zq - z).detach()
        return zq_st, torch.stack(codes, 1), self.config.commitment * loss, residuals

    @torch.no_grad()
    def ema_update(self, codes: Tensor, residuals: list[Tensor], dead_threshold: float = 0.5) -> int:
        """EMA k-means step of every codebook on this batch; codes whose EMA count falls below
        ``dead_threshold`` are re-seeded from random batch vectors (global torch RNG). Returns the
        number of re-seeded codes."""
        decay = self.config.ema_decay
        reseeded = 0
        for k, layer in enumerate(self.model.quantizer.layers):
            cb = layer.codebook
            x = residuals[k].permute(0, 2, 1).reshape(-1, residuals[k].shape[1])  # [N, D]
            onehot = F.one_hot(codes[:, k].reshape(-1), cb.codebook_size).type_as(x)  # [N, C]
            cb.cluster_size.mul_(decay).add_(onehot.sum(0), alpha=1 - decay)
            cb.embed_avg.mul_(decay).add_(onehot.t() @ x, alpha=1 - decay)
            n = cb.cluster_size.sum()
            size = (cb.cluster_size + 1e-5) / (n + cb.codebook_size * 1e-5) * n
            cb.embed.copy_(cb.embed_avg / size[:, None])
            dead = cb.cluster_size < dead_threshold
            nd = int(dead.sum())
            if nd:
                pick = torch.randint(0, x.shape[0], (nd,), device=x.device)
                cb.embed[dead] = x[pick]
                cb.embed_avg[dead] = x[pick]
                cb.cluster_size[dead] = 1.0
                reseeded += nd
        return reseeded

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """Training forward on float audio ``[B, n]``: ``(reconstruction [B, n'], codes, commit_loss, residuals)``."""
        z = self.encode_latents(x)
        zq, codes, commit, residuals = self.quantize_train(z)
        return self.decode_latents(zq), codes, commit, residuals


# ---------------------------------------------------------------------------------------- losses / metrics
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, device: torch.device | None = None) -> Tensor:
    """HTK-style triangular mel filters ``[n_mels, n_fft // 2 + 1]``."""
    def hz_to_mel(f: Tensor) -> Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def mel_to_hz(m: Tensor) -> Tensor:
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, device=device)
    mels = torch.linspace(float(hz_to_mel(torch.tensor(20.0))), float(hz_to_mel(torch.tensor(sample_rate / 2))), n_mels + 2, device=device)
    hz = mel_to_hz(mels)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def log_mel(x: Tensor, sample_rate: int = 16000, n_fft: int = 1024, n_mels: int = 64, hop: int | None = None) -> Tensor:
    """Log-mel spectrogram ``[B, n_mels, frames]`` of audio ``[B, n]``."""
    hop = hop or n_fft // 4
    spec = torch.stft(x.float(), n_fft, hop, window=torch.hann_window(n_fft, device=x.device), return_complex=True).abs().pow(2)
    fb = mel_filterbank(sample_rate, n_fft, n_mels, x.device)
    return torch.log(fb @ spec + 1e-5)


def multiscale_mel_loss(x: Tensor, y: Tensor, sample_rate: int = 16000, scales: tuple[int, ...] = (256, 512, 1024)) -> Tensor:
    """Mean L1 distance of log-mel spectrograms at several FFT sizes (the codec's main loss)."""
    n = min(x.shape[-1], y.shape[-1])
    x, y = x[..., :n], y[..., :n]
    return sum(F.l1_loss(log_mel(x, sample_rate, s, min(64, s // 8)), log_mel(y, sample_rate, s, min(64, s // 8))) for s in scales) / len(scales)


def si_snr(est: Tensor, ref: Tensor, eps: float = 1e-8) -> Tensor:
    """Scale-invariant SNR in dB per row of ``[B, n]``."""
    n = min(est.shape[-1], ref.shape[-1])
    est, ref = est[..., :n] - est[..., :n].mean(-1, keepdim=True), ref[..., :n] - ref[..., :n].mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + eps) * ref
    noise = est - proj
    return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + eps) + eps)
