"""Small multi-speaker English corpus for zero-shot TTS: fixed espeak-ng voices saying stdlib prose.

``leapgen data tts-en`` builds it (needs ``espeak-ng``; resampling to 16 kHz with soxr). It reuses
the sentence pool of :mod:`leapgen.data.speech` (docstring prose restricted to the shipped ASR's
1000-word vocabulary, so the ASR can score intelligibility) and the same 300 held-out test
sentences (seed 0 shuffle, as ``speech-en`` and the ``asr-en`` model).

* **Speakers**: a *speaker* is a fixed espeak-ng voice ``accent+variant`` with a fixed pitch and
  rate. ``seen_speakers`` (default 40) come from the seen accents / variants of ``speech-en``;
  ``unseen_speakers`` (default 8) from its held-out accents (``en-gb-x-rp``, ``en-gb-x-gbcwmd``)
  and variants (``m6``, ``f5``), never in training: the zero-shot test voices.
* **Splits**: ``train`` (``per_speaker`` training sentences per seen speaker), ``prompts``
  (``prompts_per_speaker`` other training sentences per unseen and per seen speaker: prompt clips
  and speaker-verification material), ``test`` (``test_per_speaker`` held-out sentences per unseen
  speaker and per a few seen speakers: the real speech of the sentences the bench synthesises).
* Sentences have at most ``max_words`` words (short clips keep CPU training cheap). One
  synthesis process (the machine is shared); resumable (existing wavs are kept).

Output (default ``~/.cache/leapgen/tts-en``): ``<split>/<id>.wav`` (16 kHz mono int16),
``<split>.jsonl`` (``audio``, ``text``, ``speaker``, ``voice``, ``pitch``, ``rate``, ``seen``,
``duration``), ``speakers.json``, ``meta.json``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .speech import SEEN_ACCENTS, SEEN_VARIANTS, UNSEEN_ACCENTS, UNSEEN_VARIANTS, select_sentences

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
SPLITS = ("train", "prompts", "test")


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "tts-en"


def speakers(seed: int, seen: int, unseen: int) -> list[dict[str, Any]]:
    """Fixed voices: ``{"speaker", "voice", "pitch", "rate", "seen"}`` (seen ones first)."""
    rng = random.Random(seed + 17)
    combos = [f"{a}+{v}" for a in SEEN_ACCENTS for v in SEEN_VARIANTS]
    rng.shuffle(combos)
    held = [f"{a}+{v}" for a in UNSEEN_ACCENTS for v in UNSEEN_VARIANTS]
    out = []
    for i in range(seen):
        out.append({"speaker": f"s{i:02d}", "voice": combos[i % len(combos)], "pitch": rng.randint(25, 75),
                    "rate": rng.randint(140, 190), "seen": True})
    for i in range(unseen):
        out.append({"speaker": f"u{i:02d}", "voice": held[i % len(held)], "pitch": rng.randint(25, 75),
                    "rate": rng.randint(140, 190), "seen": False})
    return out


def plan(seed: int = 0, seen_speakers: int = 40, unseen_speakers: int = 8, per_speaker: int = 30,
         prompts_per_speaker: int = 2, test_per_speaker: int = 5, seen_test_speakers: int = 4,
         max_words: int = 9) -> dict[str, list[dict[str, Any]]]:
    """The deterministic utterance list per split."""
    sents, _ = select_sentences(1000)
    order = sents[:]
    random.Random(seed).shuffle(order)  # the same shuffle as speech-en / asr-en: the first 300 are test
    test = [s for s in order[:300] if len(s.split()) <= max_words]
    train = [s for s in order[300:] if len(s.split()) <= max_words]
    if len(train) < 100 or len(test) < test_per_speaker:
        raise ConfigError(f"too few sentences of <= {max_words} words; raise max_words")
    rng = random.Random(seed + 1)
    spk = speakers(seed, seen_speakers, unseen_speakers)
    jobs: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for s in spk:
        if s["seen"]:
            for k in range(per_speaker):
                jobs["train"].append({**s, "id": f"{s['speaker']}_tr{k:03d}", "text": rng.choice(train)})
        for k in range(prompts_per_speaker):
            jobs["prompts"].append({**s, "id": f"{s['speaker']}_p{k}", "text": rng.choice(train)})
        if not s["seen"] or int(s["speaker"][1:]) < seen_test_speakers:
            for k, text in enumerate(rng.sample(test, test_per_speaker)):
                jobs["test"].append({**s, "id": f"{s['speaker']}_t{k}", "text": text})
    return jobs


def synthesize(job: dict[str, Any], dst: Path) -> np.ndarray:
    """espeak-ng -> 16 kHz float32 (written to ``dst`` as int16 unless it exists)."""
    import soundfile as sf
    import soxr

    if dst.exists():
        return sf.read(str(dst), dtype="float32")[0]
    with tempfile.TemporaryDirectory(prefix="leapgen-tts-") as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["nice", "-n", "10", "espeak-ng", "-v", job["voice"], "-s", str(job["rate"]), "-p",
                        str(job["pitch"]), "-w", str(raw), job["text"]], check=True, capture_output=True, timeout=60)
        x, sr = sf.read(str(raw), dtype="float32")
    if x.ndim > 1:
        x = x.mean(1)
    y = soxr.resample(x, sr, SAMPLE_RATE).astype(np.float32) * 0.9
    sf.write(str(dst), y, SAMPLE_RATE, subtype="PCM_16")
    return y


def build(out_dir: str | os.PathLike | None = None, seed: int = 0, seen_speakers: int = 40, unseen_speakers: int = 8,
          per_speaker: int = 30, prompts_per_speaker: int = 2, test_per_speaker: int = 5, seen_test_speakers: int = 4,
          max_words: int = 9) -> dict[str, Any]:
    """Build the corpus (see the module docstring); returns utterances and hours per split."""
    plan_kw = dict(seen_speakers=seen_speakers, unseen_speakers=unseen_speakers, per_speaker=per_speaker,
                   prompts_per_speaker=prompts_per_speaker, test_per_speaker=test_per_speaker,
                   seen_test_speakers=seen_test_speakers, max_words=max_words)
    if shutil.which("espeak-ng") is None:
        raise ConfigError("`espeak-ng` is not installed; install it (Debian: apt-get install espeak-ng).")
    out = Path(out_dir) if out_dir is not None else default_dir()
    jobs = plan(seed, **plan_kw)
    summary: dict[str, Any] = {"out_dir": str(out)}
    for split, items in jobs.items():
        (out / split).mkdir(parents=True, exist_ok=True)
        rows = []
        for job in items:
            dst = out / split / f"{job['id']}.wav"
            y = synthesize(job, dst)
            rows.append({"audio": f"{split}/{dst.name}", "text": job["text"], "speaker": job["speaker"], "voice": job["voice"],
                         "pitch": job["pitch"], "rate": job["rate"], "seen": job["seen"], "duration": round(len(y) / SAMPLE_RATE, 3)})
        with open(out / f"{split}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        summary[split] = {"utterances": len(rows), "hours": round(sum(r["duration"] for r in rows) / 3600, 3)}
        logger.info("tts-en %s: %s", split, summary[split])
    (out / "speakers.json").write_text(json.dumps(speakers(seed, seen_speakers, unseen_speakers), indent=1))
    (out / "meta.json").write_text(json.dumps({"seed": seed, **plan_kw, "summary": summary}, indent=2))
    return summary


def read_manifest(root: str | os.PathLike, split: str) -> list[dict[str, Any]]:
    """Rows of ``<root>/<split>.jsonl`` with ``audio`` made an absolute path."""
    path = Path(root) / f"{split}.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; build the corpus first: leapgen data tts-en --out {root}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["audio"] = str(Path(root) / r["audio"])
    return rows


__all__ = ["SPLITS", "build", "default_dir", "plan", "read_manifest", "speakers", "synthesize"]
