"""Next-scale (VAR) / next-frequency (NFIG) image transformer and its decode contract.

Papers: Tian et al., "Visual Autoregressive Modeling: Scalable Image Generation via Next-Scale
Prediction" (VAR), NeurIPS 2024, code ``FoundationVision/VAR`` (``models/var.py``,
``autoregressive_infer_cfg``); Huang et al., "NFIG: Autoregressive Image Generation with
Next-Frequency Prediction", 2025, arXiv 2503.07076 (same transformer, frequency-band tokenizer).

:class:`ScaleGPT` is a :class:`~leapgen.models.llamagen.LlamaGenGPT` trunk (Llama blocks, the
class/text prefix, 2D RoPE) read in VAR's layout: the prefix's last position predicts scale 0 (1x1);
the tokens of scale ``k >= 1`` are predicted all at once from their *inputs* ``down(f_hat, p_k)`` (the
residual sum of the scales so far, brought to ``p_k x p_k``), embedded by ``word_embed`` (a linear map
of the d-dimensional latent) plus a learned level embedding. 2D RoPE rotates each input with its
cell centre in full-resolution coordinates (``(i + 0.5) N / p - 0.5``), so every scale shares one
positional frame (VAR uses learned absolute positions; this choice lets the trunk start from the
raster GPT). Training uses the block-causal mask
(:func:`~leapgen.models.image_orders.block_causal_mask`); the output head predicts codes of the
tokenizer's shared codebook.

:class:`ScaleLM` (contracts ``next-scale`` / ``next-frequency``, by the tokenizer's band) holds the
transformer and the :class:`~leapgen.tokenizers.multiscale_vq.MultiScaleVQ` whose residual maps build
the next inputs: ``start`` (prefill: scale 0 logits), ``commit`` (add a scale's codes to ``f_hat``) and
``step`` (all inputs of scale ``k`` in one forward over the KV cache). With guidance it returns the
conditional and unconditional logits; the sampler mixes them with VAR's growing scale.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ConfigError, InputError
from ..tokenizers.multiscale_vq import MultiScaleVQ
from .image_orders import block_causal_mask, scale_of_token
from .llamagen import GPTConfig, KVBackend, LlamaGenGPT
from .llamagen_lm import LlamaGenLM
from .per_thread import PerThread


@dataclass
class ScaleGPTConfig(GPTConfig):
    scales: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 10, 13, 16)
    latent_dim: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        self.scales = tuple(int(p) for p in self.scales)
        if self.scales[-1] != self.grid_size:
            raise ConfigError(f"the last scale must equal grid_size={self.grid_size}, got {self.scales}")


def scale_rope(scales: tuple[int, ...], head_dim: int, base: float, prefix: int, cond_zero: bool) -> Tensor:
    """``[prefix + L - 1, head_dim // 2, 2]`` (cos, sin): 2D RoPE of every input of scales 1..K-1 at
    its cell centre in full-resolution coordinates (the raster GPT's table at the last scale)."""
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    n = scales[-1]
    rows = []
    for p in scales[1:]:
        c = (torch.arange(p, dtype=torch.float32) + 0.5) * n / p - 0.5
        r, q = torch.meshgrid(c, c, indexing="ij")
        rows.append(torch.cat([torch.outer(r.flatten(), freqs), torch.outer(q.flatten(), freqs)], -1))
    ang = torch.cat(rows)
    table = torch.stack([torch.cos(ang), torch.sin(ang)], -1)
    cond = torch.zeros(prefix, half, 2)
    if not cond_zero:
        cond[..., 0] = 1.0
    return torch.cat([cond, table])


class ScaleGPT(LlamaGenGPT):
    """VAR/NFIG transformer (see the module docstring)."""

    config_class = ScaleGPTConfig

    def __init__(self, config: ScaleGPTConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = ScaleGPTConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        super().__init__(config)
        cfg = self.config
        self.word_embed = nn.Linear(cfg.latent_dim, cfg.dim)
        self.lvl_embed = nn.Embedding(len(cfg.scales), cfg.dim)
        nn.init.normal_(self.lvl_embed.weight, std=0.02)
        self.register_buffer("freqs_cis", scale_rope(cfg.scales, cfg.dim // cfg.n_head, cfg.rope_base, cfg.cls_token_num,
                                                     cfg.cond_qk_zero), persistent=False)
        self.register_buffer("token_level", scale_of_token(cfg.scales), persistent=False)

    @property
    def num_tokens(self) -> int:
        return sum(p * p for p in self.config.scales)

    def forward_scales(self, latents: Tensor | None, position_ids: Tensor, mask: Tensor | None, cache: KVBackend | None,
                       labels: Tensor, words: Tensor | None) -> Tensor:
        """Logits ``[B, n, V]`` at ``position_ids [B, n]`` (the prefix below ``cls_token_num``; input
        of token ``t >= 1`` at ``cls_token_num - 1 + t``); ``latents [B, n_inputs, d]`` fill the
        input positions (None when only the prefix is fed). ``mask``: bool, True = attend."""
        p = self.cls_token_num
        b, n = position_ids.shape
        is_in = position_ids >= p
        cond_pos = torch.where(is_in, torch.zeros_like(position_ids), position_ids)  # inputs are overwritten below
        h = self.embed(torch.zeros(b, n, dtype=torch.long, device=position_ids.device), cond_pos, labels, words)
        if bool(is_in.any()):
            if latents is None or latents.shape[:2] != (b, int(is_in[0].sum())):
                raise InputError("latents must give one d-vector per input position")
            t = position_ids[is_in].view(b, -1) - p + 1
            emb = self.word_embed(latents.to(h.dtype)) + self.lvl_embed(self.token_level[t])
            h = h.masked_scatter(is_in[..., None], emb.to(h.dtype))
        h = self.tok_dropout(h)
        freqs = self.freqs_cis[position_ids].to(h.dtype)
        for i, blk in enumerate(self.layers):
            h = blk(h, freqs, mask, cache.layers[i] if cache is not None else None)
        return self.output(self.norm(h)).float()

    def teacher_logits(self, cond_ids: Tensor, inputs: Tensor) -> Tensor:
        """Logits ``[B, L, V]`` of every token under the block-causal mask, from the condition ids
        ``[B, cls_token_num]`` and the teacher inputs ``[B, L - 1, d]`` of scales 1..K-1."""
        p = self.cls_token_num
        b = cond_ids.shape[0]
        pos = torch.arange(p + inputs.shape[1], device=inputs.device)[None].expand(b, -1)
        mask = block_causal_mask(self.config.scales, p).to(inputs.device)[None, None]
        words = cond_ids[:, 1:] if self.config.text_len else None
        return self.forward_scales(inputs, pos, mask, None, cond_ids[:, 0], words)[:, p - 1 :]


@dataclass
class ScaleState:
    """Per-call decode state of :class:`ScaleLM`."""

    cache: KVBackend
    labels: Tensor
    words: Tensor | None
    guided: bool
    batch: int
    f_hat: Tensor
    next_pos: int


class ScaleLM:
    """The ``next-scale`` / ``next-frequency`` contract of a :class:`ScaleGPT` with its tokenizer."""

    forwards = PerThread(0)  # per thread: concurrent calls count their own

    def __init__(self, gpt: ScaleGPT, tokenizer: MultiScaleVQ) -> None:
        if not isinstance(gpt, ScaleGPT) or not isinstance(tokenizer, MultiScaleVQ):
            raise TypeError("ScaleLM wraps a ScaleGPT and its MultiScaleVQ")
        if tuple(gpt.config.scales) != tuple(tokenizer.scales) or gpt.config.vocab_size != tokenizer.codebook_size:
            raise ConfigError(f"the transformer (scales {gpt.config.scales}, V={gpt.config.vocab_size}) and the tokenizer "
                              f"(scales {tokenizer.scales}, V={tokenizer.codebook_size}) do not match")
        self.gpt, self.tokenizer = gpt.eval(), tokenizer.eval()
        self._cond = LlamaGenLM(gpt)
        self.vocab_size = gpt.config.vocab_size
        self.scales = tuple(gpt.config.scales)
        self.band = tokenizer.band
        self.family = "nfig" if self.band == "frequency" else "var"
        self.prefix_len = gpt.cls_token_num
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.gpt.word_embed.weight.device

    @property
    def num_tokens(self) -> int:
        return self.gpt.num_tokens

    def describe(self) -> str:
        return f"{self.family.upper()} {self.band} multi-scale transformer (scales {self.scales})"

    def _run(self, state: ScaleState, latents: Tensor | None, pos: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        self.forwards += 1
        if not state.guided:
            return self.gpt.forward_scales(latents, pos, mask, state.cache, state.labels, state.words), None
        nl, nw = self._cond._condition(None, state.batch)
        labels = torch.cat([state.labels, nl])
        words = None if state.words is None else torch.cat([state.words, nw])
        lat = None if latents is None else torch.cat([latents, latents])
        out = self.gpt.forward_scales(lat, torch.cat([pos, pos]), mask, state.cache, labels, words)
        c, u = out.chunk(2)
        return c, u

    @torch.inference_mode()
    def start(self, batch: int, cond: Any = None) -> tuple[ScaleState, Tensor, Tensor | None]:
        """Prefill the condition: ``(state, cond logits [B, 1, V], uncond logits or None)`` of scale 0."""
        cond = self._cond.check_condition(cond, batch)
        if cond is not None:
            cond = cond.to(self.device)
        labels, words = self._cond._condition(cond, batch)
        guided = cond is not None and cond.guidance.active
        n = self.tokenizer.latent_grid
        f_hat = torch.zeros(batch, self.tokenizer.config.codebook_embed_dim, n, n, device=self.device)
        state = ScaleState(KVBackend(self.gpt.config.n_layer), labels, words, guided, batch, f_hat, self.prefix_len)
        p = self.prefix_len
        pos = torch.arange(p, device=self.device)[None].expand(batch, p)
        c, u = self._run(state, None, pos, None)
        return state, c[:, -1:], None if u is None else u[:, -1:]

    @torch.inference_mode()
    def commit(self, state: ScaleState, codes: Tensor) -> None:
        """Add the codes ``[B, p_k**2]`` of the next scale to the residual sum ``f_hat``."""
        p = int(round(codes.shape[1] ** 0.5))
        state.f_hat = state.f_hat + self.tokenizer.up(self.tokenizer.lookup(codes.view(-1, p, p).to(self.device)))

    @torch.inference_mode()
    def step(self, state: ScaleState, k: int) -> tuple[Tensor, Tensor | None]:
        """Feed every input of scale ``k >= 1`` at once; logits ``[B, p_k**2, V]`` of its tokens."""
        if not 1 <= k < len(self.scales):
            raise InputError(f"scale index must lie in [1, {len(self.scales)}), got {k}")
        lat = self.tokenizer.next_input(state.f_hat, k)
        n = lat.shape[1]
        pos = torch.arange(state.next_pos, state.next_pos + n, device=self.device)[None].expand(state.batch, n)
        past = state.cache.layers[0].keys.shape[2]
        mask = torch.ones(1, 1, n, past + n, dtype=torch.bool, device=self.device)
        state.next_pos += n
        return self._run(state, lat, pos, mask)


__all__ = ["ScaleGPTConfig", "ScaleGPT", "ScaleLM", "ScaleState", "scale_rope"]
