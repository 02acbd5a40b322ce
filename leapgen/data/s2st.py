"""Offline English -> German speech-to-speech translation corpus from a templated bilingual grammar.

``leapgen data s2st-en-de`` builds it (needs the Debian packages ``espeak-ng`` and ``sox``):

* **Grammar**: English / German template pairs over an aligned vocabulary -- numbers (two ..
  twelve), colours, objects (with German gender and plural), places, actions (imperative, 1st
  person singular and plural) and time phrases. German agreement is explicit (``der rote ball`` /
  ``den roten ball`` / ``drei rote baelle``) and some templates reorder (``we buy three cups
  tomorrow`` -> ``wir kaufen morgen drei tassen``; ``yesterday the cup was ...`` -> ``gestern war
  die tasse ...``), so the translation is not monotonic word for word.
* **Speech**: the English source by espeak-ng English voices (accent x variant x rate x pitch, the
  held-out accents and variants of :mod:`leapgen.data.speech` only in ``test_unseen``); the German
  target by one fixed espeak-ng ``de`` voice (the acoustic decoder learns one speaker). 16 kHz mono.
* **Target phonemes**: ``espeak-ng -v de -x --ipa`` of the German sentence, split into symbols
  (a length mark joins its vowel, stress marks dropped, ``|`` between words): see :func:`ipa_symbols`.
* **Splits**: ``train`` (training templates, seen voices), ``test_seen`` (training templates,
  sentences not in train, seen voices) and ``test_unseen`` (held-out templates built from the same
  words, unseen voices).
* **Size**: ``pairs`` training pairs (default 12,000; the issue asks >= 10k). Synthesis is one
  nice'd process at a time and resumable (existing wavs are kept), so an interrupted build
  continues where it stopped; ``max_minutes`` stops a build early and writes what exists.

Output folder (default ``~/.cache/leapgen/s2st-en-de``): ``<split>/<id>_en.wav``, ``<id>_de.wav``,
``<split>.jsonl`` (``src_audio``, ``tgt_audio`` relative paths, ``en``, ``de``, ``phonemes`` (space
separated symbols), ``template``, ``voice``, ``rate``, ``pitch``, ``src_duration``,
``tgt_duration``), ``meta.json``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .speech import SEEN_ACCENTS, SEEN_VARIANTS, UNSEEN_ACCENTS, UNSEEN_VARIANTS

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
SPLITS = ("train", "test_seen", "test_unseen")
TARGET_VOICE = {"voice": "de", "rate": 150, "pitch": 50}

NUMBERS = [("two", "zwei"), ("three", "drei"), ("four", "vier"), ("five", "fünf"), ("six", "sechs"),
           ("seven", "sieben"), ("eight", "acht"), ("nine", "neun"), ("ten", "zehn"), ("eleven", "elf"),
           ("twelve", "zwölf")]
COLOURS = [("red", "rot"), ("blue", "blau"), ("green", "grün"), ("yellow", "gelb"), ("black", "schwarz"),
           ("white", "weiß"), ("brown", "braun"), ("grey", "grau")]
# english singular, english plural, german singular, german plural, gender
OBJECTS = [("ball", "balls", "ball", "bälle", "m"), ("cup", "cups", "tasse", "tassen", "f"),
           ("book", "books", "buch", "bücher", "n"), ("chair", "chairs", "stuhl", "stühle", "m"),
           ("table", "tables", "tisch", "tische", "m"), ("lamp", "lamps", "lampe", "lampen", "f"),
           ("car", "cars", "auto", "autos", "n"), ("bag", "bags", "tasche", "taschen", "f"),
           ("hat", "hats", "hut", "hüte", "m"), ("bottle", "bottles", "flasche", "flaschen", "f"),
           ("key", "keys", "schlüssel", "schlüssel", "m"), ("window", "windows", "fenster", "fenster", "n")]
PLACES = [("in the kitchen", "in der küche"), ("in the garden", "im garten"), ("on the roof", "auf dem dach"),
          ("in the school", "in der schule"), ("in the house", "im haus"), ("at the station", "am bahnhof"),
          ("in the city", "in der stadt"), ("under the bed", "unter dem bett")]
# english, german imperative, german 1st singular, german 1st plural
ACTIONS = [("take", "nimm", "nehme", "nehmen"), ("buy", "kauf", "kaufe", "kaufen"),
           ("find", "finde", "finde", "finden"), ("bring", "bring", "bringe", "bringen"),
           ("carry", "trag", "trage", "tragen"), ("open", "öffne", "öffne", "öffnen"),
           ("wash", "wasch", "wasche", "waschen"), ("sell", "verkauf", "verkaufe", "verkaufen")]
TIMES = [("today", "heute"), ("tomorrow", "morgen"), ("now", "jetzt"), ("in the morning", "am morgen"),
         ("in the evening", "am abend"), ("every day", "jeden tag"), ("later", "später")]
PAST_TIMES = [("yesterday", "gestern"), ("last week", "letzte woche"), ("this morning", "heute morgen")]

_NOM = {"m": "der", "f": "die", "n": "das"}
_ACC = {"m": "den", "f": "die", "n": "das"}
_ADJ_NOM = {"m": "e", "f": "e", "n": "e"}
_ADJ_ACC = {"m": "en", "f": "e", "n": "e"}


def _fill(template: str, rng: random.Random) -> tuple[str, str]:
    """One (english, german) sentence of ``template`` with random slot values."""
    num, col, pl, act = rng.choice(NUMBERS), rng.choice(COLOURS), rng.choice(PLACES), rng.choice(ACTIONS)
    tm, past = rng.choice(TIMES), rng.choice(PAST_TIMES)
    o = rng.choice(OBJECTS)
    g = o[4]
    if template == "colour_place":
        return f"the {col[0]} {o[0]} is {pl[0]}", f"{_NOM[g]} {col[1]}{_ADJ_NOM[g]} {o[2]} ist {pl[1]}"
    if template == "see_number":
        return f"i see {num[0]} {col[0]} {o[1]}", f"ich sehe {num[1]} {col[1]}e {o[3]}"
    if template == "please_action":
        return f"please {act[0]} the {o[0]} {tm[0]}", f"bitte {act[1]} {_ACC[g]} {o[2]} {tm[1]}"
    if template == "where_is":
        return f"where is the {col[0]} {o[0]}", f"wo ist {_NOM[g]} {col[1]}{_ADJ_NOM[g]} {o[2]}"
    if template == "we_action":
        return f"we {act[0]} {num[0]} {o[1]} {tm[0]}", f"wir {act[3]} {tm[1]} {num[1]} {o[3]}"
    if template == "not_place":
        return f"the {o[0]} is not {pl[0]}", f"{_NOM[g]} {o[2]} ist nicht {pl[1]}"
    if template == "have_number":
        return f"do you have {num[0]} {o[1]}", f"hast du {num[1]} {o[3]}"
    if template == "past_place":
        return f"{past[0]} the {o[0]} was {pl[0]}", f"{past[1]} war {_NOM[g]} {o[2]} {pl[1]}"
    if template == "i_action":
        return f"i {act[0]} the {col[0]} {o[0]}", f"ich {act[2]} {_ACC[g]} {col[1]}{_ADJ_ACC[g]} {o[2]}"
    # held-out templates: new combinations of words and agreement patterns seen in the others
    if template == "colour_not_place":
        return f"the {col[0]} {o[0]} is not {pl[0]}", f"{_NOM[g]} {col[1]}{_ADJ_NOM[g]} {o[2]} ist nicht {pl[1]}"
    if template == "see_the_time":
        return f"i see the {col[0]} {o[0]} {tm[0]}", f"ich sehe {_ACC[g]} {col[1]}{_ADJ_ACC[g]} {o[2]} {tm[1]}"
    if template == "where_number":
        return f"where are the {num[0]} {o[1]}", f"wo sind die {num[1]} {o[3]}"
    raise ConfigError(f"unknown template {template!r}")


TRAIN_TEMPLATES = ("colour_place", "see_number", "please_action", "where_is", "we_action", "not_place",
                   "have_number", "past_place", "i_action")
HELDOUT_TEMPLATES = ("colour_not_place", "see_the_time", "where_number")


def ipa_symbols(ipa: str) -> list[str]:
    """espeak-ng IPA -> phoneme symbols: stress marks dropped, a length mark or combining diacritic
    joins the previous symbol, ``|`` between words (``"dɛɾ rˈoːtə"`` -> ``d ɛ ɾ | r oː t ə``)."""
    out: list[str] = []
    for word in ipa.replace("_", " ").split():
        if out:
            out.append("|")
        for ch in word:
            if ch in "ˈˌ-":
                continue
            if (ch in "ːˑ" or unicodedata.combining(ch)) and out and out[-1] != "|":
                out[-1] += ch
            else:
                out.append(ch)
    return out


def _voice(rng: random.Random, unseen: bool) -> dict[str, Any]:
    accents, variants = (UNSEEN_ACCENTS, UNSEEN_VARIANTS) if unseen else (SEEN_ACCENTS, SEEN_VARIANTS)
    return {"voice": f"{rng.choice(accents)}+{rng.choice(variants)}", "rate": rng.randint(140, 200),
            "pitch": rng.randint(30, 70)}


def plan(seed: int, pairs: int, test_pairs: int) -> dict[str, list[dict[str, Any]]]:
    """The deterministic jobs per split (distinct German sentences within and across splits)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    tested: set[str] = set()
    jobs: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    wanted = {"train": pairs, "test_seen": test_pairs, "test_unseen": test_pairs}
    for split in ("test_seen", "train", "test_unseen"):
        templates = HELDOUT_TEMPLATES if split == "test_unseen" else TRAIN_TEMPLATES
        tries = 0
        while len(jobs[split]) < wanted[split]:
            tries += 1
            if tries > 50 * wanted[split] + 1000:
                raise ConfigError(f"the grammar has fewer than {wanted[split]} distinct {split} sentences")
            t = templates[len(jobs[split]) % len(templates)] if split != "train" else rng.choice(templates)
            en, de = _fill(t, rng)
            if de in seen and (split != "train" or de in tested or rng.random() < 0.9):
                continue  # distinct test sentences; training has a few repeats (other voices), never a test one
            seen.add(de)
            if split != "train":
                tested.add(de)
            k = len(jobs[split])
            jobs[split].append({"id": f"{split[:2]}{split[-1]}{k:06d}", "en": en, "de": de, "template": t,
                                **_voice(rng, split == "test_unseen")})
    return jobs


