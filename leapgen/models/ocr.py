"""The scene-text network: an SVTR-style encoder shared by a CPPD decoder and an attention AR decoder.

* **Encoder** (SVTR, Du et al. IJCAI 2022, tiny): a two-convolution patch stem (stride 4) turns a
  ``32x100`` grayscale word image into an ``8x25`` grid of tokens (+ learned 2-D positions);
  ``local_blocks`` *local mixing* blocks (attention inside a 7x11 window of the grid) then
  ``global_blocks`` *global mixing* blocks; a merging convolution (stride (2, 1)) to ``4x25`` and
  ``width``; ``stage2_blocks`` global blocks; a last merging convolution to ``2x25``: 50 visual
  tokens (``vis_seq = 50``, as CPPD uses for 32x100).
* **CPPD** (Context Perception Parallel Decoder, Du et al., TPAMI 2025, arXiv 2307.12270; PaddleOCR
  ``CPPDHead``): ``max_len + 1`` **position nodes** (an embedding of 0..max_len plus a learned
  ``char_pos_embed``) and one **character node** per class. ``layers`` pairs of post-norm decoder
  layers update ``[character nodes; visual tokens]`` and ``[position nodes; visual tokens]``
  (queries), attending to the visual part of their own stream (keys / values). Training adds
  **character counting** (``Linear(d, max_len)`` on each character node, CE against the number of
  times that class occurs in the label, ``</s>`` once) and **character ordering** (``Linear(d,
  max_len + 1)`` on each position node, its own diagonal logit, BCE against "slot i is used"
  (i <= length, the ``</s>`` slot included)). The **edge decoder** lets the position nodes attend
  to the character branch's visual features (``softmax(P Wp (V Wpv)^T) V Wcv``, residual + MLP)
  and ``edge_fc`` classifies every slot; CE with padding ignored. Loss = ``side_weight * (CC + CO) +
  edge CE`` (label smoothing 0.1). Inference is one pass with no character nodes: argmax per
  slot, cut at the first ``</s>``.
* **Auxiliary CTC head** (``ctc_weight > 0``, the recipe's default): SVTR's own read-out, a linear
  CTC classifier on the 25 columns of the last grid (the two rows averaged), trained beside the
  decoders as guidance for the encoder (GTC, Hu et al., AAAI 2020: CTC guided by attention
  decoders; here the other way round, CTC's monotonic alignment teaches the visual tokens to be
  character-local, which the attention decoders then read). On the rendered corpus the attention
  decoders alone stay at the unigram loss for the first thousand steps of a CPU run; with the
  CTC guidance the encoder starts reading within a few hundred. It is not used at inference.
* **AR decoder**: the ASR family's causal Transformer decoder layer (:class:`~leapgen.models.asr._ARLayer`,
  pre-norm, self-attention KV cache, cross-attention keys / values computed once per image).

Ids: 0 = padding (never a target), 1 = ``</s>`` (also the AR start token), 2.. = the 36 characters
``0-9a-z``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from .asr import _ARLayer
from .speech_encoder import LayerKV, ctc_loss, decoder_self_mask, sinusoid
from .torch_lean import encoder_layer_forward

PAD, EOS = 0, 1
CHARSET = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclasses.dataclass
class OCRConfig(ComponentConfig):
    charset: str = CHARSET
    height: int = 32
    width: int = 100
    dim: int = 64
    width2: int = 128
    heads: int = 2
    heads2: int = 4
    local_blocks: int = 2
    global_blocks: int = 1
    stage2_blocks: int = 2
    window: tuple = (7, 11)
    max_len: int = 16
    cppd_layers: int = 2
    ar_layers: int = 2
    ff_ratio: int = 2
    dropout: float = 0.1
    side_weight: float = 1.0
    #: weight of the auxiliary CTC loss on the encoder's columns (0: no CTC head; see the module docstring)
    ctc_weight: float = 0.0

    @property
    def vocab_size(self) -> int:
        return len(self.charset) + 2


def cppd_targets(labels: list[list[int]], max_len: int, vocab_size: int) -> dict[str, Tensor]:
    """CPPD training targets of label id lists (characters only, ids >= 2, no ``</s>``):

    * ``count [B, V]``: occurrences of every class (``</s>``: 1, padding: 0), clipped to ``max_len - 1``;
    * ``order [B, max_len + 1]``: 1.0 where slot ``i <= len(label)`` (characters and the ``</s>`` slot);
    * ``edge [B, max_len + 1]``: the characters, ``</s>``, then -100 (ignored)."""
    b = len(labels)
    count = torch.zeros(b, vocab_size, dtype=torch.long)
    order = torch.zeros(b, max_len + 1)
    edge = torch.full((b, max_len + 1), -100, dtype=torch.long)
    for r, lab in enumerate(labels):
        lab = list(lab)[:max_len]
        for t in lab:
            count[r, t] += 1
        count[r, EOS] = 1
        order[r, : len(lab) + 1] = 1.0
        edge[r, : len(lab)] = torch.tensor(lab, dtype=torch.long)
        edge[r, len(lab)] = EOS
    return {"count": count.clamp_(max=max_len - 1), "order": order, "edge": edge}


def cut_at_eos(ids: list[int]) -> list[int]:
    """The characters before the first ``</s>`` (the CPPD read-out)."""
    return ids[: ids.index(EOS)] if EOS in ids else list(ids)


class _Block(nn.Module):
    """Pre-norm Transformer block (SVTR mixing block) with an optional attention mask."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True,
                                                activation="gelu")

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return encoder_layer_forward(self.layer, x, mask)


