"""Recipe ``image-ctf``: the shipped ``leapgen/image-emoji-ctf`` (CTF coarse-to-fine on the shipped
emoji VQ tokens).

1. **clusters** -- k-means (``num_clusters``, default 128) over the shipped VQ's 1024 code vectors
   (:func:`leapgen.models.ctf.kmeans_codebook`); every training code maps to its cluster label.
2. **coarse GPT** -- the raster target's architecture over the cluster labels, initialised from the
   shipped raster GPT (trunk and condition encoders copied; a label's input embedding and output row
   are the means over its member codes), then trained on the coarse sequences (raster recipe's
   conditioning mix and dropout).
3. **coarse draft** -- the shipped raster draft converted the same way (no training), so
   ``speculative`` runs on the coarse stage.
4. **fine model** -- :class:`leapgen.models.ctf.CTFFineGPT` (``fine_layers`` blocks of the raster
   architecture, bidirectional, initialised from the raster GPT's first blocks; output rows start as
   the raster token embeddings), trained with cross-entropy over the fine codes restricted to each
   cell's cluster, given the true coarse grid.
5. **save** -- :class:`~leapgen.pipelines.image_ctf.ImageCTFPipeline` (fp16) and ``train_metrics.json``.

Defaults fit about 60 min on 2 CPU cores; the shipped asset used ``--coarse-minutes 13 --fine-minutes 6
--threads 1`` (``make train-image-families``; docs/image_families.md).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.models.ctf import CTFFineConfig, CTFFineGPT, kmeans_codebook
from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
from leapgen.train.common import num_params, pick_device
from leapgen.train.image_families import (
    condition_table,
    draw_prefixes,
    emoji_latents,
    load_base,
    nll_summary,
    write_metrics,
)
from leapgen.train.loop import train_planned

logger = logging.getLogger(__name__)


def coarse_from_fine(src: LlamaGenGPT, labels: torch.Tensor, k: int, cls: type = LlamaGenGPT, **extra: Any) -> LlamaGenGPT:
    """A GPT over ``k`` cluster labels initialised from ``src`` (a GPT over the fine codes): trunk and
    condition copied; label embeddings / output rows = means over member codes."""
    cfg = dataclasses.asdict(src.config)
    cfg.update(vocab_size=k, **extra)
    config_cls = CTFFineConfig if cls is CTFFineGPT else GPTConfig
    model = cls(config_cls(**cfg))
    skip = ("tok_embeddings.", "output.")
    state = {n: v for n, v in src.state_dict().items() if not n.startswith(skip)
             and (not n.startswith("layers.") or int(n.split(".")[1]) < model.config.n_layer)}
    model.load_state_dict(state, strict=False)
    with torch.no_grad():
        counts = torch.bincount(labels, minlength=k).clamp_min(1).float()[:, None]
        emb = torch.zeros(k, src.config.dim).index_add_(0, labels, src.tok_embeddings.weight.float()) / counts
        model.tok_embeddings.weight.copy_(emb)
        if cls is CTFFineGPT:
            model.output.weight.copy_(src.tok_embeddings.weight)
        else:
            model.output.weight.copy_(torch.zeros(k, src.config.dim).index_add_(0, labels, src.output.weight.float()) / counts)
    return model


@torch.inference_mode()
def heldout(coarse: LlamaGenGPT, fine: CTFFineGPT, codes: torch.Tensor, labels: torch.Tensor, prefixes: torch.Tensor) -> dict[str, Any]:
    flat = codes.flatten(1)
    cl = labels[flat]
    c_nll = f_nll = 0.0
    correct = 0
    for i in range(0, flat.shape[0], 32):
        pre, x, c = prefixes[i : i + 32], flat[i : i + 32], cl[i : i + 32]
        lc = coarse.training_logits(pre, c)
        c_nll += float(F.cross_entropy(lc.reshape(-1, lc.shape[-1]), c.reshape(-1), reduction="sum"))
        lf = fine.training_fine_logits(pre, c)
        f_nll += float(F.cross_entropy(lf.reshape(-1, lf.shape[-1]), x.reshape(-1), reduction="sum"))
        correct += int((lf.argmax(-1) == x).sum())
    return {"coarse": nll_summary(c_nll, flat.numel(), flat.shape[0]), "fine_given_coarse": nll_summary(f_nll, flat.numel(), flat.shape[0]),
            "fine_argmax_accuracy": correct / flat.numel()}


def main(out_dir: str | Path = "assets/image-emoji-ctf", seed: int = 0, *, num_clusters: int = 128, fine_layers: int = 4,
         coarse_steps: int = 1000, fine_steps: int = 400, batch_size: int = 32, lr: float = 6e-4, weight_decay: float = 0.05,
         coarse_minutes: float = 40.0, fine_minutes: float = 15.0, base: str = "leapgen/image-emoji",
         device: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Train and save the CTF pipeline to ``out_dir``; returns the metrics."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    t_all = time.perf_counter()
    pipe = load_base(base)
    data = emoji_latents(pipe, seed)
    ds = data["dataset"]
    metrics: dict[str, Any] = {"seed": seed, "device": str(dev), "threads": torch.get_num_threads(), "base": base}

    # 1. clusters of the VQ codebook
    labels, cent = kmeans_codebook(pipe.vq.codebook().float().cpu(), num_clusters, seed=seed + 50)
    sizes = torch.bincount(labels, minlength=num_clusters)
    metrics["clusters"] = {"k": num_clusters, "min_size": int(sizes.min()), "max_size": int(sizes.max()),
                           "within_cluster_mse": float((pipe.vq.codebook().float().cpu() - cent[labels]).pow(2).sum(1).mean())}
    codes, rows = data["codes"].flatten(1), data["rows"]
    coarse_codes = labels[codes]

    # 2-4. models initialised from the shipped raster GPTs
    torch.manual_seed(seed + 51)
    coarse = coarse_from_fine(pipe.model, labels, num_clusters)
    draft = coarse_from_fine(pipe.draft, labels, num_clusters) if pipe.draft is not None else None
    fine = coarse_from_fine(pipe.model, labels, num_clusters, cls=CTFFineGPT, n_layer=fine_layers,
                            fine_vocab_size=pipe.vq.codebook_size)
    fine.set_clusters(labels)
    table = condition_table(coarse, pipe, ds)
    drop = coarse.config.class_dropout_prob

    def coarse_loss(step: int, gen: torch.Generator) -> torch.Tensor:
        i = torch.randint(codes.shape[0], (batch_size,), generator=gen)
        pre = draw_prefixes(table, rows[i], gen, drop).to(dev)
        x = coarse_codes[i].to(dev)
        logits = coarse.training_logits(pre, x).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1))

    def fine_loss(step: int, gen: torch.Generator) -> torch.Tensor:
        i = torch.randint(codes.shape[0], (batch_size,), generator=gen)
        pre = draw_prefixes(table, rows[i], gen, drop).to(dev)
        logits = fine.training_fine_logits(pre, coarse_codes[i].to(dev)).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes[i].to(dev).reshape(-1))

    metrics["coarse_train"] = train_planned(coarse, coarse_loss, steps=coarse_steps, lr=lr, weight_decay=weight_decay,
                                         seed=seed + 52, device=dev, max_minutes=coarse_minutes, desc="ctf-coarse")
    metrics["fine_train"] = train_planned(fine, fine_loss, steps=fine_steps, lr=lr, weight_decay=weight_decay,
                                       seed=seed + 53, device=dev, max_minutes=fine_minutes, desc="ctf-fine")
    coarse.cpu().eval()
    fine.cpu().eval()

    # 5. save and evaluate the saved weights
    from leapgen.pipelines.image_ctf import ImageCTFPipeline

    out = Path(out_dir)
    cp = ImageCTFPipeline(vq=pipe.vq, model=coarse, fine=fine, draft=draft, text_tokenizer=pipe.text_tokenizer,
                          class_names=pipe.class_names)
    cp.save_pretrained(out, dtype=torch.float16)
    loaded = ImageCTFPipeline.from_pretrained(out)
    metrics["heldout_class_prefix"] = heldout(loaded.model, loaded.fine, data["held_codes"], labels,
                                              table["class"][data["held_rows"]])
    metrics["params"] = {"coarse": num_params(loaded.model), "fine": num_params(loaded.fine),
                         "draft": num_params(loaded.draft) if loaded.draft is not None else 0,
                         "raster_target": num_params(pipe.model)}
    metrics["minutes_total"] = round((time.perf_counter() - t_all) / 60, 2)
    write_metrics(out, metrics)
    logger.info("image-ctf done: %s", metrics["heldout_class_prefix"])
    return metrics


__all__ = ["main", "coarse_from_fine", "heldout"]
