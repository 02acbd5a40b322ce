"""CTF: coarse-to-fine token prediction (Guo et al. 2025, "Improving Autoregressive Image Generation
through Coarse-to-Fine Token Prediction", arXiv 2503.16194; repo ``GzyAftermath/CTF``).

k-means over the VQ codebook groups similar codewords into ``K`` clusters (:func:`kmeans_codebook`);
the **coarse** model is an ordinary :class:`~leapgen.models.llamagen.LlamaGenGPT` over the cluster
labels (vocabulary ``K``), decoded autoregressively by any causal sampler (``ar``, ``speculative``,
``sjd``, ``lantern`` ... unchanged, through :class:`~leapgen.models.llamagen_lm.LlamaGenLM`); the
**fine** model :class:`CTFFineGPT` reads the whole coarse grid at once (bidirectional attention over
the condition prefix and every cell) and predicts every fine code in **one** forward, its logits
restricted to the codes of each cell's cluster (``cluster_of``), so a fine token always lies in its
coarse cluster.

:class:`CoarseFineLM` is the ``coarse-fine`` contract the ``ctf`` sampler runs on: ``coarse`` (the
causal adapter of the coarse GPT, with an optional coarse ``draft``) and ``fine_logits`` (the one
parallel pass, classifier-free guidance applied as LlamaGen's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ConfigError, InputError
from .guidance import guidance_mix
from .llamagen import GPTConfig, LlamaGenGPT
from .llamagen_lm import LlamaGenLM
from .per_thread import PerThread


def kmeans_codebook(codebook: Tensor, k: int, iters: int = 50, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(labels [V], centroids [k, d])``: Lloyd's k-means (k-means++ seeding) of the code vectors;
    every cluster keeps at least one code."""
    x = codebook.float()
    v = x.shape[0]
    if not 1 <= k <= v:
        raise ConfigError(f"the number of clusters must lie in [1, {v}], got {k}")
    gen = torch.Generator().manual_seed(seed)
    cent = x[torch.randint(v, (1,), generator=gen)]
    for _ in range(1, k):
        d = torch.cdist(x, cent).min(1).values.pow(2)
        cent = torch.cat([cent, x[torch.multinomial(d / d.sum(), 1, generator=gen)]])
    for _ in range(iters):
        labels = torch.cdist(x, cent).argmin(1)
        for j in range(k):
            members = labels == j
            if members.any():
                cent[j] = x[members].mean(0)
            else:  # re-seed an empty cluster with the worst-fitted code
                far = torch.cdist(x, cent).min(1).values.argmax()
                cent[j] = x[far]
    labels = torch.cdist(x, cent).argmin(1)
    return labels, cent


@dataclass
class CTFFineConfig(GPTConfig):
    fine_vocab_size: int = 1024  # the VQ codebook; ``vocab_size`` is the number of clusters K

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fine_vocab_size < self.vocab_size:
            raise ConfigError("the fine vocabulary (VQ codes) must be at least the number of clusters")


class CTFFineGPT(LlamaGenGPT):
    """The auxiliary fine model: coarse labels in (vocabulary K), fine codes out, one pass."""

    config_class = CTFFineConfig

    def __init__(self, config: CTFFineConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = CTFFineConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        super().__init__(config)
        cfg = self.config
        self.output = nn.Linear(cfg.dim, cfg.fine_vocab_size, bias=False)
        nn.init.zeros_(self.output.weight)
        self.register_buffer("cluster_of", torch.zeros(cfg.fine_vocab_size, dtype=torch.long))

    def set_clusters(self, labels: Tensor) -> None:
        if labels.shape != (self.config.fine_vocab_size,) or int(labels.max()) >= self.config.vocab_size:
            raise ConfigError(f"cluster labels must be [{self.config.fine_vocab_size}] ids < {self.config.vocab_size}")
        self.cluster_of.copy_(labels.to(self.cluster_of))

    def fine_logits(self, coarse: Tensor, labels: Tensor, words: Tensor | None) -> Tensor:
        """Logits ``[B, H*W, V_fine]`` of every cell's fine code given the whole coarse grid
        ``[B, H*W]`` (bidirectional); codes outside a cell's cluster get ``-inf``."""
        b, n = coarse.shape
        p = self.cls_token_num
        tokens = torch.cat([torch.zeros(b, p, dtype=torch.long, device=coarse.device), coarse], 1)
        pos = torch.arange(p + n, device=coarse.device)[None].expand(b, -1)
        mask = torch.ones(1, 1, p + n, p + n, dtype=torch.bool, device=coarse.device)
        logits = self.forward(tokens, pos, mask, None, labels, words)[:, p:]
        allowed = self.cluster_of[None, None, :] == coarse[..., None]
        return logits.masked_fill(~allowed, float("-inf"))

    def training_fine_logits(self, cond_ids: Tensor, coarse: Tensor) -> Tensor:
        words = cond_ids[:, 1:] if self.config.text_len else None
        return self.fine_logits(coarse, cond_ids[:, 0], words)


class CoarseFineLM:
    """The ``coarse-fine`` contract: a coarse causal LM (+ optional coarse draft) and the fine pass."""

    forwards = PerThread(0)  # per thread: concurrent calls count their own

    family = "ctf"

    def __init__(self, coarse: LlamaGenGPT, fine: CTFFineGPT, draft: LlamaGenGPT | None = None,
                 centroids: Tensor | None = None) -> None:
        if coarse.config.vocab_size != fine.config.vocab_size:
            raise ConfigError(f"the coarse model has {coarse.config.vocab_size} labels, the fine model reads "
                              f"{fine.config.vocab_size}")
        self.coarse = LlamaGenLM(coarse)
        self.draft = LlamaGenLM(draft) if draft is not None else None
        if centroids is not None:  # what each coarse label means (for LANTERN-style samplers)
            for lm in (self.coarse, self.draft):
                if lm is not None:
                    lm.set_token_latents(centroids)
        self.fine = fine.eval()
        self.grid = self.coarse.grid
        self.vocab_size = fine.config.fine_vocab_size
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.fine.tok_embeddings.weight.device

    def describe(self) -> str:
        return f"CTF coarse ({self.coarse.vocab_size} clusters) + fine ({self.vocab_size} codes)"

    @torch.inference_mode()
    def fine_logits(self, coarse: Tensor, cond: Any = None) -> Tensor:
        """One parallel pass: logits ``[B, H*W, V]`` of the fine codes (guided when ``cond`` is)."""
        cond = self.coarse.check_condition(cond, coarse.shape[0])
        if cond is not None:
            cond = cond.to(self.device)
        if coarse.dim() != 2 or coarse.shape[1] != self.grid[0] * self.grid[1]:
            raise InputError(f"coarse labels must be [B, {self.grid[0] * self.grid[1]}], got {tuple(coarse.shape)}")
        coarse = coarse.to(self.device)
        labels, words = self.coarse._condition(cond, coarse.shape[0])
        self.forwards += 1
        if cond is None or not cond.guidance.active:
            return self.fine.fine_logits(coarse, labels, words)
        nl, nw = self.coarse.null_condition(cond, coarse.shape[0])
        both = self.fine.fine_logits(torch.cat([coarse, coarse]), torch.cat([labels, nl]),
                                     None if words is None else torch.cat([words, nw]))
        c, u = both.chunk(2)
        return guidance_mix(c, u.masked_fill(torch.isinf(u), 0.0), cond.guidance.scale).masked_fill(torch.isinf(c), float("-inf"))


__all__ = ["kmeans_codebook", "CTFFineConfig", "CTFFineGPT", "CoarseFineLM"]
