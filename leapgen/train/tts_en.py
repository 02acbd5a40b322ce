"""Recipe ``tts-en``: zero-shot English TTS (MaskGCT T2S + S2A, an AR T2S baseline, an x-vector).

Steps (each with a wall-clock budget; everything on ``num_threads`` CPU threads by default):

1. Corpus: :mod:`leapgen.data.tts_en` (fixed espeak-ng speakers, held-out voices).
2. Speech codec: the shipped ``audio-music`` codec (EnCodec small, 16 kHz, 50 Hz, 4 x 256) is
   fine-tuned on the corpus (``codec_minutes``; multi-scale mel + waveform L1 + commitment, EMA
   codebooks: the ``audio-codec`` objective); the shipped ASR's WER on test reconstructions vs
   on the originals is recorded. ``codec_distill > 0`` adds SpeechTokenizer's semantic
   distillation of the first RVQ layer towards the ASR encoder states (:func:`finetune_codec`);
   ``H(first-layer code | semantic token)`` is recorded either way (:func:`conditional_entropy`).
3. Semantic tokens: spherical k-means (``semantic_size``) over the final hidden states of the shipped
   ASR encoder (60 ms frames); usage and perplexity recorded.
4. G2P (espeak-ng IPA) -> phone inventory; semantic ids and codec codes for every utterance
   (codec frames = 3 x semantic frames).
5. Networks (:mod:`leapgen.train.tts_stages`): T2S (masked), AR T2S (same width / depth), a 1-layer
   AR draft (for ``speculative``), S2A, speaker x-vector.
6. The asset folder ``out_dir``: every component (float16 weights), ``model_index.json``
   (``TTSPipeline``), ``train_metrics.json``, ``examples/prompt.wav``.

``leapgen train tts-en --out assets/tts-en --corpus-dir ~/.cache/leapgen/tts-en-100`` with the
defaults (4,000 training utterances, 2.8 h) is about 80 minutes on one CPU thread (the budgets sum
to 65 minutes of training; the corpus takes about 5 more the first time); the settings of the
shipped run are recorded in its train_metrics.json. ``--codec-minutes 0.2 --t2s-minutes 0.2 ...`` is a smoke run.

``--continue-from assets/tts-en --stages s2a --s2a-minutes 40`` continues one network (here the S2A) of an
earlier run and copies the rest (codec, semantic codebook, ASR, phones and the other networks) unchanged;
``--stages codec,s2a --codec-distill 1`` fine-tunes the codec further (its codes change, so the S2A too).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.tts_en import build, read_manifest
from ..errors import ConfigError
from ..models.asr import ASRModel
from ..models.tts import (
    CODEC_PER_SEMANTIC,
    S2AConfig,
    S2ANet,
    SemanticCodebook,
    SemanticConfig,
    SpeakerConfig,
    SpeakerNet,
    T2SConfig,
    T2SNet,
    ar_t2s_config,
)
from ..pipelines.base import model_index, resolve_pretrained, write_model_index
from ..tokenizers.audio_codec import AudioCodec, multiscale_mel_loss
from ..tokenizers.phones import PhoneTokenizer, phonemize
from ..tokenizers.speech_features import SpeechFrontend
from .audio_codec import random_crops
from .common import environment, lr_at, num_params, write_metrics
from .tts_stages import train_ar, train_s2a, train_speaker, train_t2s

logger = logging.getLogger(__name__)
STAGES = ("t2s", "ar_t2s", "ar_draft", "s2a", "speaker")  # the networks, in training order
CONTINUABLE = ("codec", *STAGES)  # what --continue-from can train further
SR = 16000
HOP = 960  # one semantic frame (60 ms) = 3 codec frames


def _load(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    import soundfile as sf

    out = []
    for r in rows:
        x = sf.read(r["audio"], dtype="float32")[0]
        out.append(np.pad(x, (0, (-x.size) % HOP)))
    return out


def asr_wer(asr_pipe: Any, waves: list[np.ndarray], texts: list[str]) -> float:
    import jiwer

    hyps = asr_pipe(list(waves), sampling_rate=SR, sampler="paraformer").texts
    return float(jiwer.wer(list(texts), [h or "<empty>" for h in hyps]))


def _aligned_crops(waves: list[np.ndarray], states: list[torch.Tensor], n: int, frames: int,
                   rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` crops of ``frames`` semantic frames (``frames x HOP`` samples) starting on a semantic
    frame, with the ASR encoder states of those frames repeated to the codec's rate: ``(audio [n,
    frames x HOP], targets [n, frames x 3, d], valid [n, frames x 3])`` (zero-padded past a clip's end)."""
    d = states[0].shape[1]
    x = torch.zeros(n, frames * HOP)
    tgt = torch.zeros(n, frames, d)
    valid = torch.zeros(n, frames, dtype=torch.bool)
    for i in range(n):
        k = int(rng.integers(len(waves)))
        w, s = waves[k], states[k]
        m = min(s.shape[0], w.size // HOP)
        s0 = int(rng.integers(0, max(1, m - frames) + 1))
        ls = min(frames, m - s0)
        x[i, : ls * HOP] = torch.from_numpy(w[s0 * HOP : (s0 + ls) * HOP])
        tgt[i, :ls] = s[s0 : s0 + ls].float()
        valid[i, :ls] = True
    return x, tgt.repeat_interleave(CODEC_PER_SEMANTIC, 1), valid.repeat_interleave(CODEC_PER_SEMANTIC, 1)


def finetune_codec(codec: AudioCodec, waves: list[np.ndarray], minutes: float, batch_size: int = 8, crop_seconds: float = 0.8,
                   lr: float = 1e-3, seed: int = 0, states: list[torch.Tensor] | None = None,
                   distill_weight: float = 0.0) -> dict[str, Any]:
    """Fine-tune ``codec`` on ``waves`` (the ``audio-codec`` objective) for ``minutes``.

    ``states`` (the ASR encoder states of each wave, 60 ms frames) with ``distill_weight > 0`` adds
    SpeechTokenizer's semantic distillation: a linear map of the first RVQ layer's quantized output
    (straight-through) is pulled towards the ASR state of its frame, ``distill_weight x (1 - cos)``,
    so that the first codec layer carries the phonetic content the semantic tokens also carry
    (what MaskGCT's S2A must predict from them)."""
    rng = np.random.default_rng(seed)
    distill = states is not None and distill_weight > 0
    head = torch.nn.Linear(codec.config.hidden_size, states[0].shape[1]) if distill else None
    params = [*codec.parameters(), *(head.parameters() if head is not None else [])]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.8, 0.99))
    codec.train()
    t0, step, hist = time.perf_counter(), 0, []
    frames = max(1, round(crop_seconds * SR / HOP))
    while minutes > 0:
        frac = (time.perf_counter() - t0) / (minutes * 60)
        if frac >= 1:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 10**6, lr, 20, time_frac=frac)
        if distill:
            x, tgt, valid = _aligned_crops(waves, states, batch_size, frames, rng)
        else:
            x = random_crops(waves, batch_size, frames * HOP, rng)
        z = codec.encode_latents(x)
        zq, codes, commit, residuals = codec.quantize_train(z)
        y = codec.decode_latents(zq)[:, : x.shape[1]]
        mel = multiscale_mel_loss(y, x, SR)
        loss = mel + 0.1 * (y - x).abs().mean() + commit
        sem = torch.zeros(())
        if distill:
            q0 = codec.model.quantizer.layers[0].decode(codes[:, 0])
            q0 = z + (q0 - z).detach()  # straight-through to the encoder
            t = min(q0.shape[2], tgt.shape[1])
            cos = F.cosine_similarity(head(q0[:, :, :t].transpose(1, 2)), tgt[:, :t], dim=-1)
            sem = (1 - cos)[valid[:, :t]].mean()
            loss = loss + distill_weight * sem
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        codec.ema_update(codes, residuals, dead_threshold=0.05)
        if step % 25 == 0:
            hist.append({"step": step, "mel": round(float(mel.detach()), 4), "distill": round(float(sem.detach()), 4)})
            logger.info("codec step %d mel %.4f distill %.4f", step, float(mel.detach()), float(sem.detach()))
        step += 1
    codec.eval()
    return {"steps": step, "distill_weight": distill_weight if distill else 0.0, "history": hist[-10:]}


