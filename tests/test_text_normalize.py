"""The TTS text normaliser (leapgen/tokenizers/text_normalize.py): numbers, amounts, times, dates and
abbreviations written out as words before the letters-only checks of ``clean_text``; digits it cannot
read, and any other unreadable character, are refused with an InputError, never dropped."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from leapgen.errors import InputError
from leapgen.tokenizers.phones import clean_text, phonemize
from leapgen.tokenizers.text_normalize import cardinal, normalize_text, ordinal, year

torch.set_num_threads(1)

CASES = [
    # cardinals
    ("0", "zero"), ("7", "seven"), ("13", "thirteen"), ("20", "twenty"), ("42", "forty two"),
    ("100", "one hundred"), ("101", "one hundred one"), ("999", "nine hundred ninety nine"),
    ("1,000", "one thousand"), ("1,234", "one thousand two hundred thirty four"),
    ("1000", "one thousand"), ("1066", "one thousand sixty six"), ("2100", "two thousand one hundred"),
    ("1,000,000", "one million"), ("12,000,005", "twelve million five"),
    ("999,999,999,999", "nine hundred ninety nine billion nine hundred ninety nine million nine hundred "
                        "ninety nine thousand nine hundred ninety nine"),
    ("007", "zero zero seven"), ("00", "zero zero"),
    ("I have 3 cats", "I have three cats"), ("123 456", "one hundred twenty three four hundred fifty six"),
    # signs and decimals
    ("-5", "minus five"), ("x = \u22123.5", "x = minus three point five"), ("(-2)", "(minus two)"),
    ("COVID-19", "COVID-nineteen"), ("3.14", "three point one four"), ("3.0", "three point zero"),
    (".5", "point five"), ("0.5", "zero point five"), ("1,234.05", "one thousand two hundred thirty four point zero five"),
    ("I have 3.", "I have three."),
    # ordinals, dates
    ("1st", "first"), ("2nd", "second"), ("3rd", "third"), ("4th", "fourth"), ("11th", "eleventh"),
    ("12th", "twelfth"), ("13th", "thirteenth"), ("21st", "twenty first"), ("22nd", "twenty second"),
    ("103rd", "one hundred third"), ("100th", "one hundredth"), ("1,000th", "one thousandth"), ("20th", "twentieth"),
    ("May 2", "May second"), ("on June 30, 2021", "on June thirtieth, twenty twenty one"),
    ("2024-05-12", "May twelfth twenty twenty four"),
    # years (a bare 4-digit number 1100-2099)
    ("in 1999", "in nineteen ninety nine"), ("2005", "two thousand five"), ("2024", "twenty twenty four"),
    ("1900", "nineteen hundred"), ("1905", "nineteen oh five"), ("2000", "two thousand"), ("2010", "twenty ten"),
    ("1100", "eleven hundred"), ("1,999 votes", "one thousand nine hundred ninety nine votes"),
    ("-1999", "minus one thousand nine hundred ninety nine"), ("1999.5", "one thousand nine hundred ninety nine point five"),
    ("1990s", "nineteen nineties"), ("1990's", "nineteen nineties"), ("the '80s", "the eighties"),
    ("1900s", "nineteen hundreds"), ("2000s", "two thousands"), ("6s", "sixes"),
    # currency
    ("$5", "five dollars"), ("$1", "one dollar"), ("$5.50", "five dollars and fifty cents"),
    ("$0.99", "ninety nine cents"), ("$.99", "ninety nine cents"), ("$0.01", "one cent"), ("$0", "zero dollars"),
    ("$1.01", "one dollar and one cent"), ("$1.00", "one dollar"), ("$5.5", "five dollars and fifty cents"),
    ("$5.125", "five point one two five dollars"), ("£3", "three pounds"), ("£1.50", "one pound and fifty pence"),
    ("€1,000", "one thousand euros"), ("¥500", "five hundred yen"), ("¥5.5", "five point five yen"),
    ("$1.5 million", "one point five million dollars"), ("$2M", "two million dollars"), ("$3k", "three thousand dollars"),
    ("-$5", "minus five dollars"), ("5 USD", "five dollars"), ("2.50 EUR", "two euros and fifty cents"),
    ("1 GBP", "one pound"), ("99¢", "ninety nine cents"), ("it costs $5.", "it costs five dollars."),
    # percentages, degrees
    ("50%", "fifty percent"), ("3.5 %", "three point five percent"), ("-2%", "minus two percent"),
    ("20°C", "twenty degrees celsius"), ("-4 °F", "minus four degrees fahrenheit"), ("90°", "ninety degrees"),
    # times
    ("3:30", "three thirty"), ("3:05", "three oh five"), ("3:00", "three o'clock"), ("15:00", "fifteen hundred"),
    ("15:45", "fifteen forty five"), ("00:30", "zero thirty"), ("3:30 pm", "three thirty p m"),
    ("10:05am", "ten oh five eh em"), ("7:15 a.m.", "seven fifteen eh em"), ("12:00 PM", "twelve p m"),
    ("5pm", "five p m"), ("at 9 am today", "at nine eh em today"), ("John 3:16", "John three sixteen"),
    # fractions
    ("1/2", "one half"), ("3/2", "three halves"), ("1/4", "one quarter"), ("3/4", "three quarters"),
    ("2/3", "two thirds"), ("5/8", "five eighths"), ("1/10", "one tenth"), ("1/100", "one one hundredth"),
    ("1 1/2", "one and a half"), ("2 3/4", "two and three quarters"),
    # ranges and digit groups
    ("1990-1995", "nineteen ninety to nineteen ninety five"), ("1990-95", "nineteen ninety to ninety five"),
    ("pages 3-5", "pages three to five"), ("3\u20135", "three to five"), ("$5-$10", "five dollars to ten dollars"),
    ("10%-20%", "ten percent to twenty percent"), ("9am-5pm", "nine eh em to five p m"),
    ("10:00-11:30", "ten o'clock to eleven thirty"), ("555-123-4567", "five five five, one two three, four five six seven"),
    # abbreviations
    ("Mr. Smith", "mister Smith"), ("Mrs. Jones", "missus Jones"), ("Ms. Lee", "miz Lee"), ("Dr. Who", "doctor Who"),
    ("Prof. Xu", "professor Xu"), ("John Jr.", "John junior"), ("St. Louis", "saint Louis"),
    ("on Main St.", "on Main street"), ("cats vs. dogs", "cats versus dogs"), ("cats vs dogs", "cats versus dogs"),
    ("apples, pears, etc.", "apples, pears, et cetera"), ("fruit, e.g. apples", "fruit, for example apples"),
    ("i.e. now", "that is now"), ("No. 5", "number five"), ("#1 fan", "number one fan"),
    # letters glued to numbers
    ("5kg", "five kg"), ("mp3", "mp three"), ("3D", "three D"),
    # the brief's sentence
    ("I paid $5.50 for 3 apples on May 2nd, 2024 at 3:30 pm",
     "I paid five dollars and fifty cents for three apples on May second, twenty twenty four at three thirty p m"),
]


@pytest.mark.parametrize(("text", "want"), CASES, ids=[c[0] for c in CASES])
def test_normalize_text_reads(text, want):
    assert normalize_text(text) == want
    assert normalize_text(want) == want  # idempotent: its output has nothing left to rewrite


@pytest.mark.parametrize("text", ["hello there", "It's done, isn't it?", "Café naïve", "salt & pepper", "",
                                  "smile \N{GRINNING FACE} now", "hello 世界", "cost $ ten", "well... (yes) - ok!",
                                  "Monday, March and May", "No, it is not", "a mid-day break"])
def test_normalize_text_leaves_text_without_numbers_alone(text):
    """Plain text passes unchanged (what it cannot read is for clean_text to refuse, not to drop)."""
    assert normalize_text(text) == text


UNREADABLE_DIGITS = ["1.2.3", "3:75", "25:00", "3:30:15", "12,34", "1,2,3", "5/12/2024", "24/7", "1/0", "9/11",
                     "192.168.0.1", "v1.2.3"]


@pytest.mark.parametrize("text", UNREADABLE_DIGITS)
def test_digits_it_cannot_read_are_refused_by_name(text):
    with pytest.raises(InputError, match=f"cannot read '{text}' as a number.*write this one out as words"):
        normalize_text(f"go {text} now")


def test_out_of_range_numbers_and_times_are_refused_with_the_limit():
    with pytest.raises(InputError, match="too large to read.*999,999,999,999"):
        normalize_text("1,000,000,000,000 stars")
    with pytest.raises(InputError, match="too large"):
        normalize_text("$12345678901234")
    with pytest.raises(InputError, match="hour is 1 to 12"):
        normalize_text("13:00 pm")
    with pytest.raises(InputError, match="must be a string"):
        normalize_text(5)  # type: ignore[arg-type]


def test_number_words():
    assert [cardinal(n) for n in (0, 15, 40, 99, 110, 1001, 10**9)] == [
        "zero", "fifteen", "forty", "ninety nine", "one hundred ten", "one thousand one", "one billion"]
    assert [ordinal(n) for n in (0, 5, 8, 9, 30, 1000000)] == ["zeroth", "fifth", "eighth", "ninth", "thirtieth", "one millionth"]
    assert [year(n) for n in (1066, 1200, 1801, 2009, 2099)] == [
        "ten sixty six", "twelve hundred", "eighteen oh one", "two thousand nine", "twenty ninety nine"]


# ------------------------------------------------------------------------------------------ clean_text / G2P
READ = {
    "I paid $5.50 for 3 apples on May 2nd, 2024 at 3:30 pm":
        "i paid five dollars and fifty cents for three apples on may second twenty twenty four at three thirty p m",
    "I have 3 cats": "i have three cats",
    "123": "one hundred twenty three",
    "Dr. Smith lives at No. 10, St. James St.": "doctor smith lives at number ten saint james street",
    "50% off, e.g. $10-$20": "fifty percent off for example ten dollars to twenty dollars",
    "Meet at 10:05am on 2024-05-12.": "meet at ten oh five eh em on may twelfth twenty twenty four",
}


def test_clean_text_reads_numbers_and_phonemize_speaks_them():
    assert {t: clean_text(t) for t in READ} == READ
    ipa = phonemize(list(READ))
    assert len(ipa) == len(READ) and all(ipa)
    assert ipa[1] == phonemize(["i have three cats"])[0]


@pytest.mark.parametrize(("text", "match"), [
    ("hello 世界", r"cannot read \('世界'\)"), ("Straße 5", r"cannot read \('ß'\)"),
    ("x\N{SUPERSCRIPT TWO} is 4", r"cannot read \('\N{SUPERSCRIPT TWO}'\)"),
    ("\N{FULLWIDTH DIGIT THREE} cats", r"cannot read \('\N{FULLWIDTH DIGIT THREE}'\)"),
    ("\N{VULGAR FRACTION ONE HALF} cup", r"cannot read \('\N{VULGAR FRACTION ONE HALF}'\)"),
    ("smile \N{GRINNING FACE} 3 times", "symbols the voice would skip"), ("cost $ ten", "symbols the voice would skip"),
    ("3 < 5", "symbols the voice would skip"), ("5 \N{EURO SIGN}", "symbols the voice would skip"),
    ("version 1.2.3", "cannot read '1.2.3' as a number"), ("?! ...", "no pronounceable characters"),
])
def test_clean_text_still_refuses_what_it_cannot_read(text, match):
    with pytest.raises(InputError, match=match):
        clean_text(text)


# ------------------------------------------------------------------------------------------ shipped pipeline
@functools.cache
def _tts():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/tts-en")


def test_the_shipped_tts_pipeline_speaks_text_with_digits():
    """End to end on the shipped asset (its example prompt voice, 2 T2S steps: a few seconds on a CPU):
    digits are spoken; unreadable digits and foreign letters fail their own item only."""
    out = _tts()(["I paid $5.50 for 3 apples at 3:30 pm", "version 1.2.3", "hello 世界"], steps=2, seed=0)
    assert out.errors[0] is None and out.audios[0] is not None
    assert out.audios[0].dtype == np.float32 and out.audios[0].size > out.sample_rate  # well over a second of speech
    assert "cannot read '1.2.3' as a number" in out.errors[1] and out.audios[1] is None
    assert "cannot read ('世界')" in out.errors[2] and out.audios[2] is None
