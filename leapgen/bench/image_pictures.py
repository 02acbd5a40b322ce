"""Pictures of ``leapgen bench image``: sample grids per sampler and the acceptance-map figure
(samples beside the map of which target forward produced each token). Pillow only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .common import fmt

if TYPE_CHECKING:
    from .image import ImageBenchResult


def _font(size: int = 11):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def sample_grid(images: Sequence[Any], captions: Sequence[str] | None = None, title: str = "", cols: int = 8, scale: int = 2) -> Any:
    """A PNG-ready grid of PIL images (upscaled ``scale`` x, nearest) with optional captions and title."""
    from PIL import Image, ImageDraw

    if not images:
        raise ConfigError("no images to put in a grid.")
    w, h = images[0].size
    w, h = w * scale, h * scale
    cols = max(1, min(cols, len(images)))
    rows = math.ceil(len(images) / cols)
    cap_h = 14 if captions else 0
    title_h = 18 if title else 0
    pad = 4
    grid = Image.new("RGB", (cols * (w + pad) + pad, title_h + rows * (h + cap_h + pad) + pad), "white")
    draw = ImageDraw.Draw(grid)
    font = _font()
    if title:
        draw.text((pad, 3), title, fill="black", font=font)
    for i, img in enumerate(images):
        r, c = divmod(i, cols)
        x, y = pad + c * (w + pad), title_h + pad + r * (h + cap_h + pad)
        grid.paste(img.convert("RGB").resize((w, h), Image.NEAREST), (x, y))
        if captions:
            draw.text((x, y + h + 1), str(captions[i])[: max(4, w // 6)], fill="black", font=font)
    return grid


def acceptance_figure(samples: dict[str, list[Any]], maps: dict[str, list[Any]], scale: int = 2) -> Any:
    """One row per sampler: its first samples, each followed by its acceptance map."""
    from PIL import Image, ImageDraw

    names = [n for n in samples if maps.get(n)]
    if not names:
        raise ConfigError("no acceptance maps to draw.")
    k = max(len(maps[n]) for n in names)
    w, h = samples[names[0]][0].size
    w, h = w * scale, h * scale
    label_w, pad = 96, 4
    fig = Image.new("RGB", (max(420, label_w + k * (2 * w + 3 * pad)), len(names) * (h + pad) + pad + 16), "white")
    draw = ImageDraw.Draw(fig)
    font = _font()
    draw.text((pad, 2), "sample | acceptance map: one colour = one target forward (grey: 1 token)", fill="black", font=font)
    for r, n in enumerate(names):
        y = 16 + pad + r * (h + pad)
        draw.text((pad, y + h // 2 - 6), n, fill="black", font=font)
        for i, m in enumerate(maps[n]):
            x = label_w + i * (2 * w + 3 * pad)
            fig.paste(samples[n][i].convert("RGB").resize((w, h), Image.NEAREST), (x, y))
            fig.paste(m.convert("RGB").resize((w, h), Image.NEAREST), (x + w + pad, y))
    return fig


def write_pictures(bench: ImageBenchResult, out_dir: str | Path) -> list[Path]:
    """``image_samples_<sampler>.png`` per entry and ``image_acceptance_maps.png`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    st = bench.result["settings"]
    paths = []
    for name, imgs in bench.samples.items():
        row = bench.result["results"][name]
        title = (
            f"{name}: cfg {st['cfg_scale']}, T {st['temperature']}, top-k {st['top_k']}, seeds {st['seed']}+j; "
            f"step compression {fmt(row['step_compression'])}"
        )
        p = out / f"image_samples_{name}.png"
        sample_grid(imgs, bench.classes, title=title).save(p)
        paths.append(p)
    if any(bench.maps.values()):
        p = out / "image_acceptance_maps.png"
        acceptance_figure(bench.samples, bench.maps).save(p)
        paths.append(p)
    return paths


__all__ = ["acceptance_figure", "sample_grid", "write_pictures"]
