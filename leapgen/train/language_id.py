"""``leapgen train language-id``: the spoken language identifier (English vs German) of the S2ST pipeline.

Model: :class:`~leapgen.models.language_id.LanguageID`, an x-vector (Snyder et al. 2018, "Spoken
Language Recognition using X-vectors") trained with the speaker verifier's loop
(:func:`~leapgen.train.tts_stages.train_speaker`): random crops of 1-3 s (``crop_seconds``) of
per-clip mean-normalised fbank, cross-entropy over the languages, AdamW, a time budget
(``minutes``, default 5 on one thread).

Data (offline, espeak-ng speech; missing corpora are skipped, logged):

* English: ``speech-en-2k`` (falls back to ``speech-en``) ``train`` (50 voices: 5 accents x 10
  variants, augmented) and the English source side (``src_audio``) of ``s2st-en-de`` ``train``.
* German: ``speech-de`` ``train`` (11 voices) without the voices of ``heldout_de_voices`` and the
  German target side (``tgt_audio``) of ``s2st-en-de`` ``train``.

``clips_per_source`` clips (default 1200) are drawn from each of the four sources, so the
languages are balanced. Held out for evaluation (whole clips, the first ``max_seconds``): the
``s2st-en-de`` ``test_seen`` and ``test_unseen`` splits (200 English source + 200 German target
clips each; ``test_unseen``'s English clips are in unseen accents), ``speech-en-2k``
``test_unseen_voice`` (unseen accents and variants) and ``speech-de`` ``test_seen`` clips of the
held-out German voices. The English/German contrast in this offline world is also one of espeak
voices, which is why the evaluation leans on voices never seen in training.

Output (``out_dir``, default ``assets/s2st-en-de/language_id``): the component (``config.json``,
``model.safetensors``, about 1 MB) and ``train_metrics.json`` (accuracy per split and language,
training clips, steps, minutes).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..models.language_id import LanguageID, LanguageIDConfig
from .tts_stages import train_speaker

logger = logging.getLogger(__name__)

#: fbank frames per second (10 ms shift)
FRAMES_PER_SECOND = 100


def _cache_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen"))


def _rows(root: Path | None, split: str, key: str) -> list[dict[str, Any]]:
    """Rows of ``<root>/<split>.jsonl`` with ``path`` (absolute ``key`` audio) and ``voice``; [] (logged) if missing."""
    if root is None or not (root / f"{split}.jsonl").is_file():
        logger.warning("language-id: %s/%s.jsonl not found; skipped", root, split)
        return []
    rows = [json.loads(line) for line in (root / f"{split}.jsonl").read_text().splitlines() if line.strip()]
    return [{"path": str(root / r[key]), "voice": r.get("voice")} for r in rows if r.get(key)]


def _sample(rows: list[dict[str, Any]], n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    if len(rows) <= n:
        return rows
    return [rows[i] for i in sorted(rng.choice(len(rows), n, replace=False))]


def _features(lid: LanguageID, rows: list[dict[str, Any]]) -> list[torch.Tensor]:
    import soundfile as sf

    out = []
    for r in rows:
        wave, rate = sf.read(r["path"], dtype="float32", always_2d=True)
        if rate != 16000:
            raise ConfigError(f"{r['path']} is {rate} Hz; the language-id corpora are 16 kHz.")
        out.append(lid.features(wave.mean(1)))
    return out


def _resolve(path: str | None, *names: str) -> Path | None:
    if path is not None:
        return Path(path).expanduser()
    for name in names:
        if (_cache_dir() / name).is_dir():
            return _cache_dir() / name
    return None


@torch.no_grad()
def evaluate(lid: LanguageID, feats: list[torch.Tensor], labels: list[int]) -> dict[str, Any]:
    """Accuracy (argmax) and mean probability of the true language of whole-clip features."""
    lid.eval()
    probs = torch.cat([lid(f[None], torch.tensor([f.shape[0]])).softmax(-1) for f in feats])
    y = torch.tensor(labels)
    return {"clips": len(labels), "accuracy": round(float((probs.argmax(-1) == y).float().mean()), 4),
            "mean_p_true": round(float(probs[torch.arange(len(y)), y].mean()), 4)}


def main(out_dir: str = "assets/s2st-en-de/language_id", seed: int = 0, en_corpus: str | None = None,
         de_corpus: str | None = None, s2st_corpus: str | None = None, minutes: float = 5.0,
         clips_per_source: int = 1200, eval_clips: int = 200, heldout_de_voices: tuple[str, ...] | str = ("de+m5", "de+f3"),
         crop_seconds: tuple[float, float] = (1.0, 3.0), batch_size: int = 32, lr: float = 2e-3, threads: int = 1,
         max_steps: int = 100_000) -> dict[str, Any]:
    """Train and save the language identifier (see the module docstring); returns the metrics."""
    t_start = time.perf_counter()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if isinstance(heldout_de_voices, str):
        heldout_de_voices = tuple(v.strip() for v in heldout_de_voices.split(",") if v.strip())
    held = set(heldout_de_voices)
    en_root = _resolve(en_corpus, "speech-en-2k", "speech-en")
    de_root = _resolve(de_corpus, "speech-de")
    s2_root = _resolve(s2st_corpus, "s2st-en-de")
    languages = ("en", "de")
    train_sources = {
        "speech-en train": (0, _rows(en_root, "train", "audio")),
        "s2st train src_audio": (0, _rows(s2_root, "train", "src_audio")),
        "speech-de train": (1, [r for r in _rows(de_root, "train", "audio") if r["voice"] not in held]),
        "s2st train tgt_audio": (1, _rows(s2_root, "train", "tgt_audio")),
    }
    eval_sources = {
        ("s2st test_seen", "en"): (0, _rows(s2_root, "test_seen", "src_audio")),
        ("s2st test_seen", "de"): (1, _rows(s2_root, "test_seen", "tgt_audio")),
        ("s2st test_unseen", "en"): (0, _rows(s2_root, "test_unseen", "src_audio")),
        ("s2st test_unseen", "de"): (1, _rows(s2_root, "test_unseen", "tgt_audio")),
        ("speech-en test_unseen_voice", "en"): (0, _rows(en_root, "test_unseen_voice", "audio")),
        ("speech-de test_seen held-out voices", "de"): (1, [r for r in _rows(de_root, "test_seen", "audio")
                                                             if r["voice"] in held]),
    }
    lid = LanguageID(LanguageIDConfig(languages=languages))
    feats: list[torch.Tensor] = []
    labels: list[int] = []
    counts: dict[str, int] = {}
    for name, (lang, rows) in train_sources.items():
        rows = _sample(rows, clips_per_source, rng)
        counts[name] = len(rows)
        feats += _features(lid, rows)
        labels += [lang] * len(rows)
    for k, lang in enumerate(languages):
        if labels.count(k) == 0:
            raise ConfigError(f"no {lang} training clips found; build the corpora first: leapgen data speech-en-2k, "
                              "leapgen data speech-de, leapgen data s2st-en-de (or pass en_corpus / de_corpus / s2st_corpus).")
    t_feats = time.perf_counter() - t_start
    logger.info("language-id: %d training clips (%s), features in %.1f s", len(feats), counts, t_feats)
    lo, hi = (int(s * FRAMES_PER_SECOND) for s in crop_seconds)
    train_stats = train_speaker(lid.xvector, feats, labels, minutes, batch_size=batch_size, crop=(lo, hi), lr=lr,
                                max_steps=max_steps, seed=seed)
    t_train = time.perf_counter() - t_start - t_feats
    results: dict[str, dict[str, Any]] = {}
    for (split, lang_name), (lang, rows) in eval_sources.items():
        rows = _sample(rows, eval_clips, rng)
        if rows:
            res = evaluate(lid, _features(lid, rows), [lang] * len(rows))
            results.setdefault(split, {})[lang_name] = res | {"voices": sorted({str(r["voice"]) for r in rows})[:8]}
            logger.info("language-id: %s %s accuracy %.4f (%d clips)", split, lang_name, res["accuracy"], len(rows))
    metrics = {
        "recipe": "language-id", "languages": list(languages), "seed": seed, "train_clips": counts,
        "heldout_de_voices": sorted(held), "crop_seconds": list(crop_seconds), "batch_size": batch_size, "lr": lr,
        "threads": threads, "steps": train_stats["steps"], "train_acc_ema": train_stats["train_acc_ema"],
        "feature_seconds": round(t_feats, 1), "train_minutes": round(t_train / 60, 2), "heldout": results,
        "corpora": {"en": str(en_root), "de": str(de_root), "s2st": str(s2_root)},
    }
    out = Path(out_dir)
    lid.save_pretrained(out)
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    logger.info("language-id: saved %s (%.1f min in all)", out, (time.perf_counter() - t_start) / 60)
    return metrics


__all__ = ["evaluate", "main"]
