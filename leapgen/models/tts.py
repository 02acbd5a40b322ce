"""Networks of the zero-shot TTS family (MaskGCT's two stages, their AR baseline, a speaker verifier).

Paper: Wang et al., "MaskGCT: Zero-Shot Text-to-Speech with Masked Generative Codec Transformer",
ICLR 2025 (reference ``open-mmlab/Amphion`` ``models/tts/maskgct``). Scaled down to CPU minutes:

* :class:`SemanticCodebook`: k-means centroids over the hidden states of the shipped ASR encoder
  (``asr-en``, 60 ms frames): this project's stand-in for w2v-BERT 2.0 + RepCodec.
  ``encode(memory [B, T, d]) -> ids [B, T]`` (nearest centroid, cosine on L2-normalised states).
* :class:`T2SNet`: bidirectional Transformer over ``[phones ; semantic]``. Phones (prompt text +
  target text) and the prompt's semantic tokens are the condition, the target semantic tokens are
  masked. ``hidden(...)`` gives the last hidden states of the semantic positions, ``to_logits`` the
  logits: CFG is mixed in between (embedding space, MaskGCT). The unconditional pass
  (``uncond=True``) sees neither phones nor prompt (key-padding masks), as in MaskGCT.
* :class:`S2ANet`: bidirectional Transformer over codec frames (K RVQ layers, 50 Hz): the input of
  a frame is the sum of its layers' embeddings (a per-layer mask embedding where masked) plus the
  semantic token of its 60 ms frame (3 codec frames per semantic frame) plus the embedding of the
  layer being predicted (``stage``); one output head per layer. One network does every layer
  (MaskGCT trains a 1-layer and a full model). The unconditional pass drops the acoustic prompt.
* :class:`SpeakerNet`: an x-vector (Snyder et al. 2018): TDNN (dilated Conv1d) over 80-dim fbank,
  mean + std pooling, a 128-dim embedding, a softmax over the training speakers.
* :func:`ar_t2s_config`: the autoregressive T2S baseline is a small ``transformers`` Llama over one
  joint vocabulary ``[specials ; phones ; semantic]`` (sequence ``<s> phones <sep> semantic </s>``),
  so the registry's ``ar`` and ``speculative`` run on it through ``HFCausalLM`` unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from ..errors import InputError
from .torch_lean import encoder_forward

#: upsampling from semantic frames (60 ms) to codec frames (20 ms)
CODEC_PER_SEMANTIC = 3


def sinusoid_table(n: int, d: int) -> Tensor:
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    out = torch.zeros(n, d)
    out[:, 0::2] = torch.sin(pos * div)
    out[:, 1::2] = torch.cos(pos * div)
    return out


# ------------------------------------------------------------------------------------------ semantic codebook
@dataclasses.dataclass
class SemanticConfig(ComponentConfig):
    size: int = 256
    dim: int = 144


class SemanticCodebook(PretrainedMixin, nn.Module):
    """k-means codebook over ASR encoder states (see the module docstring)."""

    config_class = SemanticConfig

    def __init__(self, config: SemanticConfig | None = None) -> None:
        super().__init__()
        self.config = config or SemanticConfig()
        self.register_buffer("centroids", torch.zeros(self.config.size, self.config.dim))

    @staticmethod
    def normalise(x: Tensor) -> Tensor:
        return F.normalize(x.float(), dim=-1)

    def encode(self, memory: Tensor) -> Tensor:
        """Nearest centroid ids ``[B, T]`` of encoder states ``[B, T, d]``."""
        return (self.normalise(memory) @ self.centroids.float().t()).argmax(-1)

    @torch.no_grad()
    def fit(self, states: Tensor, iters: int = 25, seed: int = 0) -> dict[str, Any]:
        """Spherical k-means on ``states [N, d]``; returns usage statistics."""
        x = self.normalise(states)
        g = torch.Generator().manual_seed(seed)
        c = x[torch.randperm(x.shape[0], generator=g)[: self.config.size]].clone()
        for _ in range(iters):
            ids = (x @ c.t()).argmax(-1)
            sums = torch.zeros_like(c).index_add_(0, ids, x)
            counts = torch.bincount(ids, minlength=c.shape[0]).float()
            dead = counts == 0
            c = torch.where(dead[:, None], x[torch.randint(0, x.shape[0], (c.shape[0],), generator=g)], F.normalize(sums, dim=-1))
        self.centroids.copy_(c)
        ids = (x @ c.t()).argmax(-1)
        p = torch.bincount(ids, minlength=c.shape[0]).float() / ids.numel()
        return {"used": int((p > 0).sum()), "size": c.shape[0],
                "perplexity": round(float(torch.exp(-(p * torch.log(p + 1e-12)).sum())), 1)}


# ------------------------------------------------------------------------------------------ shared block
class _Encoder(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, layers: int, dropout: float) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True, activation="gelu")
        self.net = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: Tensor, key_padding: Tensor) -> Tensor:
        return self.norm(encoder_forward(self.net, x, key_padding))


# ------------------------------------------------------------------------------------------ T2S
@dataclasses.dataclass
class T2SConfig(ComponentConfig):
    phone_vocab: int = 64
    semantic_size: int = 256
    d_model: int = 192
    heads: int = 4
    ff: int = 768
    layers: int = 4
    dropout: float = 0.1
    max_positions: int = 512


class T2SNet(PretrainedMixin, nn.Module):
    """MaskGCT text-to-semantic network (see the module docstring). Mask id = ``semantic_size``."""

    config_class = T2SConfig

    def __init__(self, config: T2SConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or T2SConfig()
        self.phone_emb = nn.Embedding(c.phone_vocab, c.d_model, padding_idx=0)
        self.sem_emb = nn.Embedding(c.semantic_size + 1, c.d_model)
        self.segment = nn.Embedding(3, c.d_model)  # phones, prompt, target
        self.register_buffer("pos", sinusoid_table(c.max_positions, c.d_model), persistent=False)
        self.encoder = _Encoder(c.d_model, c.heads, c.ff, c.layers, c.dropout)
        self.out = nn.Linear(c.d_model, c.semantic_size)

    @property
    def mask_id(self) -> int:
        return self.config.semantic_size

    def hidden(self, phones: Tensor, phone_mask: Tensor, sem: Tensor, sem_mask: Tensor, prompt_len: Tensor,
               uncond: bool | Tensor = False) -> Tensor:
        """Last hidden states ``[B, L, d]`` of the semantic positions.

        ``phones [B, P]`` (0 = pad) with ``phone_mask``; ``sem [B, L]`` (mask id where unknown) with
        ``sem_mask`` (False on right padding); ``prompt_len [B]``; ``uncond`` (bool or ``[B]``): drop
        phones and prompt."""
        b, p = phones.shape
        length = sem.shape[1]
        if p + length > self.config.max_positions:
            raise InputError(f"{p} phones + {length} semantic frames exceed the T2S model's {self.config.max_positions} positions.")
        ar = torch.arange(length, device=sem.device)
        is_prompt = ar[None] < prompt_len[:, None]
        seg = torch.where(is_prompt, 1, 2)
        x_p = self.phone_emb(phones) + self.segment.weight[0] + self.pos[:p]
        x_s = self.sem_emb(sem) + self.segment(seg) + self.pos[p : p + length]
        unc = torch.as_tensor(uncond, device=sem.device).expand(b)
        keep_p = phone_mask & ~unc[:, None]
        keep_s = sem_mask & ~(is_prompt & unc[:, None])
        h = self.encoder(torch.cat([x_p, x_s], 1), ~torch.cat([keep_p, keep_s], 1))
        return h[:, p:]

    def to_logits(self, h: Tensor) -> Tensor:
        return self.out(h)

    def forward(self, phones: Tensor, phone_mask: Tensor, sem: Tensor, sem_mask: Tensor, prompt_len: Tensor,
                uncond: bool | Tensor = False) -> Tensor:
        return self.to_logits(self.hidden(phones, phone_mask, sem, sem_mask, prompt_len, uncond))


# ------------------------------------------------------------------------------------------ S2A
@dataclasses.dataclass
class S2AConfig(ComponentConfig):
    semantic_size: int = 256
    num_codebooks: int = 4
    codebook_size: int = 256
    d_model: int = 160
    heads: int = 4
    ff: int = 640
    layers: int = 4
    dropout: float = 0.1
    max_frames: int = 1024


class S2ANet(PretrainedMixin, nn.Module):
    """MaskGCT semantic-to-acoustic network (see the module docstring). Mask id = ``codebook_size``."""

    config_class = S2AConfig

    def __init__(self, config: S2AConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or S2AConfig()
        self.code_emb = nn.ModuleList(nn.Embedding(c.codebook_size + 1, c.d_model) for _ in range(c.num_codebooks))
        self.sem_emb = nn.Embedding(c.semantic_size, c.d_model)
        self.stage_emb = nn.Embedding(c.num_codebooks, c.d_model)
        self.prompt_emb = nn.Embedding(2, c.d_model)
        self.register_buffer("pos", sinusoid_table(c.max_frames, c.d_model), persistent=False)
        self.encoder = _Encoder(c.d_model, c.heads, c.ff, c.layers, c.dropout)
        self.heads = nn.ModuleList(nn.Linear(c.d_model, c.codebook_size) for _ in range(c.num_codebooks))

    @property
    def mask_id(self) -> int:
        return self.config.codebook_size

    def hidden(self, codes: Tensor, semantic: Tensor, frame_mask: Tensor, prompt_len: Tensor, stage: int | Tensor,
               uncond: bool | Tensor = False) -> Tensor:
        """Hidden states ``[B, T, d]``: ``codes [B, K, T]`` (mask id where unknown), ``semantic
        [B, ceil(T / 3)]``, ``frame_mask [B, T]``, ``prompt_len [B]`` (codec frames), ``stage``:
        the layer predicted (int or ``[B]``); ``uncond``: drop the acoustic prompt."""
        b, k, t = codes.shape
        if t > self.config.max_frames:
            raise InputError(f"{t} codec frames exceed the S2A model's {self.config.max_frames}.")
        x = sum(self.code_emb[i](codes[:, i]) for i in range(k))
        sem = semantic.repeat_interleave(CODEC_PER_SEMANTIC, 1)[:, :t]
        if sem.shape[1] < t:
            sem = F.pad(sem, (0, t - sem.shape[1]), value=0)
        is_prompt = torch.arange(t, device=codes.device)[None] < prompt_len[:, None]
        st = torch.as_tensor(stage, device=codes.device).expand(b)
        x = x + self.sem_emb(sem) + self.stage_emb(st)[:, None] + self.prompt_emb(is_prompt.long()) + self.pos[:t]
        unc = torch.as_tensor(uncond, device=codes.device).expand(b)
        keep = frame_mask & ~(is_prompt & unc[:, None])
        return self.encoder(x, ~keep)

    def to_logits(self, h: Tensor) -> Tensor:
        """Per-layer logits ``[B, K, T, V]``."""
        return torch.stack([head(h) for head in self.heads], 1)


# ------------------------------------------------------------------------------------------ speaker
@dataclasses.dataclass
class SpeakerConfig(ComponentConfig):
    n_mels: int = 80
    channels: int = 128
    embed_dim: int = 128
    num_speakers: int = 40


class SpeakerNet(PretrainedMixin, nn.Module):
    """x-vector speaker embedding (see the module docstring)."""

    config_class = SpeakerConfig

    def __init__(self, config: SpeakerConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or SpeakerConfig()
        ch = c.channels
        self.tdnn = nn.Sequential(
            nn.Conv1d(c.n_mels, ch, 5, padding=2), nn.ReLU(), nn.BatchNorm1d(ch),
            nn.Conv1d(ch, ch, 3, dilation=2, padding=2), nn.ReLU(), nn.BatchNorm1d(ch),
            nn.Conv1d(ch, ch, 3, dilation=3, padding=3), nn.ReLU(), nn.BatchNorm1d(ch),
            nn.Conv1d(ch, 2 * ch, 1), nn.ReLU(), nn.BatchNorm1d(2 * ch),
        )
        self.embed = nn.Linear(4 * ch, c.embed_dim)
        self.classify = nn.Sequential(nn.ReLU(), nn.BatchNorm1d(c.embed_dim), nn.Linear(c.embed_dim, c.num_speakers))

    def features(self, wave: Any) -> Tensor:
        """Mean-normalised 80-dim fbank ``[T, 80]`` of a 16 kHz waveform."""
        import numpy as np

        from ..tokenizers.speech_features import kaldi_fbank

        fb = torch.from_numpy(kaldi_fbank(np.asarray(wave, dtype=np.float32), 16000, self.config.n_mels))
        return fb - fb.mean(0, keepdim=True)

    def forward(self, feats: Tensor, lengths: Tensor) -> Tensor:
        """Embeddings ``[B, embed_dim]`` of fbank ``[B, T, 80]`` (zero-padded, ``lengths``)."""
        h = self.tdnn(feats.transpose(1, 2))  # [B, C, T]
        m = (torch.arange(h.shape[2], device=h.device)[None] < lengths[:, None]).to(h.dtype)[:, None]  # any dtype
        n = m.sum(-1).clamp(min=1)
        mean = (h * m).sum(-1) / n
        std = (((h - mean[..., None]) ** 2 * m).sum(-1) / n).clamp(min=1e-5).sqrt()
        return self.embed(torch.cat([mean, std], 1))

    @torch.no_grad()
    def embed_waves(self, waves: list[Any]) -> Tensor:
        """L2-normalised embeddings ``[N, embed_dim]`` of 16 kHz waveforms (one at a time)."""
        outs = []
        for w in waves:
            f = self.features(w)
            outs.append(self(f[None].to(next(self.parameters()).device), torch.tensor([f.shape[0]])))
        return F.normalize(torch.cat(outs), dim=-1)


# ------------------------------------------------------------------------------------------ AR baseline
AR_SPECIALS = ("<pad>", "<s>", "<sep>", "</s>")
AR_PAD, AR_BOS, AR_SEP, AR_EOS = 0, 1, 2, 3


def ar_t2s_config(phone_vocab: int, semantic_size: int, d_model: int = 192, layers: int = 4, heads: int = 4,
                  ff: int = 768, max_positions: int = 512) -> Any:
    """A ``transformers.LlamaConfig`` for the AR T2S baseline over ``[specials ; phones ; semantic]``."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(AR_SPECIALS) + phone_vocab + semantic_size, hidden_size=d_model,
                       intermediate_size=ff, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, max_position_embeddings=max_positions, bos_token_id=AR_BOS,
                       eos_token_id=AR_EOS, pad_token_id=AR_PAD, tie_word_embeddings=True)


def ar_phone_ids(phones: list[int]) -> list[int]:
    return [len(AR_SPECIALS) + p for p in phones]


def ar_semantic_offset(phone_vocab: int) -> int:
    return len(AR_SPECIALS) + phone_vocab


__all__ = [
    "AR_BOS", "AR_EOS", "AR_PAD", "AR_SEP", "AR_SPECIALS", "CODEC_PER_SEMANTIC", "S2AConfig", "S2ANet", "SemanticCodebook",
    "SemanticConfig", "SpeakerConfig", "SpeakerNet", "T2SConfig", "T2SNet", "ar_phone_ids", "ar_semantic_offset",
    "ar_t2s_config",
]
