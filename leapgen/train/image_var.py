"""Recipes ``image-var`` and ``image-nfig``: the shipped ``leapgen/image-emoji-var`` and
``leapgen/image-emoji-nfig`` (one recipe; ``band`` is the only difference).

1. **tokenizer** -- :class:`leapgen.tokenizers.multiscale_vq.MultiScaleVQ` with the shipped emoji
   VQ's encoder and decoder (copied, frozen) and a shared 1024-code residual codebook over the scales
   1,2,3,4,6,8,10,13,16 (``band="spatial"``: VAR's area/bicubic resampling; ``"frequency"``: NFIG's DCT
   bands). The codebook is fitted by residual k-means: Lloyd rounds in which every training latent is
   encoded scale by scale with the current codebook and each code moves to the mean of the residual
   vectors assigned to it (unused codes are re-seeded from the worst-fitted residuals).
2. **codes** -- every training image plus 3 augmented views (the raster recipe's) to 655 codes and the
   teacher inputs of scales 1..8.
3. **transformer** -- :class:`leapgen.models.var.ScaleGPT` with the raster target's architecture,
   its trunk, condition encoders and condition prefix copied from the shipped raster GPT
   (``init_from_base``; ``word_embed`` is the least-squares map of the raster VQ's code vectors to the
   raster token embeddings; the head starts at zero), then trained with cross-entropy over all 655
   tokens under the block-causal mask (condition mix and dropout as the raster recipe).
4. **save** -- :class:`~leapgen.pipelines.image_scale.ImageScalePipeline` (fp16) and
   ``train_metrics.json`` (reconstruction of the held-out images at the last level, round-trip error
   of the latents, held-out NLL per token / bits per image, losses, minutes).

Defaults fit about 60 min on 2 CPU cores; the shipped assets used ``--minutes 70 --batch-size 8 --threads 1``
(``make train-image-families``; docs/image_families.md).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.models.var import ScaleGPT, ScaleGPTConfig
from leapgen.tokenizers.multiscale_vq import MultiScaleVQ, MultiScaleVQConfig
from leapgen.train.common import check_options, num_params, pick_device
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

SCALES = (1, 2, 3, 4, 6, 8, 10, 13, 16)


def make_tokenizer(base_vq: Any, band: str, scales: tuple[int, ...] = SCALES) -> MultiScaleVQ:
    cfg = {k: v for k, v in dataclasses.asdict(base_vq.config).items()}
    tok = MultiScaleVQ(MultiScaleVQConfig(**cfg, scales=tuple(scales), band=band))
    tok.load_state_dict(base_vq.state_dict())
    return tok.eval()


@torch.no_grad()
def fit_codebook(tok: MultiScaleVQ, latents: torch.Tensor, rounds: int, seed: int, batch: int = 512) -> list[float]:
    """Residual k-means of the shared codebook on ``latents [M, d, N, N]``; returns the mean squared
    error of the final residual sum in every round, and keeps the codebook of the best round."""
    gen = torch.Generator().manual_seed(seed)
    emb = tok.quantize.embedding.weight
    k, d = emb.shape
    errors = []
    for r in range(rounds):
        sums, counts = torch.zeros(k, d), torch.zeros(k)
        worst: list[torch.Tensor] = []
        err = 0.0
        for i in range(0, latents.shape[0], batch):
            f = latents[i : i + batch]
            codes, f_hat, targets = tok.encode_scales(f)
            for c, t in zip(codes, targets):
                v = t.permute(0, 2, 3, 1).reshape(-1, d)
                idx = c.reshape(-1)
                sums.index_add_(0, idx, v)
                counts.index_add_(0, idx, torch.ones_like(idx, dtype=torch.float32))
                res = (v - emb[idx]).pow(2).sum(1)
                worst.append(v[res.topk(min(64, res.numel())).indices])
            err += float((f_hat - f).pow(2).sum())
        errors.append(err / latents.numel())
        if errors[-1] <= min(errors):
            best = emb.detach().clone()  # the codebook this round encoded with
        used = counts > 0
        emb[used] = sums[used] / counts[used, None]
        dead = (~used).nonzero().flatten()
        if dead.numel() and r < rounds // 2:  # re-seed early only (late re-seeding can undo the fit)
            pool = torch.cat(worst)
            emb[dead] = pool[torch.randint(pool.shape[0], (dead.numel(),), generator=gen)]
        logger.info("codebook round %d: residual MSE %.5f, %d codes unused", r + 1, errors[-1], dead.numel())
    emb.copy_(best)  # the best codebook seen (Lloyd on sequential residuals is not monotone)
    return errors


@torch.no_grad()
def multiscale_codes(tok: MultiScaleVQ, latents: torch.Tensor, batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat codes ``[M, L]`` and teacher inputs ``[M, L - 1, d]`` (float16 to save memory)."""
    codes, inputs = [], []
    for i in range(0, latents.shape[0], batch):
        c, _, _ = tok.encode_scales(latents[i : i + batch])
        codes.append(torch.cat([x.flatten(1) for x in c], 1))
        inputs.append(tok.teacher_inputs(c).half())
    return torch.cat(codes), torch.cat(inputs)


def init_from_raster(gpt: ScaleGPT, raster: torch.nn.Module, base_vq: Any) -> None:
    """Trunk, condition encoders and final norm from the raster GPT; ``word_embed`` fitted by least
    squares from the raster VQ code vectors to the raster token embeddings; the head stays at zero."""
    state = {k: v for k, v in raster.state_dict().items() if not k.startswith("output.")}
    missing, unexpected = gpt.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    with torch.no_grad():
        cb = base_vq.codebook().float()
        x = torch.cat([cb, torch.ones(cb.shape[0], 1)], 1)
        sol = torch.linalg.lstsq(x, raster.tok_embeddings.weight.float()).solution
        gpt.word_embed.weight.copy_(sol[:-1].t())
        gpt.word_embed.bias.copy_(sol[-1])


