"""Offline spoken English corpus: stdlib docstring prose voiced by espeak-ng, augmented with sox.

``leapgen data speech-en`` builds it (needs the Debian packages ``espeak-ng`` and ``sox``):

* **Sentences**: the prose of the Python standard library's docstrings, split into sentences,
  lower-cased, punctuation removed, keeping sentences of 3-14 purely alphabetic words whose words
  all lie in the ``vocab_words`` most frequent words (default 1000: about 2,400 distinct sentences,
  7.6 words on average; 2000 gives about 4,300). Available on every machine with Python, no network.
  With more than 1,000 words the held-out sentences are still those of the 1,000-word corpus, so
  test splits stay comparable across vocabularies and never overlap the ``tts-en`` training text.
  The default matches the ``tts-en`` corpus, whose test sentences are this corpus's held-out ones.
* **Voices**: espeak-ng English accents x variants (``+m1 .. +f4``, klatt ...) x rate (130-210
  wpm) x pitch (25-75). Two accents and two variants are held out for the unseen-voice split.
* **Augmentation** (sox, a share ``augment`` of the training utterances): pink noise at -26 to
  -36 dB, reverb, tempo 0.9-1.1, telephone band (300-3400 Hz). Everything is 16 kHz mono 16-bit.
  A share ``gapped`` (default 0) of the training utterances is synthesised word by word and
  joined with 50-300 ms silences, the timing split's condition (their ids start with ``tg``).
* **Splits**: ``train`` (seen sentences, seen voices), ``test_seen`` (unseen sentences, seen
  voices), ``test_unseen_voice`` (unseen sentences, unseen voices), ``timing`` (unseen sentences
  whose words are synthesised one by one, trimmed and joined with known gaps, so every word's start
  and end are exact).
* **Size**: utterances are planned until the estimated duration reaches ``hours`` (default 20 h:
  23,424 training utterances, 18.1 h of audio, 2.0 GB of wav; the recipe caches 1.2 GB of
  features); synthesis runs ``workers`` nice'd subprocesses at a time and is resumable (existing
  files are kept), so interrupted builds continue where they stopped.

Output folder (default ``~/.cache/leapgen/speech-en``): ``<split>/<id>.wav``, ``<split>.jsonl``
(one line per utterance: ``audio`` (relative path), ``text``, ``voice``, ``duration``; ``words``
``[[word, start_s, end_s], ...]`` on the timing split), ``vocab.txt``, ``meta.json``.
"""

from __future__ import annotations

import ast
import collections
import functools
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
SEEN_ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-gbclan")
UNSEEN_ACCENTS = ("en-gb-x-rp", "en-gb-x-gbcwmd")
SEEN_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "f1", "f2", "f3", "f4", "klatt")
UNSEEN_VARIANTS = ("m6", "f5")
SPLITS = ("train", "test_seen", "test_unseen_voice", "timing")
#: test sentences are held out of the corpus over this many words, whatever ``vocab_words`` is above it
TEST_VOCAB_WORDS = 1000
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "speech-en"


