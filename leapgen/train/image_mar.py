"""Recipe for the shipped ``image-emoji-mar`` assets: a small KL-VAE tokenizer and two MAR models
(target + smaller draft) with MLP diffusion heads, on the Noto Color Emoji images, offline on a CPU.

Stages:

1. **data** -- :func:`leapgen.data.emoji.build_emoji_dataset` (64x64, 8 classes, Unicode names);
   the word vocabulary is the shipped ``image-emoji`` one (same prompts), else built from the names.
2. **VAE** -- :class:`leapgen.tokenizers.kl_image.KLImageTokenizer` (``emoji`` preset: 64x64 ->
   8x8 tokens of 8 channels). Loss ``MSE + 0.5 L1 + kl_weight * KL / pixels`` on decodings of
   *sampled* latents; Adam, cosine decay; random 32x32 crops of augmented images (the network is
   convolutional) and full images for the last ``vae_full_frac`` of the steps.
3. **tokenise** -- posterior means of every image plus ``augment_views`` augmented copies (default 1),
   normalised per channel (statistics of the clean images, stored in the tokenizer config).
4. **target MAR** -- :class:`leapgen.models.mar.MARNet` (dim 160, 4 layers, head 192x3):
   per row a cosine-distributed mask ratio, condition = class only (45 %), name only (45 %) or
   both (10 %), dropped entirely with p = 0.1 (the null condition); loss = the head's eps MSE on
   masked positions (at most ``max_head_tokens`` per step, 4 timesteps each). AdamW, warmup + cosine,
   bf16 autocast on CPUs with native bf16 (float32 elsewhere).
5. **draft MAR** -- the same data and conditions with dim 96, 2 layers, head 128x2.
6. **save** -- :class:`leapgen.pipelines.image_mar.ImageMARPipeline` (``vae/``, ``model/``,
   ``draft/``, ``text_tokenizer/``) with fp16 weights and ``train_metrics.json`` (losses, VAE
   reconstruction MSE/PSNR beside the shipped VQ's, parameter counts, minutes per stage).

``leapgen train image-mar --out assets/image-emoji-mar``: the defaults budget 15 + 45 + 20 minutes
(VAE, target, draft; the stages shrink their step counts to the budget after 10 steps).
The shipped run used the defaults with ``--threads 1`` (77.7 min in float32 on one core of a 2-core CPU whose
other core trained the ASR; see docs/image_continuous.md and ``train_metrics.json``).
Smoke test: ``--vae-steps 3 --target-steps 3 --draft-steps 3 --augment-views 0``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.emoji import EmojiDataset, build_emoji_dataset
from leapgen.models.mar import TEXT_NULL, MARConfig, MARNet
from leapgen.tokenizers.kl_image import KL_PRESETS, KLConfig, KLImageTokenizer, kl_reconstruction_metrics
from leapgen.tokenizers.word_vocab import WordVocab
from leapgen.train.common import (
    autocast,
    check_options,
    environment,
    lr_at,
    num_params,
    pick_device,
    write_metrics,
)
from leapgen.train.loop import fit_steps, progress_bar, train_planned

logger = logging.getLogger(__name__)

TARGET_ARCH = dict(dim=160, n_layer=4, n_head=4, head_width=192, head_depth=3)
DRAFT_ARCH = dict(dim=96, n_layer=2, n_head=4, head_width=128, head_depth=2)
MODE_PROBS = (0.45, 0.45, 0.10)  # class only, text only, both


def load_vocab(dataset: EmojiDataset) -> WordVocab:
    """The shipped image-emoji word vocabulary when present (same prompt words), else built from the names."""
    folder = Path(__file__).resolve().parents[2] / "assets" / "image-emoji" / "text_tokenizer"
    if (folder / "vocab.json").is_file():
        return WordVocab.from_pretrained(folder)
    return WordVocab.build(list(dataset.names))


def work_dir(out: Path) -> Path:
    """Where stage outputs of the recipe go (outside the asset folder): the leapgen cache."""
    root = Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen"))
    return root / "train" / (Path(out).resolve().name + "_work")


# ------------------------------------------------------------------------------------------ VAE
def train_vae(dataset: EmojiDataset, *, steps: int, batch_size: int, lr: float, crop: int, full_frac: float,
              kl_weight: float, seed: int, device: torch.device, max_minutes: float,
              preset: str = "emoji") -> tuple[KLImageTokenizer, dict[str, Any]]:
    torch.manual_seed(seed)
    tok = KLImageTokenizer(KLConfig(**KL_PRESETS[preset], image_size=dataset.size)).to(device).train()
    opt = torch.optim.Adam(tok.parameters(), lr=lr, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(seed + 1)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = progress_bar(steps, "vae")
    step = 0
    ds = tok.config.downsample
    while step < steps:
        steps = fit_steps(step, steps, t0, max_minutes, "vae", (1 - full_frac) + full_frac * (dataset.size / crop) ** 2)
        full_from = int(steps * (1 - full_frac))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, max(1, steps // 20), min_ratio=0.05)
        idx = torch.randint(len(dataset), (batch_size,), generator=gen)
        x = dataset.augment(gen, idx)
        if step < full_from and crop < x.shape[-1]:
            i, j = (torch.randint(0, x.shape[-1] - crop + 1, (2,), generator=gen) // ds * ds).tolist()
            x = x[..., i : i + crop, j : j + crop]
        x = (x * 2 - 1).to(device)
        with autocast(device):
            dist = tok.vae.encode(x).latent_dist
            eps = torch.randn(dist.mean.shape, generator=gen).to(device)
            rec = tok.vae.decode(dist.mean + dist.std * eps).sample.float()
        kl = dist.kl().float().sum() / x.numel()
        loss = F.mse_loss(rec, x) + 0.5 * F.l1_loss(rec, x) + kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tok.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.4f}")
        if (time.perf_counter() - t0) / 60 > 1.25 * max_minutes:
            logger.warning("vae: stopping at step %d of %d (time budget %.1f min)", step, steps, max_minutes)
            break
    bar.close()
    tok.eval()
    return tok, {"steps": step, "first_loss": losses[0] if losses else None,
                 "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])), "minutes": (time.perf_counter() - t0) / 60}


@torch.no_grad()
def tokenize(tok: KLImageTokenizer, dataset: EmojiDataset, views: int, seed: int, device: torch.device,
             batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised tokens ``[M, h*w, D]`` of every image plus ``views`` augmented copies, and each row's
    dataset index. Sets the tokenizer's per-channel statistics from the clean images first."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.arange(len(dataset))

    def means(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([tok.posterior((x[i : i + batch_size] * 2 - 1).to(device))[0].float().cpu()
                          for i in range(0, len(x), batch_size)])

    clean = means(dataset.as_float(idx))
    tok.set_statistics(clean.mean((0, 2, 3)), clean.std((0, 2, 3)).clamp_min(1e-4))
    rows, toks = [idx], [tok.latents_to_tokens(clean.to(device)).cpu()]
    for _ in range(views):
        rows.append(idx)
        toks.append(tok.latents_to_tokens(means(dataset.augment(gen, idx)).to(device)).cpu())
    return torch.cat(toks), torch.cat(rows)


# ------------------------------------------------------------------------------------------ MAR
def make_mar(arch: dict[str, Any], vocab: WordVocab, dataset: EmojiDataset, tok: KLImageTokenizer, seed: int) -> MARNet:
    torch.manual_seed(seed)
    return MARNet(MARConfig(token_dim=tok.token_dim, grid_size=tok.grid[0], num_classes=len(dataset.class_names),
                            class_names=tuple(dataset.class_names), text_vocab_size=len(vocab), text_len=vocab.max_len,
                            **arch))


def condition_table(net: MARNet, dataset: EmojiDataset, vocab: WordVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image: class labels and word ids (``text_len``, padded); the recipe mixes them per row."""
    n = net.config.text_len
    words = [(vocab.encode(name)[:n] + [0] * n)[:n] for name in dataset.names]
    return dataset.labels.clone(), torch.tensor(words, dtype=torch.long)


