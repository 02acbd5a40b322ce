"""Recipe for the shipped ``image-emoji`` assets: a LlamaGen-style VQ tokenizer and class/text
conditional GPTs (target + draft) on the Noto Color Emoji images, trained offline on a CPU.

Stages (each writes a checkpoint under ``<out_dir>/_work/`` so that a rerun with
``resume=True`` skips stages that already finished):

1. **data** -- :func:`leapgen.data.emoji.build_emoji_dataset` (64x64, 8 classes, Unicode
   names as prompts); a seeded 5 % of the images is held out for the token NLL.
2. **VQ** -- :class:`leapgen.tokenizers.vq_image.VQModel` (``emoji`` preset: 64x64 -> 16x16
   tokens, K=1024 l2-normalised 8-d codes). Loss ``MSE + 0.5 L1 + VQ + 0.25 commitment``, Adam, cosine
   decay; random 32x32 crops of augmented images for speed (the network is convolutional; the last
   ``vq_full_frac`` of the steps use full images so attention/GroupNorm see the real size); codes
   unused for ``restart_every`` steps are re-seeded from the current batch's latents.
3. **tokenise** -- every training image plus ``augment_views`` augmented copies (small shifts,
   scales, colour jitter; no flips) to 16x16 codes.
4. **target GPT** -- :class:`leapgen.models.llamagen.LlamaGenGPT` (d=256, 6 layers, 8 heads,
   2D RoPE, prefix = class token + 11 text words through a 2-layer bidirectional text encoder).
   Each training row is conditioned on its class only (45 %), its name only (45 %) or both (10 %);
   then the whole condition is dropped with p=0.1 (LlamaGen's ``class_dropout_prob``), which trains
   the null condition used by classifier-free guidance. AdamW, warmup + cosine, bf16 autocast on CPUs with native bf16 (float32 elsewhere).
5. **draft GPT** -- the same conditioning with d=128, 2 layers, distilled:
   ``0.5 CE(data) + 0.5 KL(target || draft)`` on the target's logits (same condition dropout).
6. **feature classifier** -- ``leapgen.train.feature_classifier.train_feature_classifier`` (FID features
   for ``leapgen bench image``), saved to ``<out_dir>/feature_classifier``.
7. **save** -- the pipeline (``ImageARPipeline``: ``vq/``, ``model/``, ``draft/``,
   ``text_tokenizer/``, ``model_index.json``) with fp16 weights, and ``train_metrics.json``:
   losses, held-out token NLL / perplexity (target and draft, on the saved fp16 weights, with the
   class prefix and with the text prefix), VQ reconstruction MSE / PSNR and codebook usage on all
   images, parameter counts, wall time per stage.

``leapgen train image-emoji --out assets/image-emoji`` (defaults: 52 min measured on the shared 2-core CPU;
the GPU when available). Smoke test: ``--vq-steps 4 --target-steps 4 --draft-steps 4
--augment-views 0 --classifier-epochs 1``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.emoji import EmojiDataset, build_emoji_dataset, class_counts
from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
from leapgen.tokenizers.vq_image import VQ_PRESETS, VQConfig, VQModel, reconstruction_metrics
from leapgen.tokenizers.word_vocab import WordVocab
from leapgen.train.common import adamw, autocast, lr_at, num_params, pick_device
from leapgen.train.feature_classifier import train_feature_classifier

from .loop import fit_steps, progress_bar

logger = logging.getLogger(__name__)

TARGET_ARCH = dict(dim=192, n_layer=6, n_head=6, multiple_of=128, text_layers=2)
DRAFT_ARCH = dict(dim=128, n_layer=2, n_head=4, multiple_of=64, text_layers=1)
MODE_PROBS = (0.45, 0.45, 0.10)  # class only, text only, both


# ------------------------------------------------------------------------------------------ helpers
def split_indices(n: int, heldout_frac: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    k = max(1, int(round(n * heldout_frac)))
    return perm[k:].sort().values, perm[:k].sort().values


# ------------------------------------------------------------------------------------------ VQ
def train_vq(
    dataset: EmojiDataset,
    train_idx: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    crop: int,
    full_frac: float,
    restart_every: int,
    seed: int,
    device: torch.device,
    max_minutes: float,
) -> tuple[VQModel, dict[str, Any]]:
    torch.manual_seed(seed)
    vq = VQModel(VQConfig(**VQ_PRESETS["emoji"])).to(device).train()
    opt = torch.optim.Adam(vq.parameters(), lr=lr, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(seed + 1)
    k = vq.codebook_size
    usage = torch.zeros(k, dtype=torch.long)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = progress_bar(steps, "vq")
    full_from = int(steps * (1 - full_frac))
    x_size = dataset.size
    done = 0
    step = 0
    while step < steps:
        steps = fit_steps(step, steps, t0, max_minutes, "vq", (1 - full_frac) + full_frac * (x_size / crop) ** 2)
        full_from = int(steps * (1 - full_frac))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, max(1, steps // 20), min_ratio=0.05)
        idx = train_idx[torch.randint(len(train_idx), (batch_size,), generator=gen)]
        x = dataset.augment(gen, idx)
        if step < full_from and crop < x.shape[-1]:
            i, j = torch.randint(0, x.shape[-1] - crop + 1, (2,), generator=gen).tolist()
            i, j = i - i % vq.downsample, j - j % vq.downsample
            x = x[..., i : i + crop, j : j + crop]
        x = (x * 2 - 1).to(device)
        with autocast(device):
            rec, vql, codes = vq(x)
            rec = rec.float()
            loss = F.mse_loss(rec, x) + 0.5 * F.l1_loss(rec, x) + sum(vql.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vq.parameters(), 1.0)
        opt.step()
        usage += torch.bincount(codes.flatten().cpu(), minlength=k)
        if restart_every and (step + 1) % restart_every == 0 and step < full_from:
            dead = (usage == 0).nonzero().flatten()
            if dead.numel():
                with torch.no_grad():
                    z = vq.encode_latents(x).float().permute(0, 2, 3, 1).reshape(-1, vq.config.codebook_embed_dim)
                    pick = torch.randint(z.shape[0], (dead.numel(),), generator=gen)
                    new = z[pick] + 0.01 * torch.randn(dead.numel(), z.shape[1], generator=gen).to(z)
                    vq.quantize.embedding.weight.data[dead.to(device)] = F.normalize(new, dim=-1).to(
                        vq.quantize.embedding.weight.dtype)
                logger.info("vq step %d: re-seeded %d unused codes", step + 1, dead.numel())
            usage.zero_()
        losses.append(float(loss.detach()))
        done = step = step + 1
        bar.update(1)
        if done % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.4f}")
        if (time.perf_counter() - t0) / 60 > 1.25 * max_minutes:
            logger.warning("vq: stopping at step %d of %d (time budget %.1f min)", done, steps, max_minutes)
            break
    bar.close()
    vq.eval()
    return vq, {"steps": done, "planned_steps": steps, "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
                "first_loss": losses[0] if losses else None}


@torch.inference_mode()
def tokenize_views(vq: VQModel, dataset: EmojiDataset, idx: torch.Tensor, views: int, seed: int,
                   device: torch.device, batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes ``[M, h, w]`` of the clean images ``idx`` plus ``views`` augmented copies each, and the
    dataset index of every row."""
    gen = torch.Generator().manual_seed(seed)
    all_codes, all_rows = [], []
    for v in range(views + 1):
        for i in range(0, len(idx), batch_size):
            part = idx[i : i + batch_size]
            x = dataset.as_float(part) if v == 0 else dataset.augment(gen, part)
            z = vq.encode_latents((x * 2 - 1).to(device, vq.dtype))
            b, d, h, w = z.shape
            codes, _ = vq.quantize.nearest(z.float().permute(0, 2, 3, 1).reshape(-1, d))
            all_codes.append(codes.view(b, h, w).cpu())
            all_rows.append(part)
    return torch.cat(all_codes), torch.cat(all_rows)


