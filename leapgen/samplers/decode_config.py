"""The decode configuration every sampler takes: :class:`DecodeConfig` and its validation.

What a call asks of any sampler (length, temperature, top-k / top-p / min-p, penalties, EOS ids,
seed, callbacks), checked when the config is built: a bad value is a ``ConfigError`` naming it, and
a temperature below :data:`MIN_SAMPLING_TEMPERATURE` decodes greedily. Which samplers honour which
settings is :mod:`.refusals`'s table; sampler-specific parameters live on the sampler
(:mod:`.base`, re-exported from there).
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .penalties import check_penalty_values

logger = logging.getLogger(__name__)


#: temperatures below this decode greedily (vLLM's ``_SAMPLING_EPS``): logits divided by a smaller
#: one leave float range (1e-300 gave NaN probabilities and token 0 everywhere), and the
#: distribution they stand for is the argmax anyway
MIN_SAMPLING_TEMPERATURE = 1e-5


@dataclass
class DecodeConfig:
    """Parameters shared by every sampler (sampler-specific ones live on the sampler).

    ``temperature == 0`` means greedy decoding (so does any temperature below
    :data:`MIN_SAMPLING_TEMPERATURE`, with a log line). ``top_k == 0`` and ``top_p == 1`` disable
    those filters. ``repetition_penalty == 1`` disables the CTRL-style penalty. ``min_p`` (vLLM /
    transformers): after the other filters, keep the tokens whose probability is at least
    ``min_p`` times the top token's; 0 disables it. ``min_new_tokens`` (transformers): no id of
    ``eos_token_id`` is produced before a row has generated that many tokens (0: off); only samplers
    whose :meth:`Sampler.honours_min_new_tokens` is true take it, the others refuse it by name.
    ``presence_penalty`` / ``frequency_penalty`` (OpenAI / vLLM, in [-2, 2], 0 = off): see :mod:`.penalties`.
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    eos_token_id: int | Sequence[int] | None = None
    pad_token_id: int = 0
    seed: int | None = None
    progress: bool = False
    #: called by every loop after each target step as ``step_callback(step, stats)`` (the
    #: pipelines' ``callback_on_step_end``); return value ignored.
    step_callback: Any = None
    #: ``stop_check(generated_ids) -> bool``, asked after each committed token: True ends the row
    #: there (a text pipeline's stop strings); None: no check
    stop_check: Any = None
    #: ``on_commit(row, new_ids)``, told each row's newly committed tokens (streaming); None: off
    on_commit: Any = None
    #: (appended, so no earlier field moves) min_p and min_new_tokens: see the class docstring
    min_p: float = 0.0
    min_new_tokens: int = 0
    presence_penalty: float = 0.0  # (appended) see the class docstring
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "repetition_penalty", "min_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral)):
            raise ConfigError(f"seed must be an integer or None, got {self.seed!r} ({type(self.seed).__name__}).")
        for name in ("max_new_tokens", "top_k", "min_new_tokens"):  # a numpy integer counts as the int it holds (a bool does not)
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and not isinstance(value, int):
                setattr(self, name, int(value))
        if not isinstance(self.max_new_tokens, int) or isinstance(self.max_new_tokens, bool) or self.max_new_tokens <= 0:
            raise ConfigError(
                f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}; "
                "pass e.g. max_new_tokens=128."
            )
        if isinstance(self.min_new_tokens, bool) or not isinstance(self.min_new_tokens, int) or self.min_new_tokens < 0:
            raise ConfigError(
                f"min_new_tokens must be an integer >= 0 (0 disables it), got {self.min_new_tokens!r}; "
                "pass e.g. min_new_tokens=16."
            )
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(
                f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}."
            )
        if 0.0 < self.temperature < MIN_SAMPLING_TEMPERATURE:
            logger.info("temperature=%g is below %g: decoding greedily (temperature 0)", self.temperature,
                        MIN_SAMPLING_TEMPERATURE)
            self.temperature = 0.0
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}.")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top_p must be in (0, 1] (1 disables it), got {self.top_p!r}.")
        if not (0.0 <= self.min_p <= 1.0):  # NaN fails this too
            raise ConfigError(
                f"min_p must be in [0, 1] (0 disables it; e.g. 0.05 keeps tokens at least 5% as likely as the top "
                f"one), got {self.min_p!r}."
            )
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ConfigError(
                f"repetition_penalty must be a finite number > 0 (1 disables it), got {self.repetition_penalty!r}."
            )
        check_penalty_values(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(int(t) for t in self.eos_token_id)