@torch.inference_mode()
def heldout_nll(gpt: ScaleGPT, codes: torch.Tensor, inputs: torch.Tensor, prefixes: torch.Tensor, batch_size: int = 16) -> dict[str, float]:
    total = 0.0
    for i in range(0, codes.shape[0], batch_size):
        logits = gpt.teacher_logits(prefixes[i : i + batch_size], inputs[i : i + batch_size].float())
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes[i : i + batch_size].reshape(-1), reduction="sum"))
    return nll_summary(total, codes.numel(), codes.shape[0])


@torch.inference_mode()
def reconstruction(tok: MultiScaleVQ, images_uint8: torch.Tensor) -> dict[str, float]:
    x = images_uint8.permute(0, 3, 1, 2).float() / 255 * 2 - 1
    f = tok.latents(x)
    _, f_hat, _ = tok.encode_scales(f)
    rec = tok.decode_latents(f_hat).clamp(-1, 1)
    mse = float(((rec - x) / 2).pow(2).mean())
    return {"mse": mse, "psnr": float(10 * torch.log10(torch.tensor(1.0 / max(mse, 1e-12)))),
            "latent_rel_error": float((f_hat - f).norm() / f.norm())}


def main(out_dir: str | Path | None = None, seed: int = 0, *, band: str = "spatial", steps: int = 1200, batch_size: int = 16,
         lr: float = 6e-4, weight_decay: float = 0.05, minutes: float = 60.0, codebook_rounds: int = 8,
         codebook_images: int = 3000, init_from_base: bool = True, base: str = "leapgen/image-emoji",
         device: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Train and save the VAR (``band="spatial"``) or NFIG (``band="frequency"``) pipeline."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    family = "nfig" if band == "frequency" else "var"
    out = Path(out_dir or f"assets/image-emoji-{family}")
    t_all = time.perf_counter()
    pipe = load_base(base)
    data = emoji_latents(pipe, seed)
    ds = data["dataset"]
    metrics: dict[str, Any] = {"seed": seed, "device": str(dev), "threads": torch.get_num_threads(), "base": base, "band": band}

    # 1. tokenizer: shared residual codebook
    t = time.perf_counter()
    tok = make_tokenizer(pipe.vq, band)
    lat = data["latents"]
    pick = torch.randperm(lat.shape[0], generator=torch.Generator().manual_seed(seed + 40))[:codebook_images]
    metrics["codebook"] = {"rounds": codebook_rounds, "images": int(pick.numel()),
                           "residual_mse": fit_codebook(tok, lat[pick], codebook_rounds, seed + 41)}
    metrics["codebook"]["minutes"] = (time.perf_counter() - t) / 60

    # 2. codes and teacher inputs
    codes, inputs = multiscale_codes(tok, lat)
    held_codes, held_inputs = multiscale_codes(tok, data["held_latents"])
    rows = data["rows"]

    # 3. transformer
    arch = dataclasses.asdict(pipe.model.config)
    torch.manual_seed(seed + 42)
    gpt = ScaleGPT(ScaleGPTConfig(**arch, scales=SCALES, latent_dim=tok.config.codebook_embed_dim))
    if init_from_base:
        init_from_raster(gpt, pipe.model, pipe.vq)
    table = condition_table(gpt, pipe, ds)
    drop = gpt.config.class_dropout_prob

    def loss_fn(step: int, gen: torch.Generator) -> torch.Tensor:
        i = torch.randint(codes.shape[0], (batch_size,), generator=gen)
        pre = draw_prefixes(table, rows[i], gen, drop).to(dev)
        logits = gpt.teacher_logits(pre, inputs[i].float().to(dev)).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes[i].to(dev).reshape(-1))

    metrics["train"] = train_planned(gpt, loss_fn, steps=steps, lr=lr, weight_decay=weight_decay, seed=seed + 43, device=dev,
                                  max_minutes=minutes, desc=family)
    gpt.cpu().eval()

    # 4. save and evaluate the saved weights
    from leapgen.pipelines.image_scale import ImageScalePipeline

    sp = ImageScalePipeline(vq=tok, model=gpt, text_tokenizer=pipe.text_tokenizer, class_names=pipe.class_names)
    sp.save_pretrained(out, dtype=torch.float16)
    loaded = ImageScalePipeline.from_pretrained(out)
    metrics["reconstruction_heldout"] = reconstruction(loaded.vq, ds.images[data["held_idx"]])
    metrics["heldout_nll_class_prefix"] = heldout_nll(loaded.model, held_codes, held_inputs, table["class"][data["held_rows"]])
    metrics["params"] = {"model": num_params(loaded.model), "raster_target": num_params(pipe.model)}
    metrics["tokens_per_image"] = int(codes.shape[1])
    metrics["minutes_total"] = round((time.perf_counter() - t_all) / 60, 2)
    write_metrics(out, metrics)
    logger.info("image-%s done: %s", family, metrics["heldout_nll_class_prefix"])
    return metrics


def main_nfig(out_dir: str | Path | None = None, seed: int = 0, **options: Any) -> dict[str, Any]:
    """``image-nfig``: :func:`main` with ``band="frequency"``."""
    check_options("image-nfig", main, options, exclude=("band",))
    return main(out_dir, seed, band="frequency", **options)


__all__ = ["main", "main_nfig", "fit_codebook", "make_tokenizer", "multiscale_codes", "reconstruction", "SCALES"]