def sample_conditions(net: MARNet, labels: torch.Tensor, words: torch.Tensor, gen: torch.Generator,
                      drop_p: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Class only / name only / both per row (MODE_PROBS), then the whole condition dropped with ``drop_p``."""
    b = labels.shape[0]
    null_c = torch.full_like(labels, net.config.num_classes)
    null_w = torch.full_like(words, TEXT_NULL)
    mode = torch.multinomial(torch.tensor(MODE_PROBS), b, replacement=True, generator=gen)
    drop = torch.rand(b, generator=gen) < drop_p
    keep_c = ((mode == 0) | (mode == 2)) & ~drop
    keep_w = ((mode == 1) | (mode == 2)) & ~drop
    return torch.where(keep_c, labels, null_c), torch.where(keep_w[:, None], words, null_w)


def random_known(b: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Known-masks with a cosine-distributed masked fraction per row (at least one masked)."""
    ratio = torch.cos(math.pi / 2 * torch.rand(b, generator=gen))
    n_mask = (ratio * n).ceil().clamp(1, n).long()
    ranks = torch.rand(b, n, generator=gen).argsort(1).argsort(1)
    return ranks >= n_mask[:, None]


def train_mar(net: MARNet, tokens: torch.Tensor, rows: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor], *,
              steps: int, batch_size: int, lr: float, weight_decay: float, max_head_tokens: int, seed: int,
              device: torch.device, max_minutes: float, desc: str) -> dict[str, Any]:
    labels_all, words_all = table

    def loss_fn(step: int, gen: torch.Generator) -> torch.Tensor:
        pick = torch.randint(len(tokens), (batch_size,), generator=gen)
        x = tokens[pick]
        b, n, _ = x.shape
        labels, words = sample_conditions(net, labels_all[rows[pick]], words_all[rows[pick]], gen)
        known = random_known(b, n, gen)
        x, known, labels, words = x.to(device), known.to(device), labels.to(device), words.to(device)
        z = net(x, known, labels, words if net.config.text_len else None)
        zm, xm = z[~known], x[~known]
        if zm.shape[0] > max_head_tokens:  # the diffusion head sees a random subset of the masked tokens
            sel = torch.randperm(zm.shape[0], generator=gen)[:max_head_tokens].to(device)
            zm, xm = zm[sel], xm[sel]
        return net.head.loss(xm, zm, None)

    return train_planned(net, loss_fn, steps=steps, lr=lr, weight_decay=weight_decay, device=device,
                         max_minutes=max_minutes, desc=desc, seed=seed, min_ratio=0.1)


