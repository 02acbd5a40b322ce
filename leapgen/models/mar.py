"""MAR: a bidirectional masked transformer over continuous tokens with a per-token diffusion head.

Paper: Li et al. 2024, "Autoregressive Image Generation without Vector Quantization" (MAR,
``LTH14/mar``, ``models/mar.py``). Emoji-scale version:

* **network** :class:`MARNet`: the condition "buffer" (MAR's class-embedding buffer tokens):
  position 0 the class embedding (``num_classes`` = the null class), positions ``1 .. text_len``
  word embeddings + learned positions of the prompt's Unicode name (word ids of
  :class:`~leapgen.tokenizers.word_vocab.WordVocab`; all ``TEXT_NULL`` = no text); then the
  ``seq_len`` image positions: ``Linear(D, dim)`` of the token where known, a learned **mask
  embedding** where not, plus learned position embeddings; ``n_layer`` pre-LN bidirectional
  blocks (SDPA); a final LayerNorm gives the conditioning vector ``z`` of every image position.
  Simplification of MAR's MAE encoder/decoder pair: one stack sees known tokens and mask
  embeddings together (at 64 positions dropping masked ones from an encoder saves little).
* **head** :class:`~leapgen.models.mar_head.DiffusionHead` (MLP DDPM) samples each token from ``z``.
* **adapter** :class:`MARModel`: the :class:`~leapgen.models.masked_base.ContinuousMaskedModel`
  contract (``model(values, known, cond)`` -> ``z``; ``sample_tokens``) with a
  :class:`~leapgen.models.condition.ClassCondition` as ``cond``, plus what the ``mar`` / ``cspd``
  samplers use: :meth:`MARModel.conditioning` (conditional and null ``z`` of one batched
  forward) and :meth:`MARModel.head_sample` (guided head sampling from given noise). Registered
  as the model contract ``"mar"``.

Training (``leapgen.train.image_mar``): mask a cosine-distributed fraction of the positions
(``r = cos(pi/2 * u)``, ``u ~ U(0, 1)``, at least one), drop the whole condition with p = 0.1
(the null condition used by guidance), and train the head's eps loss on the masked positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError, InputError, ModelMismatchError
from .condition import NULL_LABEL, ClassCondition
from .mar_head import DiffusionHead
from .masked_base import ContinuousMaskedModel
from .per_thread import PerThread

TEXT_PAD, TEXT_NULL = 0, 1


@dataclass
class MARConfig(ComponentConfig):
    token_dim: int = 8
    grid_size: int = 8
    dim: int = 192
    n_layer: int = 6
    n_head: int = 6
    mlp_ratio: float = 4.0
    dropout: float = 0.1
    num_classes: int = 8
    class_names: tuple[str, ...] = ()
    text_vocab_size: int = 0
    text_len: int = 0
    head_width: int = 256
    head_depth: int = 3
    train_steps: int = 1000
    sampling_steps: int = 16
    clip_denoised: float = 5.0

    def __post_init__(self) -> None:
        self.class_names = tuple(self.class_names)
        if self.dim % self.n_head:
            raise ConfigError(f"dim {self.dim} is not a multiple of n_head {self.n_head}")
        if bool(self.text_vocab_size) != bool(self.text_len):
            raise ConfigError("text_vocab_size and text_len must both be 0 (class only) or both positive")

    @property
    def seq_len(self) -> int:
        return self.grid_size**2

    @property
    def prefix_len(self) -> int:
        return 1 + self.text_len


class _Block(nn.Module):
    def __init__(self, cfg: MARConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        hidden = int(cfg.dim * cfg.mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, hidden), nn.GELU(), nn.Linear(hidden, cfg.dim))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.drop(self.proj(a))
        return x + self.drop(self.mlp(self.norm2(x)))


class MARNet(PretrainedMixin, nn.Module):
    """The MAR transformer + diffusion head (see the module docstring)."""

    config_class = MARConfig

    def __init__(self, config: MARConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = MARConfig(**kwargs)
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = cfg = config
        self.cls_emb = nn.Embedding(cfg.num_classes + 1, cfg.dim)
        if cfg.text_len:
            self.word_emb = nn.Embedding(cfg.text_vocab_size, cfg.dim)
            self.word_pos = nn.Parameter(torch.zeros(cfg.text_len, cfg.dim))
        self.tok_in = nn.Linear(cfg.token_dim, cfg.dim)
        self.mask_emb = nn.Parameter(torch.zeros(cfg.dim))
        self.pos = nn.Parameter(torch.zeros(cfg.seq_len, cfg.dim))
        self.blocks = nn.ModuleList([_Block(cfg) for _ in range(cfg.n_layer)])
        self.norm = nn.LayerNorm(cfg.dim)
        for p in (self.mask_emb, self.pos):
            nn.init.normal_(p, std=0.02)
        if cfg.text_len:
            nn.init.normal_(self.word_pos, std=0.02)
        self.head = DiffusionHead(cfg.token_dim, cfg.dim, cfg.head_width, cfg.head_depth, cfg.train_steps,
                                  cfg.sampling_steps, cfg.clip_denoised)

    def null_words(self, batch: int, device: torch.device) -> Tensor | None:
        if not self.config.text_len:
            return None
        return torch.full((batch, self.config.text_len), TEXT_NULL, dtype=torch.long, device=device)

    def forward(self, values: Tensor, known: Tensor, labels: Tensor, words: Tensor | None = None) -> Tensor:
        """Conditioning vectors ``z [B, T, dim]`` of ``values [B, T, D]`` (read where ``known [B, T]``)
        under class ``labels [B]`` (``num_classes`` = null) and ``words [B, text_len]``."""
        cfg = self.config
        b = values.shape[0]
        x = torch.where(known[..., None], self.tok_in(values.to(self.pos.dtype)), self.mask_emb.to(self.pos.dtype))
        x = x + self.pos[: values.shape[1]]
        parts = [self.cls_emb(labels)[:, None]]
        if cfg.text_len:
            w = words if words is not None else self.null_words(b, values.device)
            parts.append(self.word_emb(w) + self.word_pos)
        h = torch.cat(parts + [x], 1)
        for blk in self.blocks:
            h = blk(h)
        return self.norm(h[:, cfg.prefix_len :])


def _split_cond(net: MARNet, cond: Any, batch: int, device: torch.device) -> tuple[Tensor, Tensor | None]:
    """Class indices (null class for ``NULL_LABEL``) and word ids of a ClassCondition (None: null)."""
    cfg = net.config
    if cond is None:
        return torch.full((batch,), cfg.num_classes, dtype=torch.long, device=device), net.null_words(batch, device)
    if not isinstance(cond, ClassCondition):
        raise InputError(f"a MAR model is conditioned on a ClassCondition, got {type(cond).__name__}")
    if cond.batch_size != batch:
        raise InputError(f"the condition has {cond.batch_size} rows but the state has {batch}")
    labels = cond.labels.to(device)
    if bool((labels >= cfg.num_classes).any()):
        raise InputError(f"class ids must lie in [0, {cfg.num_classes}) or be {NULL_LABEL} (no class)")
    labels = torch.where(labels == NULL_LABEL, torch.full_like(labels, cfg.num_classes), labels)
    words = None
    if cfg.text_len:
        words = cond.text_ids.to(device) if cond.text_ids is not None else net.null_words(batch, device)
        if tuple(words.shape) != (batch, cfg.text_len):
            raise InputError(f"text ids must be [B, {cfg.text_len}], got {tuple(words.shape)}")
    return labels, words


class MARModel(ContinuousMaskedModel):
    """The ``"mar"`` model contract: a :class:`MARNet` behind :class:`ContinuousMaskedModel`.

    ``forwards`` counts transformer forwards (one batched call = one forward, guidance included);
    ``head_calls`` counts head sampling calls (each runs ``K`` MLP steps on many tokens)."""

    head_calls = PerThread(0)  # per thread, like ``forwards``

    def __init__(self, net: MARNet) -> None:
        self.net = net
        self.token_dim = net.config.token_dim
        self.cond_dim = net.config.dim
        self.max_length = net.config.seq_len
        self.forwards = 0
        self.head_calls = 0

    @property
    def config(self) -> MARConfig:
        return self.net.config

    @property
    def device(self) -> torch.device:
        return self.net.pos.device

    @property
    def seq_len(self) -> int:
        return self.net.config.seq_len

    def null_cond(self, cond: Any) -> Any:
        if cond is None:
            return None
        b = cond.batch_size
        return ClassCondition(labels=torch.full((b,), NULL_LABEL, dtype=torch.long), text_ids=None)

    def _forward(self, values: Tensor, known: Tensor, cond: Any, attention_mask: Tensor | None) -> Tensor:
        labels, words = _split_cond(self.net, cond, values.shape[0], values.device)
        return self.net(values, known, labels, words).float()

    def sample_tokens(self, z: Tensor, generator: torch.Generator | None, temperature: Tensor) -> Tensor:
        k = self.net.head.sampling_steps
        noise = torch.randn((z.shape[0], k + 1, self.token_dim), generator=generator, device=z.device)
        self.head_calls += 1
        return self.net.head.sample(z, noise, temperature.to(z.device).float())[0]

    # ------------------------------------------------------------------ what the mar/cspd samplers use
    def check_compatible(self, other: MARModel) -> None:
        """Refuse a draft whose tokens, grid, classes or text vocabulary differ from this model's."""
        a, b = self.config, other.config
        if a.token_dim != b.token_dim:
            raise ModelMismatchError(
                f"the draft's token dimension is {b.token_dim} but the target's is {a.token_dim}; "
                "train the draft on the same tokenizer's latents"
            )
        if (a.grid_size, a.num_classes, a.text_vocab_size, a.text_len) != (b.grid_size, b.num_classes, b.text_vocab_size, b.text_len):
            raise ModelMismatchError("the draft must share the target's grid, classes and text vocabulary/length")

    def conditioning(self, values: Tensor, known: Tensor, cond: Any, guided: bool) -> tuple[Tensor, Tensor | None]:
        """``z [B, T, C]`` (and the null-condition ``z`` when ``guided``) of one batched forward."""
        d = self.token_dim
        if values.dim() != 3 or values.shape[-1] != d or not values.dtype.is_floating_point:
            raise InputError(f"this model takes float values [B, T, {d}], got {values.dtype} {tuple(values.shape)}.")
        b = values.shape[0]
        labels, words = _split_cond(self.net, cond, b, values.device)
        if guided:
            labels = torch.cat([labels, torch.full_like(labels, self.config.num_classes)])
            words = None if words is None else torch.cat([words, self.net.null_words(b, values.device)])
            values, known = torch.cat([values, values]), torch.cat([known, known])
        z = self._check_finite(self.net(values, known, labels, words), "conditioning vectors")
        self.forwards += 1
        return (z[:b], z[b:]) if guided else (z, None)

    def head_sample(self, z: Tensor, noise: Tensor, temperature: Tensor, cfg: Tensor | None = None,
                    z_null: Tensor | None = None, steps: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`DiffusionHead.sample` (token, last-step mean and std), counted in ``head_calls``."""
        self.head_calls += 1
        return self.net.head.sample(z, noise, temperature, cfg, z_null, steps)


__all__ = ["MARConfig", "MARModel", "MARNet"]
