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

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, LeapgenError
from ..tokenizers.phones import clean_text
from ..tokenizers.text_normalize import normalize_text

#: the longest chunk spoken in one piece (normalised characters; about 8 s at espeak-ng's rate)
LONG_TEXT_CHARS = 120
#: silence between the chunks of one text
PAUSE_SECONDS = 0.2
logger = logging.getLogger(__name__)
_LETTER = re.compile(r"[a-zA-Z]")
#: semantic frames per prompt phone a prompt may imply: espeak-ng at 450 words a minute gives 0.36, at 80
#: wpm 1.6 (175 wpm: 0.83); outside this range prompt_text is not what the clip says
PROMPT_RATE = (0.3, 5.0)


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


def check_prompt_rate(frames: int, phones: int, prompt_text: str, heard: bool, frame_seconds: float) -> None:
    """InputError when the prompt's text cannot be what its clip says: the target length is read off
    ``frames / phones``, so a one-word ``prompt_text`` for a 3 s clip made a four-word text 12.9 s long and a
    long one made it a 0.5 s blur, with no error. ``heard``: the text came from the bundled ASR."""
    rate = frames / max(phones, 1)
    if PROMPT_RATE[0] <= rate <= PROMPT_RATE[1]:
        return
    quote = prompt_text if len(prompt_text) <= 60 else prompt_text[:57] + "..."
    side = "too few" if rate > PROMPT_RATE[1] else "too many"
    fix = ("the bundled ASR misheard it; pass prompt_text= (what the clip says)" if heard else
           "prompt_text must be exactly what the prompt clip says (or leave it out to have the bundled ASR transcribe it)")
    if rate > PROMPT_RATE[1]:
        fix += ", and the clip one stretch of speech (cut long pauses out of it)"
    raise InputError(f"the prompt text {quote!r} has {side} phones ({phones}) for {frames * frame_seconds:.1f} s of "
                     f"prompt speech ({rate:.2f} semantic frames per phone; speech runs at {PROMPT_RATE[0]:g}-"
                     f"{PROMPT_RATE[1]:g}): {fix}.")


def with_example_voice(prompts: list[Any], ptexts: list[Any], example: Callable[[Any], tuple[str, Any]]
                       ) -> tuple[list[Any], list[Any]]:
    """A None in a per-text ``prompt_audio`` list is the asset's example voice (its text too where that
    text's ``prompt_text`` is None), as for a call without ``prompt_audio``; it used to fail the item as an
    "unsupported audio item of type NoneType". Without an example voice the Nones stay (the item fails)."""
    if not any(p is None for p in prompts):
        return prompts, ptexts
    try:
        audio, text = example(None)
    except LeapgenError:
        return prompts, ptexts
    return ([audio if p is None else p for p in prompts],
            [text if p is None and t is None else t for p, t in zip(prompts, ptexts)])


def warn_silent(audios: Sequence[np.ndarray | None], rows: Sequence[int], owners: Sequence[int], sampler: str,
                peak: float = 1e-3) -> list[int]:
    """The texts (``owners[row]``) of the chunks ``rows`` whose generated audio is silence (peak below
    ``peak``), each logged as a warning (the rows used to be reported as chunk indices)."""
    silent = sorted({owners[i] for i in rows if audios[i] is not None
                     and (audios[i].size == 0 or float(np.abs(audios[i]).max()) < peak)})  # type: ignore[union-attr]
    other = "sampler='ar'" if sampler == "maskgct_t2s" else "sampler='maskgct'"
    for i in silent:
        logger.warning("item %d: the generated speech is silent (the %s T2S produced only silence tokens); try another "
                       "seed or %s", i, sampler, other)
    return silent


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


__all__ = ["LONG_TEXT_CHARS", "PAUSE_SECONDS", "PROMPT_RATE", "check_prompt_rate", "join_chunks", "split_text", "warn_silent",
           "with_example_voice"]
