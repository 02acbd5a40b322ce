"""Guidance: logits transforms that cost extra forwards (counted in ``target_forwards``).

| name | logits | source |
|---|---|---|
| ``none`` | the conditional logits | |
| ``cfg`` | ``u + s * (c - u)``, ``u`` from ``model.null_cond(cond)``; ``s = cfg_scale``, or with ``cfg_anneal="mask_rate"`` ``s = m * cfg_scale + (1 - m) * cfg_min_scale`` where ``m`` is the stage's masked fraction; ``c`` and ``u`` come from one forward over the doubled batch wherever the condition and its null stack and no cache policy is used (``cfg_batch``: True, False, or ``"auto"``: on an accelerator, or one active row on a CPU) | MAGNeT (10 -> 1 annealed), MaskGIT ports; LLaDA's ``(s+1)`` form is ``cfg_scale = s + 1`` |
| ``context`` | ``poor + w * (full - poor)`` where ``poor`` masks a fraction ``context_gamma`` of the context tokens | GenMol molecular context guidance (``w = 2``) |

The mixing itself is :func:`leapgen.samplers.logits.guidance_mix`. Scales and weights are finite and
at most ``parts.MAX_GUIDANCE_SCALE`` (1000) in magnitude.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ...errors import ConfigError, InputError
from ...models.masked_base import MaskedModel
from ..logits import guidance_mix
from .parts import GUIDANCES, Guidance, _finite, guidance_scale
from .state import MaskedDecodeState, select_rows


def check_cfg_batch(value: bool | str) -> bool | str:
    """Validate a ``cfg_batch`` setting: True, False or ``"auto"``."""
    if not (isinstance(value, bool) or (isinstance(value, str) and value == "auto")):
        raise ConfigError(f"cfg_batch must be True, False or 'auto', got {value!r}.")
    return value


def batch_guidance(setting: bool | str, state: MaskedDecodeState) -> bool:
    """Whether this step runs the guidance pass in the conditional pass's forward (a doubled batch).

    ``"auto"``: on an accelerator always; on a CPU only for one active row, where a forward is
    overhead-bound: from two rows on, a CPU forward is compute-bound and the doubled batch stopped
    paying for MaskGCT (the measurements: docs/tts.md, and the benches' ``cfg_batch=false``
    speed-only rows in docs/bench_audio.md and docs/bench_speech.md).
    """
    if setting == "auto":
        return state.generated.device.type != "cpu" or int(state.rows.numel()) == 1
    return bool(setting)


@GUIDANCES.register("none")
class NoGuidance(Guidance):
    """No guidance: one forward per step."""


@GUIDANCES.register("cfg")
class ClassifierFreeGuidance(Guidance):
    """Classifier-free guidance with the model's null condition (a second forward per step)."""

    ANNEALS = ("const", "mask_rate")

    def __init__(
        self, cfg_scale: float = 3.0, cfg_min_scale: float | None = None, cfg_anneal: str = "const", cfg_batch: bool | str = "auto"
    ) -> None:
        self.cfg_scale = guidance_scale(cfg_scale, "cfg_scale")
        #: run the conditional and the null pass as one forward over the doubled batch when they stack
        self.cfg_batch = check_cfg_batch(cfg_batch)
        if cfg_anneal not in self.ANNEALS:
            raise ConfigError(f"cfg_anneal must be one of {self.ANNEALS}, got {cfg_anneal!r}.")
        if cfg_anneal == "mask_rate" and cfg_min_scale is None:
            raise ConfigError("cfg_anneal='mask_rate' needs cfg_min_scale (MAGNeT anneals 10 -> 1).")
        self.cfg_min_scale = None if cfg_min_scale is None else guidance_scale(cfg_min_scale, "cfg_min_scale")
        self.cfg_anneal = cfg_anneal

    def check(self, state: MaskedDecodeState, model: MaskedModel) -> None:
        if state.cond is None:
            raise InputError(
                "guidance='cfg' needs a condition (MaskedInputs.cond); without one the conditional and "
                "unconditional passes are the same. Use guidance='none'."
            )

    def scale(self, state: MaskedDecodeState) -> float | Tensor:
        if self.cfg_anneal == "const":
            return self.cfg_scale
        rate = state.n_masked_units.double() / state.n_initial.clamp(min=1).double()
        return (rate * self.cfg_scale + (1.0 - rate) * self.cfg_min_scale).float()

    def guided_forward(self, model: MaskedModel, state: MaskedDecodeState) -> Tensor:
        """One forward over the doubled batch (conditional rows, then null rows) when the condition
        and its null stack and no cache is in use; two forwards otherwise. Both give the same
        logits up to float rounding (tested); ``extra["guidance_batched"]`` counts batched steps."""
        if batch_guidance(self.cfg_batch, state):
            pair = state.forward_pair(model, model.null_cond(select_rows(state.cond, state.rows)))
            if pair is not None:
                state.extra["guidance_batched"] = state.extra.get("guidance_batched", 0) + 1
                return self.mix(state, *pair)
        return self(model, state, state.forward(model))

    def __call__(self, model: MaskedModel, state: MaskedDecodeState, logits: Tensor) -> Tensor:
        null = model.null_cond(select_rows(state.cond, state.rows))
        return self.mix(state, logits, state.forward(model, cond=null, cache_key="uncond"))

    def mix(self, state: MaskedDecodeState, logits: Tensor, uncond: Tensor) -> Tensor:
        scale = self.scale(state)
        if isinstance(scale, Tensor):
            scale = scale.to(logits.device)
        return guidance_mix(logits, uncond, scale)


