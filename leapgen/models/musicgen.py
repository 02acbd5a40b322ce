"""MusicGen-style autoregressive audio model over one codebook-pattern stream, and its CausalLM adapter.

Paper: Copet et al., "Simple and Controllable Music Generation" (MusicGen), NeurIPS 2023. The K
residual-VQ streams are laid out by a :mod:`codebook pattern <leapgen.models.codebook_patterns>`
(``delay`` by default) as one token stream, and a causal transformer with cross-attention to the
text condition generates it. Unlike MusicGen's K parallel heads (one forward per pattern step),
this model emits **one cell per forward** (the :class:`~leapgen.models.base.CausalLM` contract), so
every autoregressive sampler of the registry (``ar``, ``speculative``, ...) runs on it unchanged;
a decoding step of the pattern costs K forwards.

Stream vocabulary: codes ``0..V-1``, ``empty_id = V`` (a pattern cell outside the grid: the first
``K - 1`` steps of the delay pattern), ``bos_id = V + 1`` (the prompt). Sequence position 0 holds
BOS and position ``i + 1`` stream cell ``i``; the output at position ``i`` predicts cell ``i``,
whose codebook ``i % K`` and step ``i // K`` enter the input embedding (learned codebook embedding
+ sinusoidal step). The adapter makes the structure exact: BOS is never predicted, an empty cell
has all its mass on ``empty_id`` and a grid cell none (logits -1e9, finite).

For T frames the stream is generated up to :meth:`MusicGenConfig.stream_tokens` cells (every
codebook of frames ``0..T-1`` present) and read back with :meth:`MusicGenConfig.codes_from_stream`.
Training crops of F frames use the first ``F * K`` cells (no end-of-grid cells, so the model never
has to know T).

Classifier-free guidance runs inside the adapter (``TextEmbeddings.guidance.scale`` != 1: a doubled
batch over a :class:`~leapgen.models.lean.static_cache.StaticKVCache` with two copies, one counted
forward), identically for the target and the draft.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import ConfigError
from .audio_lm import AudioBlock, text_memory
from .base import CausalLM, KVCache
from .codebook_patterns import get_pattern
from .condition import Guidance, TextEmbeddings, expect_condition
from .guidance import guidance_mix
from .lean.static_cache import StaticKVCache
from .speech_encoder import sinusoid

FORBIDDEN = -1e9
#: the largest sampling temperature for this model: its structure rules cells out with the finite
#: FORBIDDEN logit (a model's logits must be finite), which FORBIDDEN / temperature brings back near 0
#: past about 1e7 (a draw of BOS or EMPTY inside the grid); at 100 the codes are already near uniform
MAX_TEMPERATURE = 100.0


@dataclass
class MusicGenConfig(ComponentConfig):
    num_codebooks: int = 4
    codebook_size: int = 256
    dim: int = 128
    num_layers: int = 4
    num_heads: int = 4
    text_dim: int = 128
    max_frames: int = 500
    pattern: str = "delay"
    dropout: float = 0.0
    frame_rate: int = 50

    def __post_init__(self) -> None:
        get_pattern(self.pattern)
        if self.dim % self.num_heads:
            raise ConfigError(f"dim {self.dim} must be a multiple of num_heads {self.num_heads}")

    @property
    def empty_id(self) -> int:
        return self.codebook_size

    @property
    def bos_id(self) -> int:
        return self.codebook_size + 1

    @property
    def vocab_size(self) -> int:
        return self.codebook_size + 2

    def stream_tokens(self, frames: int) -> int:
        """Cells to generate so that frames ``0..frames-1`` are complete."""
        k = self.num_codebooks
        return get_pattern(self.pattern).prefix_length(k, frames + k - 1, frames)

    @property
    def max_length(self) -> int:
        return self.stream_tokens(self.max_frames) + 1

    def codes_from_stream(self, stream: Tensor, frames: int) -> Tensor:
        """Codes ``[B, K, frames]`` from generated cells ``[B, n >= stream_tokens(frames)]``."""
        k = self.num_codebooks
        codes, _ = get_pattern(self.pattern).from_stream(stream[:, : self.stream_tokens(frames)], k, frames + k - 1)
        return codes[:, :, :frames]

    def train_stream(self, codes: Tensor) -> Tensor:
        """The first ``F * K`` cells of the pattern stream of a crop ``[B, K, F]`` (training inputs)."""
        b, k, f = codes.shape
        return get_pattern(self.pattern).to_stream(codes, self.empty_id)[:, : f * k]

    def empty_cells(self, n: int) -> Tensor:
        """Bool ``[n]``: which of the first ``n`` cells are empty (position-determined)."""
        k = self.num_codebooks
        mask = get_pattern(self.pattern).empty_mask(k, n // k + 2 * k)
        return mask[:n]


class MusicGenTransformer(PretrainedMixin, nn.Module):
    """Causal transformer over a pattern stream with text cross-attention (see the module docstring)."""

    config_class = MusicGenConfig

    def __init__(self, config: MusicGenConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config if config is not None else MusicGenConfig(**kwargs)
        self.config = config
        c = config
        self.tok = nn.Embedding(c.vocab_size, c.dim)
        self.cb = nn.Embedding(c.num_codebooks, c.dim)
        self.null_text = nn.Parameter(torch.randn(c.text_dim) * 0.02)
        self.blocks = nn.ModuleList([AudioBlock(c.dim, c.num_heads, c.text_dim, dropout=c.dropout) for _ in range(c.num_layers)])
        self.ln_out = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab_size)
        self.register_buffer("empty", c.empty_cells(c.max_length + c.num_codebooks), persistent=False)

    def forward(self, tokens: Tensor, positions: Tensor, cond: TextEmbeddings | None, mask: Tensor | None = None,
                cache: Any = None) -> Tensor:
        """Logits ``[B, n, vocab]`` (structure applied) of ``tokens [B, n]`` at sequence ``positions [B, n]``;
        ``mask``: bool ``[B or 1, 1, n, past + n]`` or None (causal); ``cache``: a backend with
        ``layers[i].append(k, v)``."""
        c = self.config
        b, n = tokens.shape
        x = self.tok(tokens) + self.cb(positions % c.num_codebooks)
        x = x + sinusoid(positions // c.num_codebooks, c.dim).to(x.dtype)
        memory, mmask = text_memory(self.null_text, cond, b, tokens.device)
        for i, blk in enumerate(self.blocks):
            x = blk(x, memory, mmask, mask, cache.layers[i] if cache is not None else None, causal=cache is None)
        logits = self.head(self.ln_out(x)).float()
        return self.structure(logits, positions)

    def structure(self, logits: Tensor, positions: Tensor) -> Tensor:
        c = self.config
        empty = self.empty[positions.clamp(max=self.empty.numel() - 1)]  # [B, n]
        allowed = torch.ones(c.vocab_size, dtype=torch.bool, device=logits.device)
        allowed[c.bos_id] = False
        grid_ok = allowed.clone()
        grid_ok[c.empty_id] = False
        empty_ok = torch.zeros_like(allowed)
        empty_ok[c.empty_id] = True
        ok = torch.where(empty[..., None], empty_ok, grid_ok)
        return logits.masked_fill(~ok, FORBIDDEN)


#: the key of ``TextEmbeddings.extra`` holding forced stream cells ``[B, N]`` (a code, or -1 = free):
#: an audio prompt's cells that the codebook pattern places after generated ones
FORCED_KEY = "prompt_cells"


def force_cells(logits: Tensor, position_ids: Tensor, forced: Tensor) -> Tensor:
    """``logits [B, n, V]`` with all the mass on ``forced[b, p]`` wherever it is a code (the output
    at position p predicts stream cell p); every other position unchanged."""
    b, n_new, _ = logits.shape
    width = forced.shape[1]
    pos = position_ids.to(forced.device).expand(b, n_new)
    code = torch.where(pos < width, forced.gather(1, pos.clamp(max=width - 1)), torch.full_like(pos, -1)).to(logits.device)
    one = torch.full_like(logits, FORBIDDEN).scatter_(-1, code.clamp(min=0)[..., None], 0.0)
    return torch.where((code >= 0)[..., None], one, logits)


def continuation_plan(config: MusicGenConfig, codes: list[Tensor | None], frames: int) -> tuple[list[list[int]], Tensor]:
    """``(input rows, forced)`` of an AR decode of ``frames`` frames continuing ``codes`` (per row a
    prompt ``[K, P]`` of its first P frames, or None): rows ``[BOS] + prefix``, the longest stream
    prefix made only of prompt cells and empty cells (one common length: the shortest row's), and
    ``forced [B, N]`` (N = ``config.stream_tokens(frames)``): the prompt's code at every later prompt
    cell (delay pattern: codebook k of frames P-k..P-1), -1 elsewhere, for the condition's
    ``extra[FORCED_KEY]``. A prompt may be longer than ``frames`` (its cells within the N are used).
    Used by the audio pipeline's ``audio_prompt`` and by ``magnet_hybrid``'s AR part."""
    k, n = config.num_codebooks, config.stream_tokens(frames)
    width = frames + k - 1  # the grid codes_from_stream reads the stream as
    idx = get_pattern(config.pattern).index_map(k, width)[:n]
    grid_cell = idx >= 0
    t_of, k_of = idx.clamp(min=0) % width, idx.clamp(min=0) // width
    forced = torch.full((len(codes), n), -1, dtype=torch.long)
    prefix = n
    for r, c in enumerate(codes):
        p = 0 if c is None else c.shape[1]
        new = grid_cell & (t_of >= p)
        prefix = min(prefix, int(new.nonzero()[0]) if bool(new.any()) else n)
        if p:
            known = grid_cell & (t_of < p)
            forced[r, known] = c[k_of[known], t_of[known]]
    head = torch.where(grid_cell[:prefix], forced[:, :prefix], torch.full_like(forced[:, :prefix], config.empty_id))
    rows = [[config.bos_id] + h.tolist() for h in head]
    forced[:, :prefix] = -1
    return rows, forced


class MusicGenLM(CausalLM):
    """:class:`CausalLM` adapter of a :class:`MusicGenTransformer`; condition: TextEmbeddings (+ guidance).
    Cells named in the condition's ``extra[FORCED_KEY]`` are forced to their codes (audio continuation:
    every AR sampler, draft included, then keeps them, and greedy ``speculative`` still equals ``ar``)."""

    def __init__(self, net: MusicGenTransformer) -> None:
        self.net = net.eval()
        c = net.config
        self.config = c
        self.vocab_size = c.vocab_size
        self.max_length = c.max_length
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        return self.net.null_text.device

    @property
    def dtype(self) -> torch.dtype:
        return self.net.null_text.dtype

    def describe(self) -> str:
        c = self.config
        return f"MusicGen-style audio LM ({c.pattern} pattern, {c.num_codebooks}x{c.codebook_size} codes, {c.num_layers} layers)"

    def embeddings(self) -> Tensor:
        return self.net.tok.weight

    def new_cache(self, batch_size: int, cond: Any = None) -> KVCache:
        cond = expect_condition(cond, TextEmbeddings, "the MusicGen audio model", batch_size)
        if cond is not None:
            cond = cond.to(self.device)
        guided = cond is not None and cond.guidance.active
        c = self.config
        return StaticKVCache(c.num_layers, batch_size, c.num_heads, c.dim // c.num_heads, self.dtype, self.device,
                             capacity=min(self.max_length + 32, 4096), copies=2 if guided else 1, cond=cond)

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: KVCache, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        tokens, position_ids = tokens.to(self.device), position_ids.to(self.device)
        if cond is not cache.cond:
            cond = expect_condition(cond, TextEmbeddings, "the MusicGen audio model", tokens.shape[0])
        if isinstance(cache, StaticKVCache):
            cache.reserve(tokens.shape[1])
        forced = getattr(cond, "extra", {}).get(FORCED_KEY)
        copies = getattr(cache, "copies", 1)
        if copies == 1:
            logits = self.net(tokens, position_ids, cond, mask, cache.backend)
            return logits if forced is None else force_cells(logits, position_ids, forced)
        null = TextEmbeddings(embeddings=cond.embeddings, mask=torch.zeros_like(cond.mask if cond.mask is not None else cond.embeddings[..., 0], dtype=torch.bool))
        both = TextEmbeddings(embeddings=torch.cat([cond.embeddings, null.embeddings]), mask=torch.cat([null.mask | True if cond.mask is None else cond.mask, null.mask]))
        mask2 = None
        if mask is not None:
            m = mask.expand(tokens.shape[0], *mask.shape[1:])
            mask2 = torch.cat([m, m])
        logits = self.net(torch.cat([tokens, tokens]), torch.cat([position_ids, position_ids]), both, mask2, cache.backend)
        c, u = logits.chunk(2)
        logits = self.net.structure(guidance_mix(c, u, cond.guidance.scale), position_ids)
        return logits if forced is None else force_cells(logits, position_ids, forced)


@torch.inference_mode()
def cell_log_probs(lm: CausalLM, grid: Tensor, cond: Any) -> Tensor:
    """Teacher-forced log-probabilities ``[A, K, T]`` of every cell of a code grid ``[A, K, T]`` under
    ``lm``, a CausalLM over a codebook-pattern stream whose ``config`` is a :class:`MusicGenConfig`
    (e.g. :class:`MusicGenLM`): one forward over the grid's pattern stream (BOS first) with ``cond``
    and no guidance. MAGNeT's rescorer scores proposals with it, the audio bench generated codes."""
    c = lm.config
    a, k, t = grid.shape
    pattern = get_pattern(c.pattern)
    stream = pattern.to_stream(grid, c.empty_id)[:, : c.stream_tokens(t)]
    seq = torch.cat([torch.full((a, 1), c.bos_id, dtype=torch.long, device=grid.device), stream[:, :-1]], 1)
    if isinstance(cond, TextEmbeddings):
        cond = dataclasses.replace(cond, guidance=Guidance())
    logp = lm(seq, lm.new_cache(a, cond)).log_softmax(-1)
    cell = logp.gather(-1, stream.to(logp.device)[..., None]).squeeze(-1)  # [A, N]
    idx = pattern.index_map(k, t + k - 1)[: stream.shape[1]].to(grid.device)
    idx_t = torch.where(idx >= 0, idx % (t + k - 1), torch.full_like(idx, -1))
    idx_k = torch.where(idx >= 0, idx // (t + k - 1), torch.full_like(idx, -1))
    keep = (idx >= 0) & (idx_t < t)
    out = torch.zeros(a, k * t, dtype=cell.dtype, device=grid.device)
    out[:, idx_k[keep] * t + idx_t[keep]] = cell[:, keep].to(grid.device)
    return out.view(a, k, t)
