"""Printed lines and pages cut into word boxes by projection profiles (the OCR pipeline's ``layout``).

Method (classic projection-profile segmentation, no learning):

1. **Ink**: the rule of :func:`leapgen.pipelines.ocr.crop_to_text`: the ground is the median of the
   image's border, ink any pixel more than 35 % of the image's grey range away from it (dark text on
   light ground and light on dark alike). An image over :data:`MAX_PIXELS` is analysed on a reduced
   copy (boxes are mapped back to the full image; crops come from the full image), so a giant scan
   costs time in proportion to its pixels, not more.
2. **Lines**: the runs of rows holding ink (horizontal projection). A band much thinner than its
   neighbour (:data:`THIN_BAND` of it: an i's dot, an accent, a comma's tail) joins the nearer
   neighbouring band, so dots and accents stay with their line.
3. **Words**: in each line, the runs of columns holding ink (vertical projection), after undoing the
   slant of italic text (the shear among :data:`SHEARS` that leaves the most empty columns). The gaps
   between runs are split into letter gaps and word gaps by Otsu's rule, checked against the line's
   height (:func:`word_gaps`; :data:`GAP_RATIO`, :data:`MIN_WORD_GAP`, :data:`ALIKE_WORD_GAP`): no
   fixed share of the height parts both mono faces (letter gaps up to 0.45 of it) and narrow italics
   (word gaps down to 0.07), so the rule looks at each line's own gaps. Chosen by measurement on
   lines rendered in every font of the OCR corpus (:mod:`leapgen.data.ocr`: DejaVu and Liberation,
   upright, oblique, italic, condensed and mono, sizes 16-40 px, lower case, Title and UPPER: 97-100 %
   of lines of 1-8 words cut exactly right per size; 87 % at 12 px). Marks lower than
   :data:`MARK_HEIGHT` of the line's height standing alone (a dash, a lone full stop, a speck) are not
   words: the model reads only ``0-9a-z``, so they are left out.
5. **Defaults**: at most :data:`MAX_WORDS` words per image (more: InputError); word crops take a
   margin of a fifth of the word's height (the training crops'), see :func:`word_crop`.
4. **Order**: lines top to bottom, words left to right.

Limits (out of scope): skewed or rotated pages, several columns (a line runs across the whole image,
so two columns side by side read as one line across both), tables, handwriting, text running top
to bottom, text on photographs or textured grounds (the ink rule is global). An image whose ink is
mostly isolated pixels (:data:`MAX_SPECKS`) is no printed text (noise, a photograph): refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

#: word gaps (see :func:`word_gaps`; chosen by measurement on the corpus fonts, see above): the two
#: classes of a line's gaps must be this far apart, a word gap wider than this share of the line's
#: height, and a line of alike gaps holds words only when they are wider than this share
GAP_RATIO, MIN_WORD_GAP, ALIKE_WORD_GAP = 2.0, 0.15, 0.4
#: the stricter test of ``strict`` segmentation (``layout="auto"`` on an image that could be one word):
#: every word gap at least this many times the line's widest letter gap, this share of its height and
#: this many pixels; a line with no letter gap at all needs word gaps of :data:`ALIKE_WORD_GAP` of its
#: height. Chosen by measurement (see :func:`word_gaps`)
CLEAR_RATIO, CLEAR_SHARE, CLEAR_PIXELS = 2.0, 0.2, 4
#: a band of rows thinner than this share of its taller neighbour is a dot or an accent of that line
THIN_BAND = 0.4
#: ... and joins its nearer neighbour only when the gap is at most this share of that neighbour's height
#: (an i's dot or an accent: at most 0.33 on every corpus font at 12-40 px; a row of dashes between
#: lines stands further off): a merged band keeps its tallest part's height, so merges never cascade
NEAR_BAND = 0.5
#: a lone mark lower than this share of the line's height is punctuation or a speck, not a word
MARK_HEIGHT = 0.25
#: slants tried when cutting a line into words (horizontal shift per row, as a share of a row)
SHEARS = (0.0, 0.04, 0.08, 0.12, 0.16, 0.2, 0.24, 0.28, 0.32)
#: an image whose ink is more than this share of isolated pixels (no ink among the four neighbours)
#: is noise or a photograph, not printed text (rendered text: under 1 %; uniform noise: about 25 %)
MAX_SPECKS = 0.1
#: images with more pixels are segmented on a reduced copy
MAX_PIXELS = 8_000_000
#: the most words one image may hold
MAX_WORDS = 512


@dataclass(frozen=True)
class WordBox:
    """One word: its box ``(x0, y0, x1, y1)`` in the image's pixels (x1, y1 exclusive), its line's
    number and rows (``top``, ``bottom``), and the slant (``shear``) its line was cut at with the
    word's span of upright columns (``s0``, ``s1``: pixel ``(y, x)`` is in it when
    ``s0 <= x - round(shear * (bottom - 1 - y)) < s1``)."""

    x0: int
    y0: int
    x1: int
    y1: int
    line: int
    top: int = 0
    bottom: int = 0
    shear: float = 0.0
    s0: int = 0
    s1: int = 0

    @property
    def box(self) -> tuple[int, int, int, int]:
        return (self.x0, self.y0, self.x1, self.y1)


def ground_level(a: np.ndarray) -> float:
    """The background's grey level of an ``[H, W]`` array: the median of its border."""
    return float(np.median(np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])))


