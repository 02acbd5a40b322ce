"""``ctf``: coarse-to-fine decoding -- coarse cluster labels autoregressively, all fine codes in one pass.

Paper: Guo et al., "Improving Autoregressive Image Generation through Coarse-to-Fine Token
Prediction" (CTF), 2025, arXiv 2503.16194.

Loop (:class:`~leapgen.models.ctf.CoarseFineLM`): (1) the coarse stage decodes the ``H*W`` cluster
labels with ``coarse_sampler``, any registered sampler that runs on causal models (default ``ar``;
``speculative`` uses the model's coarse draft, ``sjd`` / ``lantern`` / ``gsd`` run unchanged, LANTERN's
latent neighbours being the cluster centroids); (2) the fine model reads the whole coarse grid and
every fine code is drawn at once from its logits restricted to its cell's cluster (one forward,
counted in ``other_forwards``; temperature / top-k / top-p as the coarse stage, 0 = argmax).
Statistics are the coarse stage's (its forwards, acceptance, step compression) plus the fine pass;
``stats.sampler`` names both stages, ``"ctf+<coarse sampler>"`` (``"ctf+ar"`` by default, ``"ctf+sjd"``
...), and ``stats.extra["coarse_sampler"]`` the coarse one.

Guarantee: ``distribution-exact`` with the default coarse ``ar`` (a draw from the model's
factorisation: coarse labels autoregressively, fine codes independent given the coarse grid); with
another coarse sampler the result carries that sampler's guarantee. Defaults: ``coarse_sampler="ar"``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ...errors import ConfigError, InputError
from ...models.ctf import CoarseFineLM
from ..base import (
    DecodeConfig,
    DecodeResult,
    Sampler,
    get_sampler,
    register_contract,
    register_sampler,
    samplers_for,
)
from ..logits import LogitsProcessor
from .common import sample_finite

register_contract("coarse-fine", lambda m: isinstance(m, CoarseFineLM))


@register_sampler("ctf", family="image-parallel", guarantee="distribution-exact", needs=("model",),
                  paper="Guo et al. 2025, Coarse-to-Fine Token Prediction (arXiv 2503.16194)", contracts=("coarse-fine",))
class CoarseToFine(Sampler):
    """CTF: coarse labels by any causal sampler, then every fine code in one parallel pass."""

    defaults: dict[str, Any] = {"coarse_sampler": "ar"}

    def validate(self) -> None:
        s = self.coarse_sampler
        if isinstance(s, Sampler):
            ok = "causal" in s.contracts
        else:
            ok = isinstance(s, str) and s in samplers_for("causal")
        if not ok:
            raise ConfigError(
                f"coarse_sampler must be a sampler that runs on causal models (the coarse stage is a LlamaGen GPT): "
                f"one of {', '.join(samplers_for('causal'))}; got {s!r}"
            )

    def generate(self, models: dict[str, Any], prompts: list[list[int]], config: DecodeConfig,
                 generator: torch.Generator | None = None, cond: Any = None) -> DecodeResult:
        self.check_models(models)
        lm: CoarseFineLM = models["model"]
        h, w = lm.grid
        if not isinstance(prompts, (list, tuple)) or not prompts or any(len(p) for p in prompts):
            raise InputError("ctf decodes images from their condition only; pass empty prompts ([[]] * batch)")
        if config.max_new_tokens != h * w:
            raise ConfigError(f"ctf fills {h * w} tokens per image; set max_new_tokens={h * w}, got {config.max_new_tokens}")
        inner = self.coarse_sampler if isinstance(self.coarse_sampler, Sampler) else get_sampler(self.coarse_sampler)
        coarse_models = {"model": lm.coarse}
        if lm.draft is not None:
            coarse_models["draft"] = lm.draft
        # 1. coarse labels, autoregressively, by the coarse sampler (unchanged)
        res = inner.generate(coarse_models, prompts, config, generator, cond=cond)
        coarse = torch.tensor(res.sequences, dtype=torch.long, device=lm.device)
        # 2. every fine code in one pass, within its cluster
        t0 = time.perf_counter()
        fine = sample_finite(LogitsProcessor(config), lm.fine_logits(coarse, cond), generator)
        st = res.stats
        st.sampler = f"{self.name}+{inner.name}"  # what ran: both stages
        st.other_forwards += 1
        st.wall_time += time.perf_counter() - t0
        st.extra.update(coarse_sampler=inner.name, coarse_forwards=st.target_forwards, coarse=res.sequences)
        return DecodeResult(sequences=fine.cpu().tolist(), stats=st, token_steps=res.token_steps)


__all__ = ["CoarseToFine"]