# ------------------------------------------------------------------------------------------ GPT
def make_gpt(arch: dict[str, Any], vocab: WordVocab, class_names: tuple[str, ...], codebook_size: int, grid: int,
             seed: int) -> LlamaGenGPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=codebook_size, num_classes=len(class_names), class_names=tuple(class_names), grid_size=grid, text_vocab_size=len(vocab),
                    text_len=vocab.max_len, cond_qk_zero=False, token_dropout_p=0.1, resid_dropout_p=0.1,
                    ffn_dropout_p=0.1, **arch)
    return LlamaGenGPT(cfg)


def prefix_table(gpt: LlamaGenGPT, dataset: EmojiDataset, vocab: WordVocab) -> dict[str, torch.Tensor]:
    """Per dataset image: the condition ids (``[class] + words``, see ``LlamaGenGPT.condition_ids``) with
    class only, text only, both, and the null condition."""
    cls_only, txt_only, both = [], [], []
    for name, label in zip(dataset.names, dataset.labels.tolist()):
        words = vocab.encode(name)
        cls_only.append(gpt.condition_ids(label, None))
        txt_only.append(gpt.condition_ids(None, words))
        both.append(gpt.condition_ids(label, words))
    return {"class": torch.tensor(cls_only), "text": torch.tensor(txt_only), "both": torch.tensor(both),
            "null": torch.tensor(gpt.null_condition_ids())}