def _run(cmd: list[str]) -> str:
    return subprocess.run(["nice", "-n", "10", *cmd], check=True, capture_output=True, timeout=60, text=True).stdout


def _synth(job: dict[str, Any], split_dir: Path) -> dict[str, Any]:
    import soundfile as sf

    src, tgt = split_dir / f"{job['id']}_en.wav", split_dir / f"{job['id']}_de.wav"
    row: dict[str, Any] = {"src_audio": f"{split_dir.name}/{src.name}", "tgt_audio": f"{split_dir.name}/{tgt.name}",
                           **{k: job[k] for k in ("en", "de", "template", "voice", "rate", "pitch")}}
    with tempfile.TemporaryDirectory(prefix="leapgen-s2st-") as tmp:
        raw = Path(tmp) / "raw.wav"
        if not src.exists():
            _run(["espeak-ng", "-v", job["voice"], "-s", str(job["rate"]), "-p", str(job["pitch"]), "-w", str(raw), job["en"]])
            _run(["sox", "-q", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(Path(tmp) / "s.wav")])
            shutil.move(str(Path(tmp) / "s.wav"), src)
        v = TARGET_VOICE
        cmd = ["espeak-ng", "-v", v["voice"], "-s", str(v["rate"]), "-p", str(v["pitch"]), "-x", "--ipa", "-q", job["de"]]
        ipa = _run(cmd)
        if not tgt.exists():
            _run(cmd[:-2] + ["-w", str(raw), job["de"]])
            _run(["sox", "-q", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(Path(tmp) / "t.wav")])
            shutil.move(str(Path(tmp) / "t.wav"), tgt)
    row["phonemes"] = " ".join(ipa_symbols(ipa))
    row["src_duration"] = round(sf.info(str(src)).duration, 3)
    row["tgt_duration"] = round(sf.info(str(tgt)).duration, 3)
    return row


