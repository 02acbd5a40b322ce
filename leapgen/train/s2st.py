"""Recipe ``leapgen train s2st-en-de``: English speech -> German speech (DASpeech-style, beside an AR baseline).

Steps: (1) the corpus (``leapgen data s2st-en-de``; built here when missing with ``pairs``);
(2) source features with the ASR front end of ``init_from`` (fbank -> LFR 7/6, its CMVN; cached
``feats_src_<split>.pt``), target log-mels of the German speech with leading / trailing silence
trimmed (:class:`~leapgen.tokenizers.mel.MelSpectrogram`; cached ``mel_<split>.pt``); (3) phoneme
durations: per-phoneme mean frame counts fitted by least squares on the training split, then
scaled to each utterance's mel length (no forced aligner offline; stated in docs/s2st.md);
(4) joint training of :class:`~leapgen.models.s2st.S2STModel` (DAG loss with glancing, ratio
annealed ``glance_start -> glance_end``; AR CE; acoustic decoder L1 + duration MSE on the
argmax path), encoder initialised from the shipped ASR encoder (``assets/asr-en``);
(5) the pipeline folder (``model/``, ``frontend/``, ``vocab/``, ``mel/``, ``model_index.json``,
fp16 weights, <= 30 MB) and two short example clips from ``test_unseen``.

Defaults describe the full run (12k pairs, 90 minutes on 2 CPU cores); the shipped asset's
actual settings are in its ``train_metrics.json``.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import s2st as corpus_mod
from ..models.asr import ASRModel
from ..models.s2st import S2STConfig, S2STModel
from ..tokenizers.asr_vocab import ASRVocab
from ..tokenizers.mel import MelSpectrogram
from ..tokenizers.speech_features import SpeechFrontend, pad_features
from .asr_en import batches
from .common import adamw, environment, pick_device, write_metrics
from .loop import train_budgeted

logger = logging.getLogger(__name__)


def trim(wave: np.ndarray, thresh: float = 0.01) -> np.ndarray:
    """Leading / trailing samples below ``thresh`` x peak removed."""
    idx = np.flatnonzero(np.abs(wave) > thresh * max(1e-6, float(np.abs(wave).max())))
    return wave[idx[0] : idx[-1] + 1] if idx.size else wave[:0]


def load_split(root: Path, split: str, frontend: SpeechFrontend, mel: MelSpectrogram, limit: int | None = None
               ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, Any]]]:
    """Source LFR features (before CMVN), target log-mels (float16) and rows of a split (cached)."""
    import soundfile as sf

    rows = corpus_mod.read_manifest(root, split)
    if limit is not None:
        rows = rows[:limit]
    cache = root / f"feats_s2st_{split}_{len(rows)}.pt"
    if cache.exists():
        src, tgt = torch.load(cache)
    else:
        src, tgt = [], []
        for r in rows:
            src.append(frontend.features(sf.read(r["src_audio"], dtype="float32")[0]).half())
            tgt.append(mel(torch.from_numpy(trim(sf.read(r["tgt_audio"], dtype="float32")[0]))).half())
        torch.save((src, tgt), cache)
    return src, tgt, rows


def fit_durations(targets: list[list[int]], frames: list[int], vocab_size: int) -> np.ndarray:
    """Per-token mean frame counts ``[V]`` (least squares of ``frames ~ counts @ d``, clamped to >= 1)."""
    counts = np.zeros((len(targets), vocab_size))
    for i, t in enumerate(targets):
        np.add.at(counts[i], t, 1)
    d, *_ = np.linalg.lstsq(counts, np.asarray(frames, dtype=float), rcond=None)
    return np.clip(d, 1.0, None)


def utterance_durations(tokens: list[int], frames: int, means: np.ndarray) -> list[int]:
    """Integer durations of ``tokens`` summing to ``frames`` (means scaled, cumulative rounding)."""
    d = means[tokens]
    c = np.round(np.cumsum(d / d.sum() * frames)).astype(int)
    return np.diff(np.concatenate([[0], c])).tolist()


def collate(idx, src, tgt, targets, durs, frontend, device):
    x, xl = pad_features([frontend.normalize(src[i].float()) for i in idx])
    tl = torch.tensor([len(targets[i]) for i in idx])
    y = torch.zeros(len(idx), int(tl.max()), dtype=torch.long)
    d = torch.zeros_like(y)
    for k, i in enumerate(idx):
        y[k, : len(targets[i])] = torch.tensor(targets[i])
        d[k, : len(targets[i])] = torch.tensor(durs[i])
    ml = torch.tensor([tgt[i].shape[0] for i in idx])
    m = torch.zeros(len(idx), int(ml.max()), tgt[idx[0]].shape[1])
    for k, i in enumerate(idx):
        m[k, : tgt[i].shape[0]] = tgt[i].float()
    return [t.to(device) for t in (x, xl, y, tl, m, ml, d)]


def save_pipeline(out: Path, model: S2STModel, frontend: SpeechFrontend, vocab: ASRVocab, mel: MelSpectrogram) -> None:
    """The folder :class:`~leapgen.pipelines.s2st.S2STPipeline` loads (fp16 weights)."""
    from ..pipelines.base import model_index, write_model_index

    for name in ("model", "frontend", "vocab", "mel"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out / "model", dtype=torch.float16)
    frontend.save_pretrained(out / "frontend")
    vocab.save_pretrained(out / "vocab")
    mel.save_pretrained(out / "mel")
    write_model_index(out, model_index("S2STPipeline", {"model": model, "frontend": frontend, "vocab": vocab, "mel": mel}))


def main(out_dir: str = "assets/s2st-en-de", seed: int = 0, corpus: str | None = None, pairs: int = 12000,
         init_from: str | None = "assets/asr-en", minutes: float = 90.0, max_steps: int | None = None,
         batch_size: int = 32, lr: float = 1e-3, warmup: int = 200, weight_decay: float = 0.01,
         decoder_layers: int = 2, upsample: float = 2.0, dropout: float = 0.1, glance_start: float = 0.5,
         glance_end: float = 0.1, tts_weight: float = 1.0, threads: int = 2, bf16: bool = False,
         max_train: int | None = None, log_every: int = 50, device: str | None = None,
         checkpoint_every_min: float = 10.0, resume: str | None = None) -> dict[str, Any]:
    """Train and save the S2ST pipeline (see the module docstring); returns the metrics.
    ``resume``: a saved S2ST pipeline folder to continue from (its model, front end and vocabulary;
    a fresh warm-up + cosine schedule over this run's budget)."""
    torch.manual_seed(seed)
    torch.set_num_threads(int(threads))
    rng = random.Random(seed)
    dev = pick_device(device)
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    if not (root / "train.jsonl").exists():
        logger.info("building the s2st-en-de corpus in %s (%d pairs)", root, pairs)
        corpus_mod.build(out_dir=root, seed=seed, pairs=pairs)
    source = resume or init_from
    frontend = SpeechFrontend.from_pretrained(Path(source) / "frontend") if source else SpeechFrontend()
    previous = json.loads((Path(resume) / "train_metrics.json").read_text()) if resume else None
    mel = MelSpectrogram()
    src, tgt, rows = load_split(root, "train", frontend, mel, max_train)
    held = {r["de"] for split in ("test_seen", "test_unseen") if (root / f"{split}.jsonl").exists()
            for r in corpus_mod.read_manifest(root, split)}
    keep = [i for i, r in enumerate(rows) if r["de"] not in held]  # never train on a test sentence
    if len(keep) < len(rows):
        logger.info("dropped %d training pairs whose German sentence is a test sentence", len(rows) - len(keep))
        src, tgt, rows = [src[i] for i in keep], [tgt[i] for i in keep], [rows[i] for i in keep]
    if not source:
        frontend.fit_cmvn([f.float() for f in src[:3000]])
    symbols = sorted({s for r in rows for s in r["phonemes"].split()})
    vocab = ASRVocab.from_pretrained(Path(resume) / "vocab") if resume else ASRVocab(symbols)
    targets = [vocab.encode(r["phonemes"]) for r in rows]
    means = fit_durations(targets, [t.shape[0] for t in tgt], len(vocab))
    durs = [utterance_durations(t, m.shape[0], means) for t, m in zip(targets, tgt)]
    cfg = S2STConfig(vocab_size=len(vocab), input_dim=frontend.dim, decoder_layers=decoder_layers, upsample=upsample,
                     dropout=dropout, n_mels=mel.config.n_mels)
    model = S2STModel(cfg)
    if resume:
        model = S2STModel.from_pretrained(Path(resume) / "model").float()
        cfg = model.config
    elif init_from:
        asr = ASRModel.from_pretrained(Path(init_from) / "model")
        c = asr.config
        if (c.d_model, c.heads, c.ff, c.encoder_layers, c.input_dim) != (cfg.d_model, cfg.heads, cfg.ff, cfg.encoder_layers, cfg.input_dim):
            raise ValueError("init_from's encoder shape differs from the S2ST encoder's")
        model.encoder.load_state_dict({k: v.float() for k, v in asr.encoder.state_dict().items()})
        del asr
    model.to(dev).train()
    logger.info("S2STModel %s on %s, %d training pairs", model.num_parameters(), dev, len(rows))
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    gen = torch.Generator(device=dev).manual_seed(seed)
    lengths = [f.shape[0] for f in src]
    out = Path(out_dir)
    ratio = {"glance": glance_start}

    def losses(idx, progress):
        ratio["glance"] = glance_start + (glance_end - glance_start) * progress
        x, xl, y, yl, m, ml, d = collate(idx, src, tgt, targets, durs, frontend, dev)
        return model.losses(x, xl, y, yl, mel=m, mel_lengths=ml, durations=d, glance_ratio=ratio["glance"],
                            weights={"tts": tts_weight}, generator=gen)

    run = train_budgeted(model, opt, lambda: batches(lengths, batch_size, rng), losses, minutes=minutes,
                         max_steps=max_steps, lr=lr, warmup=warmup, device=dev, bf16=bf16, clip=5.0,
                         log_every=log_every, checkpoint_every_min=checkpoint_every_min,
                         save=lambda: save_pipeline(out, model, frontend, vocab, mel),
                         log_extra=lambda p: {"glance_ratio": round(ratio["glance"], 3)})
    model.eval()
    save_pipeline(out, model, frontend, vocab, mel)
    examples = ship_examples(out, root)
    metrics = {
        "recipe": "s2st-en-de", "seed": seed, "corpus": str(root), "train_pairs": len(rows),
        "train_hours_source": round(sum(r["src_duration"] for r in rows) / 3600, 2), "phonemes": len(symbols),
        "settings": {"init_from": init_from, "minutes": minutes, "max_steps": max_steps, "batch_size": batch_size,
                     "lr": lr, "warmup": warmup, "glance": [glance_start, glance_end], "tts_weight": tts_weight,
                     "upsample": upsample, "bf16": bf16, "resume": resume, "threads": threads, "max_train": max_train,
                     "acoustic_strategy": "argmax path (Viterbi alignment of the target), hidden states detached"},
        "config": cfg.to_dict(), "parameters": model.num_parameters(), "steps": run.steps, "epochs": run.epochs,
        "train_minutes": round(run.minutes, 2), "history": run.history[-40:], "examples": examples,
        "environment": environment(dev),
    }
    if previous is not None:  # the run this one continued
        metrics["previous"] = {k: previous.get(k) for k in ("steps", "epochs", "train_minutes", "settings", "previous")}
    write_metrics(out, metrics, max_size_mb=30)
    return metrics


def ship_examples(out: Path, root: Path) -> list[dict[str, Any]]:
    """Copy the shortest ``test_seen`` source clip (a training template, unseen sentence) to
    ``examples/clip0.wav`` and the shortest ``test_unseen`` one (held-out template and voice) to
    ``examples/clip1.wav``, each with ``clipK.txt`` (English, German, phonemes, tab-separated)."""
    (out / "examples").mkdir(parents=True, exist_ok=True)
    shipped = []
    for k, split in enumerate(("test_seen", "test_unseen")):
        r = min(corpus_mod.read_manifest(root, split), key=lambda r: r["src_duration"])
        shutil.copy(r["src_audio"], out / "examples" / f"clip{k}.wav")
        (out / "examples" / f"clip{k}.txt").write_text(f"{r['en']}\t{r['de']}\t{r['phonemes']}\n")
        shipped.append({"file": f"examples/clip{k}.wav", "split": split, "en": r["en"], "de": r["de"], "voice": r["voice"]})
    return shipped


__all__ = ["fit_durations", "main", "save_pipeline", "utterance_durations"]
