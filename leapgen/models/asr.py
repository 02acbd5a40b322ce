"""The ASR network: one speech encoder, three decoders (Paraformer CIF + NAR, CTC, attention AR).

``ASRModel`` holds, over one :class:`~leapgen.models.speech_encoder.SpeechEncoder`:

* **CTC** head: a linear layer (blank = 0);
* **Paraformer**: a CIF predictor (FunASR ``CifPredictorV2``: Conv1d(k=3) -> ReLU -> Linear ->
  sigmoid, threshold 1.0, tail 0.45 at inference, MAE quantity loss on ``sum(alpha)``, training
  alphas rescaled to the target length) and a **non-causal** Transformer decoder over the fired
  embeddings, cross-attending to the encoder; trained with the **GLM glancing sampler** (a first
  pass without gradient, then ``floor(ratio * #wrong)`` random positions take the gold token's
  embedding; Paraformer, Gao et al. 2022; GLAT, Qian et al. 2021);
* **AR**: a causal Transformer decoder with a per-layer KV cache (self-attention) and
  cross-attention keys/values computed once per utterance.

All three share the encoder and are trained jointly (``L = CE_nar + w_mae * MAE + w_ctc * CTC +
w_ar * CE_ar``, label smoothing 0.1), so they have the same encoder shape, data and step budget,
and the speculative sampler's draft (Paraformer or CTC) and verifier (AR) reuse one encoder pass.
Token ids: 0 = blank / padding, 1 = ``<s>`` / ``</s>``, 2 = ``<unk>``, then words.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from .cif import add_tail, cif, cif_cumsum
from .speech_encoder import (
    CTCHead,
    LayerKV,
    SpeechEncoder,
    ctc_loss,
    decoder_self_mask,
    key_padding_bias,
    lengths_to_mask,
    sinusoid,
)
from .torch_lean import decoder_forward

BLANK, EOS, UNK = 0, 1, 2


@dataclasses.dataclass
class ASRConfig(ComponentConfig):
    vocab_size: int = 1003
    input_dim: int = 560
    d_model: int = 144
    heads: int = 4
    ff: int = 576
    encoder_layers: int = 4
    nar_layers: int = 2
    ar_layers: int = 2
    dropout: float = 0.1
    max_tokens: int = 256
    threshold: float = 1.0
    tail: float = 0.45
    frame_seconds: float = 0.06


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:
        return x.view(x.shape[0], x.shape[1], self.h, self.dh).transpose(1, 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1))


class _ARLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross = _Attention(d, heads), _Attention(d, heads)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.drop = nn.Dropout(dropout)

    def attend(self, x: Tensor, kv: LayerKV | None, cross: tuple[Tensor, Tensor], self_mask: Tensor | None,
               cross_mask: Tensor | None) -> Tensor:
        """The self-attention (appending this step's keys / values to ``kv``) and the cross-attention
        sub-blocks, each pre-norm with its residual; the feed-forward block is the caller's."""
        a = self.self_attn
        h = self.n1(x)
        q, k, v = a.split(a.q(h)), a.split(a.k(h)), a.split(a.v(h))
        if kv is not None:
            k = torch.cat([kv.keys, k], 2)
            v = torch.cat([kv.values, v], 2)
            kv.keys, kv.values = k, v
        x = x + self.drop(a.attend(q, k, v, self_mask))
        c = self.cross
        return x + self.drop(c.attend(c.split(c.q(self.n2(x))), cross[0], cross[1], cross_mask))

    def forward(self, x: Tensor, kv: LayerKV | None, cross: tuple[Tensor, Tensor], self_mask: Tensor | None,
                cross_mask: Tensor) -> Tensor:
        x = self.attend(x, kv, cross, self_mask, cross_mask)
        return x + self.drop(self.ff(self.n3(x)))


class ASRModel(nn.Module, PretrainedMixin):
    """Encoder + CTC + Paraformer (CIF + NAR decoder) + AR decoder (see the module docstring)."""

    config_class = ASRConfig

    def __init__(self, config: ASRConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or ASRConfig()
        d = c.d_model
        self.encoder = SpeechEncoder(c.input_dim, d, c.heads, c.ff, c.encoder_layers, c.dropout)
        self.ctc = CTCHead(d, c.vocab_size)
        # CIF predictor (CifPredictorV2: l_order = r_order = 1)
        self.pred_conv = nn.Conv1d(d, d, 3, padding=1)
        self.pred_out = nn.Linear(d, 1)
        # non-causal decoder over fired embeddings (+ the glancing embedding table)
        self.nar_embed = nn.Embedding(c.vocab_size, d)
        layer = nn.TransformerDecoderLayer(d, c.heads, c.ff, c.dropout, batch_first=True, norm_first=True)
        self.nar = nn.TransformerDecoder(layer, c.nar_layers)
        self.nar_norm = nn.LayerNorm(d)
        self.nar_out = nn.Linear(d, c.vocab_size)
        # autoregressive decoder
        self.ar_embed = nn.Embedding(c.vocab_size, d)
        # the forward scales embeddings by sqrt(d): std d^-0.5 makes them unit-scale at init (N(0, 1)
        # would put a x12 embedding in the pre-norm residual stream and slow the AR decoder's training)
        nn.init.normal_(self.ar_embed.weight, std=d**-0.5)
        self.ar_layers = nn.ModuleList(_ARLayer(d, c.heads, c.ff, c.dropout) for _ in range(c.ar_layers))
        self.ar_norm = nn.LayerNorm(d)
        self.ar_out = nn.Linear(d, c.vocab_size)

    # ------------------------------------------------------------------------------ encoder
    def encode(self, feats: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [B, T, d], mask [B, T])`` of LFR+CMVN features ``[B, T, 560]``."""
        # lengths on the host say without a device sync whether any row is padded; an unpadded
        # batch skips the key-padding mask (the masked softmax costs 20 % of a CPU encoder pass)
        padded = lengths.device.type != "cpu" or bool((lengths < feats.shape[1]).any())
        mask = lengths_to_mask(lengths.to(feats.device), feats.shape[1])
        feats = feats.to(self.encoder.proj.weight.dtype)  # features are float32; the weights may be cast
        return self.encoder(feats, mask, padded=padded), mask

    # ------------------------------------------------------------------------------ CIF / Paraformer
    def alphas(self, memory: Tensor, mask: Tensor) -> Tensor:
        """Per-frame CIF weights in [0, 1] (0 on padding); padded frames are zero before the conv."""
        x = (memory * mask[..., None]).transpose(1, 2)
        h = F.relu(self.pred_conv(x)).transpose(1, 2)
        return torch.sigmoid(self.pred_out(h)).squeeze(-1).float() * mask

    def fire(self, memory: Tensor, mask: Tensor, target_lengths: Tensor | None = None) -> dict[str, Tensor]:
        """CIF over the encoder: training (``target_lengths`` given) rescales alphas to the target
        length; inference appends the 0.45 tail and keeps ``floor(sum alpha)`` tokens per row.
        Returns ``embeds [B, N, d]``, ``token_mask [B, N]``, ``token_num [B]``, ``alphas [B, T(+1)]``,
        ``fire_frames [B, N]`` and ``alpha_sum`` (before rescaling / tail); at inference, when the
        CIF's cumsum form ran, also its :func:`~leapgen.models.cif.cif_weights` (``cif_weights``,
        ``cif_fires``)."""
        alphas = self.alphas(memory, mask)
        alpha_sum = alphas.sum(-1)
        weights: dict[str, Tensor] = {}  # the inference CIF's weights, when its cumsum form ran
        if target_lengths is not None:
            scaled = alphas * (target_lengths.to(alphas.dtype) / alpha_sum.clamp_min(1e-4))[:, None]
            embeds, frames = cif_cumsum(memory, scaled)
            token_num = target_lengths
            n = int(target_lengths.max())
            if embeds.shape[1] < n:  # float rounding may fire one short: pad
                pad = n - embeds.shape[1]
                embeds = F.pad(embeds, (0, 0, 0, pad))
                frames = F.pad(frames, (0, pad), value=-1)
            embeds, frames = embeds[:, :n], frames[:, :n]
        else:
            hidden, alphas, token_num = add_tail(memory, alphas, mask.to(alphas.dtype), self.config.tail)
            embeds, frames = cif(hidden, alphas, self.config.threshold, weights)
            n = int(token_num.max()) if token_num.numel() else 0
            embeds, frames = embeds[:, :n], frames[:, :n]
        token_mask = torch.arange(embeds.shape[1], device=memory.device)[None] < token_num[:, None]
        out = {"embeds": embeds * token_mask[..., None], "token_mask": token_mask, "token_num": token_num,
               "alphas": alphas, "fire_frames": frames, "alpha_sum": alpha_sum}
        if weights:  # word timestamps reuse them
            out.update(cif_weights=weights["weights"], cif_fires=weights["fires"])
        return out

    def nar_logits(self, memory: Tensor, mask: Tensor, embeds: Tensor, token_mask: Tensor) -> Tensor:
        """One non-causal decoder pass over token queries ``embeds [B, N, d]`` -> logits ``[B, N, V]``."""
        if embeds.shape[1] == 0:
            return memory.new_zeros(memory.shape[0], 0, self.config.vocab_size)
        pos = sinusoid(torch.arange(embeds.shape[1], device=embeds.device), self.config.d_model)[None]
        x = embeds + pos.to(embeds.dtype)
        x = decoder_forward(self.nar, x, memory, ~token_mask, ~mask)  # the module itself in training
        return self.nar_out(self.nar_norm(x)).float()

    # ------------------------------------------------------------------------------ AR decoder
    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Cross-attention keys / values of every AR layer, computed once per utterance."""
        return [(la.cross.split(la.cross.k(memory)), la.cross.split(la.cross.v(memory))) for la in self.ar_layers]

    def empty_self_kv(self, batch: int, device: torch.device, dtype: torch.dtype) -> list[LayerKV]:
        c = self.config
        shape = (batch, c.heads, 0, c.d_model // c.heads)
        return [LayerKV(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in self.ar_layers]

    def ar_logits(self, tokens: Tensor, positions: Tensor, cross: list[tuple[Tensor, Tensor]], mem_mask: Tensor,
                  self_kv: list[LayerKV] | None = None, self_mask: Tensor | None = None) -> Tensor:
        """AR decoder forward of ``tokens [B, n]`` at ``positions [B, n]``. With ``self_kv`` the new
        keys/values are appended to it and ``self_mask`` is the additive ``[B, 1, n, past + n]`` mask
        (None: causal among the new tokens, all past slots visible); without, causal over ``tokens``."""
        d = self.config.d_model
        x = self.ar_embed(tokens) * d**0.5 + sinusoid(positions, d).to(self.ar_embed.weight.dtype)
        n = tokens.shape[1]
        past = self_kv[0].keys.shape[2] if self_kv else 0
        self_mask = decoder_self_mask(self_mask, n, past, x)
        cross_mask = key_padding_bias(mem_mask, x)
        for i, layer in enumerate(self.ar_layers):
            x = layer(x, self_kv[i] if self_kv else None, cross[i], self_mask, cross_mask)
        return self.ar_out(self.ar_norm(x)).float()

    # ------------------------------------------------------------------------------ training
    def losses(self, feats: Tensor, lengths: Tensor, targets: Tensor, target_lengths: Tensor, *,
               glm_ratio: float = 0.4, weights: dict[str, float] | None = None, label_smoothing: float = 0.1,
               generator: torch.Generator | None = None, ar_token_dropout: float = 0.0) -> dict[str, Tensor]:
        """Joint training losses (``targets [B, S]`` word ids padded with 0): ``loss`` and its parts
        ``nar``, ``mae``, ``ctc``, ``ar``. ``ar_token_dropout``: the share of the AR decoder's input
        words (teacher forcing) replaced by ``<unk>``, so it leans on the audio, not on memorised
        sentences."""
        w = {"mae": 1.0, "ctc": 0.3, "ar": 1.0, **(weights or {})}
        memory, mask = self.encode(feats, lengths)
        tmask = lengths_to_mask(target_lengths, targets.shape[1])
        out: dict[str, Tensor] = {}
        # Paraformer: CIF + MAE + GLM glancing
        fired = self.fire(memory, mask, target_lengths)
        out["mae"] = (fired["alpha_sum"] - target_lengths.float()).abs().mean()
        embeds = fired["embeds"]
        if glm_ratio > 0:
            with torch.no_grad():
                first = self.nar_logits(memory, mask, embeds, tmask).argmax(-1)
            wrong = ((first != targets) & tmask).sum(-1)
            n_pick = torch.floor(wrong.float() * glm_ratio).long()
            noise = torch.rand(targets.shape, generator=generator, device=targets.device)
            noise = noise.masked_fill(~tmask, 2.0)
            rank = noise.argsort(-1).argsort(-1)
            pick = (rank < n_pick[:, None]) & tmask
            embeds = torch.where(pick[..., None], self.nar_embed(targets), embeds)
            out["glanced"] = pick.sum().float() / tmask.sum()
        logits = self.nar_logits(memory, mask, embeds, tmask)
        out["nar"] = F.cross_entropy(logits[tmask], targets[tmask], label_smoothing=label_smoothing)
        # CTC
        out["ctc"] = ctc_loss(self.ctc(memory), lengths, targets, target_lengths)
        # AR (teacher forcing: <s> y -> y </s>)
        b = targets.shape[0]
        inp = torch.cat([targets.new_full((b, 1), EOS), targets], 1)
        if ar_token_dropout > 0:
            drop = torch.rand(targets.shape, generator=generator, device=targets.device) < ar_token_dropout
            inp = torch.cat([inp[:, :1], torch.where(drop & tmask, torch.full_like(targets, UNK), targets)], 1)
        gold = torch.cat([targets, targets.new_zeros(b, 1)], 1).scatter(1, target_lengths[:, None], EOS)
        gmask = lengths_to_mask(target_lengths + 1, gold.shape[1])
        pos = torch.arange(inp.shape[1], device=inp.device)[None].expand(b, -1)
        ar = self.ar_logits(inp, pos, self.cross_kv(memory), mask)
        out["ar"] = F.cross_entropy(ar[gmask], gold[gmask], label_smoothing=label_smoothing)
        out["loss"] = out["nar"] + w["mae"] * out["mae"] + w["ctc"] * out["ctc"] + w["ar"] * out["ar"]
        return out

    def num_parameters(self) -> dict[str, Any]:
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        return {"encoder": count(self.encoder), "ctc": count(self.ctc),
                "paraformer": count(self.pred_conv) + count(self.pred_out) + count(self.nar) + count(self.nar_out)
                + count(self.nar_norm) + count(self.nar_embed),
                "ar": count(self.ar_layers) + count(self.ar_embed) + count(self.ar_norm) + count(self.ar_out),
                "total": count(self)}


__all__ = ["ASRConfig", "ASRModel", "BLANK", "EOS", "UNK"]
