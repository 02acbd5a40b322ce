"""Classifier-free guidance arithmetic on logits, shared by model adapters and samplers.

Models mix conditional and unconditional logits themselves (an image GPT runs its batch doubled
with the null condition), and masked samplers mix the outputs of two forwards; both use these two
functions, which live on the models layer so that models never import samplers.
"""

from __future__ import annotations

import torch
from torch import Tensor


def guidance_mix(cond: Tensor, uncond: Tensor, scale: float | Tensor) -> Tensor:
    """Classifier-free guidance on logits: ``uncond + scale * (cond - uncond)``.

    ``scale == 1`` returns ``cond``; ``0`` returns ``uncond``. ``scale`` may be a tensor with one
    value per batch row (e.g. annealed by each row's mask rate); it is broadcast over the rest.
    LLaDA's ``un + (s + 1)(cond - un)`` is ``scale = s + 1``; GenMol's context guidance
    ``w * full + (1 - w) * poor`` is ``scale = w`` with the context-poor logits as ``uncond``.
    """
    if isinstance(scale, Tensor) and scale.dim() > 0:
        scale = scale.to(cond.dtype).reshape(scale.shape[0], *([1] * (cond.dim() - 1)))
    return uncond + scale * (cond - uncond)


def cfg_logits(cond: Tensor, uncond: Tensor, scale: float, n_generated: Tensor | int, cfg_interval: int = -1) -> Tensor:
    """LlamaGen's classifier-free guidance for autoregressive image models (``generate.py``).

    ``uncond + (cond - uncond) * scale`` (:func:`guidance_mix`) for the token that has
    ``n_generated`` image tokens before it (a tensor broadcastable to ``cond.shape[:-1]``, or an
    int); once guidance is cut off only ``cond`` is used. Cutoff exactly as the reference decode
    loop: token k (= ``n_generated``) is guided iff ``cfg_interval == -1`` or ``k - 1 <=
    cfg_interval`` (the loop index ``i = k - 1`` is compared with ``cfg_interval``; the first token,
    from the prefill, is always guided). ``scale == 1`` returns ``cond``.
    """
    if scale == 1.0:
        return cond
    mixed = guidance_mix(cond, uncond, scale)
    if cfg_interval is None or cfg_interval < 0:
        return mixed
    n = torch.as_tensor(n_generated, device=cond.device)
    use = (n - 1) <= cfg_interval
    return torch.where(use[..., None], mixed, cond)


__all__ = ["guidance_mix", "cfg_logits"]
