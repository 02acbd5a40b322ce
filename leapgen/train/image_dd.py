"""Recipe for the shipped ``image-emoji-dd`` assets: Distilled Decoding (DD1) of the raster emoji GPT.

Needs no image data, only the AR model (``leapgen/image-emoji``) and prompts (the class names and
the Unicode emoji names it was trained with):

1. **teacher trajectories** -- for random prompts (class only or name only, half each) and Gaussian
   noise ``eps [n, 8]`` per image, run the raster GPT token after token at guidance ``cfg_scale``
   and ``temperature``; each token is the flow-matching map (:func:`leapgen.models.dd.flow_map`,
   ``flow_steps`` Euler steps) of its noise under the GPT's categorical over the VQ codebook
   vectors. The pairs ``(eps, tokens)`` are the training set (``heldout`` of them held out).
2. **generator** -- :class:`leapgen.models.dd.DDGenerator` initialised from a raster GPT
   (``init="target"``, or ``"draft"`` -- the shipped pipeline's smaller GPT -- for a CPU budget),
   trained with :func:`leapgen.models.dd.dd_loss` (cross-entropy of the teacher tokens from pure
   noise, plus the second step from the first ``n/2`` teacher tokens on half the rows). AdamW,
   warmup + cosine, bf16 autocast on CPUs with native bf16 (float32 elsewhere).
3. **save** -- :class:`leapgen.pipelines.image_dd.ImageDDPipeline` (``vq/`` copied from
   image-emoji, ``model/``, ``text_tokenizer/``) with fp16 weights; ``train_metrics.json`` with the
   teacher settings, the held-out token agreement of 1- and 2-step generation with the teacher,
   losses and minutes.

``leapgen train image-dd --out assets/image-emoji-dd`` (defaults: 25 + 60 min budgets). The shipped
run used ``--teacher-minutes 6 --teacher-batch 32 --train-minutes 7 --init draft`` (see docs/image_continuous.md).
Smoke test: ``--trajectories 4 --steps 2 --batch-size 2``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from leapgen.errors import ConfigError
from leapgen.models.dd import DDGenerator, dd_loss, flow_map
from leapgen.models.llamagen import KVBackend, LlamaGenGPT
from leapgen.train.common import check_options, environment, num_params, pick_device, write_metrics
from leapgen.train.loop import progress_bar, train_planned

logger = logging.getLogger(__name__)


@torch.no_grad()
def teacher_trajectories(gpt: LlamaGenGPT, codebook: torch.Tensor, labels: torch.Tensor, words: torch.Tensor | None,
                         noise: torch.Tensor, cfg_scale: float, temperature: float, flow_steps: int) -> torch.Tensor:
    """Token ids ``[B, n]`` of the DD map: raster decoding where token ``i`` = ``flow_map(noise[:, i], p_i)``."""
    gpt.eval()
    b, n, _ = noise.shape
    p = gpt.cls_token_num
    guided = cfg_scale != 1.0
    lab, wds = labels, words
    if guided:
        lab = torch.cat([labels, torch.full_like(labels, gpt.null_class)])
        if words is not None:
            wds = torch.cat([words, torch.tensor(gpt.text_words(None))[None].expand_as(words)])
    rows = lab.shape[0]
    cache = KVBackend(len(gpt.layers))
    pos = torch.arange(p)[None].expand(rows, p)
    logits = gpt(torch.zeros((rows, p), dtype=torch.long), pos, cache=cache, labels=lab, words=wds)[:, -1]
    out = []
    for i in range(n):
        if guided:
            c, u = logits.chunk(2)
            logits = u + cfg_scale * (c - u)
        probs = torch.softmax(logits.float() / max(temperature, 1e-6), -1)
        _, tok = flow_map(noise[:, i], probs, codebook, flow_steps)
        out.append(tok)
        if i == n - 1:
            break
        t_in = (tok.repeat(2) if guided else tok)[:, None]
        logits = gpt(t_in, torch.full((rows, 1), p + i), cache=cache)[:, -1]
    return torch.stack(out, 1)


def prompt_rows(ds: Any, vocab: Any, gpt: LlamaGenGPT, count: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random prompts: a class (half) or an emoji's name (half), as labels + word ids."""
    pick = torch.randint(len(ds.names), (count,), generator=gen)
    by_class = torch.rand(count, generator=gen) < 0.5
    labels = torch.where(by_class, ds.labels[pick], torch.full((count,), gpt.null_class))
    if not gpt.config.text_len:
        return labels, None
    words = [gpt.text_words(None) if c else gpt.text_words(vocab.encode(ds.names[i]))
             for i, c in zip(pick.tolist(), by_class.tolist())]
    return labels, torch.tensor(words, dtype=torch.long)


@torch.no_grad()
def agreement(gen: DDGenerator, noise: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
              words: torch.Tensor | None) -> dict[str, float]:
    """Token agreement with the teacher of 1-step and 2-step generation."""
    from leapgen.models.dd import DDModel

    m = DDModel(gen.eval())
    from leapgen.models.condition import NULL_LABEL, ClassCondition

    lab = torch.where(labels == gen.null_class, torch.full_like(labels, NULL_LABEL), labels)
    cond = ClassCondition(labels=lab, text_ids=words)
    return {f"{s}_step": float((m.generate(noise, cond, s) == tokens).float().mean()) for s in (1, 2)}