@torch.no_grad()
def heldout_head_loss(net: MARNet, tokens: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor], rows: torch.Tensor,
                      seed: int, n: int = 256) -> float:
    """Mean head eps-loss (class condition, cosine masks) on ``n`` clean-image rows, fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(tokens), generator=gen)[:n]
    x = tokens[pick]
    known = random_known(x.shape[0], x.shape[1], gen)
    z = net(x, known, table[0][rows[pick]], table[1][rows[pick]] if net.config.text_len else None)
    torch.manual_seed(seed)
    return float(net.head.loss(x[~known], z[~known], gen))


# ------------------------------------------------------------------------------------------ main
def main(
    out_dir: str | Path = "assets/image-emoji-mar",
    seed: int = 0,
    device: str | None = None,
    vae_steps: int = 4000,
    vae_batch_size: int = 32,
    vae_lr: float = 1e-3,
    vae_crop: int = 32,
    vae_full_frac: float = 0.15,
    kl_weight: float = 1e-3,
    vae_minutes: float = 15.0,
    augment_views: int = 1,
    target_steps: int = 6000,
    draft_steps: int = 6000,
    batch_size: int = 32,
    lr: float = 1e-3,
    weight_decay: float = 0.05,
    max_head_tokens: int = 512,
    target_minutes: float = 45.0,
    draft_minutes: float = 20.0,
    eval_images: int = 256,
    resume: bool = True,
    threads: int | None = None,
    **unknown: Any,
) -> Path:
    """Train the tokenizer, target and draft and save the pipeline to ``out_dir`` (see the module docstring)."""

    if unknown:
        check_options("image-mar", main, unknown)
    if threads:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    out = Path(out_dir)
    t_start = time.perf_counter()
    ds = build_emoji_dataset()
    vocab = load_vocab(ds)
    metrics: dict[str, Any] = {"seed": seed, "environment": environment(dev), "data": {"images": len(ds)}}

    work = work_dir(out)  # stage outputs, so a rerun (resume=True) skips finished stages
    if resume and (work / "vae" / "model.safetensors").is_file():
        tok = KLImageTokenizer.from_pretrained(work / "vae").to(dev)
        metrics["vae_train"] = json.loads((work / "vae_metrics.json").read_text())
        logger.info("resumed the VAE from %s", work / "vae")
    else:
        tok, metrics["vae_train"] = train_vae(ds, steps=vae_steps, batch_size=vae_batch_size, lr=vae_lr, crop=vae_crop,
                                              full_frac=vae_full_frac, kl_weight=kl_weight, seed=seed, device=dev,
                                              max_minutes=vae_minutes)
        tok.save_pretrained(work / "vae")
        (work / "vae_metrics.json").write_text(json.dumps(metrics["vae_train"]))
    t = time.perf_counter()
    tokens, rows = tokenize(tok, ds, augment_views, seed + 2, dev)
    metrics["tokens"] = {"rows": len(tokens), "grid": list(tok.grid), "token_dim": tok.token_dim,
                         "minutes": (time.perf_counter() - t) / 60}
    tok.cpu()
    sub = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed + 3))[:eval_images]
    metrics["vae_eval"] = {**kl_reconstruction_metrics(tok, ds.as_float(sub)), "images": len(sub)}
    vq_metrics = Path(__file__).resolve().parents[2] / "assets" / "image-emoji" / "train_metrics.json"
    if vq_metrics.is_file():
        metrics["vq_eval_shipped"] = json.loads(vq_metrics.read_text()).get("vq_eval", {}).get("all_images")
    logger.info("vae reconstruction: %s (shipped VQ: %s)", metrics["vae_eval"], metrics.get("vq_eval_shipped"))

    target = make_mar(TARGET_ARCH, vocab, ds, tok, seed + 10)
    table = condition_table(target, ds, vocab)
    metrics["target_train"] = train_mar(target, tokens, rows, table, steps=target_steps, batch_size=batch_size, lr=lr,
                                        weight_decay=weight_decay, max_head_tokens=max_head_tokens, seed=seed + 11,
                                        device=dev, max_minutes=target_minutes, desc="mar target")
    draft = make_mar(DRAFT_ARCH, vocab, ds, tok, seed + 20)
    metrics["draft_train"] = train_mar(draft, tokens, rows, table, steps=draft_steps, batch_size=batch_size, lr=lr,
                                       weight_decay=weight_decay, max_head_tokens=max_head_tokens, seed=seed + 21,
                                       device=dev, max_minutes=draft_minutes, desc="mar draft")
    target.cpu()
    draft.cpu()
    clean = torch.arange(len(ds))
    metrics["heldout_head_loss"] = {  # clean (non-augmented) rows: the first len(ds) rows
        "target": heldout_head_loss(target, tokens[: len(ds)], table, clean, seed + 30),
        "draft": heldout_head_loss(draft, tokens[: len(ds)], table, clean, seed + 30)}
    metrics["params"] = {"vae": num_params(tok), "target": num_params(target), "draft": num_params(draft)}
    for name, comp in (("vae", tok), ("model", target), ("draft", draft)):
        comp.save_pretrained(work / name)
    (work / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    from leapgen.pipelines.image_mar import ImageMARPipeline

    pipe = ImageMARPipeline(vae=tok, model=target, draft=draft, text_tokenizer=vocab, class_names=tuple(ds.class_names))
    pipe.save_pretrained(out, dtype=torch.float16)
    metrics["minutes_total"] = (time.perf_counter() - t_start) / 60
    write_metrics(out, metrics, max_size_mb=30)
    logger.info("saved %s (%.1f min)", out, metrics["minutes_total"])
    return out


__all__ = ["main", "train_mar", "train_vae", "tokenize", "random_known", "sample_conditions"]
