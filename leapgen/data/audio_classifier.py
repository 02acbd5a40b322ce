"""Attribute classifier of the audio benchmark: instrument family, tempo bucket and mode of a music clip.

A small 1-D CNN over log-mel frames (n_fft 1024, hop 320 = 50 frames/s, 64 mels): three conv blocks
(kernel 5, stride 2 after the first), mean + max pooling over time to a 64-d embedding, and one
linear head per label (:data:`~leapgen.data.audio_music.LABELS`: family 6, tempo 3, mode 2). Trained
on random 5 s crops of the real training clips' log-mel features (computed once; cross-entropy summed
over heads). The benchmark
uses it three ways: conditional accuracy of generations (the prompt's labels), a Frechet distance
in its embedding space against real test clips (an FAD analogue), and the KL divergence between
its label distributions on a real clip and on the clip generated from that clip's description.

Imports only torch / numpy (the data layer): the bench and the training side both use it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from leapgen.errors import AssetNotFoundError

logger = logging.getLogger(__name__)

HEADS = {"family": 6, "tempo": 3, "mode": 2}
SAMPLE_RATE = 16000
CROP = 5 * SAMPLE_RATE


def _mel_fb(n_fft: int, n_mels: int, sr: int) -> Tensor:
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    pts = torch.linspace(float(mel(30.0)), float(mel(sr / 2)), n_mels + 2)
    hz = 700.0 * (10 ** (pts / 2595.0) - 1.0)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return torch.clamp(torch.minimum((freqs[None] - lo) / (mid - lo), (hi - freqs[None]) / (hi - mid)), min=0.0)


class AttributeClassifier(nn.Module):
    """Log-mel CNN with an embedding and one head per label (see the module docstring)."""

    def __init__(self, n_mels: int = 64, width: int = 64) -> None:
        super().__init__()
        self.register_buffer("fb", _mel_fb(1024, n_mels, SAMPLE_RATE), persistent=False)
        self.register_buffer("window", torch.hann_window(1024), persistent=False)
        self.net = nn.Sequential(
            nn.Conv1d(n_mels, width, 5, padding=2), nn.GELU(), nn.BatchNorm1d(width),
            nn.Conv1d(width, width, 5, stride=2, padding=2), nn.GELU(), nn.BatchNorm1d(width),
            nn.Conv1d(width, width, 5, stride=2, padding=2), nn.GELU(), nn.BatchNorm1d(width),
        )
        self.proj = nn.Linear(2 * width, width)
        self.heads = nn.ModuleDict({k: nn.Linear(width, n) for k, n in HEADS.items()})

    def features(self, wav: Tensor) -> Tensor:
        spec = torch.stft(wav.float(), 1024, 320, window=self.window, return_complex=True).abs().pow(2)
        return torch.log(self.fb @ spec + 1e-6)

    def embed(self, wav: Tensor) -> Tensor:
        """64-d embeddings ``[B, 64]`` of audio ``[B, n]`` (16 kHz)."""
        return self.embed_features(self.features(wav))

    def embed_features(self, feats: Tensor) -> Tensor:
        h = self.net(feats)
        return self.proj(torch.cat([h.mean(-1), h.amax(-1)], -1))

    def forward(self, wav: Tensor) -> dict[str, Tensor]:
        return self.classify(self.features(wav))

    def classify(self, feats: Tensor) -> dict[str, Tensor]:
        e = F.gelu(self.embed_features(feats))
        return {k: head(e) for k, head in self.heads.items()}

    @torch.no_grad()
    def predict(self, clips: list[np.ndarray], batch_size: int = 16) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(embeddings [N, 64], {label: probabilities [N, classes]})`` of float clips (5 s crops from
        the start, zero-padded)."""
        self.eval()
        embs, probs = [], {k: [] for k in HEADS}
        for i in range(0, len(clips), batch_size):
            x = torch.from_numpy(np.stack([fit(c, CROP) for c in clips[i : i + batch_size]]))
            e = self.embed(x)
            embs.append(e.numpy())
            for k, head in self.heads.items():
                probs[k].append(head(F.gelu(e)).softmax(-1).numpy())
        return np.concatenate(embs), {k: np.concatenate(v) for k, v in probs.items()}


def fit(a: np.ndarray, n: int, start: int = 0) -> np.ndarray:
    out = np.zeros(n, dtype=np.float32)
    seg = np.asarray(a[start : start + n], dtype=np.float32)
    out[: seg.size] = seg
    return out


def train_classifier(audio: list[np.ndarray], labels: dict[str, np.ndarray], seed: int = 0, minutes: float = 4.0,
                     steps: int = 3000, batch_size: int = 16, lr: float = 2e-3) -> AttributeClassifier:
    """Train on random 5 s crops (250 frames) of the clips' log-mel features (computed once), with a
    random gain of 0.5-1.5 (a shift of the log-mel), for ``steps`` or ``minutes``."""
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = AttributeClassifier()
    with torch.no_grad():
        feats = [model.features(torch.from_numpy(np.asarray(a, dtype=np.float32))[None])[0] for a in tqdm(audio, desc="classifier features", leave=False)]
    frames = CROP // 320 + 1
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    t0 = time.perf_counter()
    model.train()
    for step in tqdm(range(steps), desc="audio classifier", leave=False):
        if time.perf_counter() - t0 > minutes * 60:
            break
        idx = rng.integers(0, len(audio), batch_size)
        x = torch.full((batch_size, feats[0].shape[0], frames), float(np.log(1e-6)))
        for r, i in enumerate(idx):
            f = feats[i]
            s = int(rng.integers(0, max(1, f.shape[1] - frames + 1)))
            seg = f[:, s : s + frames]
            x[r, :, : seg.shape[1]] = seg
        x = x + torch.from_numpy(2 * np.log(rng.uniform(0.5, 1.5, (batch_size, 1, 1))).astype(np.float32))
        out = model.classify(x)
        loss = sum(F.cross_entropy(out[k], torch.from_numpy(labels[k][idx])) for k in HEADS)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0:
            logger.info("classifier step %d loss %.3f", step, float(loss.detach()))
    return model.eval()


def load_or_train(path: str | Path, audio: list[np.ndarray] | None = None, labels: dict[str, np.ndarray] | None = None,
                  **train_options) -> AttributeClassifier:
    """The classifier cached at ``path`` (a safetensors file), trained first when missing."""
    from safetensors.torch import load_file, save_file

    path = Path(path)
    model = AttributeClassifier()
    if path.is_file():
        model.load_state_dict(load_file(str(path)))
        return model.eval()
    if audio is None or labels is None:
        raise AssetNotFoundError(f"no attribute classifier at {path}; give training clips to train one.")
    model = train_classifier(audio, labels, **train_options)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model
