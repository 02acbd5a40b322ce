"""Recipe ``leapgen train ocr-en``: the shipped scene-text recogniser (SVTR encoder + CPPD + AR decoder).

Steps: (1) the rendered word-image corpus (``leapgen data ocr-en``; built here when missing with
``n_train`` images); (2) joint training of :class:`~leapgen.models.ocr.OCRModel`: CPPD loss
(``side_weight * (character counting CE + character ordering BCE) + edge CE``) plus the AR
decoder's teacher-forced CE plus ``ctc_weight`` times the auxiliary CTC loss of the encoder,
label smoothing 0.1, AdamW, warm-up then cosine over the time budget, light on-the-fly
augmentation (random horizontal shift and contrast); (3) a quick word accuracy of ``cppd`` and
greedy AR on both held-out splits; (4) the pipeline folder (``model/`` + ``model_index.json``),
<= 30 MB.

Defaults describe the full run (120,000 images; ``minutes`` = 90 is the whole recipe, corpus build and
evaluation included, on 2 CPU cores); the shipped asset's
settings are in its ``train_metrics.json``.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import ocr as corpus_mod
from ..models.ocr import EOS, OCRConfig, OCRModel, cut_at_eos
from .common import adamw, environment, pick_device, write_metrics
from .loop import EVAL_RESERVE_MIN, train_budgeted, training_minutes

logger = logging.getLogger(__name__)


def to_pixels(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, 32, 100]`` -> float in [-1, 1]."""
    x = torch.as_tensor(images).float()
    return x / 127.5 - 1.0


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random horizontal shift (+-4 px, edge padded) and contrast (x0.6..1.2) per image."""
    b = x.shape[0]
    shifts = torch.randint(-4, 5, (b,), generator=gen).tolist()
    out = torch.empty_like(x)
    for i, s in enumerate(shifts):
        out[i] = torch.roll(x[i], s, -1)
        if s > 0:
            out[i, :, :s] = x[i, :, :1]
        elif s < 0:
            out[i, :, s:] = x[i, :, -1:]
    scale = 0.6 + 0.6 * torch.rand(b, 1, 1, generator=gen)
    return (out * scale).clamp(-1, 1)


@torch.no_grad()
def quick_accuracy(model: OCRModel, images: np.ndarray, labels: list[str], device: torch.device,
                   batch_size: int = 64, ar: bool = True) -> dict[str, float]:
    """Word accuracy of one-pass CPPD and of greedy AR (a training-time check; the bench is ``leapgen bench ocr``)."""
    model.eval()
    ok_c = ok_a = 0
    for s in range(0, len(labels), batch_size):
        x = to_pixels(images[s : s + batch_size]).to(device)
        mem = model.encode(x)
        ids = model.cppd_logits(mem).argmax(-1).tolist()
        for k, row in enumerate(ids):
            ok_c += model.decode_ids(cut_at_eos(row)) == labels[s + k]
        if ar:
            b = x.shape[0]
            cross = model.cross_kv(mem)
            kv = model.empty_self_kv(b, device, mem.dtype)
            tok = torch.full((b, 1), EOS, device=device)
            outs = [[] for _ in range(b)]
            done = torch.zeros(b, dtype=torch.bool, device=device)
            for p in range(model.config.max_len + 1):
                nxt = model.ar_logits(tok, torch.full((b, 1), p, device=device), cross, kv)[:, -1].argmax(-1)
                for r in range(b):
                    if not done[r] and int(nxt[r]) != EOS:
                        outs[r].append(int(nxt[r]))
                done |= nxt == EOS
                if bool(done.all()):
                    break
                tok = nxt[:, None]
            ok_a += sum(model.decode_ids(o) == labels[s + k] for k, o in enumerate(outs))
    model.train()
    n = max(1, len(labels))
    return {"cppd": ok_c / n, "ar": ok_a / n if ar else float("nan")}


def save_pipeline(out: Path, model: OCRModel) -> None:
    """The folder :class:`~leapgen.pipelines.ocr.OCRPipeline` loads (fp16 weights)."""
    from ..pipelines.base import model_index, write_model_index

    if (out / "model").exists():
        shutil.rmtree(out / "model")
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out / "model", dtype=torch.float16)
    write_model_index(out, model_index("OCRPipeline", {"model": model}))


def main(out_dir: str = "assets/ocr-en", seed: int = 0, corpus: str | None = None, n_train: int = 120_000,
         minutes: float = 90.0, max_steps: int | None = None, batch_size: int = 32, lr: float = 1e-3,
         warmup: int = 200, weight_decay: float = 0.05, dim: int = 48, width2: int = 96, local_blocks: int = 1,
         global_blocks: int = 1, stage2_blocks: int = 1, cppd_layers: int = 1, ar_layers: int = 2,
         max_len: int = 16, dropout: float = 0.1, side_weight: float = 1.0, ctc_weight: float = 1.0,
         threads: int = 1, bf16: bool = False,
         eval_images: int = 300, log_every: int = 50, device: str | None = None,
         checkpoint_every_min: float = 5.0, init_from: str | None = None) -> dict[str, Any]:
    """Train and save the OCR pipeline (see the module docstring); returns the metrics.
    ``init_from``: a pipeline folder whose model weights (same config) start the run (continuing a run)."""
    torch.manual_seed(seed)
    torch.set_num_threads(int(threads))
    rng = random.Random(seed)
    dev = pick_device(device)
    t_start = time.perf_counter()
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    if not (root / "images_train.npy").exists():
        logger.info("building the ocr-en corpus in %s (%d images)", root, n_train)
        corpus_mod.build(out_dir=root, seed=seed, n_train=n_train)
    images, words = corpus_mod.load_split(root, "train")
    cfg = OCRConfig(dim=dim, width2=width2, local_blocks=local_blocks, global_blocks=global_blocks,
                    stage2_blocks=stage2_blocks, cppd_layers=cppd_layers, ar_layers=ar_layers, max_len=max_len,
                    dropout=dropout, side_weight=side_weight, ctc_weight=ctc_weight)
    model = OCRModel(cfg).to(dev)
    if init_from:
        model.load_state_dict(OCRModel.from_pretrained(Path(init_from) / "model").state_dict())
        logger.info("continuing from %s", init_from)
    labels = [model.encode_text(w) for w in words]
    logger.info("OCRModel %s on %s, %d training images", model.num_parameters(), dev, len(labels))
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(seed)
    out = Path(out_dir)

    def epoch_batches():
        order = list(range(len(labels)))
        rng.shuffle(order)
        return (order[s : s + batch_size] for s in range(0, len(order) - batch_size + 1, batch_size))

    def losses(idx, progress):
        return model.losses(augment(to_pixels(images[idx]), gen).to(dev), [labels[i] for i in idx])

    train_minutes = training_minutes(minutes, t_start, EVAL_RESERVE_MIN)
    run = train_budgeted(model, opt, epoch_batches, losses, minutes=train_minutes, max_steps=max_steps, lr=lr,
                         warmup=warmup, device=dev, bf16=bf16, clip=5.0, log_every=log_every,
                         checkpoint_every_min=checkpoint_every_min, save=lambda: save_pipeline(out, model))
    model.eval()
    quick: dict[str, Any] = {}
    for split in ("test_words", "test_fonts"):
        if (root / f"images_{split}.npy").exists():
            ims, labs = corpus_mod.load_split(root, split)
            quick[split] = quick_accuracy(model, ims[:eval_images], labs[:eval_images], dev)
            logger.info("%s word accuracy %s", split, quick[split])
    save_pipeline(out, model)
    metrics = {
        "recipe": "ocr-en", "seed": seed, "corpus": str(root), "train_images": len(labels),
        "settings": {"init_from": init_from, "minutes": minutes, "max_steps": max_steps, "batch_size": batch_size, "lr": lr, "warmup": warmup,
                     "weight_decay": weight_decay, "bf16": bf16, "threads": threads},
        "config": cfg.to_dict(), "parameters": model.num_parameters(), "steps": run.steps, "epochs": run.epochs,
        "train_minutes": round(run.minutes, 2), "total_minutes": round((time.perf_counter() - t_start) / 60, 2),
        "quick_eval": quick, "history": run.history[-40:],
        "environment": environment(dev),
    }
    write_metrics(out, metrics, max_size_mb=30)
    return metrics


__all__ = ["augment", "main", "quick_accuracy", "save_pipeline", "to_pixels"]