@torch.no_grad()
def encoder_states(asr: ASRModel, frontend: SpeechFrontend, waves: list[np.ndarray], batch: int = 16) -> list[torch.Tensor]:
    out = []
    for s in range(0, len(waves), batch):
        x, lengths = frontend(waves[s : s + batch])
        mem, _ = asr.encode(x, lengths)
        out += [mem[i, : int(n)] for i, n in enumerate(lengths)]
    return out


def _train_codec(codec: AudioCodec, train_w: list[np.ndarray], test_w: list[np.ndarray], texts: list[str], minutes: float,
                 seed: int, states: list[torch.Tensor], distill: float, asr_pipe: Any = None) -> dict[str, Any]:
    """:func:`finetune_codec` between two readings of the shipped ASR's WER on test reconstructions."""
    from ..pipelines import Pipeline

    asr_pipe = asr_pipe or Pipeline.from_pretrained(resolve_pretrained("leapgen/asr-en"))

    def recon(ws: list[np.ndarray]) -> list[np.ndarray]:
        return [codec.decode(codec.encode(w))[0, : w.size].numpy() for w in ws]

    wer_real, wer_before = asr_wer(asr_pipe, test_w, texts), asr_wer(asr_pipe, recon(test_w), texts)
    out = finetune_codec(codec, train_w, minutes, seed=seed, states=states, distill_weight=distill)
    out.update(asr_wer_original=round(wer_real, 4), asr_wer_recon_before=round(wer_before, 4),
               asr_wer_recon=round(asr_wer(asr_pipe, recon(test_w), texts), 4))
    logger.info("codec: %s", {k: v for k, v in out.items() if k != "history"})
    return out


