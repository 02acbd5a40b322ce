"""Word vocabulary for short text prompts (the emoji names of the image pipeline).

Lower-cased words split on whitespace and punctuation (``"flag: us"`` -> ``flag``, ``:``, ``us``).
Ids 0/1/2 are ``<pad>``, ``<null>`` (the dropped condition of classifier-free guidance) and
``<unk>``; the rest are the training words by decreasing frequency (ties alphabetical), so the
vocabulary is deterministic. Saved as ``vocab.json`` by :class:`leapgen.configuration.ConfigMixin`
(``save_pretrained`` / ``from_pretrained``, the path every leapgen component uses).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..configuration import ConfigMixin
from ..errors import ConfigError, InputError

SPECIALS = ("<pad>", "<null>", "<unk>")
_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class WordVocab(ConfigMixin):
    """Maps prompt texts to word ids and back."""

    config_name = "vocab.json"

    def __init__(self, words: Iterable[str], max_len: int = 12) -> None:
        self.itos: list[str] = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.max_len = int(max_len)

    @staticmethod
    def split(text: str) -> list[str]:
        return _WORD.findall(text.lower())

    @classmethod
    def build(cls, texts: Iterable[str], max_len: int | None = None, min_count: int = 1) -> WordVocab:
        texts = list(texts)
        counts = Counter(w for t in texts for w in cls.split(t))
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        longest = max((len(cls.split(t)) for t in texts), default=1)
        return cls(words, max_len=max_len or longest)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """Word ids of ``text`` (unknown words -> ``<unk>``), truncated to ``max_len``."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("a text prompt must be a non-empty string")
        return [self.stoi.get(w, 2) for w in self.split(text)][: self.max_len]

    def unknown_words(self, text: str) -> list[str]:
        return [w for w in self.split(text) if w not in self.stoi]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.itos[i] for i in ids if i >= len(SPECIALS))

    # ------------------------------------------------------------------ save / load (leapgen.configuration)
    def config_dict(self) -> dict[str, Any]:
        return {"max_len": self.max_len, "words": self.itos}

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> WordVocab:
        config = {**config, **overrides}
        if "words" not in config:
            raise ConfigError("a WordVocab config needs 'words' (and 'max_len'); write it with WordVocab.save_pretrained")
        return cls(config["words"][len(SPECIALS) :], max_len=config.get("max_len", 12))


__all__ = ["WordVocab", "SPECIALS"]
