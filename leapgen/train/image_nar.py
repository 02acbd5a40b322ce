"""Recipe ``image-nar``: the shipped ``leapgen/image-emoji-nar`` (NAR next-neighbour GPT on the
shipped emoji VQ tokens).

The network is the raster target's architecture (d=192, 6 layers, 6 heads, 2D RoPE, class + 11-word
text prefix) plus NAR's below head (one extra block): :class:`leapgen.models.nar.NARGPT`. Each step
draws a batch of tokenised emoji (the raster recipe's split, augmented views and conditioning mix,
condition dropout 0.1) and trains either the two neighbour heads under the proximity mask
(``right CE + below CE``), or, with probability ``raster_frac``, the right head as a raster causal
LM (so ``ar`` and the speculative samplers decode the same network). Saved with the shipped VQ and
vocabulary as an :class:`~leapgen.pipelines.image_nar.ImageNARPipeline` (fp16), with
``train_metrics.json``: losses, held-out NLL in both orders (class prefix), parameters, minutes.

The network starts from the shipped raster target (``init_from_base``; the below head from copies of
the last block and the right head), then fine-tunes. Defaults fit about 60 min on 2 CPU cores; the
shipped asset used ``--minutes 20 --threads 1`` (``make train-image-families``; docs/image_families.md).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.models.nar import NARGPT, NARConfig
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


@torch.inference_mode()
def heldout_nll(gpt: NARGPT, codes: torch.Tensor, prefixes: torch.Tensor, batch_size: int = 32) -> dict[str, Any]:
    """Token NLL of held-out images in the NAR order (mixed heads) and in raster order (right head)."""
    gpt.eval()
    flat = codes.flatten(1)
    nar = ras = 0.0
    for i in range(0, flat.shape[0], batch_size):
        x, pre = flat[i : i + batch_size], prefixes[i : i + batch_size]
        v = gpt.config.vocab_size
        nar += float(F.cross_entropy(gpt.neighbour_logits(pre, x).reshape(-1, v), x.reshape(-1), reduction="sum"))
        ras += float(F.cross_entropy(gpt.training_logits(pre, x).reshape(-1, v), x.reshape(-1), reduction="sum"))
    return {"nar": nll_summary(nar, flat.numel(), flat.shape[0]), "raster": nll_summary(ras, flat.numel(), flat.shape[0])}


def init_from_raster(gpt: NARGPT, raster: torch.nn.Module) -> None:
    """Start from the shipped raster GPT (same architecture): trunk, condition encoders and the
    right head are copied; the below head's block, norm and output start as copies of the last
    trunk block, the final norm and the right head."""
    missing, unexpected = gpt.load_state_dict(raster.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("below_") for k in missing), (missing, unexpected)
    with torch.no_grad():
        for blk in gpt.below_layers:
            blk.load_state_dict(gpt.layers[-1].state_dict())
        gpt.below_norm.load_state_dict(gpt.norm.state_dict())
        gpt.below_output.weight.copy_(gpt.output.weight)


def main(out_dir: str | Path = "assets/image-emoji-nar", seed: int = 0, *, steps: int = 1500, batch_size: int = 32,
         lr: float = 6e-4, weight_decay: float = 0.05, raster_frac: float = 0.25, minutes: float = 60.0,
         init_from_base: bool = True,
         base: str = "leapgen/image-emoji", device: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Train and save the NAR pipeline to ``out_dir``; returns the metrics."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    t_all = time.perf_counter()
    pipe = load_base(base)
    data = emoji_latents(pipe, seed)
    ds = data["dataset"]
    arch = {k: v for k, v in dataclasses.asdict(pipe.model.config).items()}
    torch.manual_seed(seed + 30)
    gpt = NARGPT(NARConfig(**arch, below_layers=1, raster_frac=raster_frac))
    if init_from_base:
        init_from_raster(gpt, pipe.model)
    table = condition_table(gpt, pipe, ds)
    codes, rows = data["codes"].flatten(1), data["rows"]
    drop = gpt.config.class_dropout_prob
    log: dict[str, float] = {"raster_steps": 0}

    def loss_fn(step: int, gen: torch.Generator) -> torch.Tensor:
        pick = torch.randint(codes.shape[0], (batch_size,), generator=gen)
        x = codes[pick].to(dev)
        pre = draw_prefixes(table, rows[pick], gen, drop).to(dev)
        if float(torch.rand((), generator=gen)) < raster_frac:
            log["raster_steps"] += 1
            logits = gpt.training_logits(pre, x).float()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1))
        lr_, lb_ = gpt.neighbour_losses(pre, x)
        return lr_ + lb_

    metrics: dict[str, Any] = {"seed": seed, "device": str(dev), "threads": torch.get_num_threads(), "base": base}
    metrics["train"] = train_planned(gpt, loss_fn, steps=steps, lr=lr, weight_decay=weight_decay, seed=seed + 31,
                                  device=dev, max_minutes=minutes, desc="nar")
    metrics["train"]["raster_steps"] = log["raster_steps"]
    gpt.cpu().eval()

    from leapgen.pipelines.image_nar import ImageNARPipeline

    out = Path(out_dir)
    nar_pipe = ImageNARPipeline(vq=pipe.vq, model=gpt, text_tokenizer=pipe.text_tokenizer, class_names=pipe.class_names)
    nar_pipe.save_pretrained(out, dtype=torch.float16)
    loaded = ImageNARPipeline.from_pretrained(out)
    held = data["held_codes"]
    metrics["heldout_nll_class_prefix"] = heldout_nll(loaded.model, held, table["class"][data["held_rows"]])
    metrics["params"] = {"model": num_params(loaded.model), "raster_target": num_params(pipe.model)}
    metrics["config"] = dataclasses.asdict(loaded.model.config)
    metrics["minutes_total"] = round((time.perf_counter() - t_all) / 60, 2)
    write_metrics(out, metrics)
    logger.info("image-nar done: %s", metrics["heldout_nll_class_prefix"])
    return metrics


__all__ = ["main", "heldout_nll"]