def main(
    out_dir: str | Path = "assets/image-emoji-dd",
    seed: int = 0,
    device: str | None = None,
    teacher: str = "leapgen/image-emoji",
    init: str = "target",
    cfg_scale: float = 3.0,
    temperature: float = 1.0,
    flow_steps: int = 32,
    trajectories: int = 4096,
    teacher_batch: int = 64,
    teacher_minutes: float = 25.0,
    heldout: int = 64,
    steps: int = 4000,
    batch_size: int = 16,
    lr: float = 3e-4,
    weight_decay: float = 0.01,
    train_minutes: float = 60.0,
    threads: int | None = None,
    **unknown: Any,
) -> Path:
    """Distil the raster GPT of ``teacher`` into a 1/2-step generator and save the pipeline (module docstring)."""
    from leapgen.data.emoji import build_emoji_dataset
    from leapgen.pipelines.base import Pipeline
    from leapgen.pipelines.image_dd import ImageDDPipeline

    if unknown:
        check_options("image-dd", main, unknown)
    if init not in ("target", "draft"):
        raise ConfigError(f"init must be 'target' or 'draft', got {init!r}")
    if threads:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    out = Path(out_dir)
    t_start = time.perf_counter()
    ar = Pipeline.from_pretrained(teacher)
    gpt = ar.model.float().eval()
    codebook = ar.vq.codebook().float().cpu()
    ds = build_emoji_dataset()
    gen = torch.Generator().manual_seed(seed)
    metrics: dict[str, Any] = {"seed": seed, "environment": environment(dev),
                               "teacher": {"pipeline": teacher, "cfg_scale": cfg_scale, "temperature": temperature,
                                           "flow_steps": flow_steps}}
    # 1. teacher trajectories (time-boxed)
    noises, toks, labs, wrds = [], [], [], []
    t0 = time.perf_counter()
    bar = progress_bar(trajectories, "teacher")
    done = 0
    while done < trajectories and (time.perf_counter() - t0) / 60 < teacher_minutes:
        b = min(teacher_batch, trajectories - done)
        labels, words = prompt_rows(ds, ar.text_tokenizer, gpt, b, gen)
        noise = torch.randn((b, gpt.config.grid_size**2, codebook.shape[1]), generator=gen)
        toks.append(teacher_trajectories(gpt, codebook, labels, words, noise, cfg_scale, temperature, flow_steps))
        noises.append(noise)
        labs.append(labels)
        wrds.append(words)
        done += b
        bar.update(b)
    bar.close()
    noise_all, tok_all, lab_all = torch.cat(noises), torch.cat(toks), torch.cat(labs)
    word_all = torch.cat(wrds) if wrds[0] is not None else None
    metrics["teacher"].update(trajectories=len(tok_all), minutes=(time.perf_counter() - t0) / 60)
    h = min(heldout, len(tok_all) // 4)
    # 2. the generator, initialised from a raster GPT
    src = gpt if init == "target" or ar.draft is None else ar.draft.float()
    net = DDGenerator.from_gpt(src, noise_dim=codebook.shape[1]).to(dev).train()
    n_train = len(tok_all) - h
    if n_train <= 0:
        raise ConfigError(f"{len(tok_all)} teacher trajectories leave none for training after {h} held out; "
                          "raise trajectories or teacher_minutes")

    def loss_fn(step: int, g: torch.Generator) -> torch.Tensor:
        idx = torch.randint(n_train, (batch_size,), generator=g) + h
        w = word_all[idx].to(dev) if word_all is not None else None
        return dd_loss(net, noise_all[idx].to(dev), tok_all[idx].to(dev), lab_all[idx].to(dev), w)

    train = train_planned(net, loss_fn, steps=steps, lr=lr, weight_decay=weight_decay, device=dev,
                          max_minutes=train_minutes, desc="dd generator", generator=gen, min_ratio=0.1, curve_every=25)
    net = net.cpu().eval()
    metrics["generator_train"] = {"init": init, **train, "params": num_params(net)}
    if h:
        metrics["heldout_agreement"] = agreement(net, noise_all[:h], tok_all[:h], lab_all[:h],
                                                 word_all[:h] if word_all is not None else None)
        metrics["heldout_agreement"]["trajectories"] = h
    # 3. save
    pipe = ImageDDPipeline(vq=ar.vq, model=net, text_tokenizer=ar.text_tokenizer, class_names=ar.class_names)
    pipe.save_pretrained(out, dtype=torch.float16)
    metrics["minutes_total"] = (time.perf_counter() - t_start) / 60
    write_metrics(out, metrics, max_size_mb=30)
    logger.info("saved %s: %s", out, json.dumps(metrics.get("heldout_agreement")))
    return out


__all__ = ["main", "teacher_trajectories"]