def sample_prefixes(table: dict[str, torch.Tensor], rows: torch.Tensor, gen: torch.Generator, drop_p: float) -> torch.Tensor:
    mode = torch.multinomial(torch.tensor(MODE_PROBS), rows.numel(), replacement=True, generator=gen)
    pre = torch.where((mode == 0)[:, None], table["class"][rows], table["text"][rows])
    pre = torch.where((mode == 2)[:, None], table["both"][rows], pre)
    drop = torch.rand(rows.numel(), generator=gen) < drop_p
    return torch.where(drop[:, None], table["null"][None].expand_as(pre), pre)


def train_gpt(
    gpt: LlamaGenGPT,
    codes: torch.Tensor,
    rows: torch.Tensor,
    table: dict[str, torch.Tensor],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    device: torch.device,
    max_minutes: float,
    teacher: LlamaGenGPT | None = None,
    kd_weight: float = 0.5,
    desc: str = "gpt",
) -> dict[str, Any]:
    gpt.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    opt = adamw(gpt, lr, weight_decay)
    gen = torch.Generator().manual_seed(seed)
    flat = codes.flatten(1)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = progress_bar(steps, desc)
    done = 0
    step = 0
    while step < steps:
        steps = fit_steps(step, steps, t0, max_minutes, desc)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, max(1, steps // 20), min_ratio=0.05)
        pick = torch.randint(flat.shape[0], (batch_size,), generator=gen)
        x = flat[pick].to(device)
        pre = sample_prefixes(table, rows[pick], gen, gpt.config.class_dropout_prob).to(device)
        with autocast(device):
            logits = gpt.training_logits(pre, x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x.reshape(-1))
            if teacher is not None:
                with torch.no_grad():
                    t_logits = teacher.training_logits(pre, x).float()
                kl = F.kl_div(F.log_softmax(logits.float(), -1), F.log_softmax(t_logits, -1), log_target=True,
                              reduction="batchmean") / logits.shape[1]
                loss = (1 - kd_weight) * loss + kd_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        done = step = step + 1
        bar.update(1)
        if done % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / 20:.3f}")
        if (time.perf_counter() - t0) / 60 > 1.25 * max_minutes:
            logger.warning("%s: stopping at step %d of %d (time budget %.1f min)", desc, done, steps, max_minutes)
            break
    bar.close()
    gpt.eval()
    tail = losses[-50:]
    return {"steps": done, "planned_steps": steps, "first_loss": losses[0] if losses else None,
            "final_loss": sum(tail) / max(1, len(tail)), "loss_curve": [round(sum(losses[i:i + 50]) / len(losses[i:i + 50]), 4)
                                                                     for i in range(0, len(losses), 50)]}