@functools.lru_cache(maxsize=1)
def docstring_sentences() -> tuple[str, ...]:
    """Distinct cleaned sentences of the stdlib's docstrings (sorted, deterministic per Python)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        if {"test", "tests", "site-packages", "idlelib", "lib2to3"} & set(path.relative_to(root).parts[:-1]):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            for para in re.split(r"\n\s*\n", doc or ""):
                for sent in re.split(r"(?<=[.!?])\s+", " ".join(para.split())):
                    words = re.sub(r"[,;:]", "", sent.strip().rstrip(".!?").lower()).split()
                    if 3 <= len(words) <= 14 and all(_WORD.fullmatch(w) for w in words):
                        out.add(" ".join(words))
    return tuple(sorted(out))


def select_sentences(vocab_words: int = 2000) -> tuple[list[str], list[str]]:
    """Sentences whose words are all among the ``vocab_words`` most frequent, and that vocabulary."""
    sents = docstring_sentences()
    counts = collections.Counter(w for s in sents for w in s.split())
    vocab = sorted(w for w, _ in counts.most_common(vocab_words))
    keep = set(vocab)
    return [s for s in sents if all(w in keep for w in s.split())], vocab


def _voice(rng: random.Random, unseen: bool) -> dict[str, Any]:
    accents, variants = (UNSEEN_ACCENTS, UNSEEN_VARIANTS) if unseen else (SEEN_ACCENTS, SEEN_VARIANTS)
    return {
        "voice": f"{rng.choice(accents)}+{rng.choice(variants)}",
        "rate": rng.randint(130, 210),
        "pitch": rng.randint(25, 75),
    }


def _effects(rng: random.Random) -> dict[str, Any]:
    fx: dict[str, Any] = {}
    if rng.random() < 0.5:
        fx["noise"] = round(10 ** (-rng.uniform(26, 36) / 20), 4)
    if rng.random() < 0.35:
        fx["reverb"] = rng.randint(20, 60)
    if rng.random() < 0.35:
        fx["tempo"] = round(rng.uniform(0.9, 1.1), 3)
    if rng.random() < 0.25:
        fx["telephone"] = True
    return fx


def _gaps(rng: random.Random, text: str) -> list[float]:
    """Silences before each word and after the last one (50-300 ms), as in the timing split."""
    return [round(rng.uniform(0.05, 0.3), 3) for _ in range(len(text.split()) + 1)]


def plan(seed: int, hours: float, vocab_words: int, test_sentences: int, unseen_voice_utts: int,
         timing_utts: int, augment: float,
         gapped: float = 0.0) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """The deterministic list of utterances to synthesise per split, and the vocabulary.

    ``gapped`` is the share of training utterances synthesised word by word with silences between
    the words (the timing split's condition); their choice and gaps come from a second generator,
    so ``gapped=0`` plans exactly the corpus of earlier releases.
    """
    sents, vocab = select_sentences(vocab_words)
    if len(sents) < 2 * test_sentences + 10:
        raise ConfigError(f"only {len(sents)} sentences with vocab_words={vocab_words}; raise vocab_words or lower test_sentences")
    rng = random.Random(seed)
    # the held-out sentences are those of the TEST_VOCAB_WORDS corpus whenever the vocabulary is at
    # least that large, so every corpus (and the tts-en corpus) holds out the same test sentences
    base = select_sentences(TEST_VOCAB_WORDS)[0] if vocab_words > TEST_VOCAB_WORDS else sents
    order = base[:]
    rng.shuffle(order)
    test, train = order[:test_sentences], order[test_sentences:]
    if base is not sents:
        held = set(test)
        train = [s for s in sents if s not in held]
        rng.shuffle(train)
    gap_rng = random.Random(seed + 1)
    jobs: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    total = 0.0
    i = 0
    while total < hours * 3600:
        text = train[i % len(train)]
        v = _voice(rng, unseen=False)
        fx = _effects(rng) if rng.random() < augment else {}
        job = {"id": f"tr{i:06d}", "text": text, **v, "fx": fx}
        if gapped > 0 and gap_rng.random() < gapped:
            job.update(id=f"tg{i:06d}", fx={}, gaps=_gaps(gap_rng, text))
        jobs["train"].append(job)
        total += len(text.split()) * 60.0 / v["rate"] / fx.get("tempo", 1.0) + 0.35
        i += 1
    for k, text in enumerate(test):
        jobs["test_seen"].append({"id": f"ts{k:05d}", "text": text, **_voice(rng, False), "fx": {}})
    for k in range(unseen_voice_utts):
        jobs["test_unseen_voice"].append({"id": f"tu{k:05d}", "text": test[k % len(test)], **_voice(rng, True), "fx": {}})
    for k in range(timing_utts):
        v = _voice(rng, False)
        text = test[k % len(test)]
        jobs["timing"].append({"id": f"tw{k:05d}", "text": text, **v, "fx": {}, "gaps": _gaps(rng, text)})
    return jobs, vocab


def _espeak(job: dict[str, Any], text: str, out: Path) -> None:
    cmd = ["nice", "-n", "10", "espeak-ng", "-v", job["voice"], "-s", str(job["rate"]), "-p", str(job["pitch"]),
           "-w", str(out), text]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def _sox(src: Path, dst: Path, fx: dict[str, Any]) -> None:
    cmd = ["nice", "-n", "10", "sox", "-q"]
    if "noise" in fx:
        cmd += ["-m", "-v", "1", str(src), "-v", str(fx["noise"]), f"|sox -q {src} -p synth pinknoise"]
    else:
        cmd += [str(src)]
    cmd += ["-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(dst)]
    if fx.get("telephone"):
        cmd += ["highpass", "300", "lowpass", "3400"]
    if "reverb" in fx:
        cmd += ["reverb", str(fx["reverb"])]
    if "tempo" in fx:
        cmd += ["tempo", str(fx["tempo"])]
    cmd += ["vol", "0.9"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def _trim(x: np.ndarray, thresh: float = 0.01) -> np.ndarray:
    idx = np.flatnonzero(np.abs(x) > thresh * max(1e-6, float(np.abs(x).max())))
    return x[idx[0] : idx[-1] + 1] if idx.size else x[:0]


def _synth(job: dict[str, Any], split_dir: Path) -> dict[str, Any]:
    import soundfile as sf

    dst = split_dir / f"{job['id']}.wav"
    row: dict[str, Any] = {"audio": f"{split_dir.name}/{dst.name}", "text": job["text"], "voice": job["voice"],
                           "rate": job["rate"], "pitch": job["pitch"], "fx": job["fx"]}
    with tempfile.TemporaryDirectory(prefix="leapgen-speech-") as tmp:
        if "gaps" not in job:
            if not dst.exists():
                raw = Path(tmp) / "raw.wav"
                _espeak(job, job["text"], raw)
                _sox(raw, Path(tmp) / "out.wav", job["fx"])
                shutil.move(str(Path(tmp) / "out.wav"), dst)
            row["duration"] = round(sf.info(str(dst)).duration, 3)
            return row
        pieces, words, t = [], [], 0.0
        for k, word in enumerate(job["text"].split()):
            raw, res = Path(tmp) / f"w{k}.wav", Path(tmp) / f"r{k}.wav"
            _espeak(job, word, raw)
            _sox(raw, res, {})
            w = _trim(sf.read(str(res), dtype="float32")[0])
            gap = np.zeros(int(job["gaps"][k] * SAMPLE_RATE), np.float32)
            pieces += [gap, w]
            start = t + len(gap) / SAMPLE_RATE
            t = start + len(w) / SAMPLE_RATE
            words.append([word, round(start, 4), round(t, 4)])
        pieces.append(np.zeros(int(job["gaps"][-1] * SAMPLE_RATE), np.float32))
        audio = np.concatenate(pieces)
        if not dst.exists():
            sf.write(str(dst), audio, SAMPLE_RATE, subtype="PCM_16")
        row.update(duration=round(len(audio) / SAMPLE_RATE, 3), words=words)
        return row


def build(out_dir: str | os.PathLike | None = None, seed: int = 0, hours: float = 20.0, vocab_words: int = 1000,
          test_sentences: int = 300, unseen_voice_utts: int = 300, timing_utts: int = 100, augment: float = 0.5,
          gapped: float = 0.0, workers: int = 2) -> dict[str, Any]:
    """Build the corpus (see the module docstring); returns a summary (utterances and hours per split)."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise ConfigError(f"`{tool}` is not installed; install it (Debian: apt-get install espeak-ng sox).")
    if hours <= 0 or not 0 <= augment <= 1 or not 0 <= gapped <= 1 or workers < 1:
        raise ConfigError("hours must be > 0, augment and gapped in [0, 1], workers >= 1")
    out = Path(out_dir) if out_dir is not None else default_dir()
    jobs, vocab = plan(seed, hours, vocab_words, test_sentences, unseen_voice_utts, timing_utts, augment, gapped)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    summary: dict[str, Any] = {"out_dir": str(out), "vocab_words": len(vocab)}
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    for split, items in jobs.items():
        split_dir = out / split
        split_dir.mkdir(exist_ok=True)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            it = pool.map(functools.partial(_synth, split_dir=split_dir), items)
            if tqdm is not None:
                it = tqdm(it, total=len(items), desc=f"speech-en {split}", mininterval=5)
            rows = list(it)
        with open(out / f"{split}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        summary[split] = {"utterances": len(rows), "hours": round(sum(r["duration"] for r in rows) / 3600, 3)}
        logger.info("speech-en %s: %s", split, summary[split])
    meta = {"seed": seed, "hours": hours, "vocab_words": vocab_words, "augment": augment, "gapped": gapped,
            "sample_rate": SAMPLE_RATE,
            "seen_accents": SEEN_ACCENTS, "unseen_accents": UNSEEN_ACCENTS, "seen_variants": SEEN_VARIANTS,
            "unseen_variants": UNSEEN_VARIANTS, "summary": summary}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return summary


def read_manifest(root: str | os.PathLike, split: str) -> list[dict[str, Any]]:
    """Rows of ``<root>/<split>.jsonl`` with ``audio`` made an absolute path."""
    path = Path(root) / f"{split}.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; build the corpus first: leapgen data speech-en --out {root}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["audio"] = str(Path(root) / r["audio"])
    return rows
