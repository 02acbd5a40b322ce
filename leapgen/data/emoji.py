"""Offline emoji image dataset: every emoji of Noto Color Emoji rendered to small RGB images.

The data of the shipped ``image-emoji`` pipeline (a tiny LlamaGen-style VQ + GPT): no network, only
the font file installed by ``apt-get install fonts-noto-color-emoji``.

What is rendered
    * every **single code point** of the font's cmap that has a Unicode name and is an emoji-like
      symbol (ASCII, digits, joiners, variation selectors, tag characters, lone regional indicators
      and private-use glyphs are skipped), and
    * every **flag**: a GSUB ligature of two regional indicators (e.g. U+1F1FA U+1F1F8 -> 🇺🇸).
      Multi-code-point sequences that are not flags (ZWJ families, skin-tone variants, keycaps,
      subdivision flags) are skipped because they have no single Unicode name.

    Each glyph is drawn with Pillow (``ImageFont.truetype(path, 109)``, the font's only bitmap
    strike, ``embedded_color=True``) on a transparent 136x136 canvas, composited on **white** and
    resized to ``size`` x ``size`` with a Lanczos filter.

Prompt text
    ``unicodedata.name(ch).lower()`` (e.g. ``"red apple"``, ``"grinning face"``); flags are
    ``"flag: xx"`` with the lower-cased ISO 3166 country code (``"flag: us"``).

Classes (``CLASS_NAMES``), assigned by code-point block, checked in this order:
    * ``flags``   -- regional-indicator pairs;
    * ``faces``   -- any emoji whose name contains ``"face"`` inside the face blocks
      (U+1F600-1F64F Emoticons, U+1F910-1F92F, U+1F970-1F97F, U+1F9D0-1F9D0, U+1FAE0-1FAEF) plus
      U+263A/2639 and the cat/monkey faces of U+1F638-1F640 and U+1F648-1F64A;
    * ``people``  -- U+1F466-1F4AA (people, body parts, roles), U+1F645-1F64F (gestures),
      U+1F574-1F57A, U+1F590-1F596, U+1F6B4-1F6B6, U+1F918-1F91F, U+1F926-1F93E,
      U+1F9B0-1F9B9, U+1F9CD-1F9DF, U+1FAC3-1FAC5, U+1FAF0-1FAF8, U+261D, U+270A-270D,
      U+26F9, U+1F3C3-1F3C4, U+1F3CA-1F3CC, U+1F44A-1F450 (hands);
    * ``animals`` -- U+1F400-1F43F, U+1F980-1F9AE, U+1F54A, U+1F577-1F578, U+1FAB0-1FABF (animals),
      and nature: U+1F330-1F344 (plants), U+1F490, U+1F4AE, U+1F940, U+1FAB7, U+2618;
    * ``food``    -- U+1F345-1F37F (food and drink), U+1F950-1F96F, U+1F9C0-1F9CB, U+1FAD0-1FADF,
      U+2615, U+1F32D-1F32F, U+1F37D;
    * ``travel``  -- U+1F680-1F6FF (transport and map), U+1F3D4-1F3F0 (places), U+1F5FA-1F5FF,
      U+1F300-1F32C (sky and weather), U+2600-2604, U+26C4-26C8, U+26E9-26FA, U+2708, U+2744,
      U+1F30D-1F321;
    * ``objects`` -- U+1F380-1F3D3 and U+1F3F1-1F3FA (activities, sport, events), U+1F4AB-1F4FF
      and U+1F500-1F53D, U+1F56F-1F5F9 (objects), U+1F93F-1F94F, U+1F9E0-1F9FF, U+1FA70-1FAAF,
      U+231A-231B, U+2328, U+23F0-23F3, U+260E, U+2692-269C, U+26CF-26D4, U+2702, U+2709,
      U+270F-2712, U+1F451-1F465 (clothing);
    * ``symbols`` -- everything else (arrows, geometric shapes, signs, hearts, zodiac, ...).

    ``class_counts(dataset)`` reports the sizes; every class has at least a few dozen images.

Interface (used by the image recipe, the samplers' tests and the image metrics)::

    ds = build_emoji_dataset()          # cached at ~/.cache/leapgen/emoji_64.npz after the first call
    ds.images   # uint8 [N, 64, 64, 3]
    ds.names    # list[str] prompt per image
    ds.labels   # long [N] index into ds.class_names
    ds.augment(generator)   # float32 [N, 3, 64, 64] in [0, 1]: small shifts/scales/colour jitter, no flips
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from leapgen.errors import AssetNotFoundError, ConfigError

logger = logging.getLogger(__name__)

DEFAULT_FONT = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"
CLASS_NAMES: tuple[str, ...] = (
    "faces", "people", "animals", "food", "travel", "objects", "symbols", "flags",
)
_CACHE_VERSION = 2
_STRIKE = 109  # the only bitmap strike of Noto Color Emoji
_CANVAS = 136  # glyph advance width at the 109 px strike (height 128)

_RI_FIRST, _RI_LAST = 0x1F1E6, 0x1F1FF  # regional indicator symbols A..Z

# (first, last) inclusive ranges per class; see the module docstring.
_FACE_RANGES = [(0x1F600, 0x1F64F), (0x1F910, 0x1F92F), (0x1F970, 0x1F97F), (0x1F9D0, 0x1F9D0),
                (0x1FAE0, 0x1FAEF), (0x263A, 0x263A), (0x2639, 0x2639)]
_FACE_EXTRA = [(0x1F638, 0x1F640), (0x1F648, 0x1F64A)]
_RANGES: dict[str, list[tuple[int, int]]] = {
    "people": [(0x1F466, 0x1F4AA), (0x1F645, 0x1F64F), (0x1F574, 0x1F57A), (0x1F590, 0x1F596),
               (0x1F6B4, 0x1F6B6), (0x1F918, 0x1F91F), (0x1F926, 0x1F93E), (0x1F9B0, 0x1F9B9),
               (0x1F9CD, 0x1F9DF), (0x1FAC3, 0x1FAC5), (0x1FAF0, 0x1FAF8), (0x261D, 0x261D),
               (0x270A, 0x270D), (0x26F9, 0x26F9), (0x1F3C3, 0x1F3C4), (0x1F3CA, 0x1F3CC),
               (0x1F44A, 0x1F450)],
    "animals": [(0x1F400, 0x1F43F), (0x1F980, 0x1F9AE), (0x1F54A, 0x1F54A), (0x1F577, 0x1F578),
                (0x1FAB0, 0x1FABF), (0x1F330, 0x1F344), (0x1F490, 0x1F490), (0x1F4AE, 0x1F4AE),
                (0x1F940, 0x1F940), (0x2618, 0x2618)],
    "food": [(0x1F345, 0x1F37F), (0x1F950, 0x1F96F), (0x1F9C0, 0x1F9CB), (0x1FAD0, 0x1FADF),
             (0x2615, 0x2615), (0x1F32D, 0x1F32F)],
    "travel": [(0x1F680, 0x1F6FF), (0x1F3D4, 0x1F3F0), (0x1F5FA, 0x1F5FF), (0x1F300, 0x1F32C),
               (0x2600, 0x2604), (0x26C4, 0x26C8), (0x26E9, 0x26FA), (0x2708, 0x2708),
               (0x2744, 0x2744)],
    "objects": [(0x1F380, 0x1F3D3), (0x1F3F1, 0x1F3FA), (0x1F4AB, 0x1F4FF), (0x1F500, 0x1F53D),
                (0x1F56F, 0x1F5F9), (0x1F93F, 0x1F94F), (0x1F9E0, 0x1F9FF), (0x1FA70, 0x1FAAF),
                (0x231A, 0x231B), (0x2328, 0x2328), (0x23F0, 0x23F3), (0x260E, 0x260E),
                (0x2692, 0x269C), (0x26CF, 0x26D4), (0x2702, 0x2702), (0x2709, 0x2709),
                (0x270F, 0x2712), (0x1F451, 0x1F465)],
}


def _in(cp: int, ranges: list[tuple[int, int]]) -> bool:
    return any(a <= cp <= b for a, b in ranges)


def classify_code_point(cp: int, name: str) -> str:
    """Class name of a single code point (see the mapping in the module docstring)."""
    if _in(cp, _FACE_EXTRA) or (_in(cp, _FACE_RANGES) and "face" in name):
        return "faces"
    for cls in ("people", "animals", "food", "travel", "objects"):
        if _in(cp, _RANGES[cls]):
            return cls
    return "symbols"


def _keep_code_point(cp: int) -> bool:
    if cp < 0xA9 or 0xFE00 <= cp <= 0xFE0F or cp in (0x200D, 0x20E3):
        return False
    if _RI_FIRST <= cp <= _RI_LAST or 0xE0000 <= cp <= 0xE007F or cp >= 0xF0000:
        return False
    if 0x1F3FB <= cp <= 0x1F3FF:  # skin-tone modifiers render as colour swatches
        return False
    try:
        unicodedata.name(chr(cp))
    except ValueError:
        return False
    return True


def _flag_pairs(font) -> list[str]:
    """Two-letter codes of the regional-indicator ligatures (flags) in the font's GSUB table."""
    cmap = font.getBestCmap()
    ri_glyph = {cmap[cp]: chr(ord("A") + cp - _RI_FIRST) for cp in range(_RI_FIRST, _RI_LAST + 1)
                if cp in cmap}
    codes: set[str] = set()
    if "GSUB" not in font:
        return []
    for lookup in font["GSUB"].table.LookupList.Lookup:
        for sub in lookup.SubTable:
            if getattr(sub, "ExtSubTable", None) is not None:
                sub = sub.ExtSubTable
            ligatures = getattr(sub, "ligatures", None)
            if not ligatures:
                continue
            for first, ligs in ligatures.items():
                if first not in ri_glyph:
                    continue
                for lig in ligs:
                    if len(lig.Component) == 1 and lig.Component[0] in ri_glyph:
                        codes.add(ri_glyph[first] + ri_glyph[lig.Component[0]])
    return sorted(codes)


