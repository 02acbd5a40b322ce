"""Hooks: run after every commit; they may fill masked positions (never overwrite others).

| name | effect | source |
|---|---|---|
| ``early_exit`` | when the mean top-1/top-2 logit gap over a row's still-masked positions reaches the phase threshold (``early_exit_thresholds`` for progress < 1/3, < 2/3, else), fill all of the row's masks with their argmax and stop it | Prophet (7.5 / 5.0 / 2.5) |
| ``eos_truncate`` | once a row has committed an end token, fill its masked positions after the first one with that token | Learn2PD End-of-Text Prediction |
| ``trajectory`` | record the tokens after every step (``MaskedDecodeResult.trajectory``) | MaskGIT ``final_seqs``, MAGNeT ``callback`` |

Hooks write only through ``state.fill`` (filled positions get infinite confidence, so revising
policies never re-mask them) and use tensor ops only: no host synchronisation per step.
``early_exit`` and ``eos_truncate`` read token logits, so they need a token model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ...errors import ConfigError
from .parts import HOOKS, Hook, _finite
from .state import MaskedDecodeState


def _need_tokens(state: MaskedDecodeState, name: str) -> None:
    if state.continuous:
        raise ConfigError(f"hook {name!r} reads token logits; it does not work with continuous values.")


def commit_on_gap(state: MaskedDecodeState, masked: Tensor, progress: Tensor, thresholds: Sequence[float]) -> Tensor:
    """The early-commit rule of ``early_exit`` and Prophet: an active row whose mean top-2 logit gap
    over its ``masked`` positions ``[A, K, L]`` reaches the threshold of its phase (``progress`` ``[A]``
    below 1/3, below 2/3, else: ``thresholds[0..2]``) takes its argmax at every one of them. Returns
    which rows committed ``[A]`` (no host sync)."""
    logits = state.logits
    if 0 <= state.mask_id < logits.shape[-1]:
        logits = logits.clone()
        logits[..., state.mask_id] = float("-inf")
    top = logits.topk(2, dim=-1)
    gap = (top.values[..., 0] - top.values[..., 1]).double()
    n = masked.sum((1, 2))
    mean_gap = (gap * masked).sum((1, 2)) / n.clamp(min=1)
    t0, t1, t2 = thresholds
    # float64 like the gaps (python scalars alone would make a float32 tensor: a threshold past its
    # range, i.e. never commit, overflowed)
    need = torch.where(progress < 1 / 3, t0, torch.where(progress < 2 / 3, t1, torch.full_like(progress, t2)))
    go = (mean_gap >= need) & (n > 0)
    state.fill(state.rows, masked & go[:, None, None], top.indices[..., 0])
    return go


@HOOKS.register("early_exit")
class EarlyExit(Hook):
    """Prophet's early commit: go all-in when the top-2 logit gap is large enough."""

    def __init__(self, early_exit_thresholds: Sequence[float] = (7.5, 5.0, 2.5)) -> None:
        th = tuple(early_exit_thresholds) if isinstance(early_exit_thresholds, (list, tuple)) else ()
        if len(th) != 3:
            raise ConfigError(
                f"early_exit_thresholds must be three gaps (early, mid, late phase; Prophet: 7.5, 5.0, 2.5), "
                f"got {early_exit_thresholds!r}."
            )
        self.thresholds = tuple(_finite(t, "early_exit_thresholds", low=0.0) for t in th)

    def start(self, state: MaskedDecodeState) -> None:
        _need_tokens(state, "early_exit")
        state.extra["early_exit_rows"] = 0

    def after_step(self, state: MaskedDecodeState) -> None:
        masked = state.active(state.masked)  # [A, K, L]
        go = commit_on_gap(state, masked, state.step / state.total.double(), self.thresholds)
        state.extra["early_exit_rows"] = state.extra["early_exit_rows"] + go.sum()


@HOOKS.register("eos_truncate")
class EosTruncate(Hook):
    """Fill a row's masked positions after its first committed end token with that token.

    ``eos_id`` (a token id or a list) defaults to ``DecodeConfig.eos_token_id``. Single-stream only.
    """

    def __init__(self, eos_id: int | Sequence[int] | None = None) -> None:
        self.eos_id: tuple[int, ...] | None = None
        if eos_id is not None:
            ids = (eos_id,) if isinstance(eos_id, int) else tuple(eos_id)
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise ConfigError(f"eos_id must be a token id or a list of them, got {eos_id!r}.")
            self.eos_id = ids
        self.eos: tuple[int, ...] = ()

    def start(self, state: MaskedDecodeState) -> None:
        self.eos = self.eos_id if self.eos_id is not None else tuple(state.config.eos_ids)
        if not self.eos:
            raise ConfigError("hook 'eos_truncate' needs an end token: pass eos_id=... or DecodeConfig(eos_token_id=...).")
        _need_tokens(state, "eos_truncate")
        if state.generated.shape[1] != 1:
            raise ConfigError("hook 'eos_truncate' works on single-stream models only.")

    def after_step(self, state: MaskedDecodeState) -> None:
        rows = state.rows
        tok = state.active(state.tokens)[:, 0]  # [A, L]
        gen = state.active(state.generated)[:, 0]
        is_eos = torch.zeros_like(gen)
        for t in self.eos:
            is_eos |= tok == t
        is_eos &= gen
        seq = tok.shape[1]
        idx = torch.arange(seq, device=tok.device)
        first = torch.where(is_eos, idx, seq).amin(1)  # [A]
        after = idx[None] > first[:, None]
        fill_tok = tok.gather(1, first.clamp(max=seq - 1)[:, None]).expand(-1, seq)
        state.fill(rows, after[:, None], fill_tok[:, None])  # rows without an end token: nothing


@HOOKS.register("trajectory")
class Trajectory(Hook):
    """Record the values (``state.tokens``) after every step (and the input before the first)."""

    def start(self, state: MaskedDecodeState) -> None:
        state.trajectory = [state.tokens.clone()]

    def after_step(self, state: MaskedDecodeState) -> None:
        state.trajectory.append(state.tokens.clone())
