"""Recipe ``leapgen train peptide``: the shipped de novo peptide sequencer (spectrum encoder + NAR CTC
decoder + AR decoder + bidirectional-augmented AR decoder).

Steps: (1) the simulated MS/MS corpus (``leapgen data peptide``; built here when missing); (2)
joint training of :class:`~leapgen.models.peptide.PeptideModel` with **importance annealing**
(CrossNovo): the CTC weight falls linearly from 1.0 to ``ctc_final`` and the bidirectional AR
weight rises from ``bi_start`` to 1.0 over the budget, the plain AR weight stays 1.0; gradient
blocking is in the model (the bidirectional decoder reads the NAR hidden states detached); AdamW,
warm-up then cosine; (3) a quick greedy check (peptide recall of the three decoders on 200 held-out
spectra); (4) the pipeline folder (``model/`` + ``model_index.json``), <= 30 MB.

Defaults describe the full run (100,000 spectra; ``minutes`` = 90 is the whole recipe, corpus build and
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

from ..data import peptide as corpus_mod
from ..models.peptide import PeptideConfig, PeptideModel
from .common import adamw, environment, pick_device, write_metrics
from .loop import EVAL_RESERVE_MIN, train_budgeted, training_minutes

logger = logging.getLogger(__name__)


def spectra_batch(data: dict[str, np.ndarray], idx: list[int], device: torch.device) -> dict[str, torch.Tensor]:
    """Tensors of spectra ``idx`` (peaks cut to the batch's longest)."""
    n = data["n_peaks"][idx]
    p = max(1, int(n.max()))
    mask = torch.arange(p)[None] < torch.as_tensor(n)[:, None]
    prec = (data["precursor_mz"][idx] - corpus_mod.PROTON) * data["charge"][idx]
    return {"mz": torch.as_tensor(data["mz"][idx, :p]).to(device), "intensity": torch.as_tensor(data["intensity"][idx, :p]).to(device),
            "mask": mask.to(device), "precursor_mass": torch.as_tensor(prec).to(device),
            "charge": torch.as_tensor(data["charge"][idx]).long().to(device)}


def save_pipeline(out: Path, model: PeptideModel) -> None:
    from ..pipelines.base import model_index, write_model_index

    if (out / "model").exists():
        shutil.rmtree(out / "model")
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out / "model", dtype=torch.float16)
    write_model_index(out, model_index("PeptidePipeline", {"model": model}))


def loss_weights(progress: float, ctc_final: float = 0.3, bi_start: float = 0.3) -> dict[str, float]:
    """The annealed loss weights at ``progress`` in [0, 1] of the run: the NAR (CTC) weight decays
    linearly from 1 to ``ctc_final``, the bidirectional decoder's grows from ``bi_start`` to 1, the
    AR one stays 1 (the bidirectional-augmented training of the module docstring)."""
    p = min(1.0, max(0.0, float(progress)))
    return {"ctc": 1.0 - (1.0 - ctc_final) * p, "ar": 1.0, "bi": bi_start + (1.0 - bi_start) * p}


def main(out_dir: str = "assets/peptide", seed: int = 0, corpus: str | None = None, n_train: int = 100_000,
         minutes: float = 90.0, max_steps: int | None = None, batch_size: int = 32, lr: float = 1e-3, warmup: int = 200,
         weight_decay: float = 0.01, d_model: int = 128, heads: int = 4, ff: int = 256, enc_layers: int = 2,
         nar_layers: int = 2, ar_layers: int = 2, ctc_slots: int = 24, dropout: float = 0.1, ctc_final: float = 0.3,
         bi_start: float = 0.3, mass_inputs: bool = True, ion_inputs: bool = True, threads: int = 1,
         eval_spectra: int = 200, log_every: int = 50,
         device: str | None = None, checkpoint_every_min: float = 5.0) -> dict[str, Any]:
    """Train and save the peptide pipeline (see the module docstring); returns the metrics."""
    torch.manual_seed(seed)
    torch.set_num_threads(int(threads))
    rng = random.Random(seed)
    dev = pick_device(device)
    t_start = time.perf_counter()
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    if not (root / "train.npz").exists():
        corpus_mod.build(out_dir=root, seed=seed, n_train=n_train)
    data, seqs = corpus_mod.load_split(root, "train")
    cfg = PeptideConfig(d_model=d_model, heads=heads, ff=ff, enc_layers=enc_layers, nar_layers=nar_layers,
                        ar_layers=ar_layers, ctc_slots=ctc_slots, dropout=dropout, mass_inputs=mass_inputs,
                        ion_inputs=ion_inputs)
    model = PeptideModel(cfg).to(dev)
    targets = [model.encode_peptide(s) for s in seqs]
    logger.info("PeptideModel %s on %s, %d training spectra", model.num_parameters(), dev, len(seqs))
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    out = Path(out_dir)

    def weights_at(progress: float) -> dict[str, float]:
        return loss_weights(progress, ctc_final, bi_start)

    def epoch_batches():
        order = list(range(len(seqs)))
        rng.shuffle(order)
        return (order[s : s + batch_size] for s in range(0, len(order) - batch_size + 1, batch_size))

    def losses(idx, progress):
        return model.losses(spectra_batch(data, idx, dev), [targets[i] for i in idx], weights=weights_at(progress))

    train_minutes = training_minutes(minutes, t_start, EVAL_RESERVE_MIN)
    run = train_budgeted(model, opt, epoch_batches, losses, minutes=train_minutes, max_steps=max_steps, lr=lr,
                         warmup=warmup, device=dev, clip=1.0, log_every=log_every,
                         checkpoint_every_min=checkpoint_every_min, save=lambda: save_pipeline(out, model),
                         log_extra=lambda progress: {f"w_{k}": round(v, 3) for k, v in weights_at(progress).items()})
    model.eval()
    save_pipeline(out, model)
    quick: dict[str, Any] = {}
    if (root / "test.npz").exists():
        from ..pipelines.peptide import PeptidePipeline

        tdata, tseqs = corpus_mod.load_split(root, "test")
        pipe = PeptidePipeline(model=model)
        spectra = [{"mz": tdata["mz"][i, : tdata["n_peaks"][i]], "intensity": tdata["intensity"][i, : tdata["n_peaks"][i]],
                    "precursor_mz": float(tdata["precursor_mz"][i]), "charge": int(tdata["charge"][i])}
                   for i in range(min(eval_spectra, len(tseqs)))]
        for name in ("ar", "ar_bidirectional", "ctc_pmc"):
            o = pipe(spectra, sampler=name)
            quick[name] = sum(a == b for a, b in zip(o.sequences, tseqs)) / max(1, len(spectra))
        logger.info("held-out peptide recall %s", quick)
    metrics = {
        "recipe": "peptide", "seed": seed, "corpus": str(root), "train_spectra": len(seqs),
        "settings": {"minutes": minutes, "max_steps": max_steps, "batch_size": batch_size, "lr": lr, "warmup": warmup,
                     "ctc_final": ctc_final, "bi_start": bi_start, "threads": threads},
        "config": cfg.to_dict(), "parameters": model.num_parameters(), "steps": run.steps, "epochs": run.epochs,
        "train_minutes": round(run.minutes, 2), "total_minutes": round((time.perf_counter() - t_start) / 60, 2), "quick_eval": {"split": "test", "peptide_recall": quick},
        "history": run.history[-40:], "environment": environment(dev),
    }
    write_metrics(out, metrics, max_size_mb=30)
    return metrics


__all__ = ["main", "save_pipeline", "spectra_batch"]
