"""Phones for text-to-speech: espeak-ng as the grapheme-to-phoneme front end, IPA symbols as tokens.

MaskGCT (Amphion) phonemises text with a bundled G2P built on phonemizer / espeak-ng; here
``espeak-ng -q --ipa -v en-us`` is called directly (one subprocess for a whole batch: one line in,
one line out). Tokens are the IPA characters of its output (stress marks and length marks are
their own tokens) and ``" "`` for word boundaries; ids 0 = ``<pad>``, 1 = ``<unk>``, then the
inventory seen in the training corpus.

* :func:`clean_text` first writes numbers, amounts, times, dates and abbreviations out as words
  (:func:`~leapgen.tokenizers.text_normalize.normalize_text`: ``"$5.50 at 3:30 pm"`` -> ``"five dollars
  and fifty cents at three thirty p m"``; the corpus has no digits, and espeak-ng's own reading of
  them is not what the models were trained on).
* :func:`phonemize` (``texts -> IPA strings``) raises :class:`InputError` for an empty text, a text
  without one pronounceable letter, digits that read as no number, time, amount or date (``"1.2.3"``),
  a non-Latin letter or digit, and a symbol it does not say (dropping them would speak another
  sentence). Accents are dropped (``café`` -> ``cafe``).
* :class:`PhoneTokenizer` (a pipeline component, ``phones.json``): ``encode(ipa) -> ids``,
  ``__call__(texts) -> list of id lists``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from ..configuration import ConfigMixin
from ..errors import ConfigError, InputError
from .text_normalize import normalize_text

SPECIALS = ("<pad>", "<unk>")
_LETTERS = re.compile(r"[a-zA-Z]")
_UNREADABLE = re.compile(r"[^\W_a-zA-Z]")  # digits left after normalize_text, and letters other than a-z
G2P_VOICE = "en-us"
#: symbols read as a word; any other symbol (Unicode category S*: currency, maths, emoji ...) is refused,
#: and punctuation is a word break
_SPOKEN_SYMBOLS = {"&": "and", "%": "percent", "+": "plus", "=": "equals", "@": "at"}


def _fold(text: str) -> str:
    """``text`` without accents (``café`` -> ``cafe``; NFKD, combining marks dropped)."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def clean_text(text: str) -> str:
    """Lower-case, letters / apostrophes / spaces only (the corpus's form). Numbers, amounts, times,
    dates and abbreviations are first written out as words (:func:`normalize_text`: ``"3 cats"`` ->
    ``"three cats"``, ``"$5.50"`` -> ``"five dollars and fifty cents"``, ``"Dr."`` -> ``"doctor"``).
    Accents are dropped (``café`` -> ``cafe``); ``& % + = @`` are read as words (``"salt & pepper"`` ->
    ``"salt and pepper"``); punctuation becomes a word break. InputError when nothing is left, for
    digits that read as no number (``"1.2.3"``), and when a letter outside a-z, a digit of another
    script or another symbol (``$`` alone, ``€``, an emoji) would be dropped silently."""
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise InputError("empty text: give at least one word to speak.")
    spelled = normalize_text(text)
    folded = _fold(spelled)
    for sym, word in _SPOKEN_SYMBOLS.items():
        folded = folded.replace(sym, f" {word} ")
    if not _LETTERS.search(folded):
        raise InputError(f"text {text!r} has no pronounceable characters (no letters a-z, no number); write the words out.")
    unread = sorted({c for c in spelled if _UNREADABLE.search(_fold(c))})
    if unread:
        raise InputError(f"text {text!r} has characters the voice cannot read ({''.join(unread)!r}): it speaks English "
                         "letters a-z and numbers written with the digits 0-9; transliterate other letters and "
                         "write other digits (superscripts, other scripts) as 0-9 or as words.")
    symbols = sorted({c for c in folded if unicodedata.category(c).startswith("S")})
    if symbols:
        raise InputError(f"text {text!r} has symbols the voice would skip ({''.join(symbols)!r}); write them out as "
                         f"words (it says {', '.join(repr(k) for k in _SPOKEN_SYMBOLS)} itself, and $ £ € ¥ ₹ ° "
                         "before or after a number: '$5', '20°C').")
    words = re.sub(r"[^a-z' ]+", " ", folded.lower()).split()
    return " ".join(words)


def phonemize(texts: Sequence[str], voice: str = G2P_VOICE) -> list[str]:
    """IPA of each text (espeak-ng, one subprocess for the batch); InputError for unusable text."""
    cleaned = [clean_text(t) for t in texts]
    if not cleaned:
        return []
    if shutil.which("espeak-ng") is None:
        raise ConfigError("`espeak-ng` is not installed; it is the G2P of the TTS family (Debian: apt-get install espeak-ng).")
    out = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", voice], input="\n".join(cleaned) + "\n",
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = [" ".join(line.split()) for line in out.splitlines() if line.strip()]
    if len(lines) != len(cleaned):  # espeak-ng split or merged a line: fall back to one call each
        lines = [" ".join(subprocess.run(["espeak-ng", "-q", "--ipa", "-v", voice, t], capture_output=True, text=True,
                                         timeout=60, check=True).stdout.split()) for t in cleaned]
    return lines


class PhoneTokenizer(ConfigMixin):
    """IPA symbols <-> ids (see the module docstring); saved as ``phones.json``."""

    config_name = "phones.json"

    def __init__(self, symbols: Iterable[str]) -> None:
        self.itos: list[str] = list(SPECIALS) + sorted(s for s in set(symbols) if s not in SPECIALS)
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @classmethod
    def fit(cls, ipa: Iterable[str]) -> PhoneTokenizer:
        """The inventory of every character in ``ipa``."""
        return cls({c for s in ipa for c in s})

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, ipa: str) -> list[int]:
        return [self.stoi.get(c, 1) for c in ipa]

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        """Phone ids of each text (G2P then :meth:`encode`)."""
        return [self.encode(s) for s in phonemize(texts)]

    def config_dict(self) -> dict[str, Any]:
        return {"symbols": self.itos}

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> PhoneTokenizer:
        config = {**config, **overrides}
        if "symbols" not in config:
            raise ConfigError("a PhoneTokenizer config needs 'symbols'; write it with PhoneTokenizer.save_pretrained")
        return cls(config["symbols"][len(SPECIALS):])


__all__ = ["G2P_VOICE", "PhoneTokenizer", "clean_text", "phonemize"]
