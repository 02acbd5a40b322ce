"""Synthetic scene-text word images, rendered offline with Pillow (``leapgen data ocr-en``).

Every image is one word at 32x100 px (grayscale, uint8), drawn with one of the TrueType fonts
Debian ships (DejaVu Sans / Sans Condensed / Sans Mono / Serif / Serif Condensed / Math, in their
weights and slants), at a random size, colour, background (flat, gradient, or textured noise),
case (lower / UPPER / Title: labels are lower case, the 36-class English setting of CPPD),
rotation (+-6 degrees), Gaussian blur and pixel noise, then squeezed to 32x100 (the usual
CRNN/SVTR resize without keeping the aspect ratio).

Words: the alphabetic words of the Python standard library's docstrings (the vocabulary of the
speech corpus, :func:`leapgen.data.speech.docstring_sentences`, 2-12 letters) plus random strings
of letters and digits (30 % of the training images). Held out, by a hash of the word / font
file name: 10 % of the words and three font files.

Splits (``images_<split>.npy`` [N, 32, 100] uint8 + ``labels_<split>.json``):

* ``train``: training fonts, training words + random strings;
* ``test_words``: training fonts, held-out words;
* ``test_fonts``: held-out fonts, held-out words.

``meta.json`` records the fonts of each side, the counts and the seed. Deterministic per seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import string
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

HEIGHT, WIDTH = 32, 100
CHARSET = string.digits + string.ascii_lowercase  # 36 classes (CPPD EN)
FONT_DIRS = ("/usr/share/fonts/truetype", "/usr/share/fonts/opentype")
#: font files kept out of training (one per family group)
HELD_OUT_FONTS = ("DejaVuSansCondensed-Bold.ttf", "DejaVuSerifCondensed-Italic.ttf", "DejaVuSansMono-Oblique.ttf")


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "ocr-en"


def _hash01(text: str) -> float:
    return int(hashlib.sha1(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def find_fonts() -> list[str]:
    """Every installed Latin TrueType/OpenType font file (colour emoji fonts excluded), sorted."""
    out = []
    for d in FONT_DIRS:
        for p in sorted(Path(d).rglob("*")) if Path(d).is_dir() else []:
            if p.suffix.lower() in (".ttf", ".otf") and "emoji" not in p.name.lower():
                out.append(str(p))
    if not out:
        raise ConfigError("no TrueType fonts found under /usr/share/fonts; install fonts-dejavu-core (apt).")
    return sorted(out, key=lambda s: Path(s).name)


def split_fonts(fonts: list[str]) -> tuple[list[str], list[str]]:
    """``(training fonts, held-out fonts)``."""
    held = [f for f in fonts if Path(f).name in HELD_OUT_FONTS]
    if not held:  # other font sets: hold out every fifth file
        held = fonts[2::5]
    return [f for f in fonts if f not in held], held


def vocabulary(min_len: int = 2, max_len: int = 12) -> list[str]:
    """Distinct lower-case alphabetic words of the stdlib docstrings (sorted)."""
    from .speech import docstring_sentences

    words = {w for s in docstring_sentences() for w in s.split()}
    return sorted(w for w in words if min_len <= len(w) <= max_len and all(c in CHARSET for c in w))


def split_words(words: list[str], held_fraction: float = 0.1) -> tuple[list[str], list[str]]:
    held = [w for w in words if _hash01("word:" + w) < held_fraction]
    keep = set(held)
    return [w for w in words if w not in keep], held


def random_string(rng: random.Random) -> str:
    n = rng.randint(2, 10)
    pool = string.ascii_lowercase if rng.random() < 0.6 else CHARSET
    return "".join(rng.choice(pool) for _ in range(n))


def _font(path: str, size: int, cache: dict) -> Any:
    from PIL import ImageFont

    key = (path, size)
    if key not in cache:
        cache[key] = ImageFont.truetype(path, size)
    return cache[key]


def _background(rng: random.Random, w: int, h: int) -> tuple[np.ndarray, float]:
    """An RGB background [h, w, 3] float and its mean luminance."""
    base = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
    kind = rng.random()
    if kind < 0.45:
        img = np.broadcast_to(base, (h, w, 3)).copy()
    elif kind < 0.8:
        other = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
        other = 0.5 * base + 0.5 * other
        t = np.linspace(0, 1, w if rng.random() < 0.5 else h, dtype=np.float32)
        grad = t[None, :, None] if t.size == w else t[:, None, None]
        img = base * (1 - grad) + other * grad
        img = np.broadcast_to(img, (h, w, 3)).copy()
    else:
        nr = np.random.default_rng(rng.randint(0, 2**31))
        tex = nr.normal(0, rng.uniform(10, 35), (max(1, h // 4), max(1, w // 4), 1)).astype(np.float32)
        tex = np.kron(tex, np.ones((4, 4, 1), dtype=np.float32))[:h, :w]
        tex = np.pad(tex, ((0, h - tex.shape[0]), (0, w - tex.shape[1]), (0, 0)), mode="edge")
        img = np.clip(base + tex, 0, 255)
    return img, float((img @ np.array([0.299, 0.587, 0.114], dtype=np.float32)).mean())


def render_word(text: str, font_path: str, rng: random.Random, cache: dict | None = None) -> np.ndarray:
    """One augmented word image ``[32, 100]`` uint8 (see the module docstring)."""
    from PIL import Image, ImageDraw, ImageFilter

    cache = {} if cache is None else cache
    case = rng.random()
    shown = text.upper() if case < 0.25 else text.title() if case < 0.45 else text
    font = _font(font_path, rng.randint(22, 40), cache)
    left, top, right, bottom = font.getbbox(shown)
    tw, th = max(1, right - left), max(1, bottom - top)
    mx, my = rng.randint(2, 14), rng.randint(2, 10)
    w, h = tw + 2 * mx, th + 2 * my
    bg, lum = _background(rng, w, h)
    # text colour with enough contrast against the background
    for _ in range(20):
        col = tuple(rng.randint(0, 255) for _ in range(3))
        if abs(0.299 * col[0] + 0.587 * col[1] + 0.114 * col[2] - lum) > 70:
            break
    else:
        col = (0, 0, 0) if lum > 127 else (255, 255, 255)
    img = Image.fromarray(bg.astype(np.uint8), "RGB")
    ImageDraw.Draw(img).text((mx - left, my - top), shown, font=font, fill=col)
    angle = rng.uniform(-6, 6) if rng.random() < 0.6 else 0.0
    if angle:
        fill = tuple(int(v) for v in bg[0, 0])
        img = img.rotate(angle, resample=Image.BILINEAR, expand=True, fillcolor=fill)
    img = img.resize((WIDTH, HEIGHT), Image.BILINEAR)
    if rng.random() < 0.5:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
    arr = np.asarray(img.convert("L"), dtype=np.float32)
    if rng.random() < 0.6:
        nr = np.random.default_rng(rng.randint(0, 2**31))
        arr = arr + nr.normal(0, rng.uniform(2, 14), arr.shape)
    if rng.random() < 0.5:  # invert a share so polarity is learnt both ways
        arr = 255 - arr
    return np.clip(arr, 0, 255).astype(np.uint8)


def _render_split(jobs: list[tuple[str, str]], seed: int, desc: str) -> np.ndarray:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = lambda x, **k: x  # noqa: E731
    rng = random.Random(seed)
    cache: dict = {}
    out = np.zeros((len(jobs), HEIGHT, WIDTH), dtype=np.uint8)
    for i, (word, font) in enumerate(tqdm(jobs, desc=desc, mininterval=10, disable=len(jobs) < 2000)):
        out[i] = render_word(word, font, rng, cache)
    return out


def plan(seed: int, n_train: int, n_test: int, random_fraction: float = 0.3) -> dict[str, list[tuple[str, str]]]:
    """The deterministic ``(word, font path)`` list of every split."""
    rng = random.Random(seed)
    fonts_train, fonts_held = split_fonts(find_fonts())
    words_train, words_held = split_words(vocabulary())
    if not words_held:
        raise ConfigError("the vocabulary has no held-out words")
    train = [(random_string(rng) if rng.random() < random_fraction else rng.choice(words_train), rng.choice(fonts_train))
             for _ in range(n_train)]
    test_words = [(rng.choice(words_held), rng.choice(fonts_train)) for _ in range(n_test)]
    test_fonts = [(rng.choice(words_held), rng.choice(fonts_held)) for _ in range(n_test)]
    return {"train": train, "test_words": test_words, "test_fonts": test_fonts}


def build(out_dir: str | Path | None = None, seed: int = 0, n_train: int = 120_000, n_test: int = 1000,
          random_fraction: float = 0.3) -> dict[str, Any]:
    """Render the corpus into ``out_dir`` (default ``~/.cache/leapgen/ocr-en``); returns ``meta``."""
    root = Path(out_dir) if out_dir else default_dir()
    root.mkdir(parents=True, exist_ok=True)
    jobs = plan(seed, int(n_train), int(n_test), random_fraction)
    for k, (split, rows) in enumerate(jobs.items()):
        images = _render_split(rows, seed * 1000 + k, split)
        np.save(root / f"images_{split}.npy", images)
        (root / f"labels_{split}.json").write_text(json.dumps([w for w, _ in rows]))
        (root / f"fonts_{split}.json").write_text(json.dumps([Path(f).name for _, f in rows]))
    fonts_train, fonts_held = split_fonts(find_fonts())
    meta = {"seed": seed, "counts": {s: len(r) for s, r in jobs.items()}, "charset": CHARSET,
            "fonts_train": [Path(f).name for f in fonts_train], "fonts_held_out": [Path(f).name for f in fonts_held],
            "random_fraction": random_fraction, "size": [HEIGHT, WIDTH]}
    (root / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def load_split(root: str | Path, split: str) -> tuple[np.ndarray, list[str]]:
    """``(images [N, 32, 100] uint8, labels)`` of a built split."""
    root = Path(root)
    path = root / f"images_{split}.npy"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; build the corpus with `leapgen data ocr-en --out {root}`.")
    return np.load(path), json.loads((root / f"labels_{split}.json").read_text())


__all__ = ["CHARSET", "HEIGHT", "WIDTH", "build", "default_dir", "find_fonts", "load_split", "plan", "render_word",
           "split_fonts", "split_words", "vocabulary"]
