"""Recipe ``audio-music``: the shipped ``audio-music`` pipeline (codec + text encoder + MAGNeT-style masked
model + MusicGen-style delay-pattern AR model + its draft), from the procedural music corpus.

1. corpus (:mod:`leapgen.data.audio_music`) and a trained codec folder (``codec_dir``, written by
   ``leapgen train audio-codec``); every clip is encoded once to codes ``[K, T]`` (cached);
2. a :class:`~leapgen.tokenizers.word_vocab.WordVocab` over the training descriptions;
3. **masked model + text encoder** (MAGNeT objective, Ziv et al. 2024): per batch a crop length of
   ``min_frames..max_train_frames`` frames, a random description per clip, a stage (codebook) k
   drawn uniformly, a mask rate ``cos(pi/2 * u)``, span masking of codebook k (spans of
   ``span_len``: span starts drawn with the rate ``1 - (1 - r)^(1/L)`` so that the expected masked
   fraction is r), codebooks < k given, > k masked; cross-entropy on the masked cells of codebook k;
   the text is dropped (classifier-free guidance) with probability ``cond_dropout``;
4. **AR model** (delay pattern) and its **draft** on the frozen text encoder: next-cell
   cross-entropy over the first ``F * K`` cells of the pattern stream of an F-frame crop (grid
   cells only), same condition dropout;
5. a pipeline folder: ``codec/``, ``text_encoder/``, ``text_tokenizer/``, ``model/``, ``ar_model/``,
   ``draft/`` (fp16 safetensors), ``model_index.json`` (with ``max_duration``),
   ``train_metrics.json`` (losses, held-out losses, wall times, options).

Defaults describe the full run (5 h corpus, about 80 minutes on two CPU cores, bf16 autocast only on CPUs with native bf16, float32 elsewhere);
``--masked-minutes``, ``--ar-minutes``, ``--draft-minutes`` and ``--corpus-hours`` shrink it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..data.audio_music import build, load_corpus
from ..models.audio_lm import AudioTextEncoder, MagnetConfig, MagnetTransformer, TextEncoderConfig, drop_text
from ..models.condition import TextEmbeddings
from ..models.musicgen import MusicGenConfig, MusicGenTransformer
from ..tokenizers.audio_codec import AudioCodec
from ..tokenizers.word_vocab import WordVocab
from .common import autocast, environment, lr_at, num_params, pick_device, write_metrics

logger = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------- data
@torch.no_grad()
def encode_corpus(codec: AudioCodec, audio: list[np.ndarray], batch_size: int = 16) -> list[np.ndarray]:
    """Codes ``[K, T]`` (uint16) of every clip, ``T = ceil(n / hop)`` (clips batched by length)."""
    codec.eval()
    order = np.argsort([a.size for a in audio])
    out: list[np.ndarray | None] = [None] * len(audio)
    for j in tqdm(range(0, len(order), batch_size), desc="encode corpus", leave=False):
        idx = order[j : j + batch_size]
        n = max(audio[i].size for i in idx)
        x = np.zeros((len(idx), n), dtype=np.float32)
        for r, i in enumerate(idx):
            x[r, : audio[i].size] = audio[i]
        codes = codec.encode(torch.from_numpy(x)).cpu().numpy().astype(np.uint16)
        for r, i in enumerate(idx):
            out[i] = codes[r, :, : math.ceil(audio[i].size / codec.hop_length)]
    return out  # type: ignore[return-value]


def cached_codes(codec: AudioCodec, codec_dir: Path, corpus_dir: Path | None, split: str, audio: list[np.ndarray]) -> list[np.ndarray]:
    from ..data.audio_music import DEFAULT_DIR

    root = Path(corpus_dir) if corpus_dir is not None else DEFAULT_DIR
    stamp = int((codec_dir / "model.safetensors").stat().st_mtime)
    path = root / f"codes_{split}_{stamp}.npz"
    if path.exists():
        data = np.load(path)
        return [data[f"c{i}"] for i in range(len(audio))]
    codes = encode_corpus(codec, audio)
    np.savez(path, **{f"c{i}": c for i, c in enumerate(codes)})
    return codes


class CodeBatches:
    """Random crops of ``F`` frames (``F`` drawn per batch in ``[min_frames, max_frames]``) with one
    random description per clip; ``sample(frame_budget=n)`` takes ``n // F`` crops, so every batch
    costs about the same whatever its length."""

    def __init__(self, codes: list[np.ndarray], descriptions: list[list[str]], seed: int, min_frames: int, max_frames: int) -> None:
        self.codes, self.desc = codes, descriptions
        self.lengths = np.array([c.shape[1] for c in codes])
        self.rng = np.random.default_rng(seed)
        self.min_frames, self.max_frames = min_frames, max_frames

    def sample(self, batch_size: int | None = None, frames: int | None = None, frame_budget: int | None = None) -> tuple[torch.Tensor, list[str]]:
        f = int(frames or self.rng.integers(self.min_frames, self.max_frames + 1))
        if batch_size is None:
            batch_size = max(1, int(frame_budget) // f)
        pool = np.nonzero(self.lengths >= f)[0]
        if pool.size == 0:
            f, pool = int(self.lengths.max()), np.array([int(self.lengths.argmax())])
        pick = self.rng.choice(pool, batch_size)
        out = np.zeros((batch_size, self.codes[0].shape[0], f), dtype=np.int64)
        texts = []
        for r, i in enumerate(pick):
            s = int(self.rng.integers(0, self.lengths[i] - f + 1))
            out[r] = self.codes[i][:, s : s + f]
            texts.append(str(self.rng.choice(self.desc[i])))
        return torch.from_numpy(out), texts


# -------------------------------------------------------------------------------------------- objectives
def span_mask(batch: int, frames: int, rate: torch.Tensor, span_len: int, generator: torch.Generator) -> torch.Tensor:
    """Bool ``[B, T]``: union of spans of ``span_len`` whose starts are drawn so that the expected
    masked fraction of row b is ``rate[b]``; at least one cell masked per row."""
    q = 1.0 - (1.0 - rate.clamp(0.0, 0.999)) ** (1.0 / span_len)
    starts = torch.rand(batch, frames, generator=generator) < q[:, None]
    mask = F.max_pool1d(F.pad(starts.float()[:, None], (span_len - 1, 0)), span_len, stride=1)[:, 0] > 0
    none = ~mask.any(1)
    if bool(none.any()):
        mask[none, torch.randint(0, frames, (int(none.sum()),), generator=generator)] = True
    return mask


def magnet_loss(net: MagnetTransformer, codes: torch.Tensor, cond: TextEmbeddings, gen: torch.Generator) -> torch.Tensor:
    """MAGNeT training loss on a crop ``[B, K, T]`` (see the module docstring)."""
    b, k, t = codes.shape
    cfg = net.config
    stage = int(torch.randint(0, k, (1,), generator=gen))
    rate = torch.cos(math.pi / 2 * torch.rand(b, generator=gen))
    m = span_mask(b, t, rate, cfg.span_len, gen)
    x = codes.clone()
    x[:, stage] = torch.where(m, torch.full_like(codes[:, stage], cfg.mask_id), codes[:, stage])
    x[:, stage + 1 :] = cfg.mask_id
    logits = net(x, cond, stage=stage)[:, stage]  # [B, T, V]
    return F.cross_entropy(logits[m], codes[:, stage][m])


def ar_loss(net: MusicGenTransformer, codes: torch.Tensor, cond: TextEmbeddings) -> torch.Tensor:
    cfg = net.config
    stream = cfg.train_stream(codes)  # [B, F*K]
    b, n = stream.shape
    inp = torch.cat([torch.full((b, 1), cfg.bos_id, dtype=torch.long), stream[:, :-1]], 1)
    pos = torch.arange(n)[None].expand(b, n)
    logits = net(inp, pos, cond)
    grid = ~cfg.empty_cells(n)
    return F.cross_entropy(logits[:, grid].reshape(-1, cfg.vocab_size), stream[:, grid].reshape(-1))


def train_loop(name: str, params: list, step_fn, steps: int, minutes: float | None, lr: float, dev: torch.device,
               eval_fn=None) -> dict[str, Any]:
    """AdamW + warmup + cosine over ``steps`` or ``minutes`` (whichever ends first)."""
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    budget = None if minutes is None else minutes * 60.0
    t0 = time.perf_counter()
    hist, ema, step = [], None, 0
    bar = tqdm(range(steps), desc=name, leave=False)
    for step in bar:
        frac = 0.0 if budget is None else (time.perf_counter() - t0) / budget
        if frac >= 1.0:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, 50, time_frac=frac)
        with autocast(dev):
            loss = step_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        val = float(loss.detach())
        ema = val if ema is None else 0.98 * ema + 0.02 * val
        if step % 50 == 0:
            hist.append({"step": step, "loss": round(ema, 4)})
            bar.set_postfix(loss=f"{ema:.3f}")
            logger.info("%s step %d loss %.4f (%.0f s)", name, step, ema, time.perf_counter() - t0)
    out = {"steps": step + 1, "seconds": round(time.perf_counter() - t0, 1), "final_loss": round(ema or 0.0, 4), "history": hist[-30:]}
    if eval_fn is not None:
        out["heldout_loss"] = round(eval_fn(), 4)
    return out


# -------------------------------------------------------------------------------------------- main
def main(
    out_dir: str | os.PathLike = "assets/audio-music",
    seed: int = 0,
    codec_dir: str | os.PathLike = "/tmp/audio-codec",
    corpus_dir: str | os.PathLike | None = None,
    corpus_hours: float = 5.0,
    max_clips: int | None = None,
    max_test_clips: int = 64,
    dim: int = 128,
    layers: int = 3,
    draft_dim: int = 64,
    draft_layers: int = 1,
    batch_frames: int = 2500,
    ar_batch_frames: int = 1000,
    min_frames: int = 100,
    max_train_frames: int = 250,
    masked_steps: int = 20000,
    ar_steps: int = 20000,
    draft_steps: int = 20000,
    masked_minutes: float | None = 35.0,
    ar_minutes: float | None = 30.0,
    draft_minutes: float | None = 8.0,
    lr: float = 2e-3,
    cond_dropout: float = 0.2,
    device: str | None = None,
    num_threads: int | None = None,
    max_size_mb: float = 30.0,
) -> dict[str, Any]:
    """Corpus + codec -> codes -> vocab -> masked model (+ text encoder) -> AR model -> draft -> pipeline folder."""
    t_start = time.perf_counter()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    dev = pick_device(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    walls: dict[str, float] = {}

    # 1. data and codes
    t = time.perf_counter()
    build(out_dir=corpus_dir, seed=seed, hours=corpus_hours)
    train, test = load_corpus(corpus_dir, "train"), load_corpus(corpus_dir, "test")
    if max_clips is not None:
        train.audio, train.meta = train.audio[:max_clips], train.meta[:max_clips]
    test.audio, test.meta = test.audio[:max_test_clips], test.meta[:max_test_clips]
    codec_dir = Path(codec_dir)
    codec = AudioCodec.from_pretrained(codec_dir)
    codes_tr = cached_codes(codec, codec_dir, corpus_dir, f"train{len(train)}", train.audio)
    codes_te = cached_codes(codec, codec_dir, corpus_dir, f"test{len(test)}", test.audio)
    walls["data_and_codes"] = time.perf_counter() - t
    k, v = codec.num_codebooks, codec.codebook_size
    descs_tr = [m["descriptions"] for m in train.meta]
    descs_te = [m["descriptions"] for m in test.meta]

    # 2. vocabulary
    vocab = WordVocab.build([d for ds in descs_tr for d in ds])
    text_enc = AudioTextEncoder(TextEncoderConfig(vocab_size=len(vocab), d_model=dim, max_len=max(24, vocab.max_len))).to(dev)
    batches = CodeBatches(codes_tr, descs_tr, seed, min_frames, max_train_frames)
    held = CodeBatches(codes_te, descs_te, seed + 1, min_frames, max_train_frames)
    held_sets = [held.sample(8, frames=max_train_frames) for _ in range(4)]

    def cond_of(texts: list[str], enc_grad: bool) -> TextEmbeddings:
        ids, mask = text_enc.ids(vocab, texts)
        if enc_grad:
            emb = text_enc(ids, mask)
        else:
            with torch.no_grad():
                emb = text_enc(ids, mask)
        return TextEmbeddings(embeddings=emb, mask=mask)

    # 3. masked model + text encoder
    mcfg = MagnetConfig(num_codebooks=k, codebook_size=v, dim=dim, num_layers=layers, num_heads=4, text_dim=dim,
                        max_frames=500, frame_rate=codec.frame_rate)
    magnet = MagnetTransformer(mcfg).to(dev).train()
    text_enc.train()

    def magnet_step() -> torch.Tensor:
        codes, texts = batches.sample(frame_budget=batch_frames)
        return magnet_loss(magnet, codes.to(dev), drop_text(cond_of(texts, True), cond_dropout, gen), gen)

    @torch.no_grad()
    def magnet_eval() -> float:
        magnet.eval(), text_enc.eval()
        g = torch.Generator().manual_seed(123)
        out = float(np.mean([float(magnet_loss(magnet, c.to(dev), cond_of(tx, False), g)) for c, tx in held_sets]))
        magnet.train(), text_enc.train()
        return out

    logger.info("masked model: %.2f M parameters (+ text encoder %.2f M)", num_params(magnet) / 1e6, num_params(text_enc) / 1e6)
    m_metrics = train_loop("masked", list(magnet.parameters()) + list(text_enc.parameters()), magnet_step,
                           masked_steps, masked_minutes, lr, dev, magnet_eval)
    magnet.eval(), text_enc.eval()
    for p in text_enc.parameters():
        p.requires_grad_(False)

    # 4. AR model and draft (frozen text encoder)
    def ar_model(d: int, n_layers: int, steps: int, minutes: float | None, name: str) -> tuple[MusicGenTransformer, dict]:
        cfg = MusicGenConfig(num_codebooks=k, codebook_size=v, dim=d, num_layers=n_layers, num_heads=4, text_dim=dim,
                             max_frames=500, pattern="delay", frame_rate=codec.frame_rate)
        net = MusicGenTransformer(cfg).to(dev).train()

        def step() -> torch.Tensor:
            codes, texts = batches.sample(frame_budget=ar_batch_frames)
            return ar_loss(net, codes.to(dev), drop_text(cond_of(texts, False), cond_dropout, gen))

        @torch.no_grad()
        def ev() -> float:
            net.eval()
            out = float(np.mean([float(ar_loss(net, c.to(dev), cond_of(tx, False))) for c, tx in held_sets]))
            net.train()
            return out

        logger.info("%s: %.2f M parameters", name, num_params(net) / 1e6)
        met = train_loop(name, list(net.parameters()), step, steps, minutes, lr, dev, ev)
        return net.eval(), met

    ar, ar_metrics = ar_model(dim, layers, ar_steps, ar_minutes, "ar")
    draft, draft_metrics = ar_model(draft_dim, draft_layers, draft_steps, draft_minutes, "draft")

    # 5. pipeline folder
    from ..pipelines.base import model_index, write_model_index

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    codec.save_pretrained(out / "codec")
    if (codec_dir / "train_metrics.json").exists():  # the codec run's own record travels with it
        (out / "codec" / "train_metrics.json").write_text((codec_dir / "train_metrics.json").read_text())
    vocab.save_pretrained(out / "text_tokenizer")
    half = torch.float16
    text_enc.cpu().save_pretrained(out / "text_encoder", dtype=half)
    magnet.cpu().save_pretrained(out / "model", dtype=half)
    ar.cpu().save_pretrained(out / "ar_model", dtype=half)
    draft.cpu().save_pretrained(out / "draft", dtype=half)
    write_model_index(out, model_index("AudioPipeline", {"codec": codec, "text_encoder": text_enc, "text_tokenizer": vocab,
                                                         "model": magnet, "ar_model": ar, "draft": draft}, max_duration=10.0))
    metrics = {
        "recipe": "audio-music",
        "options": dict(seed=seed, corpus_hours=corpus_hours, dim=dim, layers=layers, draft_dim=draft_dim, draft_layers=draft_layers,
                        max_clips=max_clips, batch_frames=batch_frames, ar_batch_frames=ar_batch_frames, min_frames=min_frames, max_train_frames=max_train_frames, masked_minutes=masked_minutes,
                        ar_minutes=ar_minutes, draft_minutes=draft_minutes, lr=lr, cond_dropout=cond_dropout),
        "corpus": {"train_clips": len(train), "test_clips": len(test),
                   "train_hours": round(sum(a.size for a in train.audio) / train.sample_rate / 3600, 3)},
        "parameters": {"text_encoder": num_params(text_enc), "masked": num_params(magnet), "ar": num_params(ar), "draft": num_params(draft)},
        "masked": m_metrics, "ar": ar_metrics, "draft": draft_metrics,
        "walls": {k2: round(v2, 1) for k2, v2 in walls.items()},
        "environment": environment(dev),
        "wall_seconds": round(time.perf_counter() - t_start, 1),
    }
    write_metrics(out, metrics, max_size_mb)
    return metrics