def build(out_dir: str | os.PathLike | None = None, seed: int = 0, pairs: int = 12000, test_pairs: int = 200,
          max_minutes: float | None = None) -> dict[str, Any]:
    """Build the corpus (see the module docstring); returns the number of pairs and hours per split.
    ``max_minutes`` stops synthesis of the training split early (the test splits come first)."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise ConfigError(f"`{tool}` is not installed; install it (Debian: apt-get install espeak-ng sox).")
    if pairs < 1 or test_pairs < 1:
        raise ConfigError("pairs and test_pairs must be >= 1")
    out = Path(out_dir) if out_dir is not None else default_dir()
    jobs = plan(seed, pairs, test_pairs)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"out_dir": str(out)}
    t0 = time.time()
    for split in ("test_seen", "test_unseen", "train"):
        split_dir = out / split
        split_dir.mkdir(exist_ok=True)
        rows = []
        for i, job in enumerate(jobs[split]):
            if split == "train" and max_minutes is not None and time.time() - t0 > max_minutes * 60:
                logger.info("s2st-en-de: stopped after %.1f min at %d %s pairs", max_minutes, i, split)
                break
            rows.append(_synth(job, split_dir))
            if (i + 1) % 500 == 0:
                logger.info("s2st-en-de %s: %d / %d (%.1f min)", split, i + 1, len(jobs[split]), (time.time() - t0) / 60)
        with open(out / f"{split}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        summary[split] = {"pairs": len(rows), "src_hours": round(sum(r["src_duration"] for r in rows) / 3600, 3),
                          "tgt_hours": round(sum(r["tgt_duration"] for r in rows) / 3600, 3)}
        logger.info("s2st-en-de %s: %s", split, summary[split])
    meta = {"seed": seed, "pairs_planned": pairs, "test_pairs": test_pairs, "sample_rate": SAMPLE_RATE,
            "target_voice": TARGET_VOICE, "train_templates": TRAIN_TEMPLATES, "heldout_templates": HELDOUT_TEMPLATES,
            "unseen_accents": UNSEEN_ACCENTS, "unseen_variants": UNSEEN_VARIANTS, "summary": summary,
            "minutes": round((time.time() - t0) / 60, 2)}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    return summary


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "s2st-en-de"


def read_manifest(root: str | os.PathLike, split: str) -> list[dict[str, Any]]:
    """Rows of ``<root>/<split>.jsonl`` with ``src_audio`` / ``tgt_audio`` made absolute paths."""
    path = Path(root) / f"{split}.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; build the corpus first: leapgen data s2st-en-de --out {root}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["src_audio"] = str(Path(root) / r["src_audio"])
        r["tgt_audio"] = str(Path(root) / r["tgt_audio"])
    return rows
