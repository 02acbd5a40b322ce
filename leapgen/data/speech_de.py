"""Offline spoken German corpus for the S2ST judge: the s2st-en-de grammar's German side, voiced by espeak-ng.

``leapgen data speech-de`` builds it (needs the Debian packages ``espeak-ng`` and ``sox``); the
``asr-de`` recipe trains the German ASR that scores ``leapgen bench s2st`` (ASR-BLEU) on it.

* **Sentences**: the German side of the templated grammar of :mod:`leapgen.data.s2st` (its
  :func:`~leapgen.data.s2st._fill` over ALL its templates, the training and the held-out ones, so
  the judge knows every word a test reference can contain), minus every German sentence of the
  S2ST test splits (``test_seen``, ``test_unseen``). Those are recomputed from the s2st builder's
  own plan (:func:`leapgen.data.s2st.plan` with its default seed 0, 12,000 pairs, 200 test pairs)
  AND read from the s2st corpus's ``test_seen.jsonl`` / ``test_unseen.jsonl`` when that corpus is
  present (``s2st_dir``, default ``~/.cache/leapgen/s2st-en-de``): the union is excluded.
  ``meta.json`` records how many came from where. ``test_sentences`` (default 300) further distinct
  sentences, spread over the templates, are held out as this corpus's own ``test_seen``.
* **Voices**: the S2ST target voice (:data:`leapgen.data.s2st.TARGET_VOICE`: ``de``, rate 150,
  pitch 50) for a share ``target_share`` (default 0.4) of the utterances, else ``de+<variant>``
  (``m1``-``m5``, ``f1``-``f4``, ``klatt``) at rate 130-180 and pitch 35-65.
* **Augmentation**: a share ``augment`` (default 0.4) of the training utterances gets the mild sox
  effects of :mod:`leapgen.data.speech` (pink noise, reverb, tempo, telephone band).
* **Splits**: ``train`` (``utterances``, default 7,000: the templates in turn, each template's
  sentences cycled in a shuffled order, so small templates repeat in other voices), ``test_seen``
  (held-out sentences, seen voices) and ``timing`` (``timing_utts`` held-out sentences synthesised
  word by word with known gaps, for the recipe's timestamp calibration).
* **Synthesis** reuses :func:`leapgen.data.speech._synth` (resumable: existing wavs are kept),
  ``workers`` nice'd processes at a time (default 1).

Output folder (default ``~/.cache/leapgen/speech-de``) in exactly the speech-en format:
``<split>/<id>.wav``, ``<split>.jsonl`` (``audio``, ``text``, ``voice``, ``rate``, ``pitch``,
``fx``, ``duration``; ``words`` on ``timing``), ``vocab.txt``, ``meta.json``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import s2st
from . import speech as en_speech

logger = logging.getLogger(__name__)

SAMPLE_RATE = en_speech.SAMPLE_RATE
SPLITS = ("train", "test_seen", "timing")
TEMPLATES = s2st.TRAIN_TEMPLATES + s2st.HELDOUT_TEMPLATES
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "f1", "f2", "f3", "f4", "klatt")
#: the s2st builder's defaults, whose test splits are excluded
S2ST_PLAN = {"seed": 0, "pairs": 12000, "test_pairs": 200}
#: most draws of the grammar per template when enumerating its sentences (the largest template has 7,392)
DRAWS_PER_TEMPLATE = 30000


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "speech-de"


def s2st_test_sentences(s2st_dir: str | os.PathLike | None = None) -> tuple[set[str], dict[str, int]]:
    """German sentences of the S2ST test splits: the s2st plan's (:data:`S2ST_PLAN`) united with
    those of the built s2st corpus in ``s2st_dir`` (default: the s2st cache) when it exists.
    Returns the set and a count per source."""
    jobs = s2st.plan(**S2ST_PLAN)
    planned = {j["de"] for split in ("test_seen", "test_unseen") for j in jobs[split]}
    root = Path(s2st_dir) if s2st_dir is not None else s2st.default_dir()
    read: set[str] = set()
    for split in ("test_seen", "test_unseen"):
        path = root / f"{split}.jsonl"
        if path.exists():
            read |= {json.loads(line)["de"] for line in path.read_text().splitlines() if line.strip()}
    return planned | read, {"planned": len(planned), "read_from_corpus": len(read),
                            "corpus_only": len(read - planned)}


@functools.lru_cache(maxsize=4)
def grammar_sentences(seed: int = 0) -> dict[str, tuple[str, ...]]:
    """Distinct German sentences of every s2st template (sorted), drawn from the s2st grammar."""
    rng = random.Random(seed)
    out: dict[str, tuple[str, ...]] = {}
    for t in TEMPLATES:
        found: set[str] = set()
        stale = 0
        for _ in range(DRAWS_PER_TEMPLATE):  # until 3,000 draws in a row add nothing
            n = len(found)
            found.add(s2st._fill(t, rng)[1])
            stale = 0 if len(found) > n else stale + 1
            if stale >= 3000:
                break
        out[t] = tuple(sorted(found))
    return out


def _voice(rng: random.Random, target_share: float) -> dict[str, Any]:
    if rng.random() < target_share:
        return dict(s2st.TARGET_VOICE)
    return {"voice": f"de+{rng.choice(VARIANTS)}", "rate": rng.randint(130, 180), "pitch": rng.randint(35, 65)}


def plan(seed: int = 0, utterances: int = 7000, test_sentences: int = 300, timing_utts: int = 100,
         target_share: float = 0.4, augment: float = 0.4,
         s2st_dir: str | os.PathLike | None = None) -> tuple[dict[str, list[dict[str, Any]]], list[str], dict[str, Any]]:
    """The deterministic jobs per split, the vocabulary (every word of the grammar's sentences, the
    excluded S2ST test sentences included) and a summary of the exclusion."""
    excluded, sources = s2st_test_sentences(s2st_dir)
    by_template = grammar_sentences(seed)
    rng = random.Random(seed)
    pools: dict[str, list[str]] = {}
    for t in TEMPLATES:
        pool = [s for s in by_template[t] if s not in excluded]
        rng.shuffle(pool)
        pools[t] = pool
    own_test: list[str] = []
    for k in range(test_sentences):  # held out in turn over the templates, keeping >= 20 per template to train on
        t = TEMPLATES[k % len(TEMPLATES)]
        if len(pools[t]) > 20:
            own_test.append(pools[t].pop())
    jobs: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for i in range(utterances):
        t = TEMPLATES[i % len(TEMPLATES)]
        pool = pools[t]
        text = pool[(i // len(TEMPLATES)) % len(pool)]
        fx = en_speech._effects(rng) if rng.random() < augment else {}
        jobs["train"].append({"id": f"tr{i:06d}", "text": text, **_voice(rng, target_share), "fx": fx})
    for k, text in enumerate(own_test):
        jobs["test_seen"].append({"id": f"ts{k:05d}", "text": text, **_voice(rng, target_share), "fx": {}})
    for k in range(min(timing_utts, len(own_test))):
        text = own_test[k]
        jobs["timing"].append({"id": f"tw{k:05d}", "text": text, **_voice(rng, target_share), "fx": {},
                               "gaps": en_speech._gaps(rng, text)})
    vocab = sorted({w for sents in by_template.values() for s in sents for w in s.split()} |
                   {w for s in excluded for w in s.split()})
    info = {"excluded_s2st_test_sentences": len(excluded), "excluded_sources": sources,
            "grammar_sentences": sum(len(v) for v in by_template.values())}
    return jobs, vocab, info


def build(out_dir: str | os.PathLike | None = None, seed: int = 0, utterances: int = 7000, test_sentences: int = 300,
          timing_utts: int = 100, target_share: float = 0.4, augment: float = 0.4, workers: int = 1,
          s2st_dir: str | None = None) -> dict[str, Any]:
    """Build the corpus (see the module docstring); returns a summary (utterances and hours per split)."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise ConfigError(f"`{tool}` is not installed; install it (Debian: apt-get install espeak-ng sox).")
    if utterances < 1 or test_sentences < 1 or timing_utts < 0 or workers < 1:
        raise ConfigError("utterances and test_sentences must be >= 1, timing_utts >= 0, workers >= 1")
    if not 0 <= target_share <= 1 or not 0 <= augment <= 1:
        raise ConfigError("target_share and augment must lie in [0, 1]")
    out = Path(out_dir) if out_dir is not None else default_dir()
    jobs, vocab, info = plan(seed, utterances, test_sentences, timing_utts, target_share, augment, s2st_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    summary: dict[str, Any] = {"out_dir": str(out), "vocab_words": len(vocab), **info}
    for split, items in jobs.items():
        split_dir = out / split
        split_dir.mkdir(exist_ok=True)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(functools.partial(en_speech._synth, split_dir=split_dir), items))
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        summary[split] = {"utterances": len(rows), "hours": round(sum(r["duration"] for r in rows) / 3600, 3)}
        logger.info("speech-de %s: %s", split, summary[split])
    meta = {"seed": seed, "utterances": utterances, "test_sentences": test_sentences, "timing_utts": timing_utts,
            "target_share": target_share, "augment": augment, "sample_rate": SAMPLE_RATE,
            "target_voice": s2st.TARGET_VOICE, "variants": VARIANTS, "templates": TEMPLATES,
            "s2st_plan": S2ST_PLAN, "summary": summary}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    return summary


def read_manifest(root: str | os.PathLike, split: str) -> list[dict[str, Any]]:
    """Rows of ``<root>/<split>.jsonl`` with ``audio`` made an absolute path."""
    path = Path(root) / f"{split}.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; build the corpus first: leapgen data speech-de --out {root}")
    return en_speech.read_manifest(root, split)
