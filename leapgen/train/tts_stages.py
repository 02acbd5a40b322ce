"""Training loops of the ``tts-en`` recipe (one function per network; each stops at its time budget).

* :func:`train_t2s`: MaskGCT T2S. Per utterance: mask ratio ``max(sin(pi/2 t), 0.2)`` of the target
  frames (``t ~ U(0, 1)``); with probability ``p_prompt`` a prefix of ``[min(T/4, 5), 0.4 T]`` frames
  is the in-context prompt (MaskGCT); with probability ``p_uncond`` neither phones nor prompt
  (the unconditional branch CFG uses). Cross-entropy on the masked frames.
* :func:`train_ar`: the AR T2S baseline (a transformers Llama): next-token loss on the semantic
  tokens and ``</s>`` after ``<s> phones <sep>``.
* :func:`train_s2a`: MaskGCT S2A on crops of ``crop_frames`` codec frames: a layer ``l`` is drawn
  (``layer_probs``), layers below it are given, it is masked with ratio ``max(sin(pi/2 t), 0.1)``,
  layers above are fully masked; a prompt prefix (all layers) with probability ``p_prompt``.
* :func:`train_speaker`: x-vector softmax over the seen speakers on 2 s crops.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..models.tts import (
    AR_BOS,
    AR_EOS,
    AR_PAD,
    AR_SEP,
    CODEC_PER_SEMANTIC,
    S2ANet,
    SpeakerNet,
    T2SNet,
    ar_phone_ids,
    ar_semantic_offset,
)
from .common import adamw, lr_at

logger = logging.getLogger(__name__)


def _budget_loop(minutes: float, max_steps: int) -> Any:
    t0 = time.perf_counter()
    step = 0
    while step < max_steps:
        frac = (time.perf_counter() - t0) / (minutes * 60.0)
        if frac >= 1.0:
            break
        yield step, frac
        step += 1


def train_t2s(net: T2SNet, data: list[dict[str, Any]], minutes: float, batch_size: int = 16, lr: float = 1e-3,
              p_prompt: float = 0.7, p_uncond: float = 0.1, max_steps: int = 100000, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    opt = adamw(net, lr, 0.01)
    net.train()
    hist, step = [], 0
    for step, frac in _budget_loop(minutes, max_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, max_steps, lr, 100, time_frac=frac)
        rows = [data[i] for i in rng.integers(0, len(data), batch_size)]
        pmax = max(len(r["phones"]) for r in rows)
        lmax = max(len(r["semantic"]) for r in rows)
        phones = torch.zeros(batch_size, pmax, dtype=torch.long)
        sem = torch.full((batch_size, lmax), net.mask_id, dtype=torch.long)
        target = torch.full((batch_size, lmax), -100, dtype=torch.long)
        sem_mask = torch.zeros(batch_size, lmax, dtype=torch.bool)
        prompt_len = torch.zeros(batch_size, dtype=torch.long)
        uncond = torch.zeros(batch_size, dtype=torch.bool)
        for i, r in enumerate(rows):
            ph, s = r["phones"], r["semantic"]
            n = len(s)
            phones[i, : len(ph)] = torch.tensor(ph)
            sem_mask[i, :n] = True
            u = rng.random()
            p = 0
            if u < p_uncond:
                uncond[i] = True
            elif u < p_uncond + p_prompt and n >= 8:
                lo = min(n // 4, 5)
                p = int(rng.integers(lo, max(lo + 1, int(0.4 * n))))
            prompt_len[i] = p
            ratio = max(math.sin(math.pi / 2 * rng.random()), 0.2)
            k = max(1, int(math.ceil(ratio * (n - p))))
            pos = p + rng.choice(n - p, k, replace=False)
            sem[i, :n] = torch.tensor(s)
            sem[i, pos] = net.mask_id
            target[i, pos] = torch.tensor(s)[pos]
        logits = net(phones, phones > 0, sem, sem_mask, prompt_len, uncond)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            hist.append({"step": step, "loss": round(float(loss.detach()), 4)})
            logger.info("t2s step %d loss %.4f", step, float(loss.detach()))
    net.eval()
    return {"steps": step + 1, "history": hist[-20:]}


def ar_sequence(phones: list[int], semantic: list[int], phone_vocab: int) -> list[int]:
    off = ar_semantic_offset(phone_vocab)
    return [AR_BOS, *ar_phone_ids(phones), AR_SEP, *[off + s for s in semantic], AR_EOS]


def train_ar(model: Any, data: list[dict[str, Any]], phone_vocab: int, minutes: float, batch_size: int = 16,
             lr: float = 1e-3, max_steps: int = 100000, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    opt = adamw(model, lr, 0.01)
    model.train()
    hist, step = [], 0
    for step, frac in _budget_loop(minutes, max_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, max_steps, lr, 100, time_frac=frac)
        rows = [data[i] for i in rng.integers(0, len(data), batch_size)]
        seqs = [ar_sequence(r["phones"], r["semantic"], phone_vocab) for r in rows]
        n = max(len(s) for s in seqs)
        ids = torch.full((batch_size, n), AR_PAD, dtype=torch.long)
        labels = torch.full((batch_size, n), -100, dtype=torch.long)
        att = torch.zeros(batch_size, n, dtype=torch.long)
        for i, (s, r) in enumerate(zip(seqs, rows)):
            ids[i, : len(s)] = torch.tensor(s)
            att[i, : len(s)] = 1
            start = len(r["phones"]) + 2  # first semantic token
            labels[i, start : len(s)] = torch.tensor(s[start:])
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            hist.append({"step": step, "loss": round(float(loss.detach()), 4)})
            logger.info("ar step %d loss %.4f", step, float(loss.detach()))
    model.eval()
    return {"steps": step + 1, "history": hist[-20:]}


def train_s2a(net: S2ANet, data: list[dict[str, Any]], minutes: float, batch_size: int = 12, lr: float = 1e-3,
              crop_frames: int = 150, p_prompt: float = 0.8, layer_probs: tuple[float, ...] = (0.4, 0.2, 0.2, 0.2),
              max_steps: int = 100000, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    opt = adamw(net, lr, 0.01)
    net.train()
    k_layers = net.config.num_codebooks
    probs = np.asarray(layer_probs[:k_layers], dtype=np.float64)
    probs /= probs.sum()
    hist, step = [], 0
    crop_sem = crop_frames // CODEC_PER_SEMANTIC
    for step, frac in _budget_loop(minutes, max_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, max_steps, lr, 100, time_frac=frac)
        rows = [data[i] for i in rng.integers(0, len(data), batch_size)]
        lens = [min(crop_sem, len(r["semantic"])) for r in rows]
        tmax = max(lens) * CODEC_PER_SEMANTIC
        codes = torch.full((batch_size, k_layers, tmax), net.mask_id, dtype=torch.long)
        target = torch.full((batch_size, tmax), -100, dtype=torch.long)
        sem = torch.zeros(batch_size, max(lens), dtype=torch.long)
        frame_mask = torch.zeros(batch_size, tmax, dtype=torch.bool)
        prompt_len = torch.zeros(batch_size, dtype=torch.long)
        layer = int(rng.choice(k_layers, p=probs))
        for i, (r, ls) in enumerate(zip(rows, lens)):
            s0 = int(rng.integers(0, len(r["semantic"]) - ls + 1))
            t = ls * CODEC_PER_SEMANTIC
            gt = torch.as_tensor(r["codes"][:, s0 * CODEC_PER_SEMANTIC : s0 * CODEC_PER_SEMANTIC + t])
            sem[i, :ls] = torch.as_tensor(r["semantic"][s0 : s0 + ls])
            frame_mask[i, :t] = True
            p = int(rng.integers(int(0.1 * t), int(0.4 * t) + 1)) if rng.random() < p_prompt else 0
            prompt_len[i] = p
            codes[i, :, :t] = gt
            codes[i, layer + 1 :, p:t] = net.mask_id
            ratio = max(math.sin(math.pi / 2 * rng.random()), 0.1)
            m = max(1, int(math.ceil(ratio * (t - p))))
            pos = p + rng.choice(t - p, m, replace=False)
            codes[i, layer, pos] = net.mask_id
            target[i, pos] = gt[layer, pos]
        uncond = prompt_len == 0
        h = net.hidden(codes, sem, frame_mask, prompt_len, layer, uncond)
        logits = net.heads[layer](h)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            hist.append({"step": step, "layer": layer, "loss": round(float(loss.detach()), 4)})
            logger.info("s2a step %d layer %d loss %.4f", step, layer, float(loss.detach()))
    net.eval()
    return {"steps": step + 1, "history": hist[-20:]}


def train_speaker(net: SpeakerNet, feats: list[torch.Tensor], labels: list[int], minutes: float, batch_size: int = 32,
                  crop: int | tuple[int, int] = 200, lr: float = 2e-3, max_steps: int = 100000,
                  seed: int = 0) -> dict[str, Any]:
    """Train an x-vector classifier (speakers, or languages for :class:`~leapgen.models.language_id.LanguageID`)
    on random crops of ``crop`` fbank frames (a ``(low, high)`` pair: a length drawn per batch)."""
    rng = np.random.default_rng(seed)
    lo, hi = (crop, crop) if isinstance(crop, int) else crop
    opt = adamw(net, lr, 0.01)
    net.train()
    hist, step, acc = [], 0, 0.0
    for step, frac in _budget_loop(minutes, max_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, max_steps, lr, 50, time_frac=frac)
        idx = rng.integers(0, len(feats), batch_size)
        crop = lo if lo == hi else int(rng.integers(lo, hi + 1))  # a fixed crop draws nothing (same runs as before)
        x = torch.zeros(batch_size, crop, feats[0].shape[1])
        lengths = torch.zeros(batch_size, dtype=torch.long)
        for i, j in enumerate(idx):
            f = feats[j]
            s = int(rng.integers(0, max(1, f.shape[0] - crop + 1)))
            seg = f[s : s + crop]
            x[i, : seg.shape[0]] = seg
            lengths[i] = seg.shape[0]
        y = torch.tensor([labels[j] for j in idx])
        logits = net.classify(net(x, lengths))
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = 0.9 * acc + 0.1 * float((logits.argmax(-1) == y).float().mean())
        if step % 50 == 0:
            hist.append({"step": step, "loss": round(float(loss.detach()), 4), "acc_ema": round(acc, 3)})
            logger.info("speaker step %d loss %.4f acc %.3f", step, float(loss.detach()), acc)
    net.eval()
    return {"steps": step + 1, "train_acc_ema": round(acc, 3), "history": hist[-10:]}


__all__ = ["ar_sequence", "train_ar", "train_s2a", "train_speaker", "train_t2s"]
