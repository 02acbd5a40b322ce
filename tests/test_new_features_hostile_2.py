"""Hostile-user regressions for OCR lines and pages (ocr_layout) and TTS long texts (tts_text, speed=)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from leapgen.pipelines import Pipeline
from leapgen.pipelines import ocr_layout as layout
from leapgen.pipelines.tts_text import split_text

torch.set_num_threads(1)
SANS = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def render(lines: list[tuple[str, int]], margin: int = 30, spacing: float = 1.5) -> Image.Image:
    """``(text, size)`` lines drawn black on white, each ``spacing`` times its size below the last."""
    fonts = [ImageFont.truetype(SANS, size) for _, size in lines]
    width = max(int(f.getlength(t)) for (t, _), f in zip(lines, fonts)) + 2 * margin
    img = Image.new("L", (width, int(sum(s * spacing for _, s in lines)) + 2 * margin), 255)
    draw, y = ImageDraw.Draw(img), margin
    for (text, size), f in zip(lines, fonts):
        draw.text((margin, y), text, font=f, fill=0)
        y += int(size * spacing)
    return img


def line_words(img: Image.Image) -> list[int]:
    boxes = layout.segment(np.asarray(img))
    return [sum(b.line == k for b in boxes) for k in range(max(b.line for b in boxes) + 1)]


# ------------------------------------------------------------------------------------------ OCR
def test_a_row_of_dashes_or_dots_between_lines_does_not_swallow_the_page():
    """A thin band far from its neighbours (a separator of dashes and dots) merged into the next line,
    the merged band then counted as tall and swallowed the line above: the whole page was one 'word'
    (read 'ji'). Dot leaders joined the next line ('goadbve')."""
    assert line_words(render([("hello world", 28), ("- - - . . .", 28), ("good bye", 28)])) == [2, 2]
    assert line_words(render([("chapter one", 28), ("..............", 28), ("good bye", 28)])) == [2, 2]
    for name in ("jiffy mimic", "ij quick"):  # dots of i and j still join their line
        assert line_words(render([(name, 28), (name, 28)])) == [2, 2]


def test_a_heading_over_smaller_body_lines_keeps_every_line():
    """Sanity case (passes before the fix too): the new far-band rule keeps small body lines under a
    heading as lines of their own."""
    img = Image.new("L", (500, 200), 255)
    draw = ImageDraw.Draw(img)
    draw.text((20, 20), "Title", font=ImageFont.truetype(SANS, 48), fill=0)
    for y in (87, 111):
        draw.text((20, y), "some body text here", font=ImageFont.truetype(SANS, 16), fill=0)
    assert line_words(img) == [1, 4, 4]


def test_auto_layout_reads_small_body_lines_under_a_heading():
    """``layout="auto"`` took a 48 px heading over two 16 px body lines for one word (the single-word
    check counted only bands half as tall as the tallest as lines) and read 'lel' with no error;
    small, wide lines now count, so the page is segmented. Single words with dots and accents do not."""
    img = Image.new("L", (500, 200), 255)
    draw = ImageDraw.Draw(img)
    draw.text((20, 20), "Title", font=ImageFont.truetype(SANS, 48), fill=0)
    for y in (87, 111):
        draw.text((20, y), "some body text here", font=ImageFont.truetype(SANS, 16), fill=0)
    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    out = pipe(img, layout="auto")
    assert out.errors == [None] and out.texts[0].count("\n") == 2 and len(out.words[0]) == 9
    for word in ("minimum", "jiffy", "cafe"):
        single = render([(word, 40)])
        assert pipe(single, layout="auto").texts == pipe(single, layout="word").texts


def test_the_pipeline_reads_a_page_with_a_separator_line():
    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    img = render([("hello world", 28), ("- - - . . .", 28), ("good bye", 28)])
    out = pipe([img, img], sampler="cppd", layout="auto")
    assert out.errors == [None, None] and out.texts[0] == "hello world\ngood bye"


# ------------------------------------------------------------------------------------------ TTS long texts
def test_a_long_text_opening_with_punctuation_is_not_a_chunk_of_its_own():
    """'... ' before a long text was a chunk with nothing to say, failing the whole text."""
    chunks = split_text("... " + "Word " * 40)
    assert len(chunks) == 2 and all(any(c.isalpha() for c in ch) for ch in chunks)
    assert split_text("?! ...") == ["?! ..."]  # nothing to say at all: one piece, the pipeline says why


def test_sentences_without_a_space_after_the_full_stop_are_cut_at_their_ends():
    chunks = split_text("Hello there.It is late.Go home now." * 5)
    assert all(c.rstrip().endswith(".") for c in chunks)


@pytest.fixture(scope="module")
def tts():
    return Pipeline.from_pretrained("leapgen/tts-en")


def test_a_long_text_at_half_speed_is_spoken_in_shorter_chunks(tts):
    """speed=0.5 doubled each 120-character chunk's speech past the S2A model's 1,024 frames: the text failed."""
    kw = {"steps": 2, "s2a_params": {"steps_per_stage": (1, 1, 1, 1)}, "seed": 0}
    out = tts(["... " + "Word " * 30, "hi there"], speed=0.5, **kw)
    assert out.errors == [None, None] and out.stats.extra["chunks"] == 4
    assert len(out.audios[0]) > len(out.audios[1])
