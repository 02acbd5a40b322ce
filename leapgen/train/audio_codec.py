"""Recipe ``audio-codec``: train the small EnCodec codec (:class:`~leapgen.tokenizers.audio_codec.AudioCodec`)
on the procedural music corpus (:mod:`leapgen.data.audio_music`).

Objective (no adversarial terms: the budget is minutes on a CPU): multi-scale log-mel L1 (FFT 256 /
512 / 1024) + ``wave_weight`` x waveform L1 + the residual-VQ commitment loss; codebooks are EMA
k-means (decay 0.95) seeded from encoder outputs of the first batch, dead codes re-seeded from the
batch. Random ``crop_seconds`` crops of the training clips, AdamW + warmup + cosine, a wall-clock
budget (``minutes``) that ends training early.

``speech_corpus`` (a ``leapgen data tts-en`` folder) mixes espeak-ng speech into the crops
(``speech_fraction`` of every batch), so that one codec serves the music models and the speech
models (MaskGCT's S2A, issue #16) instead of a music codec fine-tuned on speech afterwards.

Evaluation on the held-out test clips (and the speech corpus's test split, when mixed): log-mel L1
distance (FFT 1024, 64 mels) and SI-SNR (dB) of the reconstructions, plus the per-codebook code
usage (perplexity). The folder written
(``out_dir``) is a codec component (``config.json`` + ``model.safetensors`` + ``train_metrics.json``)
that the ``audio-music`` recipe loads.

``leapgen train audio-codec --out /tmp/audio-codec --speech-corpus ~/.cache/leapgen/tts-en-100
--speech-fraction 0.4`` with the defaults (16 filters, 1.9 M parameters) is the shipped run: 80
minutes on one CPU thread, about 13,600 steps; ``--minutes 1 --steps 30`` is a smoke run.

``decoder_from`` (``--decoder-from DIR``): fine-tune **only the decoder** of the codec in ``DIR``
(encoder and residual-VQ codebooks frozen, so every code sequence means the same frames as before
and the token models trained on that codec stay valid) on the same losses without the
commitment term; the architecture options are then read from ``DIR``. The earlier run's metrics
are kept under ``decoder_from_metrics``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.audio_music import build, load_corpus
from ..errors import ConfigError
from ..tokenizers.audio_codec import AudioCodec, log_mel, multiscale_mel_loss, si_snr
from .common import adamw, environment, lr_at, num_params, pick_device, write_metrics

logger = logging.getLogger(__name__)


def load_speech(root: str | os.PathLike, split: str) -> list[np.ndarray]:
    """The waveforms of a ``leapgen data tts-en`` split (16 kHz mono float32)."""
    import soundfile as sf

    from ..data.tts_en import read_manifest

    return [sf.read(r["audio"], dtype="float32")[0] for r in read_manifest(root, split)]


def mixed_crops(sources: list[list[np.ndarray]], counts: list[int], length: int, rng: np.random.Generator) -> torch.Tensor:
    """``counts[i]`` random crops from ``sources[i]``, stacked (see :func:`random_crops`)."""
    return torch.cat([random_crops(src, c, length, rng) for src, c in zip(sources, counts) if c > 0])


def random_crops(audio: list[np.ndarray], n: int, length: int, rng: np.random.Generator) -> torch.Tensor:
    """``n`` random crops of ``length`` samples (zero-padded when a clip is shorter)."""
    out = np.zeros((n, length), dtype=np.float32)
    for i in range(n):
        a = audio[int(rng.integers(len(audio)))]
        if a.size > length:
            s = int(rng.integers(a.size - length))
            out[i] = a[s : s + length]
        else:
            out[i, : a.size] = a
    return torch.from_numpy(out)


@torch.no_grad()
def evaluate_codec(codec: AudioCodec, audio: list[np.ndarray], max_clips: int = 64) -> dict[str, float]:
    """Mel distance, SI-SNR and code perplexity of ``codec`` on (up to ``max_clips``) clips."""
    codec.eval()
    mel, snr, counts = [], [], torch.zeros(codec.num_codebooks, codec.codebook_size)
    for a in audio[:max_clips]:
        x = torch.from_numpy(a)[None].to(codec.device)
        codes = codec.encode(x)
        y = codec.decode(codes)[:, : x.shape[1]]
        mel.append(float((log_mel(y) - log_mel(x)).abs().mean()))
        snr.append(float(si_snr(y, x).mean()))
        for k in range(codec.num_codebooks):
            counts[k] += torch.bincount(codes[0, k].cpu(), minlength=codec.codebook_size).float()
    p = counts / counts.sum(1, keepdim=True)
    ppl = torch.exp(-(p * torch.log(p + 1e-12)).sum(1))
    return {"mel_distance": float(np.mean(mel)), "si_snr_db": float(np.mean(snr)), "code_perplexity": [round(float(v), 1) for v in ppl]}


def seed_codebooks(codec: AudioCodec, x: torch.Tensor, rng: np.random.Generator) -> None:
    """Seed every residual-VQ codebook with distinct encoder outputs of ``x`` (k-means++-free)."""
    with torch.no_grad():
        r = codec.encode_latents(x)
        for layer in codec.model.quantizer.layers:
            cb = layer.codebook
            flat = r.permute(0, 2, 1).reshape(-1, r.shape[1])
            pick = torch.from_numpy(rng.choice(flat.shape[0], cb.codebook_size, replace=False)).to(x.device)
            cb.embed.copy_(flat[pick])
            cb.embed_avg.copy_(flat[pick])
            cb.cluster_size.fill_(1.0)
            r = r - layer.decode(layer.encode(r))


def _earlier_metrics(folder: str | os.PathLike | None) -> Any:
    """The ``train_metrics.json`` of the codec a decoder-only run started from (None if absent)."""
    if folder is None or not (Path(folder) / "train_metrics.json").is_file():
        return None
    import json

    return json.loads((Path(folder) / "train_metrics.json").read_text())


def main(
    out_dir: str | os.PathLike = "/tmp/audio-codec",
    seed: int = 0,
    corpus_dir: str | os.PathLike | None = None,
    corpus_hours: float = 5.0,
    steps: int = 100_000,
    minutes: float | None = 80.0,
    batch_size: int = 8,
    crop_seconds: float = 0.8,
    lr: float = 3e-3,
    wave_weight: float = 0.1,
    dead_threshold: float = 0.05,
    num_filters: int = 16,
    hidden_size: int = 64,
    num_codebooks: int = 4,
    codebook_size: int = 256,
    speech_corpus: str | os.PathLike | None = None,
    speech_fraction: float = 0.5,
    device: str | None = None,
    num_threads: int | None = None,
    decoder_from: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Corpus -> codec training -> evaluation -> ``out_dir`` (config, weights, train_metrics.json)."""
    t0 = time.perf_counter()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    dev = pick_device(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if speech_corpus is not None and not 0.0 < speech_fraction < 1.0:
        raise ConfigError(f"speech_fraction must be in (0, 1) when a speech corpus is mixed in, got {speech_fraction!r}.")
    build(out_dir=corpus_dir, seed=seed, hours=corpus_hours)
    train, test = load_corpus(corpus_dir, "train"), load_corpus(corpus_dir, "test")
    speech_train = load_speech(speech_corpus, "train") if speech_corpus is not None else []
    n_speech = round(batch_size * speech_fraction) if speech_train else 0
    sources, counts = [train.audio, speech_train], [batch_size - n_speech, n_speech]
    if decoder_from is not None:
        codec = AudioCodec.from_pretrained(decoder_from).float().to(dev)
        c = codec.config
        num_filters, hidden_size, num_codebooks, codebook_size = c.num_filters, c.hidden_size, c.num_codebooks, c.codebook_size
    else:
        codec = AudioCodec(num_filters=num_filters, hidden_size=hidden_size, num_codebooks=num_codebooks, codebook_size=codebook_size).to(dev)
    length = int(crop_seconds * codec.sample_rate)
    logger.info("audio-codec: %d train clips + %d speech utterances (%d of %d crops per batch), %.2f M parameters, device %s%s",
                len(train), len(speech_train), n_speech, batch_size, num_params(codec) / 1e6, dev,
                f", decoder only (from {decoder_from})" if decoder_from is not None else "")
    if decoder_from is None:
        seed_codebooks(codec, mixed_crops(sources, [32 - round(32 * n_speech / batch_size), round(32 * n_speech / batch_size)], length, rng).to(dev), rng)
    else:
        codec.requires_grad_(False)
        codec.model.decoder.requires_grad_(True)

    opt = adamw(codec.model.decoder if decoder_from is not None else codec, lr, 0.0, betas=(0.8, 0.99))
    codec.train()
    budget = None if minutes is None else minutes * 60.0
    t_train = time.perf_counter()
    history, reseeded = [], 0
    bar = tqdm(range(steps), desc="audio-codec", leave=False)
    step = 0
    for step in bar:
        frac = 0.0 if budget is None else (time.perf_counter() - t_train) / budget
        if frac >= 1.0:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, 100, time_frac=frac)
        x = mixed_crops(sources, counts, length, rng).to(dev)
        if decoder_from is None:
            y, codes, commit, residuals = codec(x)
        else:  # frozen encoder and codebooks: the codes of x are fixed, only the decoder learns
            with torch.no_grad():
                zq = codec.quantize_train(codec.encode_latents(x))[0]
            y, commit = codec.decode_latents(zq), x.new_zeros(())
        y = y[:, : x.shape[1]]
        mel = multiscale_mel_loss(y, x, codec.sample_rate)
        loss = mel + wave_weight * (y - x).abs().mean() + commit
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(codec.parameters(), 1.0)
        opt.step()
        if decoder_from is None:
            reseeded += codec.ema_update(codes, residuals, dead_threshold=dead_threshold)
        if step % 25 == 0:
            history.append({"step": step, "mel": round(float(mel.detach()), 4), "commit": round(float(commit.detach()), 5)})
            bar.set_postfix(mel=f"{float(mel.detach()):.3f}")
            logger.info("step %d mel %.4f commit %.5f reseeded %d", step, float(mel.detach()), float(commit.detach()), reseeded)
    train_s = time.perf_counter() - t_train
    codec.eval()
    metrics = {
        "recipe": "audio-codec",
        "options": dict(seed=seed, corpus_hours=corpus_hours, steps=steps, minutes=minutes, batch_size=batch_size,
                        crop_seconds=crop_seconds, lr=lr, num_filters=num_filters, hidden_size=hidden_size,
                        speech_corpus=None if speech_corpus is None else str(speech_corpus),
                        speech_fraction=speech_fraction if speech_train else 0.0,
                        decoder_from=None if decoder_from is None else str(decoder_from)),
        "steps_done": step + 1,
        "train_seconds": round(train_s, 1),
        "audio_seconds_seen": round((step + 1) * batch_size * crop_seconds, 1),
        "parameters": num_params(codec),
        "reseeded_codes": reseeded,
        "test": evaluate_codec(codec, test.audio),
        "test_speech": evaluate_codec(codec, load_speech(speech_corpus, "test")) if speech_train else None,
        "history": history[-40:],
        "decoder_from_metrics": _earlier_metrics(decoder_from),
        "environment": environment(dev),
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    out = Path(out_dir)
    codec.cpu().save_pretrained(out)
    write_metrics(out, metrics, max_size_mb=10.0)
    logger.info("audio-codec: test %s", metrics["test"])
    return metrics
