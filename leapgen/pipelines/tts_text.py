"""Long texts for :class:`~leapgen.pipelines.tts.TTSPipeline`: spoken in chunks of whole sentences, then joined.

The T2S and S2A models learnt single sentences of a few seconds, and their contexts are fixed (T2S:
512 positions for the prompt's and the target's phones and frames together), so a paragraph is not
spoken in one piece. :func:`split_text` normalises it (numbers and abbreviations written out, so the
only full stops left end sentences), cuts it into sentences, a sentence longer than
:data:`LONG_TEXT_CHARS` at its commas, then between words, and groups consecutive pieces into chunks
of at most :data:`LONG_TEXT_CHARS` characters; a text that fits stays whole. The pipeline speaks every
chunk in the same batch and voice and :func:`join_chunks` puts each text's chunks back together with
:data:`PAUSE_SECONDS` of silence between them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..errors import LeapgenError
from ..tokenizers.phones import clean_text
from ..tokenizers.text_normalize import normalize_text

#: the longest chunk spoken in one piece (normalised characters; about 8 s at espeak-ng's rate)
LONG_TEXT_CHARS = 120
#: silence between the chunks of one text
PAUSE_SECONDS = 0.2
_LETTER = re.compile(r"[a-zA-Z]")


def _pieces(text: str, budget: int) -> list[str]:
    """Sentences; clauses of a sentence over ``budget``; word runs of a clause over it."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?;:])\s+|(?<=[a-z][.!?])(?=[A-Z])", text.strip()):  # 'late.Go' too
        if len(sentence) <= budget:
            out.append(sentence)
            continue
        for clause in re.split(r"(?<=,)\s+", sentence):
            if len(clause) <= budget:
                out.append(clause)
                continue
            run = ""
            for word in clause.split():
                if run and len(run) + 1 + len(word) > budget:
                    out.append(run)
                    run = word
                else:
                    run = f"{run} {word}".strip()
            out.append(run)
    return [p for p in out if p]


def split_text(text: str, budget: int = LONG_TEXT_CHARS) -> list[str]:
    """The chunks ``text`` is spoken in (``[text]`` when it fits in ``budget`` characters, or when it
    cannot be normalised: the pipeline then reports why for the whole text)."""
    if not isinstance(text, str):
        return [text]
    try:
        clean_text(text)  # unreadable anywhere: the whole text fails with the reason
        norm = normalize_text(text)
    except LeapgenError:
        return [text]
    if len(norm) <= budget:
        return [text]
    chunks: list[str] = []
    lead = ""  # letterless pieces before the first chunk ("... Well"): said with it, not alone
    for piece in _pieces(norm, budget):
        if not chunks and not _LETTER.search(piece):
            lead = f"{lead} {piece}".strip()
        elif chunks and (not _LETTER.search(piece) or len(chunks[-1]) + 1 + len(piece) <= budget):
            chunks[-1] = f"{chunks[-1]} {piece}"  # nothing to say on its own (". . ."), or room left
        else:
            chunks.append(f"{lead} {piece}".strip() if not chunks else piece)
    return chunks or [text]


def join_chunks(owners: Sequence[int], chunks: Sequence[str], audios: Sequence[np.ndarray | None],
                semantic: Sequence[list[int] | None], errors: Sequence[str | None], n: int,
                sample_rate: int) -> tuple[list[np.ndarray | None], list[list[int] | None], list[str | None]]:
    """Per text (``owners[j]`` = the text of chunk ``j``): its chunks' audio joined with pauses, their
    semantic tokens concatenated, or the first failing chunk's error (the text then has no audio)."""
    pause = np.zeros(int(round(PAUSE_SECONDS * sample_rate)), dtype=np.float32)
    out_a: list[np.ndarray | None] = []
    out_s: list[list[int] | None] = []
    out_e: list[str | None] = []
    for i in range(n):
        idx = [j for j, o in enumerate(owners) if o == i]
        bad = next((j for j in idx if errors[j] is not None), None)
        if bad is not None:
            quote = chunks[bad] if len(chunks[bad]) <= 40 else chunks[bad][:37] + "..."
            where = f"part {idx.index(bad) + 1} of {len(idx)} ({quote!r}): " if len(idx) > 1 else ""
            out_a.append(None)
            out_s.append(None)
            out_e.append(where + str(errors[bad]))
            continue
        parts: list[np.ndarray] = []
        for j in idx:
            if parts:
                parts.append(pause)
            parts.append(audios[j])  # type: ignore[arg-type]
        out_a.append(np.concatenate(parts).astype(np.float32, copy=False))
        out_s.append([t for j in idx for t in (semantic[j] or [])])
        out_e.append(None)
    return out_a, out_s, out_e


__all__ = ["LONG_TEXT_CHARS", "PAUSE_SECONDS", "join_chunks", "split_text"]