def local_mask(h: int, w: int, window: tuple, device: Any = None) -> Tensor:
    """Additive ``[h*w, h*w]`` mask allowing attention inside a ``window`` (rows, cols) neighbourhood."""
    ys, xs = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    ok = ((ys[:, None] - ys[None]).abs() <= window[0] // 2) & ((xs[:, None] - xs[None]).abs() <= window[1] // 2)
    return torch.zeros(ok.shape, device=device).masked_fill(~ok, float("-inf"))


class SVTREncoder(nn.Module):
    """Tiny SVTR (see the module docstring): ``[B, 1, 32, 100]`` -> ``[B, 50, width2]``."""

    def __init__(self, c: OCRConfig) -> None:
        super().__init__()
        d, d2 = c.dim, c.width2
        self.stem = nn.Sequential(nn.Conv2d(1, d // 2, 3, 2, 1), nn.BatchNorm2d(d // 2), nn.GELU(),
                                  nn.Conv2d(d // 2, d, 3, 2, 1), nn.BatchNorm2d(d), nn.GELU())
        self.grid = (c.height // 4, c.width // 4)
        self.pos = nn.Parameter(torch.zeros(1, self.grid[0] * self.grid[1], d))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.stage1 = nn.ModuleList(_Block(d, c.heads, d * c.ff_ratio, c.dropout)
                                    for _ in range(c.local_blocks + c.global_blocks))
        self.n_local = c.local_blocks
        self.register_buffer("mask1", local_mask(*self.grid, c.window), persistent=False)
        self.merge1 = nn.Conv2d(d, d2, 3, (2, 1), 1)
        self.norm1 = nn.LayerNorm(d2)
        self.stage2 = nn.ModuleList(_Block(d2, c.heads2, d2 * c.ff_ratio, c.dropout) for _ in range(c.stage2_blocks))
        self.merge2 = nn.Conv2d(d2, d2, 3, (2, 1), 1)
        self.norm2 = nn.LayerNorm(d2)

    def forward(self, images: Tensor) -> Tensor:
        x = self.stem(images)  # [B, d, 8, 25]
        b, d, h, w = x.shape
        x = x.flatten(2).transpose(1, 2) + self.pos
        for i, blk in enumerate(self.stage1):
            x = blk(x, self.mask1.to(x.dtype) if i < self.n_local else None)
        x = self.merge1(x.transpose(1, 2).reshape(b, d, h, w))  # [B, d2, 4, 25]
        b, d2, h, w = x.shape
        x = self.norm1(x.flatten(2).transpose(1, 2))
        for blk in self.stage2:
            x = blk(x, None)
        x = self.merge2(x.transpose(1, 2).reshape(b, d2, h, w))  # [B, d2, 2, 25]
        return self.norm2(x.flatten(2).transpose(1, 2))


class _PostNormLayer(nn.Module):
    """CPPD ``DecoderLayer``: ``x = LN(q + Attn(q, kv)); x = LN(x + MLP(x))``."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(ff, d))

    def forward(self, q: Tensor, kv: Tensor) -> Tensor:
        x = self.n1(q + self.attn(q, kv, kv, need_weights=False)[0])
        return self.n2(x + self.mlp(x))


class _EdgeLayer(nn.Module):
    """CPPD ``EdgeDecoderLayer``: position nodes attend (keys from ``pv``) to values from ``cv``."""

    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.p, self.pv, self.cv, self.o = (nn.Linear(d, d) for _ in range(4))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def _split(self, x: Tensor) -> Tensor:
        return x.view(x.shape[0], x.shape[1], self.h, self.dh).transpose(1, 2)

    def forward(self, p: Tensor, cv: Tensor, pv: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(self._split(self.p(p)), self._split(self.pv(pv)), self._split(self.cv(cv)))
        x = self.n1(p + self.o(out.transpose(1, 2).reshape(p.shape)))
        return self.n2(x + self.mlp(x))


class CPPDDecoder(nn.Module):
    """Position nodes + character nodes + edge decoder (see the module docstring)."""

    def __init__(self, c: OCRConfig, vis_seq: int) -> None:
        super().__init__()
        d, v, n = c.width2, c.vocab_size, c.max_len + 1
        self.vis_seq, self.max_len = vis_seq, c.max_len
        self.vis_pos = nn.Parameter(torch.zeros(1, vis_seq, d))
        self.pos_node = nn.Embedding(n, d)
        self.char_pos = nn.Parameter(torch.zeros(1, n, d))
        self.char_node = nn.Embedding(v, d)
        for p in (self.vis_pos, self.char_pos):
            nn.init.trunc_normal_(p, std=0.02)
        ff = d * c.ff_ratio
        self.char_layers = nn.ModuleList(_PostNormLayer(d, c.heads2, ff, c.dropout) for _ in range(c.cppd_layers))
        self.pos_layers = nn.ModuleList(_PostNormLayer(d, c.heads2, ff, c.dropout) for _ in range(c.cppd_layers))
        self.edge = _EdgeLayer(d, c.heads2, ff)
        self.edge_fc = nn.Linear(d, v)
        self.char_fc = nn.Linear(d, c.max_len)  # character counting
        self.pos_fc = nn.Linear(d, n)  # character ordering (diagonal)

    def forward(self, vis: Tensor, with_char_nodes: bool = False) -> dict[str, Tensor]:
        """``logits [B, max_len + 1, V]`` (+ ``count [B, V, max_len]`` and ``order [B, max_len + 1]``
        logits when ``with_char_nodes``, the training branch)."""
        b, n = vis.shape[0], self.max_len + 1
        vis = vis + self.vis_pos
        pos = (self.pos_node.weight[None] + self.char_pos).expand(b, -1, -1)
        pos_q = torch.cat([pos, vis], 1)
        char_q = torch.cat([self.char_node.weight[None].expand(b, -1, -1), vis], 1) if with_char_nodes else vis
        for cl, pl in zip(self.char_layers, self.pos_layers):
            char_q = cl(char_q, char_q[:, -self.vis_seq :])
            pos_q = pl(pos_q, pos_q[:, -self.vis_seq :])
        pos_nodes, char_vis = pos_q[:, :n], char_q[:, -self.vis_seq :]
        out = {"logits": self.edge_fc(self.edge(pos_nodes, char_vis, char_vis)).float()}
        if with_char_nodes:
            out["count"] = self.char_fc(char_q[:, : -self.vis_seq]).float()
            out["order"] = torch.diagonal(self.pos_fc(pos_nodes), dim1=1, dim2=2).float()
        return out


class OCRModel(nn.Module, PretrainedMixin):
    """SVTR encoder + CPPD decoder + AR decoder (see the module docstring)."""

    config_class = OCRConfig

    def __init__(self, config: OCRConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or OCRConfig()
        if isinstance(c.window, list):
            c.window = tuple(c.window)
        self.encoder = SVTREncoder(c)
        self.vis_seq = (c.height // 16) * (c.width // 4)
        self.cppd = CPPDDecoder(c, self.vis_seq)
        d = c.width2
        self.ar_embed = nn.Embedding(c.vocab_size, d)
        self.ar_layers = nn.ModuleList(_ARLayer(d, c.heads2, d * c.ff_ratio, c.dropout) for _ in range(c.ar_layers))
        self.ar_norm = nn.LayerNorm(d)
        self.ar_out = nn.Linear(d, c.vocab_size)
        self.ctc_head = nn.Linear(d, c.vocab_size) if c.ctc_weight > 0 else None

    @property
    def d_model(self) -> int:
        return int(self.config.width2)

    # ------------------------------------------------------------------------------ encoder / CPPD
    def encode(self, images: Tensor) -> Tensor:
        """Visual tokens ``[B, 50, d]`` of ``images [B, 32, 100]`` or ``[B, 1, 32, 100]`` in [-1, 1]."""
        if images.dim() == 3:
            images = images[:, None]
        return self.encoder(images)

    def cppd_logits(self, memory: Tensor) -> Tensor:
        """One CPPD pass: slot logits ``[B, max_len + 1, V]`` (padding is never an output: -1e4)."""
        logits = self.cppd(memory)["logits"]
        logits[..., PAD] = -1e4
        return logits

    # ------------------------------------------------------------------------------ AR decoder
    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(la.cross.split(la.cross.k(memory)), la.cross.split(la.cross.v(memory))) for la in self.ar_layers]

    def empty_self_kv(self, batch: int, device: torch.device, dtype: torch.dtype) -> list[LayerKV]:
        shape = (batch, self.config.heads2, 0, self.d_model // self.config.heads2)
        return [LayerKV(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in self.ar_layers]

    def ar_logits(self, tokens: Tensor, positions: Tensor, cross: list[tuple[Tensor, Tensor]],
                  self_kv: list[LayerKV] | None = None, self_mask: Tensor | None = None) -> Tensor:
        """AR decoder forward of ``tokens [B, n]`` at ``positions [B, n]`` (``self_kv``: appended to;
        ``self_mask``: additive ``[B, 1, n, past + n]``, None = causal among the new tokens)."""
        d = self.d_model
        x = self.ar_embed(tokens) * d**0.5 + sinusoid(positions, d).to(self.ar_embed.weight.dtype)
        n = tokens.shape[1]
        past = self_kv[0].keys.shape[2] if self_kv else 0
        self_mask = decoder_self_mask(self_mask, n, past, x)
        for i, layer in enumerate(self.ar_layers):
            x = layer(x, self_kv[i] if self_kv else None, cross[i], self_mask, None)
        logits = self.ar_out(self.ar_norm(x)).float()
        if not self.training:  # padding is never an output (training leaves it to label smoothing)
            logits = torch.cat([torch.full_like(logits[..., :1], -1e4), logits[..., 1:]], -1)
        return logits

    # ------------------------------------------------------------------------------ training
    def losses(self, images: Tensor, labels: list[list[int]], label_smoothing: float = 0.1,
               ar_weight: float = 1.0) -> dict[str, Tensor]:
        """``loss`` = CPPD (``side_weight * (count + order) + edge``) + ``ar_weight * ar``
        (+ ``ctc_weight * ctc`` with the auxiliary CTC head)."""
        c = self.config
        dev = images.device
        memory = self.encode(images)
        t = {k: v.to(dev) for k, v in cppd_targets(labels, c.max_len, c.vocab_size).items()}
        out = self.cppd(memory, with_char_nodes=True)
        parts = {
            "count": F.cross_entropy(out["count"].flatten(0, 1), t["count"].flatten(), label_smoothing=label_smoothing),
            "order": F.binary_cross_entropy_with_logits(out["order"], t["order"]),
            "edge": F.cross_entropy(out["logits"].flatten(0, 1), t["edge"].flatten(), ignore_index=-100,
                                    label_smoothing=label_smoothing),
        }
        # AR teacher forcing: </s> y -> y </s>
        gold = t["edge"]  # characters, </s>, -100
        b = gold.shape[0]
        inp = torch.cat([gold.new_full((b, 1), EOS), gold[:, :-1].clamp_min(0)], 1)
        pos = torch.arange(inp.shape[1], device=dev)[None].expand(b, -1)
        ar = self.ar_logits(inp, pos, self.cross_kv(memory))
        parts["ar"] = F.cross_entropy(ar.flatten(0, 1), gold.flatten(), ignore_index=-100, label_smoothing=label_smoothing)
        parts["loss"] = c.side_weight * (parts["count"] + parts["order"]) + parts["edge"] + ar_weight * parts["ar"]
        if self.ctc_head is not None:
            parts["ctc"] = self.aux_ctc_loss(memory, labels)
            parts["loss"] = parts["loss"] + c.ctc_weight * parts["ctc"]
        return parts

    def aux_ctc_loss(self, memory: Tensor, labels: list[list[int]]) -> Tensor:
        """The auxiliary CTC loss of the encoder's columns (blank = the padding id 0)."""
        b, cols = memory.shape[0], self.config.width // 4
        logp = self.ctc_head(memory.view(b, -1, cols, memory.shape[-1]).mean(1)).float().log_softmax(-1)
        lengths = torch.tensor([min(len(lab), cols) for lab in labels], device=memory.device)
        targets = torch.zeros(b, max(1, int(lengths.max())), dtype=torch.long, device=memory.device)
        for r, lab in enumerate(labels):
            targets[r, : int(lengths[r])] = torch.tensor(list(lab)[:cols], dtype=torch.long)
        return ctc_loss(logp, torch.full((b,), cols, device=memory.device), targets, lengths)

    def num_parameters(self) -> dict[str, int]:
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        ar = count(self.ar_layers) + count(self.ar_embed) + count(self.ar_norm) + count(self.ar_out)
        return {"encoder": count(self.encoder), "cppd": count(self.cppd), "ar": ar, "total": count(self)}

    # ------------------------------------------------------------------------------ text <-> ids
    def encode_text(self, text: str) -> list[int]:
        idx = {ch: i + 2 for i, ch in enumerate(self.config.charset)}
        return [idx[ch] for ch in text.lower() if ch in idx]

    def decode_ids(self, ids: list[int]) -> str:
        cs = self.config.charset
        return "".join(cs[i - 2] for i in ids if 2 <= i < len(cs) + 2)


__all__ = ["CHARSET", "EOS", "OCRConfig", "OCRModel", "PAD", "cppd_targets", "cut_at_eos", "local_mask"]
