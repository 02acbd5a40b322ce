"""Scene-text recognition: ``Pipeline.from_pretrained("leapgen/ocr-en")(images) -> texts, confidences, stats``.

Component: ``model`` (:class:`~leapgen.models.ocr.OCRModel`: one SVTR encoder, a CPPD decoder and
an attention AR decoder). Characters: ``0-9a-z`` (readings are lower case).

Samplers (any registered sampler whose contract the model offers):

* ``cppd`` (default): one parallel pass of the CPPD decoder, cut at the end token;
* ``ar`` / ``ar_beam`` and every other chain sampler: the AR decoder with its KV cache;
* ``speculative``: the AR decoder verifies CPPD's reading (drafted whole through
  :class:`~leapgen.models.ocr_lm.CPPDDraftLM`, ``num_draft_tokens`` = max_len + 1, the confidence
  schedule stops at its end), so a correct CPPD reading costs one verifier forward; greedy output is
  identical to ``ar``.

Every image batch is encoded once; draft and verifier share that state. Per-character confidences:
``cppd`` — the CPPD slot probability of each character; AR samplers — the AR decoder's probability
of each character given the reading's prefix (one teacher-forced forward, not counted in
``stats``). Inputs: PIL images, paths, encoded bytes or open files, or uint8 / float arrays ``[H, W]`` / ``[H, W, C]`` / ``[C, H, W]`` (torchvision's layout); each is
converted to grayscale (laid on white first when it has transparency), cropped to its text
(:func:`crop_to_text`: the model was trained on tight crops of one word, and 'hello' in the middle of
a 300x60 image read as ''), and resized to 32x100. An image already 32x100 is taken as it is.

Lines and pages (``layout``): ``"auto"`` (default) cuts an image into words
(:func:`~.ocr_layout.segment`: projection profiles; skew, columns, handwriting and rotated text are
out of scope) when :func:`crop_to_text` refuses it (two or more lines, or a line over
:data:`MAX_ASPECT` times as wide as tall) or when it is one short line with clear word gaps ('red
cat', 'go 42': :func:`~.ocr_layout.segment`'s ``strict`` rule, gaps at least twice the line's widest
letter gap, a fifth of its height and 4 px: in doubt, one word; such an image is also read whole
and the cut stands unless its characters are clearly less likely, :func:`_choose`), and reads any
other image exactly as ``"word"`` does. Text under about 16 px, narrow italics or tight spacing may still read as one
word there: ``"page"`` cuts every image by the looser rule.
``"word"`` refuses what ``crop_to_text`` refuses, with an error saying to crop single words. The
words of all images are read in one batch (``batch_size`` crops at a time); ``texts[i]`` joins a
page's words by spaces and its lines by newlines, ``words[i]`` lists them with their boxes. A word
of a page wider than :data:`MAX_ASPECT` times its height is not read: ``"?"`` stands in its place and
its ``words`` entry says why (the page is still read). A page of more than
:data:`~.ocr_layout.MAX_WORDS` words, or one that looks like noise, fails alone. A bad item (missing file, not an image, empty
array) gets ``texts[i] = None`` and ``errors[i]``; the others still return.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InputError, NumericalError
from ..models.condition import EncoderInputs
from ..models.ocr import EOS, OCRModel
from ..models.ocr_lm import CPPDDraftLM, ocr_views
from ..samplers import DecodeConfig, DecodeStats, sampler_info
from ..samplers.base import Sampler
from .base import Pipeline
from .items import check_count
from .ocr_layout import WordBox, ground_and_ink, ground_level, runs, segment, speck_share, word_crop
from .outputs import PipelineOutput


@dataclass(repr=False)
class OCROutput(PipelineOutput):
    """``texts[i]`` (None when item i failed, see ``errors[i]``; a page's words joined by spaces, its
    lines by ``"\\n"``), ``confidences[i]`` (one probability per character of ``texts[i]`` other than
    spaces and line breaks, in order; 0.0 for a ``"?"`` placeholder), ``word_confidences[i]`` (their
    product: the whole text's), ``words[i]`` (one dict per word read, in reading order: ``text``,
    ``box`` ``(x0, y0, x1, y1)`` in the input image's pixels, ``confidence`` (the product of its
    characters'), ``line`` (0-based) and ``error`` (None, or why a ``"?"`` placeholder stands for the
    word); one entry for a single-word image), the merged decode statistics (``stats.extra``:
    ``encoder_time``, ``decoder_time``, ``preprocess_time``) and ``token_ids`` (the characters' ids,
    the words' in turn)."""

    texts: list[str | None]
    confidences: list[list[float] | None]
    stats: DecodeStats
    errors: list[str | None] = field(default_factory=list)
    word_confidences: list[float | None] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    words: list[list[dict[str, Any]] | None] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"OCROutput(texts={self.texts!r}, stats={self.stats.summary()})"


#: the values of the call's ``layout``
LAYOUTS = ("auto", "word", "page")
#: the text of a word of a page that could not be read (its ``words`` entry says why)
PLACEHOLDER = "?"
#: an image whose grey levels span fewer than this many values (of 256) has no text to read
BLANK_LEVELS = 8
#: an image narrower or shorter than this holds no legible character (a 14x4 thumbnail read 'an', 2x1 pixels 'ii')
MIN_SIDE = 8
#: width / height of the cropped text above which it is more than one word: the model was trained on
#: single words of 2-12 characters (aspect up to about 7) and reads at most 16
MAX_ASPECT = 12.0
#: ``auto`` keeps a one-line image's cut at clear word gaps unless the words' characters' mean confidence
#: is more than this below the whole image's read as one word (:func:`_choose`; chosen by measurement:
#: it undid 30 of 34 cuts of 1,600 corpus-style single words, and kept 106 of 111 short lines' cuts)
SPLIT_MARGIN = 0.1
#: an image is cropped to its text (and margin) only when that keeps less than this share of it: a
#: tight crop, as the model was trained on, is left as it is (cropping those again cost 2 points)
CROP_BELOW = 0.5


def _eight_bit(arr: np.ndarray) -> np.ndarray:
    """Levels as uint8: uint8 as it is; other levels in [0, 1] or [0, 255] (scaled to / kept in 0..255);
    integers up to 65535 as 16-bit levels (scaled, not clipped at 255)."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.kind == "b":
        return arr.astype(np.uint8) * 255
    x = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(x).all():
        raise InputError("the image array has NaN or infinite values")
    top = float(x.max())
    if arr.dtype.kind in "iu" and top > 255:
        if top > 65535 or float(x.min()) < 0:
            raise InputError(f"integer image levels must lie in [0, 255] or [0, 65535] (16-bit), got [{x.min():g}, {top:g}]")
        x = x * (255.0 / 65535.0)
    elif top <= 1.0:  # levels in [0, 1]
        x = x * 255
    return x.clip(0, 255).astype(np.uint8)


def _flatten(img: Any) -> Any:
    """Grayscale ``img``; an image with transparency is laid on white (on black when that leaves no
    contrast: light text on a transparent ground). A plain conversion dropped the alpha channel, so
    dark text on a transparent ground became one flat colour, refused as blank."""
    from PIL import Image

    if "A" not in img.getbands() and "transparency" not in img.info:
        return img.convert("L")
    rgba = img.convert("RGBA")
    for ground in (255, 0):
        flat = Image.alpha_composite(Image.new("RGBA", rgba.size, (ground, ground, ground, 255)), rgba).convert("L")
        lo, hi = flat.getextrema()
        if hi - lo >= BLANK_LEVELS:
            break
    return flat


def _is_line(ink: np.ndarray, start: int, end: int, tallest: int) -> bool:
    """Whether the rows ``[start, end)`` of ``ink`` hold a line of text: at least half as tall as the
    tallest band, or (smaller print under a heading) a quarter as tall and as wide as three times its
    height with ink in at least a third of those columns. An i's dot or an accent is neither."""
    height = end - start
    if height >= 0.5 * tallest:
        return True
    if height < 0.25 * tallest:
        return False
    cols = np.flatnonzero(ink[start:end].any(0))
    extent = int(cols[-1] - cols[0] + 1) if cols.size else 0
    return extent >= 3 * height and cols.size >= extent / 3


def text_box(gray: Any) -> tuple[int, int, int, int] | None:
    """The box :func:`crop_to_text` crops ``gray`` to, or None when it leaves the image as it is;
    InputError when it holds several lines of text or one line far wider than a word."""
    a = np.asarray(gray, dtype=np.float32)
    _, ink = ground_and_ink(a)
    if ink.any() and speck_share(ink) == 1.0:  # a speck or two on a blank ground was read as 'st'
        raise InputError(f"the image's only ink is {int(ink.sum())} isolated pixel(s) (specks, dust): there is no text to "
                         "read")
    rows = ink.mean(1) > 0.005
    cols = ink.mean(0) > 0.005
    if not rows.any() or not cols.any():
        return None
    row_bands, col_bands = runs(rows), runs(cols)
    (top, bottom), (left, right) = (row_bands[0][0], row_bands[-1][1]), (col_bands[0][0], col_bands[-1][1])
    tallest = max(e - s for s, e in row_bands)
    n_lines = sum(_is_line(ink, s, e, tallest) for s, e in row_bands)
    if n_lines >= 2:
        raise InputError(f"the image holds {n_lines} lines of text (or text running "
                         "top to bottom); the model reads one horizontal word per image: crop each word into an image "
                         "of its own (upright), or leave layout='auto' to read it as lines of words")
    pad = max(2, round(0.2 * (bottom - top)))
    box = (max(0, left - pad), max(0, top - pad), min(a.shape[1], right + pad), min(a.shape[0], bottom + pad))
    aspect = (box[2] - box[0]) / max(1, box[3] - box[1])
    if aspect > MAX_ASPECT:
        raise InputError(f"the text in the image is {aspect:.0f} times as wide as it is tall: more than one word (the "
                         "model reads one word of up to 16 characters per image); crop each word into an image of its "
                         "own, or leave layout='auto' to read it as lines of words")
    if (box[2] - box[0]) * (box[3] - box[1]) > CROP_BELOW * a.size:  # a crop already (or noise fills it): leave it
        return None
    return box


def crop_to_text(gray: Any) -> Any:
    """``gray`` (PIL "L") cropped to its text with a margin of a fifth of the text's height (the
    training crops' margins), or as it is when the text fills most of it or cannot be told from the
    background (noise, texture). InputError when it holds several lines of text or one line far wider
    than a word (:data:`MAX_ASPECT`)."""
    box = text_box(gray)
    return gray if box is None else gray.crop(box)


def load_image(item: Any, height: int = 32, width: int = 100) -> np.ndarray:
    """One input -> float32 ``[height, width]`` in [-1, 1]; InputError naming what is wrong."""
    full = open_gray(item, height)
    if full.size != (width, height):  # an image already at the model's size is a crop made for it
        full = crop_to_text(full)
    return to_pixels(full, height, width)


def to_pixels(gray: Any, height: int, width: int) -> np.ndarray:
    """A grey PIL image resized to the model's ``[height, width]``, levels in [-1, 1]."""
    from PIL import Image

    return np.asarray(gray.resize((width, height), Image.BILINEAR), dtype=np.float32) / 127.5 - 1.0


def open_gray(item: Any, height: int = 32) -> Any:
    """One input -> a grey PIL image (transparency laid on a ground); InputError when it is not an
    image, is too small or blank."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(item, (str, os.PathLike)):
        if isinstance(item, str) and "://" in item[:12]:  # Path() would fold 'http://x/y.png' into 'http:/x/y.png'
            raise InputError(f"{item!r} is a URL; the pipeline reads no network resources: download the image and pass "
                             "its file path (or its bytes)")
        path = Path(item).expanduser()  # '~/scans/word.png'
        if path.is_dir():
            raise InputError(f"{str(path)!r} is a directory, not an image file; pass the path of a PNG/JPEG file (or a list of them)")
        if not path.is_file():
            raise InputError(f"image file {str(path)!r} does not exist")
        try:
            with Image.open(path) as im:
                im.load()
                img = im.copy()
        except (UnidentifiedImageError, OSError) as err:
            raise InputError(f"{str(path)!r} is not a readable image ({err})") from None
    elif isinstance(item, (bytes, bytearray, memoryview)) or hasattr(item, "read"):  # an upload, an open file
        import io

        try:
            with Image.open(io.BytesIO(bytes(item)) if not hasattr(item, "read") else item) as im:
                im.load()
                img = im.copy()
        except (UnidentifiedImageError, OSError) as err:
            raise InputError(f"the image data is not a readable image ({err})") from None
    elif isinstance(item, Image.Image):
        img = item
    elif isinstance(item, (np.ndarray, torch.Tensor)):
        arr = item.detach().cpu().float().numpy() if isinstance(item, torch.Tensor) else item
        if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
            arr = np.moveaxis(arr, 0, -1)  # torchvision's [C, H, W]
        if arr.ndim not in (2, 3) or arr.size == 0 or (arr.ndim == 3 and arr.shape[-1] not in (1, 3, 4)):
            batch = "; a batch of images is a list: pass list(array)" if arr.ndim == 4 else ""
            raise InputError(f"an image array must be [H, W] or [H, W, 1|3|4] and non-empty, got shape {arr.shape}{batch}")
        img = Image.fromarray(_eight_bit(arr[..., 0] if arr.ndim == 3 and arr.shape[-1] == 1 else arr))
    else:
        raise InputError(f"an image is a PIL image, a path, the bytes of a PNG/JPEG file or an array, got {type(item).__name__}")
    if img.width == 0 or img.height == 0:
        raise InputError("the image is empty (0 pixels)")
    if min(img.width, img.height) < MIN_SIDE:
        raise InputError(f"the image is {img.width}x{img.height} pixels: too small to hold legible text (at least "
                         f"{MIN_SIDE} pixels a side; the model reads words {height} pixels tall)")
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "F"):  # 16-bit / 32-bit grey: PIL's "L" would clip at 255
        img = Image.fromarray(_eight_bit(np.asarray(img)))
    full = _flatten(img)
    lo, hi = full.getextrema()
    if hi - lo < BLANK_LEVELS:
        raise InputError(f"the image is blank (every pixel within {hi - lo} grey levels of {lo}); there is no text to read")
    return full


def _clear_words(gray: np.ndarray) -> list[WordBox] | None:
    """The words of a one-line image that :func:`crop_to_text` would take as one word, when its
    ``strict`` segmentation parts it at clear word gaps ('red cat', 'go 42'); None when it reads as
    one word (one box, no clear gap, or nothing :func:`~.ocr_layout.segment` takes for one line)."""
    try:
        boxes = segment(gray, strict=True)
    except InputError:
        return None
    return boxes if len(boxes) >= 2 and all(b.line == 0 for b in boxes) else None


@dataclass
class _Word:
    """One crop to read: its line, pixels (None when it cannot be read), box in the input's pixels, and
    the reading."""

    line: int
    pixels: np.ndarray | None
    box: tuple[int, int, int, int]
    item: int = 0
    text: str = ""
    confs: list[float] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    error: str | None = None
    whole: bool = False  # the whole image read as one word beside its strict split (``auto``): see _choose


def _mean_conf(ws: list[_Word]) -> float:
    """Geometric mean of the characters' confidences of ``ws`` (0 when a word read as nothing)."""
    confs = [p for w in ws for p in w.confs]
    if not confs or any(not w.confs for w in ws):
        return 0.0
    return float(np.exp(np.mean(np.log(np.clip(confs, 1e-9, 1.0)))))


def _choose(ws: list[_Word]) -> list[_Word]:
    """An ``auto`` image cut at clear word gaps was also read whole: keep the cut unless its characters'
    mean confidence falls more than :data:`SPLIT_MARGIN` below the whole reading's (a single word cut
    in pieces reads as unlikely fragments: 'xm il' for 'xml')."""
    whole = [w for w in ws if w.whole]
    if not whole:
        return ws
    parts = [w for w in ws if not w.whole]
    return parts if _mean_conf(parts) >= _mean_conf(whole) - SPLIT_MARGIN else [dataclasses.replace(whole[0], whole=False)]


class OCRPipeline(Pipeline):
    """Word images to text (see the module docstring)."""

    components = ("model",)
    contracts = ("encoder-decoder", "cppd")
    builds_draft = True  # the CPPD hypothesis (CPPDDraftLM)
    #: the attention decoder reads characters through its own embedding; it exposes no embedding table or latents
    model_lacks = {"embeddings": "OCRDecoderLM.embeddings() returns None", "token_latents": "OCRDecoderLM.token_latents() returns None"}
    SAMPLER_DEFAULTS: dict[str, dict[str, Any]] = {
        "speculative": {"schedule": "confidence", "confidence_threshold": 0.01},
    }

    def __init__(self, model: OCRModel) -> None:
        super().__init__(model=model)
        self._views: dict[str, Any] | None = None

    def _on_change(self) -> None:
        self._views = None

    @property
    def views(self) -> dict[str, Any]:
        """The model's contract views (``ar``, ``cppd``), built once."""
        if self._views is None or self._views["ar"].net is not self.model:
            self._views = ocr_views(self.model)
        return self._views

    # ------------------------------------------------------------------------------ call
    def __call__(self, images: Any, sampler: str | Sampler = "cppd", *, layout: str = "auto", batch_size: int = 32,
                 max_new_tokens: int | None = None, temperature: float = 0.0, seed: int | None = None,
                 generator: torch.Generator | None = None, progress: bool = False, return_dict: bool = True,
                 **sampler_params: Any) -> Any:
        """Read ``images``: one image (PIL, path, array) or a list of them; ``layout`` (see the module
        docstring): ``"auto"``, ``"word"`` or ``"page"``."""
        # 1. the sampler, checked against the model's contracts
        smp = self.make_sampler(sampler, sampler_params, self._sampler_defaults(sampler))
        check_count("batch_size", batch_size)
        check_count("max_new_tokens", max_new_tokens, optional=True)
        if layout not in LAYOUTS:
            raise InputError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
        gen = self.prepare_generator(generator, seed)
        # 2. images -> word crops [32, 100] grayscale (one per word image, one per word of a page); a bad item fails alone
        items = list(images) if isinstance(images, (list, tuple)) else [images]
        if not items:
            raise InputError("no images given; pass a PIL image, a path, an array or a list of them.")
        errors: list[str | None] = [None] * len(items)
        words: list[list[_Word] | None] = [None] * len(items)
        t0 = time.perf_counter()
        for i, item in enumerate(items):
            try:
                words[i] = self._words(item, layout)
                for w in words[i]:
                    w.item = i
            except InputError as err:
                errors[i] = str(err)
        pre_time = time.perf_counter() - t0
        # 3. every crop of every image in batches: encode once, then the sampler (draft and verifier share the state)
        parts: list[DecodeStats] = []
        enc_time = dec_time = 0.0
        todo = [w for ws in words if ws for w in ws if w.pixels is not None]
        chunks = [todo[s : s + batch_size] for s in range(0, len(todo), batch_size)]
        for chunk in self.progress_bar(chunks, desc="images") if self._show_progress(progress) else chunks:
            x = torch.from_numpy(np.stack([w.pixels for w in chunk]))
            try:
                res, cf, et, dt = self._decode(smp, x, max_new_tokens, temperature, gen)
            except (InputError, NumericalError) as err:  # the call's own errors (ConfigError) raise
                for w in chunk:
                    errors[w.item] = str(err)
                continue
            enc_time, dec_time = enc_time + et, dec_time + dt
            parts.append(res.stats)
            for row, w in enumerate(chunk):
                w.ids = [t for t in res.sequences[row] if t != EOS]
                w.text, w.confs = self.model.decode_ids(w.ids), cf[row]
        # 4. outputs: a page's words joined by spaces, its lines by newlines
        n = len(items)
        texts: list[str | None] = [None] * n
        confs: list[list[float] | None] = [None] * n
        word_lists: list[list[dict[str, Any]] | None] = [None] * n
        ids_out: list[list[int]] = [[] for _ in items]
        for i, ws in enumerate(words):
            if ws is None or errors[i] is not None:
                continue
            ws = words[i] = _choose(ws)
            texts[i] = "\n".join(" ".join(w.text for w in ws if w.line == k) for k in sorted({w.line for w in ws}))
            confs[i] = [p for w in ws for p in w.confs]
            ids_out[i] = [t for w in ws for t in w.ids]
            word_lists[i] = [{"text": w.text, "box": w.box, "confidence": float(np.prod(w.confs)) if w.confs else 1.0,
                              "line": w.line, "error": w.error} for w in ws]
        stats = DecodeStats.merged(parts, smp.name)
        stats.extra.update(encoder_time=enc_time, decoder_time=dec_time, preprocess_time=pre_time)
        word_conf = [None if cf is None else float(np.prod(cf)) if cf else 1.0 for cf in confs]
        out = OCROutput(texts=texts, confidences=confs, stats=stats, errors=errors, word_confidences=word_conf,
                        token_ids=ids_out, words=word_lists)
        return self._return(out, return_dict)

    # ------------------------------------------------------------------------------ steps
    def _words(self, item: Any, layout: str) -> list[_Word]:
        """The word crops of one input: itself as one word (``word``; ``auto`` when :func:`crop_to_text`
        takes it and it shows no clear word gap), else its words found by :func:`~.ocr_layout.segment`."""
        c = self.model.config
        full = open_gray(item, c.height)
        whole = (0, 0, full.width, full.height)
        a = np.asarray(full)
        boxes = None
        if layout != "page":
            if full.size == (c.width, c.height):  # a crop made for the model: as it is
                return [_Word(0, to_pixels(full, c.height, c.width), whole)]
            try:
                box = text_box(full)
            except InputError:
                if layout == "word":
                    raise
            else:
                one = _Word(0, to_pixels(full if box is None else full.crop(box), c.height, c.width), box or whole)
                boxes = _clear_words(a) if layout == "auto" else None
                if boxes is None:
                    return [one]
                one.whole = True  # read beside the cut; _choose keeps one of them
        from PIL import Image

        ground = ground_level(a)
        out = [] if boxes is None else [one]
        for wb in segment(a) if boxes is None else boxes:
            crop = word_crop(a, wb, ground)
            aspect = crop.shape[1] / crop.shape[0]
            if aspect > MAX_ASPECT:  # more than the model reads as one word: a placeholder, never a silent gap
                out.append(_Word(wb.line, None, wb.box, text=PLACEHOLDER, confs=[0.0], error=(
                    f"{aspect:.0f} times as wide as tall: longer than the model reads as one word (16 characters), "
                    "or words whose gaps were too narrow to part")))
            else:
                out.append(_Word(wb.line, to_pixels(Image.fromarray(crop), c.height, c.width), wb.box))
        return out

    def _sampler_defaults(self, sampler: str | Sampler) -> dict[str, Any]:
        """The pipeline's settings of a sampler named by the call (what the call's keywords override)."""
        if isinstance(sampler, Sampler):
            return {}
        info = sampler_info(sampler)
        defaults = dict(self.SAMPLER_DEFAULTS.get(info.name, {}))
        if info.name == "speculative":
            defaults["num_draft_tokens"] = self.model.config.max_len + 1
        return defaults

    @torch.inference_mode()
    def _decode(self, smp: Sampler, x: torch.Tensor, max_new_tokens: int | None, temperature: float,
                gen: torch.Generator) -> tuple[Any, list[list[float]], float, float]:
        """One batch: ``(result, per-character confidences per row, encoder s, decoder s)``."""
        views = self.views
        t0 = time.perf_counter()
        state = views["ar"].encode(EncoderInputs(input_features=x.to(self.device, self.dtype)))
        t1 = time.perf_counter()
        limit = self.model.config.max_len + 1 if max_new_tokens is None else max_new_tokens
        config = DecodeConfig(max_new_tokens=limit, temperature=temperature, eos_token_id=EOS, pad_token_id=0)
        if "cppd" in smp.contracts:
            models = {"model": views["cppd"]}
        else:
            models = {"model": views["ar"]}
            if "draft" in smp.needs:
                models["draft"] = CPPDDraftLM(views["cppd"])
        res = smp.generate(models, [[EOS]] * x.shape[0], config, gen, cond=state)
        t2 = time.perf_counter()
        seqs = [[t for t in s if t != EOS] for s in res.sequences]
        if "cppd" in smp.contracts:
            probs = views["cppd"].last_logits.softmax(-1)
            confs = [[float(probs[r, k, t]) for k, t in enumerate(s)] for r, s in enumerate(seqs)]
        else:
            lps = views["ar"].teacher_forced_logprobs(state, seqs)
            confs = [[float(lp[k, t].exp()) for k, t in enumerate(s)] for lp, s in zip(lps, seqs)]
        return res, confs, t1 - t0, t2 - t1


__all__ = ["MAX_ASPECT", "OCROutput", "OCRPipeline", "crop_to_text", "load_image"]