def conditional_entropy(data: list[dict[str, Any]]) -> float:
    """Plug-in ``H(first-layer code | semantic token)`` in nats over the training utterances: how much
    of the codec's first layer the semantic tokens leave open (what the S2A cannot predict from them)."""
    sem = np.concatenate([np.repeat(np.asarray(d["semantic"]), CODEC_PER_SEMANTIC) for d in data])
    code = np.concatenate([d["codes"][0] for d in data])
    joint = np.zeros((int(sem.max()) + 1, int(code.max()) + 1))
    np.add.at(joint, (sem, code), 1.0)
    p = joint / joint.sum()
    ps = p.sum(1, keepdims=True)
    nz = p > 0
    return round(float(-(p[nz] * np.log((p / np.maximum(ps, 1e-300))[nz])).sum()), 4)


def _new_network(name: str, phone_vocab: int, semantic_size: int, d_model: int, layers: int, codec: AudioCodec,
                 speakers: int) -> torch.nn.Module:
    """A freshly initialised network of stage ``name`` (one of :data:`STAGES`)."""
    from transformers import LlamaForCausalLM

    if name == "t2s":
        return T2SNet(T2SConfig(phone_vocab=phone_vocab, semantic_size=semantic_size, d_model=d_model, ff=4 * d_model,
                                layers=layers))
    if name == "ar_t2s":
        return LlamaForCausalLM(ar_t2s_config(phone_vocab, semantic_size, d_model=d_model, layers=layers, ff=8 * d_model // 3))
    if name == "ar_draft":
        return LlamaForCausalLM(ar_t2s_config(phone_vocab, semantic_size, d_model=96, layers=1, heads=2, ff=384))
    if name == "s2a":
        return S2ANet(S2AConfig(semantic_size=semantic_size, num_codebooks=codec.num_codebooks, codebook_size=codec.codebook_size))
    return SpeakerNet(SpeakerConfig(num_speakers=speakers))


def main(out_dir: str | os.PathLike = "/tmp/tts-en", seed: int = 0, corpus_dir: str | os.PathLike | None = None,
         per_speaker: int = 100, codec_minutes: float = 5.0, t2s_minutes: float = 18.0, ar_minutes: float = 13.0,
         draft_minutes: float = 3.0, s2a_minutes: float = 22.0, speaker_minutes: float = 4.0, semantic_size: int = 256,
         d_model: int = 192, layers: int = 4, num_threads: int | None = 1,
         codec_dir: str | os.PathLike | None = None, continue_from: str | os.PathLike | None = None,
         stages: str = "t2s,ar_t2s,ar_draft,s2a,speaker", s2a_lr: float = 1e-3,
         s2a_layer_probs: str = "0.4,0.2,0.2,0.2", codec_distill: float = 0.0) -> dict[str, Any]:
    """Corpus -> codec fine-tune -> semantic tokens -> T2S / AR / draft / S2A / speaker -> ``out_dir``.
    ``codec_dir``: the codec to start from (default: the shipped ``audio-music`` codec).

    ``continue_from`` (a folder this recipe wrote, e.g. ``assets/tts-en``): keep its codec, semantic
    codebook, ASR and phone inventory, continue training the networks named in ``stages`` (comma
    separated, from ``t2s, ar_t2s, ar_draft, s2a, speaker``) from its weights and copy the others
    unchanged; each continued network's earlier runs are kept in ``train_metrics.json``
    (``<stage>_history``). ``s2a_layer_probs``: how often each RVQ layer is the S2A's training
    target (comma separated)."""
    t_start = time.perf_counter()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    from ..pipelines import Pipeline

    chosen = [x.strip() for x in stages.split(",") if x.strip()]
    unknown = sorted(set(chosen) - set(CONTINUABLE if continue_from is not None else STAGES))
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; choose among {', '.join(CONTINUABLE)} (comma separated; "
                          "'codec' only with continue_from).")
    if "codec" in chosen and "s2a" not in chosen:
        raise ConfigError("a retrained codec changes the acoustic codes: add 's2a' to the stages.")
    corpus = build(corpus_dir, seed=seed, per_speaker=per_speaker)
    root = corpus["out_dir"]
    train_rows, test_rows = read_manifest(root, "train"), read_manifest(root, "test")
    train_w, test_w = _load(train_rows), _load(test_rows)
    metrics: dict[str, Any] = {"recipe": "tts-en", "corpus": corpus, "train_utterances": len(train_rows),
                               "settings": dict(seed=seed, per_speaker=per_speaker, codec_minutes=codec_minutes,
                                                t2s_minutes=t2s_minutes, ar_minutes=ar_minutes, draft_minutes=draft_minutes,
                                                s2a_minutes=s2a_minutes, speaker_minutes=speaker_minutes,
                                                semantic_size=semantic_size, d_model=d_model, layers=layers,
                                                num_threads=num_threads,
                                                codec_dir=None if codec_dir is None else str(codec_dir),
                                                continue_from=None if continue_from is None else str(continue_from),
                                                stages=",".join(chosen), s2a_lr=s2a_lr, s2a_layer_probs=s2a_layer_probs,
                                                codec_distill=codec_distill)}
    previous: dict[str, Any] = {}
    if continue_from is not None:
        # 2-3. codec, ASR and semantic codebook of the earlier run
        prev = Pipeline.from_pretrained(continue_from)
        previous = json.loads((Path(continue_from) / "train_metrics.json").read_text())
        codec, sem_cb, asr, frontend, asr_vocab = prev.codec, prev.semantic, prev.asr_model, prev.frontend, prev.asr_vocab
        metrics.update(codec=previous["codec"], semantic=previous["semantic"])
        states = encoder_states(asr, frontend, train_w)
        logger.info("continuing %s from %s (semantic codebook, ASR and phones kept)", ",".join(chosen), continue_from)
        if "codec" in chosen:
            codec = codec.float()
            metrics["codec_history"] = [*previous.get("codec_history", []), previous["codec"]]
            metrics["codec"] = _train_codec(codec, train_w, test_w, [r["text"] for r in test_rows], codec_minutes, seed,
                                            states, codec_distill)
    else:
        asr_pipe = Pipeline.from_pretrained(resolve_pretrained("leapgen/asr-en"))
        # 2. codec
        codec = AudioCodec.from_pretrained(Path(codec_dir) if codec_dir is not None else resolve_pretrained("leapgen/audio-music") / "codec")
        asr, frontend, asr_vocab = asr_pipe.model, asr_pipe.frontend, asr_pipe.vocab
        states = encoder_states(asr, frontend, train_w)
        metrics["codec"] = _train_codec(codec, train_w, test_w, [r["text"] for r in test_rows], codec_minutes, seed,
                                        states, codec_distill, asr_pipe)
        # 3. semantic tokens
        sem_cb = SemanticCodebook(SemanticConfig(size=semantic_size, dim=states[0].shape[1]))
        metrics["semantic"] = sem_cb.fit(torch.cat(states), seed=seed)
    sem_ids = [sem_cb.encode(s[None])[0].tolist() for s in states]
    logger.info("semantic: %s", metrics["semantic"])
    # 4. phones, codes
    ipa = phonemize([r["text"] for r in train_rows])
    phones = PhoneTokenizer.fit(ipa)
    if continue_from is not None:
        if phones.itos != prev.phones.itos:
            raise ConfigError(f"the corpus's phone inventory differs from {continue_from}'s; continue on the corpus it was trained on.")
        phones = prev.phones
    data = []
    with torch.no_grad():
        for w, s, p in zip(train_w, sem_ids, ipa):
            codes = codec.encode(w)[0][:, : len(s) * CODEC_PER_SEMANTIC].numpy()
            n = min(len(s), codes.shape[1] // CODEC_PER_SEMANTIC)
            data.append({"phones": phones.encode(p), "semantic": s[:n], "codes": codes[:, : n * CODEC_PER_SEMANTIC]})
    metrics["codec"]["layer0_given_semantic_nats"] = conditional_entropy(data)
    metrics["frames_per_phone"] = round(sum(len(d["semantic"]) for d in data) / sum(len(d["phones"]) for d in data), 4)
    # 5. networks: new, continued (continue_from + stages) or copied from the earlier run
    spk_ids = sorted({r["speaker"] for r in train_rows})
    nets: dict[str, Any] = {}
    for name in STAGES:
        if continue_from is None:
            nets[name] = _new_network(name, len(phones), semantic_size, d_model, layers, codec, len(spk_ids))
        else:
            nets[name] = getattr(prev, name).float()
            if name not in chosen:
                metrics[name] = previous[name]
                continue
            metrics[f"{name}_history"] = [*previous.get(f"{name}_history", []), previous[name]]
        net = nets[name]
        if name == "t2s":
            stats = train_t2s(net, data, t2s_minutes, seed=seed)
        elif name in ("ar_t2s", "ar_draft"):
            stats = train_ar(net, data, len(phones), ar_minutes if name == "ar_t2s" else draft_minutes, seed=seed)
        elif name == "s2a":
            probs = tuple(float(x) for x in s2a_layer_probs.split(","))
            stats = train_s2a(net, data, s2a_minutes, lr=s2a_lr, layer_probs=probs, seed=seed)
        else:
            feats = [net.features(w) for w in train_w]
            stats = train_speaker(net, feats, [spk_ids.index(r["speaker"]) for r in train_rows], speaker_minutes, seed=seed)
        metrics[name] = {"parameters": num_params(net), **stats}
    # 6. asset
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    half = torch.float16
    comps: dict[str, Any] = {**nets, "codec": codec, "semantic": sem_cb, "asr_model": asr, "frontend": frontend,
                             "asr_vocab": asr_vocab, "phones": phones}
    for name, comp in comps.items():
        if name in ("ar_t2s", "ar_draft"):
            comp.to(half).save_pretrained(out / name)
            comp.float()
        elif name in ("codec", "semantic"):
            comp.save_pretrained(out / name)  # float32: small, and the codec is precision-sensitive
        elif isinstance(comp, torch.nn.Module):
            comp.save_pretrained(out / name, dtype=half)
        else:
            comp.save_pretrained(out / name)
    write_model_index(out, model_index("TTSPipeline", comps, frames_per_phone=metrics["frames_per_phone"]))
    ex = out / "examples"
    ex.mkdir()
    prompt = next(r for r in read_manifest(root, "prompts") if not r["seen"])
    shutil.copy(prompt["audio"], ex / "prompt.wav")
    (ex / "prompt.json").write_text(json.dumps({k: prompt[k] for k in ("text", "speaker", "voice", "pitch", "rate")}) + "\n")
    metrics["environment"] = environment(torch.device("cpu"))
    metrics["wall_minutes"] = round((time.perf_counter() - t_start) / 60, 2)
    write_metrics(out, metrics, max_size_mb=30.0)
    return metrics


__all__ = ["asr_wer", "conditional_entropy", "encoder_states", "finetune_codec", "main"]
