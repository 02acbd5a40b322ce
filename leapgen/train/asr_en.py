"""Recipe ``leapgen train asr-en``: the shipped English ASR (Paraformer + CTC + AR on one encoder).

Steps: (1) the spoken corpus (``leapgen data speech-en``; built here when missing, with ``hours``
and ``vocab_words``; ``dataset`` names another ``leapgen data`` corpus in the same manifest format,
e.g. ``speech-de`` for the German judge of :mod:`leapgen.train.asr_de`); (2) the front end once per utterance (80-dim Kaldi fbank, by the
frontend's ``fbank`` setting: float32 torch by default, kaldi-native-fbank for the shipped runs' caches -> LFR 7/6; cached as ``feats_<split>.pt`` beside the corpus, so training never recomputes it) and
global CMVN fitted on the training split; (3) joint training of :class:`~leapgen.models.asr.ASRModel`
(CE of the Paraformer decoder with the GLM glancing sampler, CIF MAE, ``ctc_weight`` (1.0) x CTC,
CE of the AR decoder, whose teacher-forced input words can be dropped to ``<unk>`` at the rate
``ar_token_dropout`` (default 0; the shipped continuation used 0.3); optional SpecAugment
(``spec_augment_masks`` frequency and time masks, :func:`spec_augment`; default 0 = off); label smoothing 0.1;
``hours``, ``vocab_words`` and ``gapped`` only say how to build a missing corpus; ``--init-from`` a
pipeline with another word list keeps the rows of the shared words (:func:`remap_vocab`);
AdamW, warm-up then cosine over the time budget; length-bucketed batches); (4) a quick paraformer WER on ``test_seen``; (5) the pipeline folder
(``model/``, ``frontend/``, ``vocab/``, ``model_index.json``; fp16 weights), <= 30 MB, with the
CIF tail calibrated on training utterances (:func:`calibrate_tail`) and the word-timestamp settings
on the first half of the timing split (``--finalize-only true`` reruns just these on a trained folder).

Training runs in float32 by default: bf16 autocast (``--bf16 true``) pays off only on CPUs with
native bf16 (AVX512-BF16 / AMX); on an AVX2 CPU it is emulated and a step took 4.0 s against
0.54 s in float32 (batch 32, one thread), which is why earlier runs made so few steps.

Defaults: a 20 h corpus (23,424 training utterances) over the 1,000 most frequent words;
``minutes`` (90) is the whole recipe's budget: the corpus build (22 min with one worker while the
other core was busy), the features (4 min), the closing evaluation and timestamp calibration
(``ASR_EVAL_RESERVE_MIN``) included; training gets what is left (``total_minutes`` and
``train_minutes`` are recorded). The shipped asset's settings are in ``train_metrics.json``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..data import DATASETS
from ..data import speech as corpus_mod
from ..errors import ConfigError
from ..models.asr import ASRConfig, ASRModel
from ..tokenizers.asr_vocab import ASRVocab
from ..tokenizers.speech_features import SpeechFrontend, pad_features
from .common import adamw, environment, pick_device, write_metrics
from .loop import train_budgeted, training_minutes

#: minutes kept for the quick evaluation and the timestamp calibration after training
ASR_EVAL_RESERVE_MIN = 4.0
#: CIF tails tried by :func:`calibrate_tail` (FunASR's 0.45 first)
TAIL_GRID = (0.45, 0.55, 0.65, 0.75, 0.85)

logger = logging.getLogger(__name__)


def corpus_module(dataset: str = "speech-en") -> Any:
    """The corpus module of ``dataset`` (a :data:`leapgen.data.DATASETS` name whose manifests have
    the speech-en format: ``default_dir``, ``build``, ``read_manifest``, ``SAMPLE_RATE``)."""
    if dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}; available: {', '.join(sorted(DATASETS))}")
    module = importlib.import_module(DATASETS[dataset].partition(":")[0])
    missing = [a for a in ("default_dir", "build", "read_manifest", "SAMPLE_RATE") if not hasattr(module, a)]
    if missing:
        raise ConfigError(f"dataset {dataset!r} is not a spoken corpus in the speech-en format (lacks {missing})")
    return module


def load_features(root: Path, split: str, frontend: SpeechFrontend, limit: int | None = None) -> tuple[list[torch.Tensor], list[dict[str, Any]]]:
    """LFR features (before CMVN, float16) and manifest rows of a split, cached in ``feats_<split>.pt``."""
    rows = corpus_mod.read_manifest(root, split)  # every spoken corpus shares the speech-en manifest format
    cache = root / f"feats_{split}.pt"
    if cache.exists():
        feats = torch.load(cache)
    else:
        import soundfile as sf

        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            tqdm = lambda x, **k: x  # noqa: E731
        feats = [frontend.features(sf.read(r["audio"], dtype="float32")[0]).half()
                 for r in tqdm(rows, desc=f"features {split}", mininterval=10)]
        torch.save(feats, cache)
    if limit is not None:
        feats, rows = feats[:limit], rows[:limit]
    return feats, rows


def batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Length-bucketed batches in random order (shuffle, sort by length with jitter, chunk, shuffle)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] + rng.random() * 6)
    out = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(out)
    return out


def collate(idx: list[int], feats: list[torch.Tensor], targets: list[list[int]], frontend: SpeechFrontend,
            device: torch.device) -> tuple[torch.Tensor, ...]:
    x, lengths = pad_features([frontend.normalize(feats[i].float()) for i in idx])
    tl = torch.tensor([len(targets[i]) for i in idx])
    y = torch.zeros(len(idx), int(tl.max()), dtype=torch.long)
    for k, i in enumerate(idx):
        y[k, : len(targets[i])] = torch.tensor(targets[i])
    return x.to(device), lengths.to(device), y.to(device), tl.to(device)


def spec_augment(x: torch.Tensor, lengths: torch.Tensor, generator: torch.Generator, n_mels: int = 80,
                 freq_masks: int = 2, freq_width: int = 15, time_masks: int = 2, time_ratio: float = 0.05) -> torch.Tensor:
    """SpecAugment on normalised LFR features ``[B, T, m * n_mels]`` (a copy; zero = the CMVN mean).

    ``freq_masks`` bands of up to ``freq_width`` mel bins are zeroed in every stacked frame of the LFR
    vector, and ``time_masks`` spans of up to ``time_ratio`` of each row's length are zeroed, as in
    FunASR's ``SpecAugLFR`` (no time warp). Widths and positions come from ``generator``.
    """
    b, t, d = x.shape
    m = d // n_mels
    dev = x.device
    bins = torch.arange(n_mels, device=dev)
    width = torch.randint(0, freq_width + 1, (b, freq_masks), generator=generator, device=dev)
    start = (torch.rand(b, freq_masks, generator=generator, device=dev) * (n_mels - width + 1)).long()
    fmask = ((bins[None, None] >= start[..., None]) & (bins[None, None] < (start + width)[..., None])).any(1)  # [B, n_mels]
    frames = torch.arange(t, device=dev)
    twidth = (torch.rand(b, time_masks, generator=generator, device=dev) * time_ratio * lengths[:, None]).long()
    tstart = (torch.rand(b, time_masks, generator=generator, device=dev) * (lengths[:, None] - twidth + 1)).long()
    tmask = ((frames[None, None] >= tstart[..., None]) & (frames[None, None] < (tstart + twidth)[..., None])).any(1)  # [B, T]
    keep = ~(fmask[:, None, None, :] | tmask[:, :, None, None])  # [B, T, 1, n_mels] over the m stacked frames
    return (x.view(b, t, m, n_mels) * keep).view(b, t, d)


@torch.no_grad()
def remap_vocab(model: ASRModel, old: list[str], new: list[str]) -> ASRModel:
    """A copy of ``model`` over the token list ``new`` (``old``: the model's): every tensor indexed
    by token (CTC head, Paraformer and AR embeddings and outputs; found as the tensors whose first
    dimension follows ``vocab_size``) keeps the rows of the tokens both lists share; tokens new to
    the model keep the fresh initialisation; every other weight is copied."""
    cfg = model.config
    with torch.device("meta"):
        probe = ASRModel(dataclasses.replace(cfg, vocab_size=cfg.vocab_size + 1)).state_dict()
    fresh = ASRModel(dataclasses.replace(cfg, vocab_size=len(new)))
    src, dst = model.state_dict(), fresh.state_dict()
    where = {w: i for i, w in enumerate(old)}
    pairs = torch.tensor([(j, where[w]) for j, w in enumerate(new) if w in where], dtype=torch.long)
    for key, value in dst.items():
        if probe[key].shape == src[key].shape:  # not indexed by token
            value.copy_(src[key])
        else:
            value[pairs[:, 0]] = src[key][pairs[:, 1]].to(value.dtype)
    return fresh


@torch.no_grad()
def quick_wer(model: ASRModel, feats: list[torch.Tensor], rows: list[dict[str, Any]], vocab: ASRVocab,
              frontend: SpeechFrontend, device: torch.device, batch_size: int = 32) -> dict[str, float]:
    """Paraformer one-pass WER and CIF length accuracy (a training-time check; the bench is ``leapgen bench asr``)."""
    import jiwer

    model.eval()
    hyps, refs, len_ok = [], [], 0
    for s in range(0, len(rows), batch_size):
        idx = list(range(s, min(len(rows), s + batch_size)))
        x, lengths = pad_features([frontend.normalize(feats[i].float()) for i in idx])
        memory, mask = model.encode(x.to(device), lengths.to(device))
        fired = model.fire(memory, mask)
        ids = model.nar_logits(memory, mask, fired["embeds"], fired["token_mask"]).argmax(-1)
        for k, i in enumerate(idx):
            n = int(fired["token_num"][k])
            hyps.append(vocab.decode(ids[k, :n].tolist()))
            refs.append(rows[i]["text"])
            len_ok += n == len(rows[i]["text"].split())
    model.train()
    return {"wer": jiwer.wer(refs, [h or "<empty>" for h in hyps]), "length_acc": len_ok / max(1, len(rows))}


def save_pipeline(out: Path, model: ASRModel, frontend: SpeechFrontend, vocab: ASRVocab) -> None:
    """The folder :class:`~leapgen.pipelines.asr.ASRPipeline` loads (fp16 weights)."""
    from ..pipelines.base import model_index, write_model_index

    for name in ("model", "frontend", "vocab"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out / "model", dtype=torch.float16)
    frontend.save_pretrained(out / "frontend")
    vocab.save_pretrained(out / "vocab")
    write_model_index(out, model_index("ASRPipeline", {"model": model, "frontend": frontend, "vocab": vocab}))


def main(out_dir: str = "assets/asr-en", seed: int = 0, corpus: str | None = None, hours: float = 20.0,
         vocab_words: int = 1000, gapped: float = 0.0, minutes: float = 90.0, max_steps: int | None = None, batch_size: int = 32,
         lr: float = 1.5e-3, warmup: int = 300, weight_decay: float = 0.01, d_model: int = 144, heads: int = 4,
         ff: int = 576, encoder_layers: int = 4, nar_layers: int = 2, ar_layers: int = 2, dropout: float = 0.1,
         glm_ratio: float = 0.4, ctc_weight: float = 1.0, threads: int = 1, bf16: bool = False,
         max_train: int | None = None, eval_utts: int = 200, log_every: int = 50, device: str | None = None,
         checkpoint_every_min: float = 10.0, init_from: str | None = None, ar_token_dropout: float = 0.0,
         spec_augment_masks: int = 0, finalize_only: bool = False, dataset: str = "speech-en") -> dict[str, Any]:
    """Train and save the ASR pipeline (see the module docstring); returns the metrics.
    ``finalize_only``: train nothing; rerun the closing calibrations (:func:`finalize`) on the
    pipeline already in ``out_dir`` and record them in its ``train_metrics.json``.
    ``dataset``: the spoken corpus (a ``leapgen data`` name in the speech-en format, e.g.
    ``speech-de`` for :mod:`leapgen.train.asr_de`): its default folder, and its builder when the
    corpus is missing (given the options among ``hours``, ``vocab_words``, ``gapped`` it takes)."""
    data_mod = corpus_module(dataset)
    if finalize_only:
        return refinalize(out_dir, corpus or data_mod.default_dir())
    t_start = time.perf_counter()
    torch.manual_seed(seed)
    torch.set_num_threads(int(threads))
    rng = random.Random(seed)
    dev = pick_device(device)
    root = Path(corpus) if corpus else data_mod.default_dir()
    if not (root / "train.jsonl").exists():
        accepted = inspect.signature(data_mod.build).parameters
        options = {k: v for k, v in {"hours": hours, "vocab_words": vocab_words, "gapped": gapped}.items() if k in accepted}
        logger.info("building the %s corpus in %s (%s)", dataset, root, options)
        data_mod.build(out_dir=root, seed=seed, **options)
    elif corpus is None and dataset == "speech-en" and (built := _corpus_meta(root)):  # the default cache may hold another corpus
        asked = {"vocab_words": vocab_words, "gapped": gapped}
        if any(built.get(k, 0.0) != v for k, v in asked.items()):
            logger.warning("the corpus in %s was built with %s, not %s; training on it as it is (rebuild it "
                           "with `leapgen data speech-en --out DIR ...` or pass --corpus)", root,
                           {k: built.get(k, 0.0) for k in asked}, asked)
    vocab = ASRVocab((root / "vocab.txt").read_text().split())
    frontend = SpeechFrontend.from_pretrained(Path(init_from) / "frontend") if init_from else SpeechFrontend()
    feats, rows = load_features(root, "train", frontend, max_train)
    if not init_from:
        frontend.fit_cmvn([f.float() for f in feats[:3000]])
    targets = [vocab.encode(r["text"]) for r in rows]
    cfg = ASRConfig(vocab_size=len(vocab), input_dim=frontend.dim, d_model=d_model, heads=heads, ff=ff,
                    encoder_layers=encoder_layers, nar_layers=nar_layers, ar_layers=ar_layers, dropout=dropout,
                    frame_seconds=frontend.config.frame_seconds)
    if init_from:  # continue from a saved pipeline folder (its config, weights and CMVN)
        model = ASRModel.from_pretrained(Path(init_from) / "model")
        old_words = ASRVocab.from_pretrained(Path(init_from) / "vocab").itos
        if old_words != vocab.itos:  # the corpus has another word list: keep the rows of shared words
            model = remap_vocab(model, old_words, vocab.itos)
            logger.info("vocabulary %d -> %d words (%d shared)", len(old_words) - 3, len(vocab) - 3,
                        len(set(old_words) & set(vocab.itos)) - 3)
        model = model.to(dev)
        model.train()
        cfg = model.config
    else:
        model = ASRModel(cfg).to(dev)
    logger.info("ASRModel %s on %s, %d training utterances", model.num_parameters(), dev, len(rows))
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    gen = torch.Generator(device=dev).manual_seed(seed)
    lengths = [f.shape[0] for f in feats]
    out = Path(out_dir)

    def losses(idx, progress):
        x, xl, y, yl = collate(idx, feats, targets, frontend, dev)
        if spec_augment_masks:
            x = spec_augment(x, xl, gen, n_mels=frontend.config.n_mels, freq_masks=spec_augment_masks,
                             time_masks=spec_augment_masks)
        return model.losses(x, xl, y, yl, glm_ratio=glm_ratio, weights={"ctc": ctc_weight}, generator=gen,
                            ar_token_dropout=ar_token_dropout)

    run = train_budgeted(model, opt, lambda: batches(lengths, batch_size, rng), losses,
                         minutes=training_minutes(minutes, t_start, ASR_EVAL_RESERVE_MIN),
                         max_steps=max_steps, lr=lr, warmup=warmup, device=dev, bf16=bf16, clip=5.0,
                         log_every=log_every, checkpoint_every_min=checkpoint_every_min,
                         save=lambda: save_pipeline(out, model, frontend, vocab))
    model.eval()
    quick: dict[str, Any] = {}
    if (root / "test_seen.jsonl").exists():
        ev_feats, ev_rows = load_features(root, "test_seen", frontend, eval_utts)
        quick = {"utterances": len(ev_rows), **quick_wer(model, ev_feats, ev_rows, vocab, frontend, dev)}
        logger.info("test_seen paraformer %s", quick)
    save_pipeline(out, model, frontend, vocab)
    metrics = {
        "recipe": "asr-en" if dataset == "speech-en" else f"asr-{dataset.rsplit('-', 1)[-1]}", "dataset": dataset, "seed": seed, "corpus": str(root), "train_utterances": len(rows),
        "corpus_built_with": {k: v for k, v in _corpus_meta(root).items() if k in ("hours", "vocab_words", "augment", "gapped")},
        "train_hours": round(sum(r["duration"] for r in rows) / 3600, 2), "vocab_words": len(vocab) - 3,
        "settings": {"init_from": init_from, "minutes": minutes, "max_steps": max_steps, "batch_size": batch_size, "lr": lr, "warmup": warmup,
                     "glm_ratio": glm_ratio, "ctc_weight": ctc_weight, "ar_token_dropout": ar_token_dropout,
                     "spec_augment_masks": spec_augment_masks, "bf16": bf16,
                     "threads": threads},
        "config": cfg.to_dict(), "parameters": model.num_parameters(), "steps": run.steps, "epochs": run.epochs,
        "train_minutes": round(run.minutes, 2), "total_minutes": round((time.perf_counter() - t_start) / 60, 2),
        "quick_eval": {"split": "test_seen", **quick},
        "history": run.history[-40:], "environment": environment(dev),
    }
    prev = Path(init_from) / "train_metrics.json" if init_from else None
    if prev is not None and prev.exists():  # the run this one continued
        old = json.loads(prev.read_text())
        metrics["previous"] = {k: old.get(k) for k in ("steps", "epochs", "train_minutes", "settings", "quick_eval", "previous")}
    write_metrics(out, metrics, max_size_mb=30)
    if (root / "timing.jsonl").exists() and (root / "test_seen.jsonl").exists():
        metrics["finalize"] = finalize(out, root)
        write_metrics(out, metrics, max_size_mb=30)
    return metrics


def refinalize(out_dir: str | Path, corpus: str | Path | None = None) -> dict[str, Any]:
    """:func:`finalize` on a trained pipeline folder; its ``train_metrics.json`` keeps the earlier
    result under ``finalize_history``."""
    out = Path(out_dir)
    path = out / "train_metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {}
    if "finalize" in metrics:
        metrics.setdefault("finalize_history", []).append(metrics["finalize"])
    metrics["finalize"] = finalize(out, corpus)
    write_metrics(out, metrics, max_size_mb=30)
    return metrics


def _corpus_meta(root: Path) -> dict[str, Any]:
    path = root / "meta.json"
    return json.loads(path.read_text()) if path.exists() else {}


def calibrate_tail(pipe: Any, rows: list[dict[str, Any]], tails: tuple[float, ...] = TAIL_GRID) -> dict[str, Any]:
    """Set the CIF inference tail (``ASRConfig.tail``, FunASR's ``tail_threshold``) to the value in
    ``tails`` with the lowest ``paraformer`` WER on ``rows`` (training utterances: no test data is
    read; a tie goes to the tail nearest 0.45), and return the chosen tail and the WER per tail.

    Paraformer fires ``floor(sum(alpha) + tail)`` tokens. FunASR's 0.45 assumes ``sum(alpha)``
    centred on the word count; a small model trained on a CPU budget can be biased (run 4 of the
    shipped asset fell short: 138 deletions against 29 insertions on ``test_seen``), and the tail
    absorbs that bias."""
    import jiwer
    import soundfile as sf

    waves = [sf.read(r["audio"], dtype="float32")[0] for r in rows]
    refs = [r["text"] for r in rows]
    config = pipe.model.config
    scores: dict[str, float] = {}
    for tail in tails:
        config.tail = tail
        hyps = pipe(waves, sampling_rate=corpus_mod.SAMPLE_RATE, sampler="paraformer").texts
        scores[f"{tail:g}"] = jiwer.wer(refs, [h or "<empty>" for h in hyps])
    config.tail = min(tails, key=lambda t: (scores[f"{t:g}"], abs(t - 0.45)))
    return {"tail": config.tail, "wer_by_tail": scores, "utterances": len(rows)}


def finalize(out_dir: str | Path, corpus: str | Path | None = None, calibration_utts: int = 50,
             tail_utts: int = 150) -> dict[str, Any]:
    """Calibrate the CIF tail on ``tail_utts`` training utterances spread over the training split
    (:func:`calibrate_tail`; written to ``model/config.json``), then the pipeline's word-timestamp
    settings on the first ``calibration_utts`` of the timing split (the bench reports the second
    half), and ship one correctly recognised test clip (``examples/clip.wav`` + ``clip.txt``, 3-6 s,
    from ``test_seen``)."""
    from ..pipelines import Pipeline
    from ..pipelines.asr_timing import calibrate_timestamps
    from ..pipelines.base import model_index, write_model_index

    out = Path(out_dir)
    root = Path(corpus) if corpus else corpus_mod.default_dir()
    pipe = Pipeline.from_pretrained(out)
    train = corpus_mod.read_manifest(root, "train")
    tail = calibrate_tail(pipe, train[:: max(1, len(train) // tail_utts)][:tail_utts]) if tail_utts else None
    pipe.model.save_config(out / "model")
    logger.info("CIF tail calibration: %s", tail)
    timing = corpus_mod.read_manifest(root, "timing")
    chosen = calibrate_timestamps(pipe, timing[:calibration_utts])
    if tail is not None:
        chosen["cif_tail"] = tail
    comps = {"model": pipe.model, "frontend": pipe.frontend, "vocab": pipe.vocab}
    write_model_index(out, model_index("ASRPipeline", comps, **pipe.pipeline_config()))
    logger.info("timestamp calibration: %s", chosen)
    import jiwer

    rows = [r for r in corpus_mod.read_manifest(root, "test_seen") if 3.0 <= r["duration"] <= 6.0 and not r["fx"]]
    best: tuple[float, dict[str, Any]] | None = None
    for r in rows[:60]:  # the first clip paraformer gets right, else the one with the lowest WER
        wer = jiwer.wer(r["text"], pipe(r["audio"], sampler="paraformer").texts[0] or "<empty>")
        if best is None or wer < best[0]:
            best = (wer, r)
        if wer == 0:
            break
    if best is not None:
        wer, r = best
        (out / "examples").mkdir(exist_ok=True)
        shutil.copy(r["audio"], out / "examples" / "clip.wav")
        (out / "examples" / "clip.txt").write_text(r["text"] + "\n")
        chosen["example"] = {"text": r["text"], "voice": r["voice"], "duration": r["duration"], "paraformer_wer": wer}
    return chosen