@torch.inference_mode()
def heldout_nll(gpt: LlamaGenGPT, codes: torch.Tensor, prefixes: torch.Tensor, device: torch.device,
                batch_size: int = 32) -> dict[str, float]:
    """Mean token NLL (nats) and perplexity of ``codes [M, h, w]`` after ``prefixes [M, P]``."""
    gpt.eval()
    flat = codes.flatten(1)
    total, n = 0.0, 0
    for i in range(0, flat.shape[0], batch_size):
        x = flat[i : i + batch_size].to(device)
        logits = gpt.training_logits(prefixes[i : i + batch_size].to(device), x).float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1), reduction="sum"))
        n += x.numel()
    nll = total / max(n, 1)
    return {"nll": nll, "ppl": math.exp(nll), "bits_per_image": nll * flat.shape[1] / math.log(2)}


# ------------------------------------------------------------------------------------------ main
def main(
    out_dir: str | Path = "assets/image-emoji",
    seed: int = 0,
    *,
    vq_steps: int = 2000,
    vq_batch_size: int = 32,
    vq_lr: float = 1e-3,
    vq_crop: int = 32,
    vq_full_frac: float = 0.1,
    restart_every: int = 50,
    augment_views: int = 3,
    target_steps: int = 1500,
    target_batch_size: int = 32,
    target_lr: float = 2e-3,
    draft_steps: int = 600,
    draft_batch_size: int = 32,
    draft_lr: float = 2e-3,
    weight_decay: float = 0.05,
    heldout_frac: float = 0.05,
    classifier_epochs: int = 30,
    vq_minutes: float = 11.0,
    target_minutes: float = 26.0,
    draft_minutes: float = 7.0,
    resume: bool = True,
    device: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Train and save the ``image-emoji`` pipeline to ``out_dir``; returns the metrics dict."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    budget = {"vq": float(vq_minutes), "target": float(target_minutes), "draft": float(draft_minutes)}
    out = Path(out_dir)
    work = out / "_work"
    work.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    metrics: dict[str, Any] = {"seed": seed, "device": str(dev), "torch": torch.__version__,
                               "platform": platform.platform(), "threads": torch.get_num_threads()}
    t_all = time.perf_counter()

    # 1. data
    t = time.perf_counter()
    ds = build_emoji_dataset(64)
    train_idx, held_idx = split_indices(len(ds), heldout_frac, seed)
    vocab = WordVocab.build([ds.names[i] for i in train_idx.tolist()] + list(ds.names))
    metrics["data"] = {"images": len(ds), "train_images": len(train_idx), "heldout_images": len(held_idx),
                       "class_counts": class_counts(ds), "text_vocab": len(vocab), "text_len": vocab.max_len}
    times["data"] = time.perf_counter() - t
    logger.info("data: %s", metrics["data"])

    # 2. VQ
    t = time.perf_counter()
    vq_dir = work / "vq"
    if resume and (vq_dir / "model.safetensors").is_file():
        vq = VQModel.from_pretrained(vq_dir).to(dev)
        metrics["vq_train"] = json.loads((work / "vq_train.json").read_text())
        logger.info("vq: resumed from %s", vq_dir)
    else:
        vq, metrics["vq_train"] = train_vq(ds, train_idx, steps=vq_steps, batch_size=vq_batch_size, lr=vq_lr,
                                           crop=vq_crop, full_frac=vq_full_frac, restart_every=restart_every,
                                           seed=seed, device=dev, max_minutes=budget["vq"])
        metrics["vq_train"]["minutes"] = (time.perf_counter() - t) / 60
        vq.save_pretrained(vq_dir)
        (work / "vq_train.json").write_text(json.dumps(metrics["vq_train"]))
    times["vq"] = time.perf_counter() - t

    # 3. tokenise (from the fp16-rounded VQ, as shipped)
    t = time.perf_counter()
    vq_eval = VQModel.from_pretrained(vq_dir).to(dev)
    vq_eval.load_state_dict({k: v.half().float() for k, v in vq_eval.state_dict().items()})
    codes, rows = tokenize_views(vq_eval, ds, train_idx, augment_views, seed + 2, dev)
    held_codes, held_rows = tokenize_views(vq_eval, ds, held_idx, 0, seed + 3, dev)
    metrics["tokens"] = {"train_sequences": int(codes.shape[0]), "grid": list(codes.shape[1:]),
                         "distinct_codes_used": int(codes.unique().numel())}
    times["tokenise"] = time.perf_counter() - t
    grid = int(codes.shape[1])

    # 4. target
    t = time.perf_counter()
    tgt_dir = work / "model"
    target = make_gpt(TARGET_ARCH, vocab, tuple(ds.class_names), vq.codebook_size, grid, seed + 10)
    table = prefix_table(target, ds, vocab)
    if resume and (tgt_dir / "model.safetensors").is_file():
        target = LlamaGenGPT.from_pretrained(tgt_dir).to(dev)
        metrics["target_train"] = json.loads((work / "target_train.json").read_text())
    else:
        metrics["target_train"] = train_gpt(target, codes, rows, table, steps=target_steps, batch_size=target_batch_size,
                                             lr=target_lr, weight_decay=weight_decay, seed=seed + 11, device=dev,
                                             max_minutes=budget["target"], desc="target")
        metrics["target_train"]["minutes"] = (time.perf_counter() - t) / 60
        target.save_pretrained(tgt_dir)
        (work / "target_train.json").write_text(json.dumps(metrics["target_train"]))
    times["target"] = time.perf_counter() - t

    # 5. draft (distilled from the target)
    t = time.perf_counter()
    dr_dir = work / "draft"
    if resume and (dr_dir / "model.safetensors").is_file():
        draft = LlamaGenGPT.from_pretrained(dr_dir).to(dev)
        metrics["draft_train"] = json.loads((work / "draft_train.json").read_text())
    else:
        draft = make_gpt(DRAFT_ARCH, vocab, tuple(ds.class_names), vq.codebook_size, grid, seed + 20)
        metrics["draft_train"] = train_gpt(draft, codes, rows, table, steps=draft_steps, batch_size=draft_batch_size,
                                           lr=draft_lr, weight_decay=weight_decay, seed=seed + 21, device=dev,
                                           max_minutes=budget["draft"], teacher=target, desc="draft")
        metrics["draft_train"]["minutes"] = (time.perf_counter() - t) / 60
        draft.save_pretrained(dr_dir)
        (work / "draft_train.json").write_text(json.dumps(metrics["draft_train"]))
    times["draft"] = time.perf_counter() - t

    # 6. feature classifier (the FID features of `leapgen bench image`)
    t = time.perf_counter()
    fc = train_feature_classifier(ds, out / "feature_classifier", epochs=classifier_epochs, seed=seed)
    metrics["feature_classifier"] = {k: v for k, v in fc.items() if isinstance(v, (int, float, str, list, dict))}
    times["feature_classifier"] = time.perf_counter() - t

    # 7. save the pipeline (fp16) and evaluate the saved weights
    t = time.perf_counter()
    from leapgen.pipelines.image import ImageARPipeline

    pipe = ImageARPipeline(vq=vq.cpu(), model=target.cpu(), draft=draft.cpu(), text_tokenizer=vocab,
                           class_names=tuple(ds.class_names))
    pipe.save_pretrained(out, dtype=torch.float16)
    loaded = ImageARPipeline.from_pretrained(out)
    times["save"] = time.perf_counter() - t

    t = time.perf_counter()
    metrics["vq_eval"] = {"all_images": reconstruction_metrics(loaded.vq, ds.images),
                          "heldout_images": reconstruction_metrics(loaded.vq, ds.images[held_idx])}
    held_class = table["class"][held_rows]
    held_text = table["text"][held_rows]
    held_null = table["null"][None].expand(len(held_rows), -1)
    metrics["heldout_nll"] = {
        name: {"class": heldout_nll(m, held_codes, held_class, torch.device("cpu")),
               "text": heldout_nll(m, held_codes, held_text, torch.device("cpu")),
               "null": heldout_nll(m, held_codes, held_null, torch.device("cpu"))}
        for name, m in (("target", loaded.model), ("draft", loaded.draft))
    }
    metrics["params"] = {"vq": num_params(loaded.vq), "target": num_params(loaded.model), "draft": num_params(loaded.draft)}
    metrics["configs"] = {"vq": dataclasses.asdict(loaded.vq.config), "target": dataclasses.asdict(loaded.model.config),
                          "draft": dataclasses.asdict(loaded.draft.config)}
    times["evaluate"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t_all
    metrics["minutes_per_stage"] = {k: round(v / 60, 2) for k, v in times.items()}
    metrics["assets_mb"] = round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and "_work" not in p.parts) / 2**20, 2)
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    shutil.rmtree(work, ignore_errors=True)  # stage checkpoints are only kept to resume a failed run
    logger.info("image-emoji done in %.1f min: %s", times["total"] / 60, json.dumps(metrics["heldout_nll"]))
    return metrics