# code points scanned when fontTools is not installed (every emoji of Unicode 15 lies in them)
_SCAN_RANGES = [(0xA9, 0xAE), (0x203C, 0x3299), (0x1F000, 0x1FAFF)]


def _scan_with_pillow(font_path: str) -> tuple[list[int], list[str]]:
    """Without fontTools: the code points whose glyph renders (a missing glyph draws nothing) and
    the regional-indicator pairs that render a flag (not the font's placeholder for unknown pairs)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(font_path, _STRIKE)

    def render(text: str) -> np.ndarray:
        im = Image.new("RGBA", (_CANVAS, _CANVAS))
        ImageDraw.Draw(im).text((0, 0), text, font=font, embedded_color=True)
        return np.asarray(im)

    cps = [cp for a, b in _SCAN_RANGES for cp in range(a, b + 1) if render(chr(cp))[..., 3].any()]
    # a pair without a flag renders the font's placeholder glyph: the most common rendering
    renders = {}
    for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
            renders[a + b] = render(chr(_RI_FIRST + ord(a) - 65) + chr(_RI_FIRST + ord(b) - 65)).tobytes()
    placeholder = Counter(renders.values()).most_common(1)[0][0]
    flags = [code for code, r in renders.items() if r != placeholder]
    return cps, flags


def enumerate_emoji(font_path: str) -> list[tuple[str, str, str]]:
    """``(text, prompt, class_name)`` for every renderable emoji of the font, in a fixed order.

    Reads the font's cmap and GSUB ligatures with fontTools when it is installed; otherwise scans
    the emoji code-point ranges by rendering with Pillow (slower, same result for this font)."""
    try:
        from fontTools.ttLib import TTFont
    except ImportError:
        logger.info("fontTools is not installed; scanning the emoji ranges with Pillow (about a minute)")
        cmap_cps, flag_codes = _scan_with_pillow(font_path)
    else:
        font = TTFont(font_path, lazy=True)
        cmap_cps, flag_codes = sorted(font.getBestCmap()), _flag_pairs(font)
    items: list[tuple[str, str, str]] = []
    for cp in cmap_cps:
        if not _keep_code_point(cp):
            continue
        name = unicodedata.name(chr(cp)).lower()
        items.append((chr(cp), name, classify_code_point(cp, name)))
    for code in flag_codes:
        text = "".join(chr(_RI_FIRST + ord(c) - ord("A")) for c in code)
        items.append((text, f"flag: {code.lower()}", "flags"))
    return items


def _render(texts: list[str], font_path: str, size: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(font_path, _STRIKE)
    out = np.empty((len(texts), size, size, 3), dtype=np.uint8)
    for i, text in enumerate(texts):
        canvas = Image.new("RGBA", (_CANVAS, _CANVAS), (255, 255, 255, 0))
        ImageDraw.Draw(canvas).text((0, (_CANVAS - 128) // 2), text, font=font, embedded_color=True)
        white = Image.new("RGBA", canvas.size, (255, 255, 255, 255))
        rgb = Image.alpha_composite(white, canvas).convert("RGB")
        out[i] = np.asarray(rgb.resize((size, size), Image.LANCZOS))
    return out


@dataclass
class EmojiDataset:
    """Rendered emoji: images, prompt texts and coarse class labels (see the module docstring)."""

    images: torch.Tensor  # uint8 [N, size, size, 3]
    names: list[str]  # prompt text per image
    labels: torch.Tensor  # long [N], index into class_names
    class_names: tuple[str, ...] = CLASS_NAMES
    texts: list[str] = field(default_factory=list)  # the emoji characters themselves

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def size(self) -> int:
        return int(self.images.shape[1])

    def as_float(self, indices: torch.Tensor | None = None) -> torch.Tensor:
        """float32 ``[N, 3, size, size]`` in [0, 1] (no augmentation)."""
        x = self.images if indices is None else self.images[indices]
        return x.permute(0, 3, 1, 2).float().div(255.0)

    def augment(
        self,
        generator: torch.Generator | None = None,
        indices: torch.Tensor | None = None,
        max_shift: float = 0.06,
        scale_range: tuple[float, float] = (0.9, 1.1),
        jitter: float = 0.1,
    ) -> torch.Tensor:
        """A randomly augmented float32 batch ``[N, 3, size, size]`` in [0, 1].

        Per image: a shift of up to ``max_shift`` of the width, an isotropic scale drawn from
        ``scale_range`` (the uncovered border is white, like the background) and a colour jitter of
        brightness/contrast/saturation by factors in ``1 ± jitter``. No flips or rotations: emoji
        with text, arrows or flags must keep their orientation.
        """
        x = self.as_float(indices)
        n = x.shape[0]
        rand = lambda *shape: torch.rand(*shape, generator=generator)  # noqa: E731
        scale = scale_range[0] + (scale_range[1] - scale_range[0]) * rand(n)
        shift = (rand(n, 2) * 2 - 1) * max_shift * 2  # grid coordinates span [-1, 1]
        theta = torch.zeros(n, 2, 3)
        theta[:, 0, 0] = 1.0 / scale
        theta[:, 1, 1] = 1.0 / scale
        theta[:, :, 2] = shift
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        # sample the inverted image with zero padding so that the border becomes white
        x = 1.0 - F.grid_sample(1.0 - x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        b = 1 + (rand(n, 1, 1, 1) * 2 - 1) * jitter
        c = 1 + (rand(n, 1, 1, 1) * 2 - 1) * jitter
        s = 1 + (rand(n, 1, 1, 1) * 2 - 1) * jitter
        x = x * b
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - mean) * c + mean
        gray = (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])
        x = (x - gray) * s + gray
        return x.clamp_(0.0, 1.0)


def class_counts(dataset: EmojiDataset) -> dict[str, int]:
    """Number of images per class name."""
    counts = torch.bincount(dataset.labels, minlength=len(dataset.class_names))
    return {name: int(c) for name, c in zip(dataset.class_names, counts)}


def default_cache_path(size: int) -> Path:
    root = Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen"))
    return root / f"emoji_{size}.npz"


def build_emoji_dataset(
    size: int = 64, font_path: str | None = None, cache: str | Path | None = None
) -> EmojiDataset:
    """Render (or load from ``cache``) the emoji dataset at ``size`` x ``size`` pixels.

    ``cache=None`` uses ``~/.cache/leapgen/emoji_{size}.npz`` (``$LEAPGEN_CACHE`` overrides the
    folder); the cache is keyed by the font's size and modification time, so a different font
    re-renders.
    """
    if not isinstance(size, int) or size < 8:
        raise ConfigError(f"size must be an int >= 8, got {size!r}")
    font_path = str(font_path or DEFAULT_FONT)
    if not Path(font_path).is_file():
        raise AssetNotFoundError(
            f"emoji font not found at {font_path}; install it with "
            "`apt-get install fonts-noto-color-emoji` (or pass font_path=...)"
        )
    stat = Path(font_path).stat()
    key = f"v{_CACHE_VERSION}:{Path(font_path).name}:{stat.st_size}:{int(stat.st_mtime)}:{size}"
    cache_path = Path(cache) if cache is not None else default_cache_path(size)
    if cache_path.is_file():
        try:
            with np.load(cache_path, allow_pickle=False) as z:
                if str(z["key"]) == key:
                    names = [str(s) for s in z["names"]]
                    return EmojiDataset(
                        images=torch.from_numpy(z["images"].copy()),
                        names=names,
                        labels=torch.from_numpy(z["labels"].astype(np.int64)),
                        class_names=tuple(str(s) for s in z["class_names"]),
                        texts=[str(s) for s in z["texts"]],
                    )
        except (OSError, KeyError, ValueError) as exc:  # corrupt or old cache: re-render
            logger.warning("ignoring unreadable emoji cache %s (%s)", cache_path, exc)
    items = enumerate_emoji(font_path)
    logger.info("rendering %d emoji from %s at %dx%d", len(items), font_path, size, size)
    texts = [t for t, _, _ in items]
    images = _render(texts, font_path, size)
    labels = np.array([CLASS_NAMES.index(c) for _, _, c in items], dtype=np.int64)
    names = [n for _, n, _ in items]
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".{os.getpid()}.tmp.npz")  # per writer: concurrent renders never share a file
        np.savez_compressed(tmp, images=images, labels=labels, names=np.array(names),
                            texts=np.array(texts), class_names=np.array(CLASS_NAMES),
                            key=np.array(key))
        os.replace(tmp, cache_path)
    except OSError as exc:
        logger.warning("could not write the emoji cache %s (%s)", cache_path, exc)
    return EmojiDataset(images=torch.from_numpy(images), names=names,
                        labels=torch.from_numpy(labels), class_names=CLASS_NAMES, texts=texts)


__all__ = ["CLASS_NAMES", "EmojiDataset", "build_emoji_dataset", "class_counts",
           "classify_code_point", "enumerate_emoji"]
