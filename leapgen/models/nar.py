"""NAR: Neighboring Autoregressive Modeling (He et al. 2025, arXiv 2503.10696; code
``ThisisBillhe/NAR``, ``NAR-images/autoregressive/models/{gpt.py,generate.py}``).

:class:`NARGPT` is a :class:`~leapgen.models.llamagen.LlamaGenGPT` (same blocks, 2D RoPE, class/text
prefix; its ``output`` head is the **right** head, predicting the neighbour ``(i, j+1)`` of the token
it reads) plus a **below** head: ``below_layers`` extra transformer block(s) on the trunk's hidden
states, then ``below_norm`` / ``below_output``, predicting ``(i+1, j)`` (the reference's
``medusa_attention_num=1``, ``medusa_norm``, ``medusa_output``). Training reads the whole image at
once under the proximity-aware mask (:func:`~leapgen.models.image_orders.proximity_mask`): the token
at ``(i, j)`` sees every token at distance ``<= i + j``, so both of its targets (at distance
``i + j + 1``) stay unseen. The last prefix position predicts the first cell with both heads.

Because the right head under a causal mask is the raster model's next-token head, the recipe also
trains a share of the steps in raster order (``raster_frac``): the same network then runs as a plain
:class:`~leapgen.models.llamagen_lm.LlamaGenLM` (``causal`` contract), so ``ar``, ``speculative``,
``sjd`` ... decode it in raster order through its right head and the two orders compare on one model.

:class:`NARLM` is the ``next-neighbour`` contract the ``nar`` sampler runs on: ``start`` (prefill of
the condition slots, one forward) and ``step`` (the tokens of one anti-diagonal at once, attending to
the KV cache and to each other), each returning the right and below logits, with classifier-free
guidance applied inside (doubled batch, LlamaGen's ``uncond + s (cond - uncond)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, InputError
from .condition import ClassCondition
from .guidance import guidance_mix
from .image_orders import proximity_mask
from .llamagen import GPTConfig, KVBackend, LlamaGenGPT, RMSNorm, TransformerBlock
from .llamagen_lm import LlamaGenLM
from .per_thread import PerThread


@dataclass
class NARConfig(GPTConfig):
    below_layers: int = 1  # extra transformer block(s) of the below head
    raster_frac: float = 0.25  # share of training steps in raster order (the right head as a causal LM)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.below_layers < 1:
            raise ConfigError(f"below_layers must be >= 1, got {self.below_layers}")
        if not 0.0 <= self.raster_frac <= 1.0:
            raise ConfigError(f"raster_frac must lie in [0, 1], got {self.raster_frac}")


class NARGPT(LlamaGenGPT):
    """LlamaGen GPT + NAR's below head (see the module docstring)."""

    config_class = NARConfig

    def __init__(self, config: NARConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = NARConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        super().__init__(config)
        cfg = self.config
        self.below_layers = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg.below_layers)])
        self.below_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.below_output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        for blk in self.below_layers:
            blk.apply(self._init_weights)
        nn.init.zeros_(self.below_output.weight)

    @property
    def n_cache_layers(self) -> int:
        return self.config.n_layer + self.config.below_layers

    def forward_heads(
        self,
        tokens: Tensor,
        position_ids: Tensor,
        mask: Tensor | None,
        cache: KVBackend | None = None,
        labels: Tensor | None = None,
        words: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``(right, below)`` logits ``[B, n, V]`` (float32) of ``tokens [B, n]`` at ``position_ids``;
        ``mask`` bool ``[B|1, 1, n, past + n]`` (True = attend); ``cache``: a :class:`KVBackend` with
        ``n_layer + below_layers`` layers."""
        cfg = self.config
        h = self.tok_dropout(self.embed(tokens, position_ids, labels, words))
        freqs = self.freqs_cis[position_ids.clamp(0, self.freqs_cis.shape[0] - 1)].to(h.dtype)
        for i, blk in enumerate(self.layers):
            h = blk(h, freqs, mask, cache.layers[i] if cache is not None else None)
        right = self.output(self.norm(h)).float()
        hb = h
        for j, blk in enumerate(self.below_layers):
            hb = blk(hb, freqs, mask, cache.layers[cfg.n_layer + j] if cache is not None else None)
        below = self.below_output(self.below_norm(hb)).float()
        return right, below

    def teacher_heads(self, cond_ids: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
        """``(right, below) [B, prefix + H*W, V]`` of the whole image under the proximity mask."""
        cfg = self.config
        p, g = self.cls_token_num, cfg.grid_size
        b = codes.shape[0]
        tokens = torch.cat([torch.zeros_like(cond_ids), codes], 1)
        pos = torch.arange(tokens.shape[1], device=codes.device)[None].expand(b, -1)
        mask = proximity_mask(g, g, p).to(codes.device)[None, None]
        words = cond_ids[:, 1:] if cfg.text_len else None
        return self.forward_heads(tokens, pos, mask, None, cond_ids[:, 0], words)

    def neighbour_logits(self, cond_ids: Tensor, codes: Tensor) -> Tensor:
        """The logits ``[B, H*W, V]`` the ``nar`` sampler draws every cell from (mixed heads),
        teacher-forced without a cache: the model's factorised distribution in its order."""
        p, g = self.cls_token_num, self.config.grid_size
        right, below = self.teacher_heads(cond_ids, codes)
        b, v = codes.shape[0], right.shape[-1]
        img_r, img_b = right[:, p:].reshape(b, g, g, v), below[:, p:].reshape(b, g, g, v)
        out = torch.empty(b, g, g, v, device=right.device)
        out[:, 0, 0] = (right[:, p - 1] + below[:, p - 1]) / 2
        out[:, 0, 1:] = img_r[:, 0, :-1]
        out[:, 1:, 0] = img_b[:, :-1, 0]
        out[:, 1:, 1:] = (img_r[:, 1:, :-1] + img_b[:, :-1, 1:]) / 2
        return out.view(b, g * g, v)

    def neighbour_losses(self, cond_ids: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced NAR losses ``(right CE, below CE)`` of ``codes [B, H*W]`` (raster) under the
        proximity mask; the last prefix position predicts cell 0 with both heads."""
        cfg = self.config
        p, g = self.cls_token_num, cfg.grid_size
        b = codes.shape[0]
        right, below = self.teacher_heads(cond_ids, codes)
        grid = codes.view(b, g, g)
        img_r = right[:, p:].reshape(b, g, g, -1)
        img_b = below[:, p:].reshape(b, g, g, -1)
        v = cfg.vocab_size
        lr = F.cross_entropy(torch.cat([right[:, p - 1], img_r[:, :, :-1].reshape(-1, v)]).float(),
                             torch.cat([grid[:, 0, 0], grid[:, :, 1:].reshape(-1)]))
        lb = F.cross_entropy(torch.cat([below[:, p - 1], img_b[:, :-1].reshape(-1, v)]).float(),
                             torch.cat([grid[:, 0, 0], grid[:, 1:].reshape(-1)]))
        return lr, lb


@dataclass
class NARState:
    """Per-call decode state of :class:`NARLM` (the adapter keeps none)."""

    cache: KVBackend
    labels: Tensor
    words: Tensor | None
    guidance: float
    batch: int


class NARLM:
    """The ``next-neighbour`` contract of a :class:`NARGPT` (see the module docstring)."""

    forwards = PerThread(0)  # per thread: concurrent calls count their own

    family = "nar"

    def __init__(self, gpt: NARGPT) -> None:
        if not isinstance(gpt, NARGPT):
            raise TypeError(f"NARLM wraps a NARGPT, got {type(gpt).__name__}")
        self.gpt = gpt.eval()
        self._raster = LlamaGenLM(gpt)  # condition checks and the network's class/word indices
        cfg = gpt.config
        self.vocab_size = cfg.vocab_size
        self.grid = (cfg.grid_size, cfg.grid_size)
        self.prefix_len = cfg.cls_token_num
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.gpt.tok_embeddings.weight.device

    def describe(self) -> str:
        return f"NAR next-neighbour image GPT ({self.grid[0]}x{self.grid[1]} grid)"

    def raster_lm(self) -> LlamaGenLM:
        """The same network as a causal LM in raster order (right head)."""
        return self._raster

    def _run(self, state: NARState, tokens: Tensor, pos: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        self.forwards += 1
        b = state.batch
        if state.guidance == 1.0:
            return self.gpt.forward_heads(tokens, pos, mask, state.cache, state.labels, state.words)
        null_labels, null_words = self._raster._condition(None, b)
        labels = torch.cat([state.labels, null_labels])
        words = None if state.words is None else torch.cat([state.words, null_words])
        r, bl = self.gpt.forward_heads(torch.cat([tokens, tokens]), torch.cat([pos, pos]), mask, state.cache, labels, words)
        (rc, ru), (bc, bu) = r.chunk(2), bl.chunk(2)
        return guidance_mix(rc, ru, state.guidance), guidance_mix(bc, bu, state.guidance)

    @torch.inference_mode()
    def start(self, batch: int, cond: Any = None) -> tuple[NARState, Tensor, Tensor]:
        """Prefill the condition slots: ``(state, right [B, V], below [B, V])`` at the last slot
        (both predict the first cell)."""
        cond = self._raster.check_condition(cond, batch)
        if cond is not None:
            cond = cond.to(self.device)
        if cond is not None and cond.has_negative:
            raise InputError("negative_prompt is not supported by the NAR family's next-neighbour decode (sampler "
                             "'nar'); raster samplers ('ar', 'speculative', ...) on this model take it")
        labels, words = self._raster._condition(cond, batch)
        g = 1.0 if cond is None or not cond.guidance.active else float(cond.guidance.scale)
        if cond is not None and cond.guidance.active and cond.guidance.interval not in (-1, None):
            raise InputError("cfg_interval is not supported by the NAR model (guidance applies to every step); pass -1")
        state = NARState(KVBackend(self.gpt.n_cache_layers), labels, words, g, batch)
        p = self.prefix_len
        tokens = torch.zeros(batch, p, dtype=torch.long, device=self.device)
        pos = torch.arange(p, device=self.device)[None].expand(batch, p)
        r, b = self._run(state, tokens, pos, None)
        return state, r[:, -1], b[:, -1]

    @torch.inference_mode()
    def step(self, state: NARState, tokens: Tensor, cells: Tensor) -> tuple[Tensor, Tensor]:
        """Feed ``tokens [B, n]`` at raster ``cells [n]`` (one anti-diagonal, or one cell in raster
        order); they attend to the cache and to each other. Returns ``(right, below) [B, n, V]``."""
        if tokens.shape != (state.batch, cells.numel()):
            raise InputError(f"tokens must be [{state.batch}, {cells.numel()}], got {tuple(tokens.shape)}")
        tokens = tokens.to(self.device)
        pos = (cells.to(self.device) + self.prefix_len)[None].expand(state.batch, -1)
        past = state.cache.layers[0].keys.shape[2]
        mask = torch.ones(1, 1, cells.numel(), past + cells.numel(), dtype=torch.bool, device=self.device)
        return self._run(state, tokens, pos, mask)


__all__ = ["NARConfig", "NARGPT", "NARLM", "NARState", "ClassCondition"]
