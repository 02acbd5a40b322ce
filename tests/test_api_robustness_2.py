"""The Python API with inputs the first sweep (``test_api_robustness.py``) did not name: the black-box
sweep of every shipped pipeline of 2026-11-28. Each case failed before its fix with a raw error from
deep inside the library, or ran and silently did something else than asked."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from leapgen.errors import ConfigError, InputError
from leapgen.pipelines import Pipeline
from leapgen.samplers.base import DecodeConfig
from leapgen.tokenizers.phones import clean_text

torch.set_num_threads(1)


@functools.cache
def _pipe(name: str) -> Pipeline:
    return Pipeline.from_pretrained(f"leapgen/{name}")


# ------------------------------------------------------------------------------------------ numpy scalars
def test_numpy_scalars_are_the_numbers_they_hold_in_every_call():
    """``max_new_tokens=np.int64(4)`` was refused as "must be a positive integer, got np.int64(4)" (and
    ``top_k``, ``num_draft_tokens``, ``num_images_per_prompt``, ``cfg_scale=np.float32(..)``,
    ``duration=np.float32(..)``, ``num_samples=np.int64(..)`` alike, each with its own message)."""
    text = _pipe("text-code")
    want = text("def add(a, b):", max_new_tokens=4, sampler="speculative", num_draft_tokens=3).texts
    got = text("def add(a, b):", max_new_tokens=np.int64(4), sampler="speculative", num_draft_tokens=np.int32(3),
               top_k=np.int64(0), temperature=np.float32(0.0)).texts
    assert got == want
    image = _pipe("image-emoji-nar")
    out = image([np.int64(1), "faces"], cfg_scale=np.float32(2.0), num_images_per_prompt=np.int64(2),
                cfg_interval=np.int64(-1), seed=np.int64(0))
    assert out.errors == [None] * 4 and len(out.images) == 4
    audio = _pipe("audio-music")
    assert audio("slow piano melody", duration=np.float32(0.5), seed=0).audios[0].size > 0


def test_a_bool_top_k_is_refused_not_taken_as_one():
    """``top_k=True`` ran as ``top_k=1`` (greedy decoding in disguise)."""
    with pytest.raises(ConfigError, match="top_k must be an integer"):
        DecodeConfig(top_k=True)
    assert DecodeConfig(top_k=np.int64(5), max_new_tokens=np.int32(7)).top_k == 5


# ------------------------------------------------------------------------------------------ text to speech
def test_a_flag_takes_only_true_or_false():
    """``return_dict="no"`` and the molecule call's ``filter="no"`` counted as true (a non-empty string);
    every parameter a call annotates ``bool`` now takes only True / False (numpy's bool included)."""
    text = _pipe("text-code")
    with pytest.raises(InputError, match="return_dict must be True or False"):
        text("def f():", max_new_tokens=2, return_dict="no")
    assert isinstance(text("def f():", max_new_tokens=2, return_dict=np.bool_(False)), tuple)
    with pytest.raises(InputError, match="filter must be True or False"):
        _pipe("molecule-safe")(num_samples=2, filter="no")


def test_an_audio_duration_under_half_a_frame_is_refused_not_rounded_up():
    """``duration=1e-6`` returned one 20 ms frame of audio; durations round to whole frames, so one
    under half a frame has none to give."""
    audio = _pipe("audio-music")
    with pytest.raises(InputError, match="shorter than half a code frame"):
        audio("calm piano melody", duration=1e-6)
    assert audio.frames_for(0.011) == 1 and audio.frames_for(1.0) == audio.frame_rate


def test_tts_text_that_is_not_a_string_or_a_list_is_an_input_error():
    """``pipe(None)`` / ``pipe(5)`` raised ``TypeError: 'NoneType' object is not iterable``."""
    pipe = _pipe("tts-en")
    for bad in (None, 5):
        with pytest.raises(InputError, match="text must be a string or a list of strings"):
            pipe(bad)


def test_tts_text_with_unreadable_digits_or_foreign_letters_is_refused_and_accents_are_folded():
    """Digits and letters outside a-z were dropped without a word: "I have 3 cats" was spoken "i have
    cats", "café" as "caf", "hello 世界" as "hello". Numbers are read now ("three cats"); digits that
    read as no number and other letters are still refused, never dropped."""
    for bad, shown in (("hello 世界", "'世界'"), ("Straße", "'ß'"), ("\N{FULLWIDTH DIGIT THREE} cats", "'３'")):
        with pytest.raises(InputError, match=f"cannot read \\({shown}\\)"):
            clean_text(bad)
    with pytest.raises(InputError, match="cannot read '1.2.3' as a number.*write this one out as words"):
        clean_text("version 1.2.3")
    assert clean_text("Café, naïve!") == "cafe naive" and clean_text("I have 3 cats") == "i have three cats"
    out = _pipe("tts-en")(["version 1.2.3"], steps=2, seed=0)  # one item, refused alone
    assert out.audios == [None] and "write this one out as words" in out.errors[0]


# ------------------------------------------------------------------------------------------ speech input
def test_tts_reads_common_symbols_and_refuses_the_others():
    """``&``, ``%``, ``+``, ``=`` and ``@`` were dropped without a word (``"salt & pepper"`` spoken "salt
    pepper"); they are read as words now, and any other symbol (currency, emoji) fails the item."""
    assert clean_text("salt & pepper, x = y + z") == "salt and pepper x equals y plus z"
    for text in ("cost $ ten", "smile \N{GRINNING FACE} now", "a < b"):
        with pytest.raises(InputError, match="symbols the voice would skip"):
            clean_text(text)
    assert clean_text("well... (yes) - it's done!") == "well yes it's done"


def test_float_audio_far_outside_unit_range_is_refused_not_transcribed():
    """16-bit PCM values in a float array (peak 32767) were decoded as they were: 'x a a a a a until
    header' for a clip the model reads perfectly once scaled."""
    import soundfile as sf

    from leapgen.pipelines.base import resolve_pretrained

    clip, rate = sf.read(resolve_pretrained("leapgen/asr-en") / "examples" / "clip.wav", dtype="float32")
    out = _pipe("asr-en")([clip * 32767, clip], sampling_rate=rate, sampler="ctc_greedy")
    assert out.texts[0] is None and "float samples must lie in [-1, 1]" in out.errors[0]
    assert out.errors[1] is None and out.texts[1]
    assert _pipe("asr-en")(clip * 1.2, sampling_rate=rate, sampler="ctc_greedy").errors == [None]  # mild clipping is fine


# ------------------------------------------------------------------------------------------ OCR input
def test_ocr_reads_text_on_a_transparent_ground_and_names_a_directory():
    """Black text on a transparent PNG ground lost its alpha channel in the grayscale conversion and
    was refused as 'the image is blank'; a directory was reported as a file that 'does not exist'."""
    from PIL import Image, ImageDraw, ImageOps

    def word(fill: tuple[int, ...]) -> Image.Image:
        img = Image.new("RGBA", (96, 32), (fill[0], fill[1], fill[2], 0))
        ImageDraw.Draw(img).text((4, 10), "the cat", fill=fill)
        return img

    pipe = _pipe("ocr-en")
    plain = Image.new("RGB", (96, 32), "white")
    ImageDraw.Draw(plain).text((4, 10), "the cat", fill="black")
    want = pipe([plain, ImageOps.invert(plain)]).texts  # light text on a transparent ground is laid on black
    out = pipe([word((0, 0, 0, 255)), word((255, 255, 255, 255)), "tests"])
    assert out.texts[:2] == want and out.errors[:2] == [None, None]
    assert "is a directory" in out.errors[2]


# ------------------------------------------------------------------------------------------ peptide spectra
def test_ocr_scales_sixteen_bit_images_instead_of_clipping_them():
    """A 16-bit grey image (a uint16 array or a PIL "I;16" image) was clipped at 255, so every level
    above it became white; it is scaled, and reads as its 8-bit original does."""
    from PIL import Image, ImageDraw

    img = Image.new("L", (96, 32), 255)
    ImageDraw.Draw(img).text((4, 10), "the cat", fill=0)
    a8 = np.asarray(img)
    a16 = a8.astype(np.uint16) * 257
    ocr = _pipe("ocr-en")
    want = ocr([a8]).texts
    assert ocr([a16]).texts == ocr([Image.fromarray(a16)]).texts == ocr([a8.astype(np.int64)]).texts == want
    out = ocr([np.full((32, 96), 70000, dtype=np.int64), a8])
    assert out.texts[0] is None and "65535" in out.errors[0] and out.texts[1] == want[0]


def test_a_spectrum_without_signal_or_with_an_impossible_precursor_fails_alone():
    """All-zero intensities, and a precursor lighter than any peptide (m/z 0.5: a negative mass), were
    read as if fine: a 17-residue sequence for a precursor that weighs nothing."""
    good = {"mz": np.linspace(150, 900, 30), "intensity": np.random.RandomState(0).rand(30), "precursor_mz": 523.77,
            "charge": 2}
    out = _pipe("peptide")([{**good, "intensity": np.zeros(30)}, {**good, "precursor_mz": 0.5},
                           {**good, "precursor_mz": 30.0, "charge": 1}, good], max_new_tokens=8)
    assert "zero intensity" in out.errors[0]
    assert all("less than the lightest peptide" in e for e in out.errors[1:3])
    assert out.errors[3] is None and out.sequences[3]


# ------------------------------------------------------------------------------------------ molecules
def test_a_linker_fragment_with_two_attachment_points_is_refused_up_front():
    """'[*]c1ccc([*])cc1' decoded every sample and failed each one ('two-step linking made only 0
    molecules ... ask for more samples', or a SAFE string that does not decode) instead of naming the fragment."""
    with pytest.raises(InputError, match="has 2 attachment points; task='linker' joins two fragments with one"):
        _pipe("molecule-safe")(num_samples=2, task="linker", fragments=["[*]c1ccc([*])cc1", "[*]C1CCNCC1"])