def ground_and_ink(a: np.ndarray) -> tuple[float, np.ndarray]:
    """``(ground level, ink mask)`` of a grey ``[H, W]`` array (the rule of ``crop_to_text``)."""
    a = np.asarray(a, dtype=np.float32)
    ground = ground_level(a)
    return ground, np.abs(a - ground) > 0.35 * max(float(a.max() - a.min()), 1.0)


def speck_share(ink: np.ndarray) -> float:
    """The share of ink pixels with no ink among their four neighbours."""
    p = np.pad(ink, 1)
    alone = ink & ~(p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:])
    return float(alone.sum()) / max(1, int(ink.sum()))


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of True in a 1-D mask."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def find_lines(ink: np.ndarray) -> list[tuple[int, int]]:
    """``(top, bottom)`` of each text line: row runs with ink, thin bands merged into a close neighbour,
    thin bands far from both neighbours kept as lines of their own or, lower than :data:`MARK_HEIGHT`
    of the other bands' median height, dropped (a row of dashes or dots between lines)."""
    # (top, bottom, core: the height of the tallest run merged in, settled: a thin band far from its neighbours)
    bands = [[s, e, e - s, False] for s, e in runs(ink.any(1))]
    while len(bands) > 1:
        thin = None
        for k, (s, e, _, settled) in enumerate(bands):
            nb = [bands[j][2] for j in (k - 1, k + 1) if 0 <= j < len(bands)]
            if not settled and e - s < THIN_BAND * max(nb):
                thin = k
                break
        if thin is None:
            break
        up = bands[thin][0] - bands[thin - 1][1] if thin > 0 else None
        down = bands[thin + 1][0] - bands[thin][1] if thin + 1 < len(bands) else None
        j = thin - 1 if down is None or (up is not None and up <= down) else thin + 1
        if min(g for g in (up, down) if g is not None) > NEAR_BAND * bands[j][2]:  # no dot or accent: far away
            others = float(np.median([b[2] for i, b in enumerate(bands) if i != thin]))
            if bands[thin][1] - bands[thin][0] < MARK_HEIGHT * others:
                del bands[thin]
            else:
                bands[thin][3] = True
            continue
        lo, hi = min(thin, j), max(thin, j)
        bands[lo : hi + 1] = [[bands[lo][0], bands[hi][1], max(bands[lo][2], bands[hi][2]), False]]
    return [(s, e) for s, e, _, _ in bands]


