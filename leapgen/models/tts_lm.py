"""Masked-model views of the MaskGCT networks (:mod:`leapgen.models.tts`) for the masked loop.

Both expose what embedding-space classifier-free guidance needs beyond the masked contract:
``last_hidden`` (the final hidden states of the latest forward, ``[B, L, d]``) and
``to_logits(h)``; ``null_cond(cond)`` marks the condition unconditional (the network then drops
phones and prompt for T2S, the acoustic prompt for S2A). ``hidden_guidance = True`` and
``tts_stage`` ("t2s" / "s2a") identify them (contracts ``tts-semantic`` / ``tts-acoustic``,
registered by the samplers).

* :class:`T2SMaskedLM`: tokens ``[B, L]`` = prompt semantic tokens then masked target frames
  (right-padded, ``attention_mask``); ``cond = {"phones": [B, P], "prompt_len": [B], "uncond": bool or [B]}``.
* :class:`S2AMaskedLM`: tokens ``[B, K, T]`` = acoustic prompt codes (all layers) then masked
  frames; ``cond = {"semantic": [B, ceil(T / 3)], "prompt_len": [B], "uncond": bool or [B]}``; ``stage`` =
  the RVQ layer being decoded (codebook-stage region).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .masked_base import MaskedTokenModel
from .per_thread import PerThread
from .tts import S2ANet, T2SNet


def _need(cond: Any, keys: tuple[str, ...], who: str) -> dict[str, Any]:
    if not isinstance(cond, dict) or any(k not in cond for k in keys):
        raise InputError(f"{who} needs cond = a dict with {list(keys)} (and optionally 'uncond').")
    return cond


def _uncond(cond: dict[str, Any], batch: int, device: torch.device) -> Tensor:
    """Bool ``[B]``: the rows whose pass is unconditional (``cond["uncond"]``: a bool for the whole
    batch, or one per row, as in a guided forward over the doubled batch)."""
    unc = torch.as_tensor(cond.get("uncond", False), dtype=torch.bool, device=device)
    if unc.dim() > 1 or (unc.dim() == 1 and unc.shape[0] != batch):
        raise InputError(f"cond['uncond'] must be a bool or one bool per row ({batch}), got shape {tuple(unc.shape)}.")
    return unc.expand(batch)


class _HiddenView(MaskedTokenModel):
    #: the final hidden states of this thread's latest forward (one value per thread: :class:`PerThread`)
    last_hidden = PerThread(None)

    hidden_guidance = True
    tts_stage = ""

    def __init__(self, net: Any) -> None:
        self.net = net.eval()
        self.forwards = 0
        self.last_hidden: Tensor | None = None

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def null_cond(self, cond: Any) -> Any:
        return {**cond, "uncond": True} if isinstance(cond, dict) else cond

    def to_logits(self, h: Tensor) -> Tensor:
        return self.net.to_logits(h).float()


class T2SMaskedLM(_HiddenView):
    """MaskGCT T2S behind the masked contract (see the module docstring)."""

    tts_stage = "t2s"

    def __init__(self, net: T2SNet) -> None:
        super().__init__(net)
        self.mask_id = net.mask_id
        self.vocab_size = net.config.semantic_size
        self.num_codebooks = 1
        self.max_length = net.config.max_positions

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None) -> Tensor:
        c = _need(cond, ("phones", "prompt_len"), "T2SMaskedLM")
        dev = self.device
        phones = c["phones"].to(dev)
        am = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.to(dev)
        h = self.net.hidden(phones, phones > 0, tokens.to(dev), am, c["prompt_len"].to(dev), _uncond(c, tokens.shape[0], dev))
        self.last_hidden = h
        return self.net.to_logits(h)


class S2AMaskedLM(_HiddenView):
    """MaskGCT S2A behind the masked contract (see the module docstring)."""

    tts_stage = "s2a"

    def __init__(self, net: S2ANet) -> None:
        super().__init__(net)
        self.mask_id = net.mask_id
        self.vocab_size = net.config.codebook_size
        self.num_codebooks = net.config.num_codebooks
        self.max_length = net.config.max_frames

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cond: Any, stage: int | None, attention_mask: Tensor | None) -> Tensor:
        c = _need(cond, ("semantic", "prompt_len"), "S2AMaskedLM")
        dev = self.device
        b, _, t = tokens.shape
        am = torch.ones(b, t, dtype=torch.bool, device=dev) if attention_mask is None else attention_mask.to(dev)
        if stage is None:  # without a codebook-stage region: predict the lowest layer that is still masked
            masked = (tokens == self.mask_id).any(-1).any(0)
            stage = int(masked.nonzero()[0]) if bool(masked.any()) else 0
        h = self.net.hidden(tokens.to(dev), c["semantic"].to(dev), am, c["prompt_len"].to(dev), int(stage), _uncond(c, b, dev))
        self.last_hidden = h
        return self.net.to_logits(h)


__all__ = ["S2AMaskedLM", "T2SMaskedLM"]
