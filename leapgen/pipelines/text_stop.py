"""Stop strings, finish reasons and token streaming for :class:`~leapgen.pipelines.text.TextPipeline`.

* :class:`StopStrings` (``pipe(prompt, stop=["\\n\\n", "def "])``, vLLM's ``stop``): the decode loops
  call :meth:`StopStrings.reached` after every committed token (``DecodeConfig.stop_check``), so a row
  stops at the token that completes a stop string, whichever sampler drafted it; :meth:`StopStrings.finish`
  then cuts the row's text before the stop string (vLLM's default, ``include_stop_str_in_output=False``)
  and its ``token_ids`` after the token that completed it. ``finish`` does not rely on the loop: it
  finds the shortest prefix whose text holds a stop string by bisection, so a sampler that does not
  commit through :class:`~leapgen.samplers.rows.Rows` still returns the same cut result.
* :func:`finish_reason`: ``"stop"`` (a stop string or an end-of-sequence token; ``stop_reasons[i]``
  says which: the string, or the token id) or ``"length"`` (``max_new_tokens`` reached), as vLLM's
  ``finish_reason`` / ``stop_reason``.
* :class:`TokenStream`: feeds a transformers streamer (``TextStreamer``, ``TextIteratorStreamer`` or
  any object with ``put(ids)`` and ``end()``): the prompt ids first (what ``skip_prompt=True``
  skips), then each step's committed tokens as they are accepted (several at once for a speculative
  step), then ``end()`` (also when the call fails; an error raised by ``end()`` itself surfaces
  named, and never hides the call's own error). Batch size 1, as transformers' streamers. Tokens after a stop string's
  completing token are never streamed; the stop string's own tokens are (the streamer sees them
  before the stop is known).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import InputError

logger = logging.getLogger(__name__)

FINISH_REASONS = ("stop", "length")


def check_stop(stop: Any) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings (None -> empty); InputError naming what is wrong."""
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, Sequence) or isinstance(items, bytes):
        raise InputError(f"stop must be a string or a list of strings, got {type(stop).__name__}.")
    out = []
    for s in items:
        if not isinstance(s, str):
            raise InputError(f"stop strings must be strings, got {s!r} ({type(s).__name__}).")
        if not s:
            raise InputError("a stop string is empty; it would stop before the first token. Remove it.")
        out.append(s)
    return tuple(dict.fromkeys(out))


class StopStrings:
    """The stop strings of one call over one tokenizer (see the module docstring)."""

    def __init__(self, tokenizer: Any, stop: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        # a stop string ending in the newest token starts at most len(utf-8 bytes of s) tokens back
        # (every token decodes to >= 1 byte; a byte-level BPE writes an emoji or an accented letter
        # as several 1-byte tokens); two more keep a tokenizer's start-of-text rules (a dropped
        # leading space) away from it
        self.window = max((len(s.encode("utf-8", "surrogatepass")) for s in self.stop), default=0) + 2

    def __bool__(self) -> bool:
        return bool(self.stop)

    def _text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def _holds(self, text: str) -> bool:
        return any(s in text for s in self.stop)

    def reached(self, generated: Sequence[int]) -> bool:
        """Whether the newest token completes a stop string (the loops' per-token check)."""
        return self._holds(self._text(generated[-self.window :]))

    def finish(self, tokens: list[int]) -> tuple[list[int], str, str | None]:
        """``(tokens, text, matched)``: the tokens up to the one completing the first stop string, the
        text before that string and the string, when one occurs; else all tokens, their whole text and None."""
        text = self._text(tokens)
        if not self.stop or not self._holds(text):
            return tokens, text, None
        lo, hi = 1, len(tokens)  # the shortest prefix whose text holds a stop string is tokens[:hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._holds(self._text(tokens[:mid])):
                hi = mid
            else:
                lo = mid + 1
        kept = tokens[:hi]
        text = self._text(kept)
        cut, matched = min((text.find(s), s) for s in self.stop if s in text)
        return kept, text[:cut], matched


def finish_reason(tokens: Sequence[int], matched: str | None, eos_ids: Sequence[int]) -> tuple[str, str | int | None]:
    """Why a row ended, as vLLM reports it: ``("stop", the stop string)``, ``("stop", the EOS id)`` or
    ``("length", None)`` (``max_new_tokens`` reached)."""
    if matched is not None:
        return "stop", matched
    if tokens and tokens[-1] in eos_ids:
        return "stop", int(tokens[-1])
    return "length", None


class TokenStream:
    """Feeds a transformers-style streamer during one decode (see the module docstring)."""

    def __init__(self, streamer: Any) -> None:
        for method in ("put", "end"):
            if not callable(getattr(streamer, method, None)):
                raise InputError(
                    f"streamer must have put(token_ids) and end() methods (transformers' TextStreamer or "
                    f"TextIteratorStreamer), got {type(streamer).__name__} without {method}()."
                )
        self.streamer = streamer
        self.sent = 0
        self.ended = False

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.streamer.put(torch.tensor([list(prompt_ids)], dtype=torch.long))

    def on_commit(self, row: int, tokens: Sequence[int]) -> None:
        """``DecodeConfig.on_commit``: a row's newly committed tokens."""
        if tokens:
            self.streamer.put(torch.tensor(list(tokens), dtype=torch.long))
            self.sent += len(tokens)

    def send_rest(self, final_tokens: Sequence[int]) -> None:
        """Send what the loop did not stream (a sampler that does not commit token by token)."""
        if len(final_tokens) > self.sent:
            self.streamer.put(torch.tensor(list(final_tokens[self.sent :]), dtype=torch.long))
            self.sent = len(final_tokens)

    def end(self, after: BaseException | None = None) -> None:
        """Close the stream (once; the pipeline calls it even when the call fails, so a reader never
        waits forever). An exception from the streamer's ``end()`` surfaces as an ``InputError`` that
        names it; when the call is already failing (``after``: that error) it never replaces it: it
        is logged and added to that error's notes."""
        if self.ended:
            return
        self.ended = True
        try:
            self.streamer.end()
        except Exception as err:
            what = f"the streamer's end() raised {type(err).__name__}: {err}"
            if after is not None:
                logger.error("%s (while the call was failing with %s: %s)", what, type(after).__name__, after)
                after.add_note(f"while closing the stream after this error, {what}")
                return
            raise InputError(
                f"{what}. Every token was generated and streamed, but the stream could not be closed; fix the "
                f"streamer's end() ({type(self.streamer).__name__})."
            ) from err


__all__ = ["FINISH_REASONS", "StopStrings", "TokenStream", "check_stop", "finish_reason"]