@GUIDANCES.register("context")
class ContextGuidance(Guidance):
    """GenMol molecular context guidance (MCG): a second forward on a context-poor copy.

    Each row masks ``int(n_context * context_gamma)`` of its context tokens (real, not masked,
    not in ``context_special_ids`` such as BOS/EOS), chosen uniformly with the decode's generator
    (GenMol draws one set of positions from row 0 for the whole batch; here every row draws its own).
    Logits: ``context_weight * full + (1 - context_weight) * poor``.
    """

    def __init__(self, context_gamma: float = 0.0, context_weight: float = 2.0, context_special_ids: Sequence[int] = ()) -> None:
        self.gamma = _finite(context_gamma, "context_gamma", low=0.0, high=1.0)
        self.weight = guidance_scale(context_weight, "context_weight")
        try:
            self.special = tuple(int(t) for t in (context_special_ids or ()))
        except (TypeError, ValueError):
            raise ConfigError(f"context_special_ids must be token ids, got {context_special_ids!r}.") from None

    def check(self, state: MaskedDecodeState, model: MaskedModel) -> None:
        if state.continuous and self.gamma > 0.0 and self.weight != 1.0:
            raise InputError("guidance='context' masks context tokens; it needs a token model, not continuous values.")

    def __call__(self, model: MaskedModel, state: MaskedDecodeState, logits: Tensor) -> Tensor:
        if self.gamma == 0.0 or self.weight == 1.0:
            return logits
        x = state.tokens.index_select(0, state.rows)  # [A, K, L]
        ctx = x != state.mask_id
        for t in self.special:
            ctx &= x != t
        if state.attention_mask is not None:
            ctx &= state.attention_mask.index_select(0, state.rows)[:, None]
        a = x.shape[0]
        flat = ctx.reshape(a, -1)
        n_poor = (flat.sum(1).double() * self.gamma).floor().long()
        if not bool((n_poor > 0).any()):
            return logits
        noise = torch.rand(flat.shape, generator=state.generator, dtype=torch.float64, device=x.device)
        noise = noise.masked_fill(~flat, 2.0)  # non-context last
        order = noise.argsort(1)
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(flat.shape[1], device=x.device).expand_as(order))
        poor_mask = flat & (rank < n_poor[:, None])
        x_poor = x.reshape(a, -1).masked_fill(poor_mask, state.mask_id).reshape(x.shape)
        poor = state.forward(model, tokens=x_poor)
        return guidance_mix(logits, poor, self.weight)