def _shifts(height: int, shear: float) -> np.ndarray:
    """Per row of a band, the columns its ink moves left to stand upright (top rows the most)."""
    return np.round(shear * (height - 1 - np.arange(height))).astype(np.int64)


def word_gaps(gaps: list[int], height: int, strict: bool = False) -> list[bool]:
    """Which of a line's gaps between runs of ink columns (pixels) are word gaps.

    The gaps are split in two classes by Otsu's rule (the cut that maximises the between-class
    variance); the cut stands when the classes are well apart (mean word gap + 1 at least
    :data:`GAP_RATIO` times mean letter gap + 1) and the wider class is over :data:`MIN_WORD_GAP` of the
    line's height. Otherwise the line's gaps are all alike: word gaps when over :data:`ALIKE_WORD_GAP`
    of its height (a line of one-letter words), letter gaps else (one word).

    ``strict`` (for an image that may hold one word): the word gaps found stand only when each is at
    least :data:`CLEAR_RATIO` times the widest letter gap, :data:`CLEAR_SHARE` of the height and
    :data:`CLEAR_PIXELS` pixels (a line without letter gaps: :data:`ALIKE_WORD_GAP` of the height); else
    the line is one word. Otsu's split of a short line's few gaps is where single words were cut
    (a mono face's wide letter gap around an i or l, a 3 px gap in 12 px text): measured on lines in
    every corpus font at 12-40 px (4,788 lines, three seeds, gaps labelled by rendering each word
    apart), the strict rule cut 10 of 1,140 single words at 16-40 px (Otsu's alone: 49; the OCR
    pipeline also reads such a line whole and keeps the likelier reading) and parted 97.5 % of the 2-3
    word lines exactly right at 16-40 px (75 % at 12 px; Otsu's alone: 99.2 %)."""
    cut = ALIKE_WORD_GAP * height
    s = sorted(gaps)
    best = -1.0
    for k in range(1, len(s)):
        if s[k] == s[k - 1]:
            continue
        lo, hi = float(np.mean(s[:k])), float(np.mean(s[k:]))
        var = k * (len(s) - k) * (hi - lo) ** 2
        if var > best:
            best = var
            if (hi + 1) / (lo + 1) >= GAP_RATIO and s[k] > MIN_WORD_GAP * height:
                cut = max((s[k - 1] + s[k]) / 2, MIN_WORD_GAP * height)
            else:
                cut = ALIKE_WORD_GAP * height
    words = [g > cut for g in gaps]
    if strict and any(words):
        wide = min(g for g, w in zip(gaps, words) if w)
        letters = [g for g, w in zip(gaps, words) if not w]
        floor = CLEAR_RATIO * max(letters) if letters else ALIKE_WORD_GAP * height
        if wide < max(floor, CLEAR_SHARE * height, CLEAR_PIXELS):
            return [False] * len(gaps)
    return words


def find_words(band: np.ndarray, strict: bool = False) -> tuple[list[tuple[int, ...]], float]:
    """Word boxes ``(x0, y0, x1, y1, s0, s1)`` (band coordinates; ``s0:s1`` the upright columns, see
    :class:`WordBox`) of one line's ink ``band``, and the shear used (``strict``: see :func:`word_gaps`)."""
    h = band.shape[0]
    ys, xs = np.nonzero(band)
    if xs.size == 0:
        return [], 0.0
    best: tuple[int, float, np.ndarray] | None = None
    for shear in SHEARS:
        sx = xs - _shifts(h, shear)[ys]
        empty = int(sx.max() - sx.min() + 1) - np.unique(sx).size
        if best is None or empty > best[0]:
            best = (empty, shear, sx)
    _, shear, sx = best
    base = int(sx.min())
    cols = [(s + base, e + base) for s, e in runs(np.bincount(sx - base) > 0)]
    gaps = [s - e for (_, e), (s, _) in zip(cols, cols[1:])]
    groups: list[list[int]] = [[cols[0][0], cols[0][1]]]
    for (s, e), cut in zip(cols[1:], word_gaps(gaps, h, strict)):
        if cut:
            groups.append([s, e])
        else:
            groups[-1][1] = e
    order = np.argsort(sx, kind="stable")
    sxs = sx[order]
    boxes = []
    for s, e in groups:
        lo, hi = np.searchsorted(sxs, s), np.searchsorted(sxs, e)
        wy, wx = ys[order[lo:hi]], xs[order[lo:hi]]
        y0, y1 = int(wy.min()), int(wy.max()) + 1
        if y1 - y0 < MARK_HEIGHT * h:  # a dash, a lone full stop, a speck
            continue
        boxes.append((int(wx.min()), y0, int(wx.max()) + 1, y1, s, e))
    return boxes, shear


