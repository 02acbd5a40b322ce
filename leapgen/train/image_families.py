"""Shared parts of the recipes of the image families that decode many tokens per step
(``image-nar``, ``image-var``, ``image-nfig``, ``image-ctf``): the emoji data, tokenised once with
the shipped ``leapgen/image-emoji`` VQ (same split, same augmented views and seeds as the raster
recipe, cached under ``~/.cache/leapgen/image-families``), the conditioning table, and one
time-budgeted training loop (AdamW, warm-up + cosine, bf16 autocast on CPUs with native bf16 (float32 elsewhere), gradient clipping).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.emoji import build_emoji_dataset
from leapgen.train.image_emoji import prefix_table, sample_prefixes, split_indices

logger = logging.getLogger(__name__)

BASE = "leapgen/image-emoji"
CACHE = Path.home() / ".cache" / "leapgen" / "image-families"


def load_base(base: str = BASE) -> Any:
    """The shipped raster pipeline (its VQ, text vocabulary, classes and GPT architecture are reused)."""
    from leapgen.pipelines.image import ImageARPipeline

    return ImageARPipeline.from_pretrained(base)


@torch.inference_mode()
def emoji_latents(base: Any, seed: int = 0, augment_views: int = 3, heldout_frac: float = 0.05,
                  cache: Path | None = CACHE) -> dict[str, Any]:
    """Unit-norm VQ latents ``[M, d, 16, 16]`` and codes ``[M, 16, 16]`` of every training image plus
    ``augment_views`` augmented copies (rows: dataset index), and of the held-out images."""
    ds = build_emoji_dataset(64)
    train_idx, held_idx = split_indices(len(ds), heldout_frac, seed)
    path = None if cache is None else Path(cache) / f"latents_s{seed}_v{augment_views}_n{len(ds)}.pt"
    if path is not None and path.is_file():
        data = torch.load(path)
    else:
        vq = base.vq.eval()
        gen = torch.Generator().manual_seed(seed + 2)

        def encode(idx: torch.Tensor, views: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
            zs, rows = [], []
            for v in range(views + 1):
                for i in range(0, len(idx), 128):
                    part = idx[i : i + 128]
                    x = ds.as_float(part) if v == 0 else ds.augment(g, part)
                    zs.append(vq.encode_latents(x * 2 - 1).float())
                    rows.append(part)
            return torch.cat(zs), torch.cat(rows)

        z, rows = encode(train_idx, augment_views, gen)
        hz, hrows = encode(held_idx, 0, torch.Generator().manual_seed(seed + 3))
        data = {"latents": F.normalize(z, dim=1), "rows": rows, "held_latents": F.normalize(hz, dim=1), "held_rows": hrows}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(data, path)
    cb = base.vq.codebook().float()

    def codes(z: torch.Tensor) -> torch.Tensor:
        b, d, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, d)
        return torch.cat([(c @ cb.t()).argmax(1) for c in flat.split(65536)]).view(b, h, w)

    data["codes"], data["held_codes"] = codes(data["latents"]), codes(data["held_latents"])
    data.update(dataset=ds, train_idx=train_idx, held_idx=held_idx)
    return data


def condition_table(gpt: Any, base: Any, ds: Any) -> dict[str, torch.Tensor]:
    """Per dataset image: condition ids with class only / text only / both, and the null ids."""
    return prefix_table(gpt, ds, base.text_tokenizer)


def draw_prefixes(table: dict[str, torch.Tensor], rows: torch.Tensor, gen: torch.Generator, drop_p: float) -> torch.Tensor:
    return sample_prefixes(table, rows, gen, drop_p)


def nll_summary(total_nats: float, tokens: int, images: int) -> dict[str, float]:
    nll = total_nats / max(tokens, 1)
    return {"nll": nll, "ppl": math.exp(nll), "bits_per_image": total_nats / max(images, 1) / math.log(2)}


def asset_mb(out: Path) -> float:
    return round(sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file()) / 2**20, 2)


def write_metrics(out: Path, metrics: dict[str, Any]) -> None:
    metrics["assets_mb"] = asset_mb(out)
    (Path(out) / "train_metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    if metrics["assets_mb"] > 30:
        raise RuntimeError(f"{out} is {metrics['assets_mb']} MB, over the 30 MB asset budget")


__all__ = ["BASE", "load_base", "emoji_latents", "condition_table", "draw_prefixes", "nll_summary",
           "write_metrics", "asset_mb"]
