"""Word vocabulary of the ASR models: ids 0 = ``<blank>`` (CTC blank and padding), 1 = ``<s>``
(start and end of sentence), 2 = ``<unk>``, then the corpus words (sorted). Word units give CIF
at most about one token per 60 ms frame (English speech: ~3 words/s against 16.7 frames/s) and
make every token a word, so CIF fire frames are word timestamps. Saved as ``vocab.json``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..configuration import ConfigMixin
from ..errors import ConfigError

SPECIALS = ("<blank>", "<s>", "<unk>")


class ASRVocab(ConfigMixin):
    """Maps transcripts (lower-case words) to ids and back."""

    config_name = "vocab.json"

    def __init__(self, words: Iterable[str]) -> None:
        self.itos: list[str] = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """Ids of the words of ``text`` (unknown words -> ``<unk>``)."""
        return [self.stoi.get(w, 2) for w in text.lower().split()]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.words(ids))

    def words(self, ids: Iterable[int]) -> list[str]:
        """Words of ``ids``, special ids dropped (``<unk>`` kept as written)."""
        return [self.itos[i] for i in ids if i >= 2 and i < len(self.itos)]

    def config_dict(self) -> dict[str, Any]:
        return {"words": self.itos}

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> ASRVocab:
        config = {**config, **overrides}
        if "words" not in config:
            raise ConfigError("an ASRVocab config needs 'words'; write it with ASRVocab.save_pretrained")
        return cls(config["words"][len(SPECIALS):])


__all__ = ["ASRVocab", "SPECIALS"]