def segment(gray: np.ndarray, max_words: int = MAX_WORDS, strict: bool = False) -> list[WordBox]:
    """Word boxes of a grey ``[H, W]`` image in reading order (see the module docstring); InputError
    when it holds no text lines, looks like noise, or holds more than ``max_words`` words. ``strict``
    parts words only at gaps clearly wider than the line's letter gaps (:func:`word_gaps`)."""
    a = np.asarray(gray)
    scale = 1
    if a.size > MAX_PIXELS:
        scale = int(np.ceil(np.sqrt(a.size / MAX_PIXELS)))
        hh, ww = a.shape[0] // scale * scale, a.shape[1] // scale * scale
        a = a[:hh, :ww].reshape(hh // scale, scale, ww // scale, scale).mean((1, 3))
    _, ink = ground_and_ink(a)
    if not ink.any():
        raise InputError("found no text in the image (no ink differs from the background)")
    specks = speck_share(ink)
    if specks > MAX_SPECKS:
        raise InputError(f"{specks:.0%} of the ink is isolated pixels: this looks like noise or a photograph, "
                         "not printed text")
    out: list[WordBox] = []
    for n, (top, bottom) in enumerate(find_lines(ink)):
        boxes, shear = find_words(ink[top:bottom], strict)
        for x0, y0, x1, y1, s0, s1 in boxes:
            out.append(WordBox(x0 * scale, (top + y0) * scale, x1 * scale, (top + y1) * scale, n, top * scale,
                               bottom * scale, shear, s0 * scale, s1 * scale))
        if len(out) > max_words:
            raise InputError(f"the image holds more than {max_words} words; split the page into parts "
                             f"(the pipeline reads at most {max_words} words per image)")
    if not out:
        raise InputError("found no words in the image (only marks too small to be letters)")
    lines = sorted({w.line for w in out})
    return [dataclasses.replace(w, line=lines.index(w.line)) for w in out]


def word_crop(gray: np.ndarray, word: WordBox, ground: float) -> np.ndarray:
    """The word's box with a margin of a fifth of its height (the training crops'), uint8; pixels
    outside the word's line rows or its (slanted) column span, margin included, are laid at the
    ``ground`` level, so a neighbour's overhang or the line above's descenders stay out of the crop."""
    a = np.asarray(gray)
    pad = max(2, round(0.2 * (word.y1 - word.y0)))
    x0, y0 = max(0, word.x0 - pad), max(0, word.y0 - pad)
    x1, y1 = min(a.shape[1], word.x1 + pad), min(a.shape[0], word.y1 + pad)
    crop = a[y0:y1, x0:x1].copy()
    y = np.arange(y0, y1)
    cols = np.arange(x0, x1)[None, :] - np.round(word.shear * (word.bottom - 1 - y)).astype(np.int64)[:, None]
    keep = (cols >= word.s0 - pad) & (cols < word.s1 + pad) & ((y >= word.top) & (y < word.bottom))[:, None]
    crop[~keep] = np.uint8(round(ground))
    return crop


__all__ = ["MAX_WORDS", "WordBox", "find_lines", "find_words", "ground_and_ink", "segment", "word_crop"]
