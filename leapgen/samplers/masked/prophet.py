"""Prophet: early commit when the top-2 logit gap says the answer is already decided.

Paper: Li et al., "Diffusion Language Models Know the Answer Before Decoding", 2025;
pixeli99/Prophet ``generate_earlyexit.py`` (reference notes masked.md §7). Guarantee: **lossy**
(an early all-in commit of argmax tokens; quality measured by the benches).

LLaDA semi-AR low-confidence decoding plus, after every step, the ``prophet_gap`` hook: the mean
gap between the top-1 and top-2 **logits** over the monitored positions is compared with a
phase threshold on the progress ``step / steps`` (``< 1/3``: ``early_exit_thresholds[0]``,
``< 2/3``: ``[1]``, else ``[2]``; the paper's 7.5 / 5.0 / 2.5); when it is reached the monitored
positions' masks all get their current argmax at once ("go all-in").

General form (no answer span needed): the released code monitors five positions after forced
"The answer is" tokens. Here ``prophet_scope="block"`` (default) monitors the still-masked
positions of the current block, so a decided block is committed at once and decoding moves on;
``prophet_scope="all"`` monitors every remaining mask and fills the whole rest of the row, as
the paper's all-in does. Progress is measured within the block for ``"block"`` and over the
row's whole step budget for ``"all"``.

Defaults: LLaDA's (``block_length=32``, one step per token, ``scorer="prob"``, temperature 0),
``early_exit_thresholds=(7.5, 5.0, 2.5)``, ``prophet_scope="block"``. The thresholds are raw
logit gaps, so they depend on the model's logit scale: calibrate them per model (the bench
sweeps them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ...errors import ConfigError
from ..base import register_sampler
from .hooks import commit_on_gap
from .llada import DLLM_DEFAULTS, DLLMSampler
from .parts import HOOKS, Hook, finite
from .state import MaskedDecodeState

SCOPES = ("block", "all")


@HOOKS.register("prophet_gap")
class ProphetGap(Hook):
    """Commit the monitored masks at their argmax once the mean top-2 logit gap passes the phase threshold."""

    def __init__(self, early_exit_thresholds: Sequence[float] = (7.5, 5.0, 2.5), prophet_scope: str = "block") -> None:
        th = tuple(early_exit_thresholds) if isinstance(early_exit_thresholds, (list, tuple)) else ()
        if len(th) != 3:
            raise ConfigError(
                f"early_exit_thresholds must be three logit gaps (early, mid, late; Prophet: 7.5, 5.0, 2.5), got {early_exit_thresholds!r}."
            )
        self.thresholds = tuple(finite(t, "early_exit_thresholds", low=0.0) for t in th)
        if prophet_scope not in SCOPES:
            raise ConfigError(f"prophet_scope must be one of {SCOPES}, got {prophet_scope!r}.")
        self.scope = prophet_scope

    def start(self, state: MaskedDecodeState) -> None:
        if state.continuous:
            raise ConfigError("prophet reads token logits; it does not work with continuous values.")
        state.extra["early_commits"] = 0
        state.policy_state["prophet_steps"] = state.generated.reshape(state.batch_size, -1).sum(1).clamp(min=1)

    def after_step(self, state: MaskedDecodeState) -> None:
        masked = state.active(state.masked)  # [A, K, L]
        if self.scope == "block" and state.stage is not None:
            masked = masked & state.active(state.stage.eligible.to(masked.device))
            progress = (state.step + 1) / state.total.double()
        else:
            progress = (state.global_step + 1) / state.active(state.policy_state["prophet_steps"]).double()
        go = commit_on_gap(state, masked, progress, self.thresholds)
        state.extra["early_commits"] = state.extra["early_commits"] + go.sum()


@register_sampler(
    "prophet",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Li et al. 2025 (Prophet: Diffusion Language Models Know the Answer Before Decoding)",
)
class Prophet(DLLMSampler):
    """LLaDA + Prophet's early all-in commit on the top-2 logit gap (module docstring)."""

    defaults: ClassVar[dict[str, Any]] = {
        **DLLM_DEFAULTS,
        "hooks": ("prophet_gap",),
        "early_exit_thresholds": (7.5, 5.0, 2.5),
        "prophet_scope": "block",
    }
