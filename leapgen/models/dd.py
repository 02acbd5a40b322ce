"""Distilled Decoding (DD1): a per-token flow-matching map from noise to VQ tokens under an AR
model, and a generator distilled from it that jumps from noise to all tokens in one or two passes.

Paper: Liu et al., "Distilled Decoding 1: One-step Sampling of Image Auto-regressive Models with
Flow Matching", ICLR 2025 (``imagination-research/distilled-decoding``, now
``microsoft/distilled_decoding``). Reported: LlamaGen 256 steps -> 1 (217.8x), FID 4.11 -> 11.35.

* **flow map** (:func:`flow_map`): for token ``i`` the AR model gives a categorical ``p_i`` over
  the ``V`` codebook vectors ``c_k``. With the straight path ``x_t = t c + (1 - t) eps``
  (``c ~ sum_k p_k delta(c_k)``, ``eps ~ N(0, I)``) the flow-matching velocity is
  ``v(x, t) = (E[c | x_t = x] - x) / (1 - t)``, the posterior weights being
  ``w_k ~ p_k exp(-|x - t c_k|^2 / 2 (1 - t)^2)``. Integrating it with ``steps`` Euler steps
  from ``t = 0`` maps the noise ``eps_i`` deterministically onto (near) one code vector; the token
  is the nearest code. The last Euler step lands exactly on the posterior mean, so a one-hot
  ``p_i`` gives exactly its code vector. Running the AR model with this map token after token
  fixes the whole image by the noise ``(eps_1 .. eps_n)``: the teacher trajectory.
* **generator** :class:`DDGenerator`: a :class:`~leapgen.models.llamagen.LlamaGenGPT` (initialised
  from the raster GPT's weights) whose input at the position predicting token ``i`` also carries
  ``noise_proj(eps_i)``; the embedding of the previous token is there when it is known and a
  learned ``unknown_embedding`` otherwise. One causal forward over ``cls_token_num + n - 1``
  positions maps the noise to all ``n`` tokens (argmax); the second step of DD's two-step mode
  keeps the first ``split`` tokens of the first pass and predicts the rest again from them (the
  teacher's intermediate state: first tokens fixed, the others still noise). Trained by
  ``leapgen.train.image_dd`` on teacher trajectories only: no image data.
* **adapter** :class:`DDModel`: the ``"dd"`` model contract (forward counter, ``generate``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, InputError
from .condition import NULL_LABEL, ClassCondition
from .llamagen import GPTConfig, LlamaGenGPT
from .per_thread import PerThread


def flow_map(noise: Tensor, probs: Tensor, codebook: Tensor, steps: int = 32) -> tuple[Tensor, Tensor]:
    """Map ``noise [M, d]`` to codebook vectors under ``probs [M, V]`` over ``codebook [V, d]``
    (see the module docstring). Returns ``(x [M, d], token ids [M])``; deterministic."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"flow-map steps must be an integer >= 1, got {steps!r}")
    if noise.shape[-1] != codebook.shape[-1] or probs.shape[-1] != codebook.shape[0] or probs.shape[0] != noise.shape[0]:
        raise InputError(f"shapes do not match: noise {tuple(noise.shape)}, probs {tuple(probs.shape)}, codebook {tuple(codebook.shape)}")
    x = noise.double()
    c = codebook.double()
    logp = torch.log(probs.double().clamp_min(0))
    c2 = (c * c).sum(-1)
    for i in range(steps):
        t = i / steps
        # |x - t c_k|^2 = |x|^2 - 2 t x.c_k + t^2 |c_k|^2 ; |x|^2 cancels in the softmax
        logw = logp - (t * t * c2[None] - 2 * t * x @ c.T) / (2 * (1 - t) ** 2)
        c_hat = torch.softmax(logw, -1) @ c
        x = x + (c_hat - x) / (steps - i)  # h / (1 - t) with h = 1/steps
    d2 = (x * x).sum(-1, keepdim=True) - 2 * x @ c.T + c2[None]
    return x.to(noise.dtype), d2.argmin(-1)


