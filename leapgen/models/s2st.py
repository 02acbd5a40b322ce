"""The speech-to-speech translation network: one speech encoder, a DAG (DA-Transformer) translator,
an AR baseline translator of the same size, and one FastSpeech 2-style acoustic decoder.

DASpeech (Fang, Zhang, Feng, NeurIPS 2023) on this project's scale:

* **Encoder**: :class:`~leapgen.models.speech_encoder.SpeechEncoder` (the ASR encoder's shape;
  the recipe initialises it from ``assets/asr-en``) over LFR fbank + CMVN.
* **DAG decoder** (DA-Transformer, Huang et al. ICML 2022): ``L_b = max(2, round(upsample *
  T_b))`` vertices (``upsample`` = lambda, default 2 per 60 ms encoder frame: the corpus' target
  has at most 1.4 phonemes per source frame). Vertex ``i``'s input is the encoder state of frame
  ``floor(i * T_b / L_b)`` (uniform copy) + sinusoidal positions; a non-causal Transformer decoder
  (cross-attention to the encoder) gives vertex states ``V``; ``emit = log_softmax(W V)``,
  ``links`` from :class:`~leapgen.models.dag.LinkHead`. Loss: the DAG dynamic programme
  (:func:`~leapgen.models.dag.dag_loss`) with **glancing** (first pass without gradient, Viterbi
  alignment of the target, ``floor((M - same) * ratio + 0.5)`` aligned vertices take the gold
  phoneme's embedding, second pass with gradient).
* **AR baseline**: a causal Transformer decoder (same width, same layer count as the DAG
  decoder) with KV cache, CE with label smoothing 0.1.
* **Acoustic decoder** (:class:`~leapgen.models.fastspeech.AcousticDecoder`), **argmax-path
  strategy**: its inputs are the target phonemes and the DAG vertex states on the Viterbi
  alignment of the target (detached: the TTS loss does not train the translator); durations from
  the recipe (per-phoneme means fitted on the corpus, scaled to each utterance's mel length).

Token ids (:class:`~leapgen.tokenizers.asr_vocab.ASRVocab` over phoneme symbols): 0 = padding,
1 = ``<s>`` / ``</s>``, 2 = ``<unk>``, then phonemes and ``|`` (word boundary).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from .asr import _ARLayer
from .dag import LinkHead, dag_best_alignment, dag_loss, glance_choice
from .fastspeech import AcousticDecoder
from .speech_encoder import (
    LayerKV,
    SpeechEncoder,
    decoder_self_mask,
    key_padding_bias,
    lengths_to_mask,
    sinusoid,
)
from .torch_lean import decoder_forward

PAD, EOS, UNK = 0, 1, 2


@dataclasses.dataclass
class S2STConfig(ComponentConfig):
    vocab_size: int = 45
    input_dim: int = 560
    d_model: int = 144
    heads: int = 4
    ff: int = 576
    encoder_layers: int = 4
    decoder_layers: int = 2
    link_heads: int = 4
    upsample: float = 2.0
    dropout: float = 0.1
    max_tokens: int = 128
    tts_d: int = 128
    tts_heads: int = 2
    tts_ff: int = 384
    tts_layers: int = 2
    n_mels: int = 80
    hidden_dropout: float = 0.5


class S2STModel(nn.Module, PretrainedMixin):
    """Encoder + DAG translator + AR translator + acoustic decoder (see the module docstring)."""

    config_class = S2STConfig

    def __init__(self, config: S2STConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or S2STConfig()
        d = c.d_model
        self.encoder = SpeechEncoder(c.input_dim, d, c.heads, c.ff, c.encoder_layers, c.dropout)
        # DAG decoder
        self.dag_in = nn.Linear(d, d)
        self.dag_embed = nn.Embedding(c.vocab_size, d)
        layer = nn.TransformerDecoderLayer(d, c.heads, c.ff, c.dropout, batch_first=True, norm_first=True)
        self.dag = nn.TransformerDecoder(layer, c.decoder_layers)
        self.dag_norm = nn.LayerNorm(d)
        self.dag_out = nn.Linear(d, c.vocab_size)
        self.links = LinkHead(d, c.link_heads)
        # AR decoder
        self.ar_embed = nn.Embedding(c.vocab_size, d)
        self.ar_layers = nn.ModuleList(_ARLayer(d, c.heads, c.ff, c.dropout) for _ in range(c.decoder_layers))
        self.ar_norm = nn.LayerNorm(d)
        self.ar_out = nn.Linear(d, c.vocab_size)
        # acoustic decoder
        self.tts = AcousticDecoder(c.vocab_size, d, c.tts_d, c.tts_heads, c.tts_ff, c.tts_layers, c.n_mels, c.dropout)

    # ------------------------------------------------------------------------------ encoder
    def encode(self, feats: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [B, T, d], mask [B, T])`` of LFR+CMVN features ``[B, T, input_dim]``."""
        mask = lengths_to_mask(lengths.to(feats.device), feats.shape[1])
        return self.encoder(feats, mask), mask

    # ------------------------------------------------------------------------------ DAG decoder
    def vertex_lengths(self, mask: Tensor) -> Tensor:
        """``L_b = max(2, round(upsample * T_b))``."""
        frames = mask.long().sum(-1).float()
        return torch.clamp(torch.round(frames * self.config.upsample), min=2).long()

    def vertex_inputs(self, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Uniform copy of encoder states to the vertices: ``(inputs [B, L, d], vertex mask [B, L])``."""
        vl = self.vertex_lengths(mask)
        n = int(vl.max())
        frames = mask.long().sum(-1).clamp_min(1)
        idx = (torch.arange(n, device=memory.device)[None] * frames[:, None]) // vl[:, None]
        idx = idx.clamp(max=memory.shape[1] - 1)
        x = self.dag_in(memory.gather(1, idx[..., None].expand(-1, -1, memory.shape[2])))
        vmask = lengths_to_mask(vl, n)
        return x * vmask[..., None], vmask

    def dag_forward(self, memory: Tensor, mask: Tensor, inputs: Tensor, vmask: Tensor) -> dict[str, Tensor]:
        """One non-causal pass: ``hidden [B, L, d]``, ``emit [B, L, V]``, ``links [B, L, L]``, ``lengths [B]``."""
        pos = sinusoid(torch.arange(inputs.shape[1], device=inputs.device), self.config.d_model)[None].to(inputs.dtype)
        h = decoder_forward(self.dag, inputs + pos, memory, ~vmask, ~mask)  # the module itself in training
        h = self.dag_norm(h)
        lengths = vmask.long().sum(-1)
        emit = self.dag_out(h).float().log_softmax(-1)
        return {"hidden": h, "emit": emit, "links": self.links(h, pos, lengths), "lengths": lengths}

    # ------------------------------------------------------------------------------ AR decoder
    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(la.cross.split(la.cross.k(memory)), la.cross.split(la.cross.v(memory))) for la in self.ar_layers]

    def empty_self_kv(self, batch: int, device: torch.device, dtype: torch.dtype) -> list[LayerKV]:
        c = self.config
        shape = (batch, c.heads, 0, c.d_model // c.heads)
        return [LayerKV(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in self.ar_layers]

    def ar_logits(self, tokens: Tensor, positions: Tensor, cross: list[tuple[Tensor, Tensor]], mem_mask: Tensor,
                  self_kv: list[LayerKV] | None = None, self_mask: Tensor | None = None) -> Tensor:
        """AR decoder forward (as :meth:`leapgen.models.asr.ASRModel.ar_logits`)."""
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
               mel: Tensor | None = None, mel_lengths: Tensor | None = None, durations: Tensor | None = None,
               glance_ratio: float = 0.5, weights: dict[str, float] | None = None, label_smoothing: float = 0.1,
               generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Joint losses. ``targets [B, S]`` phoneme ids (no ``<s>``/``</s>``, padded with 0);
        ``mel [B, T, n_mels]`` / ``durations [B, S]`` (frames per phoneme) train the acoustic decoder
        when given. Returns ``loss`` and ``dag``, ``ar``, ``mel_l1``, ``duration``, ``glanced``, ``dag_valid``."""
        w = {"dag": 1.0, "ar": 1.0, "tts": 1.0, **(weights or {})}
        memory, mask = self.encode(feats, lengths)
        b = targets.shape[0]
        # <s> y </s> for the DAG
        full = torch.cat([targets.new_full((b, 1), EOS), targets, targets.new_zeros(b, 1)], 1)
        full = full.scatter(1, (target_lengths + 1)[:, None], EOS)
        flen = target_lengths + 2
        inputs, vmask = self.vertex_inputs(memory, mask)
        out: dict[str, Tensor] = {}
        with torch.no_grad():
            first = self.dag_forward(memory, mask, inputs, vmask)
            path, _ = dag_best_alignment(first["emit"], first["links"], full, flen, first["lengths"])
        if glance_ratio > 0:
            pred = first["emit"].argmax(-1).gather(1, path)
            pick = glance_choice(pred, full, flen, glance_ratio, generator)
            rows = torch.arange(b, device=feats.device)[:, None].expand_as(path)
            gl = torch.zeros_like(vmask)
            gl[rows[pick], path[pick]] = True
            tok = torch.zeros_like(vmask, dtype=torch.long)
            tok[rows[pick], path[pick]] = full[pick]
            inputs = torch.where(gl[..., None], self.dag_embed(tok).to(inputs.dtype), inputs)
            out["glanced"] = pick.sum().float() / target_lengths.sum().clamp_min(1)
        second = self.dag_forward(memory, mask, inputs, vmask)
        out["dag"], valid = dag_loss(second["emit"], second["links"], full, flen, second["lengths"])
        out["dag_valid"] = valid.float().mean()
        # AR: <s> y -> y </s>
        inp = full[:, :-1].clone()
        inp[inp == EOS] = PAD
        inp[:, 0] = EOS
        gold = full[:, 1:]
        gmask = lengths_to_mask(target_lengths + 1, gold.shape[1])
        pos = torch.arange(inp.shape[1], device=inp.device)[None].expand(b, -1)
        ar = self.ar_logits(inp, pos, self.cross_kv(memory), mask)
        out["ar"] = F.cross_entropy(ar[gmask], gold[gmask], label_smoothing=label_smoothing)
        total = w["dag"] * out["dag"] + w["ar"] * out["ar"]
        if mel is not None and durations is not None and mel_lengths is not None:
            inner = path[:, 1 : targets.shape[1] + 1]  # vertices of y_1 .. y_S on the Viterbi path
            hidden = second["hidden"].detach().gather(1, inner[..., None].expand(-1, -1, second["hidden"].shape[2]))
            keep = (torch.rand(b, 1, 1, generator=generator, device=feats.device) >= self.config.hidden_dropout)
            tmask = lengths_to_mask(target_lengths, targets.shape[1])
            tts = self.tts.loss(targets, hidden * keep.to(hidden.dtype), tmask, durations, mel, mel_lengths)
            out.update(tts)
            total = total + w["tts"] * (tts["mel_l1"] + tts["duration"])
        out["loss"] = total
        return out

    def num_parameters(self) -> dict[str, Any]:
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        dag = sum(count(m) for m in (self.dag_in, self.dag_embed, self.dag, self.dag_norm, self.dag_out, self.links))
        ar = sum(count(m) for m in (self.ar_embed, self.ar_layers, self.ar_norm, self.ar_out))
        return {"encoder": count(self.encoder), "dag_decoder": dag, "ar_decoder": ar, "acoustic": count(self.tts),
                "total": count(self)}


__all__ = ["EOS", "PAD", "S2STConfig", "S2STModel", "UNK"]
