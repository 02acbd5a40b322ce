"""Speech front end as in Paraformer (FunASR ``WavFrontend``): Kaldi fbank, LFR stacking, CMVN.

1. waveform in [-1, 1] (16 kHz mono) scaled by 32768;
2. Kaldi-compatible 80-dim log-mel filterbank (25 ms hamming window, 10 ms shift, pre-emphasis
   0.97, DC removal, 512-point FFT, mel banks from 20 Hz to Nyquist, ``snip_edges``, dither 0),
   computed by :func:`fbank_torch`, a batched float32 PyTorch version of Kaldi's maths (the
   default: 5x faster than kaldi-native-fbank on one CPU thread, and GPU friendly; checked against
   kaldi-native-fbank in the tests), or by ``kaldi-native-fbank`` itself (:func:`kaldi_fbank`,
   ``FrontendConfig.fbank="kaldi"``, and whenever ``dither > 0``);
3. LFR (low frame rate, :func:`apply_lfr`): ``m = 7`` frames stacked every ``n = 6``: 560-dim at
   60 ms, left-padded with 3 copies of frame 0, right-padded by repeating the last frame;
4. global CMVN ``(x - mean) / std`` with statistics fitted on the training set.

:class:`SpeechFrontend` bundles the steps and saves its configuration (CMVN included) as a
pipeline component (``frontend/config.json``). Features are computed once per utterance.
Reusable by any speech family (ASR, TTS, speech translation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..configuration import ComponentConfig, ConfigMixin
from ..errors import InputError

FRAME_LENGTH = 400  # samples at 16 kHz (25 ms)
FRAME_SHIFT = 160  # 10 ms


def _check_frame(samples: int) -> None:
    if samples < FRAME_LENGTH:
        raise InputError(f"the clip has {samples} samples, fewer than one 25 ms frame ({FRAME_LENGTH} samples at 16 kHz)")


def kaldi_fbank(wave: np.ndarray, sample_rate: int = 16000, num_mel_bins: int = 80, dither: float = 0.0) -> np.ndarray:
    """Kaldi log-mel filterbank ``[frames, num_mel_bins]`` (float32) of a mono waveform in [-1, 1],
    with FunASR's options (hamming window, energy floor 0), by kaldi-native-fbank."""
    import kaldi_native_fbank as knf

    wave = np.asarray(wave, dtype=np.float32).reshape(-1)
    _check_frame(wave.size)
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = sample_rate
    opts.frame_opts.dither = dither
    opts.frame_opts.window_type = "hamming"
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = num_mel_bins
    opts.energy_floor = 0.0
    fb = knf.OnlineFbank(opts)
    fb.accept_waveform(sample_rate, (wave * 32768.0).tolist())
    fb.input_finished()
    return np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)]).astype(np.float32)


