"""Text normalisation for text-to-speech: numbers, amounts, times and abbreviations written out as words.

The TTS corpus has no digits, so :func:`normalize_text` rewrites what a reader would say, before
:func:`~leapgen.tokenizers.phones.clean_text` keeps letters a-z only (the way NeMo's text
normalisation precedes its G2P). Only ASCII digits 0-9 are read; everything else is left as it is.

What it reads (``"I paid $5.50 for 3 apples on May 2nd, 2024 at 3:30 pm"`` -> ``"I paid five dollars
and fifty cents for three apples on May second, twenty twenty four at three thirty p m"``):

* cardinals 0 .. 999,999,999,999, with or without thousands separators (``"1,234"``); a sign
  (``"-5"``, ``"−5"``) is "minus"; a leading zero is read digit by digit (``"007"`` -> "zero zero seven");
* decimals (``"3.14"`` -> "three point one four", ``".5"`` -> "point five");
* ordinals (``"1st"``, ``"22nd"``, ``"103rd"``), and a day after a month name (``"May 2"`` -> "May second");
* **years**: a bare four-digit number from 1100 to 2099 (no separator, sign, decimals or unit) is read
  as a year (``"1999"`` -> "nineteen ninety nine", ``"2005"`` -> "two thousand five", ``"2024"`` ->
  "twenty twenty four", ``"1900"`` -> "nineteen hundred"); write ``"1,999"`` for the count; decades
  ``"1990s"`` / ``"'90s"``; ISO dates ``"2024-05-12"`` -> "May twelfth twenty twenty four";
* currency before the number (``$ £ € ¥ ₹``: ``"$5.50"``, ``"€1,000"``, ``"$1.5 million"``, ``"$2M"``),
  codes after it (``"5 USD"``, ``EUR GBP JPY INR``), ``"99¢"``; percentages (``"50%"``), degrees
  (``"20°C"``);
* times ``H:MM`` (``"3:30"`` -> "three thirty", ``"3:05"`` -> "three oh five", ``"3:00"`` -> "three
  o'clock", ``"15:00"`` -> "fifteen hundred") with an optional ``am`` / ``p.m.``, and ``"5pm"``;
* fractions (``"1/2"`` -> "one half", ``"3/4"`` -> "three quarters", ``"1 1/2"`` -> "one and a half");
* ranges: a hyphen (unspaced) or an en dash between numbers is "to" (``"1990-1995"``, ``"pages 3-5"``,
  ``"$5-$10"``); a spaced hyphen is punctuation (``"7 - 2"``: write "minus" for a subtraction); three
  or more hyphenated groups (``"555-123-4567"``) are read digit by digit;
* abbreviations ``Mr. Mrs. Ms. Dr. Prof. Jr. Sr. St. vs. etc. e.g. i.e. approx. No. 5 #5``
  (``"St."`` is "saint" before a capitalised word, else "street").

What it refuses (:class:`~leapgen.errors.InputError` naming the token): digits it cannot read as one of the
above (``"1.2.3"``, ``"3:75"``, ``"12,34"``, ``"5/12/2024"``: day and month order is ambiguous, a number
over 999,999,999,999, ``"13:00 pm"``, scientific notation ``"1e10"``). It never drops anything; an emoji, a stray symbol or a
non-Latin letter is left in place for ``clean_text`` to refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import InputError

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_MAX = 10**12 - 1
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
            "nine": "ninth", "twelve": "twelfth"}
_MONTHS = ("January February March April May June July August September October November December").split()
#: symbol or code -> (one, many, one hundredth, many hundredths); a currency without a subunit has None
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
             "€": ("euro", "euros", "cent", "cents"), "¥": ("yen", "yen", None, None),
             "₹": ("rupee", "rupees", "paisa", "paise")}
_CODES = {"USD": "$", "GBP": "£", "EUR": "€", "JPY": "¥", "INR": "₹"}
_SCALE_WORDS = {"k": "thousand", "K": "thousand", "M": "million", "B": "billion", "bn": "billion"}
_ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "ms": "miz", "dr": "doctor", "prof": "professor", "jr": "junior",
                  "sr": "senior", "vs": "versus", "etc": "et cetera", "approx": "approximately"}

# a number starts after no digit (nor "digit." / "digit," ...) and ends before no digit (nor ".digit" ...)
_LB = r"(?<![0-9])(?<![0-9][.,:/])"
_RA = r"(?![0-9])(?![.,:/][0-9])"
_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"
_SIGN = r"(?:(?<![\w.,])[-\u2212])?"  # a minus sign not glued to a word ("COVID-19" is not negative)
_SYM = "$£€¥₹"


def cardinal(n: int) -> str:
    """``n`` in words (``1234`` -> "one thousand two hundred thirty four"); InputError past 999,999,999,999."""
    if n < 0:
        return f"minus {cardinal(-n)}"
    if n > _MAX:
        raise InputError(f"{n:,} is too large to read (the limit is 999,999,999,999); write it out as words.")
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (f" {_ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{_ONES[n // 100]} hundred" + (f" {cardinal(n % 100)}" if n % 100 else "")
    for size, name in _SCALES:
        if n >= size:
            return f"{cardinal(n // size)} {name}" + (f" {cardinal(n % size)}" if n % size else "")
    raise AssertionError(n)  # unreachable


def ordinal(n: int) -> str:
    """``21`` -> "twenty first", ``12`` -> "twelfth", ``100`` -> "one hundredth"."""
    *head, last = cardinal(n).split()
    last = _ORDINAL.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return " ".join([*head, last])


def year(n: int) -> str:
    """``1999`` -> "nineteen ninety nine", ``2005`` -> "two thousand five", ``1905`` -> "nineteen oh five"."""
    hi, lo = divmod(n, 100)
    if 2000 <= n <= 2009 or n % 1000 == 0 or not 1000 <= n <= 9999:
        return cardinal(n)
    return f"{cardinal(hi)} " + ("hundred" if lo == 0 else f"oh {_ONES[lo]}" if lo < 10 else cardinal(lo))


def _plural(words: str) -> str:
    *head, last = words.split()
    last = last[:-1] + "ies" if last.endswith("y") else last + ("es" if last.endswith(("x", "s")) else "s")
    return " ".join([*head, last])


def _digits(s: str) -> str:
    return " ".join(_ONES[int(c)] for c in s)


def _int(digits: str) -> int:
    """``int(digits)``; InputError past the reader's limit (before Python's own limit on the length of
    an integer string raises a ValueError)."""
    if len(digits) > 15:
        raise InputError(f"{digits[:15]}... ({len(digits)} digits) is too large to read (the limit is "
                         "999,999,999,999); write it out as words.")
    return int(digits)


def _is_year(s: str) -> bool:
    return len(s) == 4 and s.isdigit() and 1100 <= int(s) <= 2099


def read_number(s: str) -> str:
    """A number as written (``"1,234.5"``, ``".5"``, ``"007"``) in words; no year reading."""
    whole, _, frac = s.replace(",", "").partition(".")
    words = "" if not whole else _digits(whole) if len(whole) > 1 and whole[0] == "0" else cardinal(_int(whole))
    return (f"{words} point {_digits(frac)}" if words else f"point {_digits(frac)}") if frac else words


def _pad(m: re.Match[str], words: str) -> str:
    """``words`` with a space against a letter or digit on either side (``"5kg"`` -> "five kg")."""
    before = m.string[m.start() - 1] if m.start() else " "
    after = m.string[m.end()] if m.end() < len(m.string) else " "
    return (" " if before.isalnum() else "") + words + (" " if after.isalnum() else "")


def _neg(m: re.Match[str]) -> str:
    """"minus " when the match starts with a minus sign."""
    return "minus " if m.group(0)[:1] in ("-", "\u2212") else ""


def _money(m: re.Match[str]) -> str:
    g = m.groupdict()
    one, many, sub_one, sub_many = _CURRENCY[g.get("sym") or _CODES[g["code"]]]
    num, scale = g["num"], g.get("scale") or _SCALE_WORDS.get(g.get("scale2") or "")
    whole, _, frac = num.replace(",", "").partition(".")
    if scale or (frac and (len(frac) > 2 or sub_one is None)):
        return _pad(m, _neg(m) + read_number(num) + (f" {scale}" if scale else "") + f" {many}")
    units, cents = _int(whole or "0"), int(frac.ljust(2, "0")) if frac else 0
    parts = [f"{cardinal(units)} {one if units == 1 else many}"] if units or not cents else []
    parts += [f"{cardinal(cents)} {sub_one if cents == 1 else sub_many}"] if cents else []
    return _pad(m, _neg(m) + " and ".join(parts))


def _time(m: re.Match[str]) -> str:
    g = m.groupdict()
    h, mins, ampm = int(g["h"]), g.get("m"), g["ampm"]
    if ampm and not 1 <= h <= 12:
        raise InputError(f"{m.group(0)!r} is not a time: with am / pm the hour is 1 to 12 (write '1 pm' or '13:00').")
    words = cardinal(h)
    if mins and mins != "00":
        words += f" oh {_ONES[int(mins)]}" if mins[0] == "0" else f" {cardinal(int(mins))}"
    elif mins and not ampm:
        words += " o'clock" if 1 <= h <= 12 else " hundred"
    # espeak-ng reads a lone "a" as the article (/ə/) and "eh" as the letter A (/eɪ/)
    return _pad(m, words + (" eh em" if ampm and ampm.lower() == "a" else " p m" if ampm else ""))


def _fraction(m: re.Match[str]) -> str:
    """A simple fraction (denominator 2-10, 16, 32, 64 or 100; numerator up to 10 or under the
    denominator); anything else ("24/7", "5/12": a date?) is left for the caller to refuse."""
    whole, top, bottom = m.group("whole"), _int(m.group("top")), _int(m.group("bottom"))
    if not (top and (2 <= bottom <= 10 or bottom in (16, 32, 64, 100)) and (top <= 10 or top < bottom)):
        return m.group(0)
    name = {2: "half", 4: "quarter"}.get(bottom) or ordinal(bottom)
    words = f"{'a' if whole and top == 1 else cardinal(top)} {_plural(name.replace('half', 'halve')) if top != 1 else name}"
    return _pad(m, _neg(m) + (f"{cardinal(_int(whole))} and {words}" if whole else words))


def _plain(m: re.Match[str]) -> str:
    num, sign = m.group("num"), _neg(m)
    return _pad(m, year(int(num)) if not sign and _is_year(num) else sign + read_number(num))


def _abbreviation(m: re.Match[str]) -> str:
    word = m.group(1).lower()
    if word == "st":
        return _pad(m, "saint" if re.match(r"\s*[A-Z]", m.string[m.end():]) else "street")
    return _pad(m, _ABBREVIATIONS[word])  # "Dr.Smith" -> "doctor Smith", not "doctorSmith"


def _unit(word: str, m: re.Match[str]) -> str:
    """``word`` after the number of ``m``: singular after exactly one ("1¢" -> "one cent"), else plural."""
    return word if m.group("num") == "1" else word + "s"


def _scientific(m: re.Match[str]) -> str:
    raise InputError(f"{m.group(0)!r} is in scientific notation, which the voice does not read; write the number "
                     "out (e.g. '1e6' -> 'one million' or 'ten to the sixth').")


_AMPM = r"(?:\s?(?P<ampm>[aApP])\.?\s?[mM]\.?(?![a-zA-Z]))"
_AMOUNT = _SIGN + _LB + r"(?P<num>" + _NUM + ")" + _RA  # a signed number
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"(?<![0-9])[0-9]+(?:\.[0-9]+)?[eE][-+\u2212]?[0-9]+(?![0-9])"), _scientific),
    (re.compile(r"(?<![a-zA-Z])(Mr|Mrs|Ms|Dr|Prof|Jr|Sr|St|vs|etc|approx)\."), _abbreviation),
    (re.compile(r"\be\.g\.", re.I), lambda m: _pad(m, "for example")),
    (re.compile(r"\bi\.e\.", re.I), lambda m: _pad(m, "that is")),
    (re.compile(r"\bvs\b"), lambda m: "versus"),
    (re.compile(r"(?:\bNo\.\s?|#)(?=[0-9])"), lambda m: _pad(m, "number")),
    (re.compile(_LB + r"(?P<y>[0-9]{4})-(?P<mo>0[1-9]|1[0-2])-(?P<d>0[1-9]|[12][0-9]|3[01])" + _RA),
     lambda m: _pad(m, f"{_MONTHS[int(m.group('mo')) - 1]} {ordinal(int(m.group('d')))} {year(int(m.group('y')))}")),
    (re.compile(r"(?<![0-9-])[0-9]+(?:-[0-9]+){2,}(?![0-9-])"),  # phone numbers, codes: digit by digit
     lambda m: _pad(m, ", ".join(_digits(g) for g in m.group(0).split("-")))),
    (re.compile(r"(?:(?<=[0-9%])|(?<=[0-9][ap]m))(?:-|\s?\u2013\s?)(?=[-\u2212]?[" + _SYM + r"]?\.?[0-9])"),
     lambda m: " to "),
    (re.compile(_LB + r"(?P<h>[01]?[0-9]|2[0-3]):(?P<m>[0-5][0-9])" + _RA + _AMPM + "?"), _time),
    (re.compile(_LB + r"(?P<h>1[0-2]|0?[1-9])" + _AMPM), _time),
    (re.compile(_SIGN + r"(?P<sym>[" + _SYM + r"])\s?" + _LB + r"(?P<num>" + _NUM + ")" + _RA
                + r"(?:\s(?P<scale>thousand|million|billion)\b|(?P<scale2>k|K|M|B|bn)\b|(?!\w))"), _money),
    (re.compile(_AMOUNT + r"\s?(?P<code>USD|EUR|GBP|JPY|INR)\b"), _money),
    (re.compile(_AMOUNT + "¢"), lambda m: _pad(m, f"{_neg(m)}{read_number(m.group('num'))} {_unit('cent', m)}")),
    (re.compile(_AMOUNT + r"\s?%"), lambda m: _pad(m, f"{_neg(m)}{read_number(m.group('num'))} percent")),
    (re.compile(_AMOUNT + r"\s?°(?:\s?(?P<unit>[CF])(?![a-zA-Z]))?"),
     lambda m: _pad(m, f"{_neg(m)}{read_number(m.group('num'))} {_unit('degree', m)}"
                       + {"C": " celsius", "F": " fahrenheit", None: ""}[m.group("unit")])),
    (re.compile(_SIGN + _LB + r"(?:(?P<whole>[0-9]+) )?(?P<top>[0-9]+)[/\u2044](?P<bottom>[0-9]+)" + _RA), _fraction),
    (re.compile(_LB + r"(?P<n>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:st|nd|rd|th)\b", re.I),
     lambda m: _pad(m, ordinal(_int(m.group("n").replace(",", ""))))),
    (re.compile(r"\b(?P<mo>" + "|".join(_MONTHS) + r")\s(?P<d>[12][0-9]|3[01]|0?[1-9])" + _RA + r"(?![:a-zA-Z])"),
     lambda m: f"{m.group('mo')} {ordinal(int(m.group('d')))}"),
    (re.compile(r"'?" + _LB + r"(?P<n>[0-9]+)'?s\b"),
     lambda m: _pad(m, _plural(year(int(m.group("n"))) if _is_year(m.group("n")) else read_number(m.group("n"))))),
    (re.compile(_AMOUNT), _plain),
]


def normalize_text(text: str) -> str:
    """``text`` with numbers, amounts, times and abbreviations in words (see the module docstring);
    InputError naming any run of digits it cannot read."""
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}.")
    out = text
    try:
        for pattern, spell in _RULES:
            out = pattern.sub(spell, out)
    except InputError as err:
        raise InputError(f"text {text!r}: {err}") from None
    left = re.findall(r"\S*[0-9]\S*", out)
    if left:
        raise InputError(
            f"text {text!r}: cannot read {', '.join(repr(t) for t in left)} as a number: the voice reads whole numbers up to "
            "999,999,999,999 ('1,234'), decimals ('3.14'), ordinals ('21st'), years ('1999', '1990s'), times "
            "('3:30 pm'), amounts ('$5.50', '5 USD'), percentages ('50%'), fractions ('1/2') and ranges ('3-5'); "
            "write this one out as words.")
    return out


__all__ = ["cardinal", "normalize_text", "ordinal", "read_number", "year"]