def metrics_markdown(path: str | Path | None = None) -> str:
    """The training metrics of a finished run as markdown tables (for docs/images.md); ``path``
    defaults to the shipped ``leapgen/image-emoji``'s ``train_metrics.json``, wherever it runs from."""
    if path is None:
        from ..pipelines.folders import shipped_assets_dir

        path = shipped_assets_dir() / "image-emoji" / "train_metrics.json"
    m = json.loads(Path(path).read_text())
    lines = ["| stage | steps (planned) | first loss | final loss (last 50 steps) | minutes |", "|---|---|---|---|---|"]
    for key, name in (("vq_train", "VQ"), ("target_train", "target GPT"), ("draft_train", "draft GPT (distilled)")):
        t = m[key]
        lines.append(f"| {name} | {t['steps']} ({t['planned_steps']}) | {t['first_loss']:.4f} | {t['final_loss']:.4f} | "
                     f"{m['minutes_per_stage'][key.split('_')[0]]:.1f} |")
    out = ["Training ({}, {} threads; total {:.1f} min; assets {:.1f} MB):".format(m["device"], m["threads"],
                                                                      m["minutes_per_stage"]["total"], m["assets_mb"]), ""]
    out += lines + [""]
    v = m["vq_eval"]
    out += ["| VQ (fp16 weights) | MSE | PSNR (dB) | codebook usage |", "|---|---|---|---|"]
    for k, name in (("all_images", f"all {m['data']['images']} images"), ("heldout_images", f"{m['data']['heldout_images']} held-out images")):
        out.append(f"| {name} | {v[k]['mse']:.5f} | {v[k]['psnr']:.2f} | {v[k]['codebook_usage']:.3f} |")
    out += ["", "| held-out token NLL (nats) / perplexity | class prefix | text prefix | null prefix |", "|---|---|---|---|"]
    for name in ("target", "draft"):
        h = m["heldout_nll"][name]
        out.append(f"| {name} ({m['params'][name] / 1e6:.2f} M params) | " + " | ".join(
            f"{h[c]['nll']:.3f} / {h[c]['ppl']:.1f}" for c in ("class", "text", "null")) + " |")
    fc = m.get("feature_classifier", {})
    if "skipped" not in fc and fc:
        acc = {k: v for k, v in fc.items() if "acc" in k and isinstance(v, (int, float))}
        out += ["", "Feature classifier: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(acc.items()))]
    return "\n".join(out) + "\n"


def samples_figure(pipe: Any, path: str | Path, prompts: list[Any] | None = None, sampler: str = "speculative",
                   seed: int = 0, cfg_scale: float = 3.0, **kw: Any) -> dict[str, Any]:
    """Generate one image per prompt (default: every class name) and save a figure: each image
    beside its acceptance map. Returns the decode statistics."""
    from PIL import Image

    prompts = list(prompts or pipe.class_names)
    out = pipe(prompts, sampler=sampler, seed=seed, cfg_scale=cfg_scale, **kw)
    tiles = [out.acceptance_map(i) for i in range(len(prompts))]
    tw, th = tiles[0].size
    cols = 4
    rows = (len(tiles) + cols - 1) // cols
    canvas = Image.new("RGB", (cols * (tw + 8), rows * (th + 8)), (255, 255, 255))
    for i, t in enumerate(tiles):
        canvas.paste(t, ((i % cols) * (tw + 8), (i // cols) * (th + 8)))
    canvas.save(path)
    return {"prompts": prompts, **out.stats.as_dict()}


__all__ = ["main", "metrics_markdown", "samples_figure", "train_vq", "train_gpt", "tokenize_views", "heldout_nll", "TARGET_ARCH", "DRAFT_ARCH"]