@dataclass
class DDConfig(GPTConfig):
    noise_dim: int = 8
    #: tokens kept from the first pass in two-step generation (0 = n // 2)
    split: int = 0
    flow_steps: int = 32
    supported_steps: tuple[int, ...] = (1, 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.supported_steps = tuple(int(s) for s in self.supported_steps)

    @property
    def num_tokens(self) -> int:
        return self.grid_size**2

    @property
    def split_at(self) -> int:
        return self.split or self.num_tokens // 2


class DDGenerator(LlamaGenGPT):
    """LlamaGen GPT + noise input projection (see the module docstring)."""

    config_class = DDConfig

    def __init__(self, config: DDConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = DDConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        super().__init__(config)
        self.noise_proj = nn.Linear(config.noise_dim, config.dim)
        self.unknown_embedding = nn.Parameter(torch.zeros(config.dim))
        nn.init.normal_(self.noise_proj.weight, std=0.02)
        nn.init.zeros_(self.noise_proj.bias)

    @classmethod
    def from_gpt(cls, gpt: LlamaGenGPT, noise_dim: int, **extra: Any) -> DDGenerator:
        """A generator whose GPT weights are copies of ``gpt``'s (the DD initialisation)."""
        fields = {f.name for f in dataclasses.fields(GPTConfig)}
        cfg = DDConfig(**{k: v for k, v in dataclasses.asdict(gpt.config).items() if k in fields},
                       noise_dim=noise_dim, **extra)
        gen = cls(cfg)
        missing, unexpected = gen.load_state_dict(gpt.state_dict(), strict=False)
        if unexpected or set(missing) - {"noise_proj.weight", "noise_proj.bias", "unknown_embedding"}:
            raise ConfigError(f"could not copy the GPT into the generator (missing {missing}, unexpected {unexpected})")
        return gen

    def logits(self, noise: Tensor, labels: Tensor, words: Tensor | None, known: Tensor | None = None,
               n_known: int = 0) -> Tensor:
        """Logits ``[B, n, V]`` of all tokens from ``noise [B, n, d]``, the condition and the first
        ``n_known`` tokens ``known [B, n_known]`` (teacher-forced; 0 = pure noise, the first step)."""
        cfg = self.config
        b, n, d = noise.shape
        p = cfg.cls_token_num
        if n != cfg.num_tokens or d != cfg.noise_dim:
            raise InputError(f"noise must be [B, {cfg.num_tokens}, {cfg.noise_dim}], got {tuple(noise.shape)}")
        length = p + n - 1
        tokens = torch.zeros((b, length), dtype=torch.long, device=noise.device)
        if n_known:
            tokens[:, p : p + n_known] = known[:, :n_known]  # token j sits at position p + j, predicts token j + 1
        pos = torch.arange(length, device=noise.device)[None].expand(b, length)
        h = self.embed(tokens, pos, labels, words)
        is_unknown = (pos >= p + max(n_known, 0)) & (pos >= p)
        h = torch.where(is_unknown[..., None], self.unknown_embedding.to(h.dtype), h)
        h = h.clone()
        h[:, p - 1 :] = h[:, p - 1 :] + self.noise_proj(noise.to(h.dtype))
        h = self.tok_dropout(h)
        freqs = self.freqs_cis[pos.clamp(0, self.freqs_cis.shape[0] - 1)].to(h.dtype)
        for blk in self.layers:
            h = blk(h, freqs, None, None)
        return self.output(self.norm(h[:, p - 1 :])).float()


class DDModel:
    """The ``"dd"`` model contract: a :class:`DDGenerator` with a forward counter.

    ``generate(noise, cond, num_steps)`` returns token ids ``[B, n]``: one forward for
    ``num_steps=1``, two for ``num_steps=2`` (the first pass's first ``split`` tokens are kept).
    Guidance in the condition is ignored: the teacher's guided distribution is distilled in."""

    forwards = PerThread(0)  # per thread: concurrent calls count their own

    def __init__(self, net: DDGenerator) -> None:
        self.net = net
        self.forwards = 0

    @property
    def config(self) -> DDConfig:
        return self.net.config

    @property
    def device(self) -> torch.device:
        return self.net.noise_proj.weight.device

    def check_steps(self, num_steps: Any) -> None:
        ok = self.config.supported_steps
        if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps not in ok:
            raise ConfigError(f"num_steps must be one of {ok} for this distilled generator, got {num_steps!r}")

    def condition(self, cond: ClassCondition | None, b: int) -> tuple[Tensor, Tensor | None]:
        cfg, dev = self.config, self.device
        if cond is None:
            labels = torch.full((b,), cfg.num_classes, dtype=torch.long, device=dev)
            text = None
        else:
            if not isinstance(cond, ClassCondition) or cond.batch_size != b:
                raise InputError(f"the dd sampler takes a ClassCondition with {b} rows")
            labels = cond.labels.to(dev)
            labels = torch.where(labels == NULL_LABEL, torch.full_like(labels, cfg.num_classes), labels)
            text = cond.text_ids.to(dev) if cond.text_ids is not None else None
        if cfg.text_len:
            null = torch.tensor(self.net.text_words(None), device=dev)[None].expand(b, -1)
            text = null if text is None else text
        return labels, text

    def generate(self, noise: Tensor, cond: ClassCondition | None, num_steps: int) -> Tensor:
        self.check_steps(num_steps)
        b = noise.shape[0]
        labels, words = self.condition(cond, b)
        tokens = self.net.logits(noise, labels, words).argmax(-1)
        self.forwards += 1
        if num_steps == 2:
            k = self.config.split_at
            second = self.net.logits(noise, labels, words, tokens, k).argmax(-1)
            self.forwards += 1
            tokens = torch.cat([tokens[:, :k], second[:, k:]], 1)
        return tokens


def dd_loss(net: DDGenerator, noise: Tensor, tokens: Tensor, labels: Tensor, words: Tensor | None,
            two_step_frac: float = 0.5, generator: torch.Generator | None = None) -> Tensor:
    """Cross-entropy of the teacher tokens: the first step (all noise) on every row, and on a
    ``two_step_frac`` share of rows the second step (first ``split`` tokens known, loss on the rest)."""
    loss = F.cross_entropy(net.logits(noise, labels, words).flatten(0, 1), tokens.flatten())
    m = int(round(two_step_frac * noise.shape[0]))
    if m:
        k = net.config.split_at
        lg = net.logits(noise[:m], labels[:m], None if words is None else words[:m], tokens[:m], k)
        loss = loss + F.cross_entropy(lg[:, k:].flatten(0, 1), tokens[:m, k:].flatten())
    return loss


__all__ = ["DDConfig", "DDGenerator", "DDModel", "dd_loss", "flow_map"]