def _mel_banks(num_bins: int, sample_rate: int, n_fft: int = 512, low: float = 20.0, high: float = 0.0) -> Tensor:
    """Kaldi's triangular mel banks ``[num_bins, n_fft // 2]`` (mel = 1127 ln(1 + f / 700))."""
    nyquist = sample_rate / 2
    high = high if high > 0 else nyquist + high
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)  # noqa: E731
    lo, hi = mel(low), mel(high)
    delta = (hi - lo) / (num_bins + 1)
    freqs = torch.arange(n_fft // 2, dtype=torch.float64) * sample_rate / n_fft
    m = 1127.0 * torch.log1p(freqs / 700.0)
    left = lo + torch.arange(num_bins, dtype=torch.float64)[:, None] * delta
    center, right = left + delta, left + 2 * delta
    up = (m - left) / (center - left)
    down = (right - m) / (right - center)
    w = torch.where((m > left) & (m < right), torch.where(m <= center, up, down), torch.zeros(()))
    return w.float()


_BANKS: dict[tuple[int, int, str], tuple[Tensor, Tensor]] = {}  # mel banks and window per device


def fbank_torch(waves: Tensor, lengths: Tensor | None = None, sample_rate: int = 16000, num_mel_bins: int = 80) -> tuple[Tensor, Tensor]:
    """Batched Kaldi fbank in PyTorch: ``waves [B, N]`` in [-1, 1] (right-padded; ``lengths [B]``
    samples) -> ``(feats [B, T, num_mel_bins], frames [B])``, the same maths as :func:`kaldi_fbank`
    (dither 0), on ``waves``' device. Frames past a row's length are zero.

    Per frame Kaldi removes the mean ``m``, pre-emphasises (``y[i] = x[i] - 0.97 x[i-1]``,
    ``y[0] = 0.03 x[0]``) and windows. Both first steps are linear, so ``y = P(f) - 0.03 m``
    with ``P(f)`` the pre-emphasis of the raw frame: one pre-emphasised copy of the whole wave is
    framed, windowed straight into the zero-padded FFT buffer, and the mean enters as one fused
    ``- 0.03 m * window`` (no per-frame copies, no padding copy before the FFT)."""
    if waves.dim() != 2:
        raise InputError(f"waves must be [B, N], got {tuple(waves.shape)}")
    b, n = waves.shape
    _check_frame(n)
    t = 1 + (n - FRAME_LENGTH) // FRAME_SHIFT
    key = (num_mel_bins, sample_rate, str(waves.device))
    if key not in _BANKS:
        i = torch.arange(FRAME_LENGTH, dtype=torch.float64)
        window = (0.54 - 0.46 * torch.cos(2 * math.pi * i / (FRAME_LENGTH - 1))).float()
        _BANKS[key] = _mel_banks(num_mel_bins, sample_rate).to(waves.device), window.to(waves.device)
    banks, window = _BANKS[key]
    # float32 throughout, as kaldi-native-fbank (5x faster than float64 on a CPU; same features)
    s = waves.float() * 32768.0
    e = torch.empty_like(s)
    torch.sub(s[:, 1:], s[:, :-1], alpha=0.97, out=e[:, 1:])
    e[:, 0] = 0.03 * s[:, 0]
    raw = s.unfold(1, FRAME_LENGTH, FRAME_SHIFT)[:, :t]  # [B, T, 400] views, no copy
    buf = torch.zeros(b, t, 512, device=waves.device)
    body = buf[..., :FRAME_LENGTH]
    torch.mul(e.unfold(1, FRAME_LENGTH, FRAME_SHIFT)[:, :t], window, out=body)
    body[..., 0] = raw[..., 0] * (0.03 * window[0])  # a frame's first sample: 0.03 x[0] of its own
    body.addcmul_(raw.mean(-1, keepdim=True), window, value=-0.03)  # the mean, removed before pre-emphasis
    spec = torch.fft.rfft(buf)[..., :256]
    power = spec.real.square() + spec.imag.square()
    feats = torch.log((power @ banks.T).clamp_min(torch.finfo(torch.float32).eps))
    if lengths is None:
        return feats, torch.full((b,), t, device=waves.device)
    n_frames = torch.clamp(1 + torch.div(lengths.to(waves.device) - FRAME_LENGTH, FRAME_SHIFT, rounding_mode="floor"), min=0)
    feats = feats * (torch.arange(t, device=waves.device)[None] < n_frames[:, None])[..., None]
    return feats, n_frames


def apply_lfr(feats: np.ndarray | Tensor, m: int = 7, n: int = 6) -> Any:
    """Low frame rate stacking (FunASR ``apply_lfr``): ``[T, D] -> [ceil(T / n), m * D]``."""
    is_np = isinstance(feats, np.ndarray)
    x = torch.as_tensor(feats)
    t = x.shape[0]
    t_lfr = math.ceil(t / n)
    left = (m - 1) // 2
    x = torch.cat([x[:1].expand(left, -1), x], 0)
    need = (t_lfr - 1) * n + m
    if x.shape[0] < need:
        x = torch.cat([x, x[-1:].expand(need - x.shape[0], -1)], 0)
    idx = torch.arange(t_lfr)[:, None] * n + torch.arange(m)[None]
    out = x[idx].reshape(t_lfr, -1)
    return out.numpy() if is_np else out


@dataclasses.dataclass
class FrontendConfig(ComponentConfig):
    sample_rate: int = 16000
    n_mels: int = 80
    lfr_m: int = 7
    lfr_n: int = 6
    dither: float = 0.0
    #: ``"torch"`` (:func:`fbank_torch`, float32) or ``"kaldi"`` (kaldi-native-fbank); dither > 0 uses kaldi
    fbank: str = "torch"
    cmvn_mean: tuple[float, ...] = ()
    cmvn_std: tuple[float, ...] = ()

    @property
    def dim(self) -> int:
        return self.n_mels * self.lfr_m

    @property
    def frame_seconds(self) -> float:
        """Seconds per LFR frame (0.06 with the defaults)."""
        return self.lfr_n * FRAME_SHIFT / self.sample_rate


class SpeechFrontend(ConfigMixin):
    """fbank -> LFR -> CMVN for a list of 16 kHz mono waveforms (see the module docstring)."""

    config_class = FrontendConfig

    def __init__(self, config: FrontendConfig | None = None) -> None:
        self.config = config or FrontendConfig()
        c = self.config
        self.mean = torch.tensor(c.cmvn_mean, dtype=torch.float32) if c.cmvn_mean else torch.zeros(c.dim)
        self.std = torch.tensor(c.cmvn_std, dtype=torch.float32) if c.cmvn_std else torch.ones(c.dim)

    @property
    def dim(self) -> int:
        return self.config.dim

    def features(self, wave: np.ndarray) -> Tensor:
        """LFR features of one waveform before CMVN, ``[T_lfr, 560]`` (float32)."""
        c = self.config
        if c.fbank not in ("torch", "kaldi"):
            raise InputError(f"frontend fbank must be 'torch' or 'kaldi', got {c.fbank!r}")
        if c.fbank == "kaldi" or c.dither:
            fb = torch.from_numpy(kaldi_fbank(wave, c.sample_rate, c.n_mels, c.dither))
        else:
            w = torch.as_tensor(np.asarray(wave, dtype=np.float32).reshape(-1))
            fb = fbank_torch(w[None], sample_rate=c.sample_rate, num_mel_bins=c.n_mels)[0][0]
        return apply_lfr(fb, c.lfr_m, c.lfr_n)

    def normalize(self, feats: Tensor) -> Tensor:
        return (feats - self.mean.to(feats.device)) / self.std.to(feats.device)

    def __call__(self, waves: Sequence[np.ndarray]) -> tuple[Tensor, Tensor]:
        """``(feats [B, T, 560] float32 (CMVN applied, zero-padded), lengths [B])``."""
        feats = [self.normalize(self.features(w)) for w in waves]
        return pad_features(feats)

    def fit_cmvn(self, feats: Sequence[Tensor]) -> SpeechFrontend:
        """Set the global CMVN statistics from un-normalised LFR features; returns self."""
        x = torch.cat([torch.as_tensor(f, dtype=torch.float64) for f in feats], 0)
        mean, std = x.mean(0), x.std(0).clamp_min(1e-5)
        self.config = dataclasses.replace(self.config, cmvn_mean=tuple(mean.tolist()), cmvn_std=tuple(std.tolist()))
        self.mean, self.std = mean.float(), std.float()
        return self


def pad_features(feats: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Right-pad ``[T_i, D]`` features into ``([B, T, D], lengths [B])``."""
    lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    out = torch.zeros(len(feats), int(lengths.max()) if len(feats) else 0, feats[0].shape[1] if feats else 0)
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
    return out, lengths


__all__ = ["FrontendConfig", "SpeechFrontend", "apply_lfr", "fbank_torch", "kaldi_fbank", "pad_features"]
