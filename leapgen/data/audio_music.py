"""Offline music corpus: procedural MIDI rendered by FluidSynth with the General MIDI soundfont.

The data of the shipped ``audio-music`` pipeline (codec, MAGNeT-style masked model, delay-pattern
AR model) and of the audio benchmark's attribute classifier. No network: only ``pretty_midi``,
the ``fluidsynth`` program and Debian's ``fluid-soundfont-gm`` (``FluidR3_GM.sf2``).

Every clip is drawn from seeded generator parameters:

* **instrument family** (a classifier label): piano, organ, guitar, strings, brass, woodwind, two
  General MIDI programs each (:data:`FAMILIES`);
* **tempo bucket** (label): slow 60-80, medium 95-115, fast 130-160 bpm (:data:`TEMPI`);
* **mode** (label): major / minor, with one of 12 tonics;
* **texture**: melody (a scale random walk over the chords), chords (block triads), arpeggio;
  optional **bass** line (Acoustic Bass roots); **drums**: none / soft / loud (GM channel 10);
  **dynamics**: soft / loud velocities.

A chord progression (I-V-vi-IV style in major, i-VI-III-VII style in minor) runs one chord per
bar. The MIDI is rendered with ``fluidsynth -ni -R 0 -C 0 -r 16000`` (no reverb/chorus), summed to
mono, scaled by a fixed gain (so soft clips stay soft) and cut to the clip's duration (2-10 s).

Descriptions come from the parameters in several phrasings (``describe``), e.g. "slow sad piano
melody in A minor with soft drums". The **test split** uses only (family, tempo, mode, texture)
combinations that never occur in training (:func:`held_out_combos`, 12 of the 108, chosen so every
single label value still occurs in training).

Layout of ``out_dir`` (default ``~/.cache/leapgen/audio-music``): ``{split}_audio.npy`` (int16,
all clips of the split concatenated), ``{split}.jsonl`` (one clip per line: offset, length,
parameters, descriptions), ``summary.json``. :func:`load_corpus` reads a split back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leapgen.errors import AssetNotFoundError, ConfigError

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
SOUNDFONT = "/usr/share/sounds/sf2/FluidR3_GM.sf2"
DEFAULT_DIR = Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "audio-music"
_VERSION = 2

FAMILIES: dict[str, tuple[tuple[int, str], ...]] = {
    "piano": ((0, "grand piano"), (4, "electric piano")),
    "organ": ((16, "drawbar organ"), (19, "church organ")),
    "guitar": ((24, "nylon guitar"), (25, "steel guitar")),
    "strings": ((48, "string ensemble"), (40, "violin")),
    "brass": ((56, "trumpet"), (61, "brass section")),
    "woodwind": ((73, "flute"), (71, "clarinet")),
}
TEMPI: dict[str, tuple[int, int]] = {"slow": (60, 80), "medium": (95, 115), "fast": (130, 160)}
MODES = ("major", "minor")
TEXTURES = ("melody", "chords", "arpeggio")
DRUMS = ("none", "soft", "loud")
DYNAMICS = ("soft", "loud")
KEYS = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
#: the classifier's label heads, in order
LABELS: dict[str, tuple[str, ...]] = {"family": tuple(FAMILIES), "tempo": tuple(TEMPI), "mode": MODES}

_SCALES = {"major": (0, 2, 4, 5, 7, 9, 11), "minor": (0, 2, 3, 5, 7, 8, 10)}
_PROGRESSIONS = {
    "major": ((0, 4, 5, 3), (0, 3, 4, 0), (0, 5, 3, 4), (0, 3, 0, 4)),
    "minor": ((0, 5, 2, 6), (0, 3, 4, 0), (0, 6, 5, 4), (0, 3, 6, 4)),
}
_TEMPO_WORDS = {"slow": ("slow", "calm", "gentle"), "medium": ("moderate", "mid-tempo", "steady"), "fast": ("fast", "lively", "energetic")}
_MOOD_WORDS = {"major": ("happy", "bright", "cheerful"), "minor": ("sad", "dark", "melancholic")}
_TEXTURE_WORDS = {"melody": ("melody", "tune"), "chords": ("chords", "chord progression"), "arpeggio": ("arpeggios", "broken chords")}
_TEMPLATES = (
    "{tempo} {mood} {instrument} {texture} in {key} {mode}{drums}{bass}",
    "a {mood} {texture} played on {family_word}, {tempo} tempo, {key} {mode}{drums}",
    "{instrument} {texture}, {mode} key of {key}, {bpm} bpm{bass}{drums}",
    "{dynamics} {tempo} {instrument} playing {texture} in {key} {mode}{drums}",
)


@dataclass
class ClipParams:
    family: str
    program: int
    instrument: str
    tempo: str
    bpm: int
    mode: str
    key: int
    texture: str
    bass: bool
    drums: str
    dynamics: str
    duration: float
    seed: int

    @property
    def combo(self) -> tuple[str, str, str, str]:
        return (self.family, self.tempo, self.mode, self.texture)

    def labels(self) -> dict[str, int]:
        return {name: LABELS[name].index(getattr(self, name)) for name in LABELS}


def held_out_combos(n: int = 12) -> set[tuple[str, str, str, str]]:
    """The (family, tempo, mode, texture) combinations reserved for the test split: the ``n`` with
    the smallest hash, so the choice is fixed and independent of the seed."""
    combos = [(f, t, m, x) for f in FAMILIES for t in TEMPI for m in MODES for x in TEXTURES]
    combos.sort(key=lambda c: hashlib.sha1("|".join(c).encode()).hexdigest())
    return set(combos[:n])


def describe(p: ClipParams, rng: np.random.Generator) -> str:
    """One text description of a clip's parameters (a random phrasing)."""
    drums = {"none": "", "soft": " with soft drums", "loud": " with loud drums"}[p.drums]
    words = dict(
        tempo=rng.choice(_TEMPO_WORDS[p.tempo]),
        mood=rng.choice(_MOOD_WORDS[p.mode]),
        instrument=p.instrument,
        family_word=rng.choice((p.instrument, p.family)),
        texture=rng.choice(_TEXTURE_WORDS[p.texture]),
        key=KEYS[p.key],
        mode=p.mode,
        bpm=p.bpm,
        drums=drums,
        bass=" and bass" if p.bass else "",
        dynamics=p.dynamics,
    )
    return rng.choice(_TEMPLATES).format(**words)


def sample_params(rng: np.random.Generator, seed: int, test: bool, held: set) -> ClipParams:
    """Draw clip parameters; ``test`` restricts to held-out combinations, else excludes them."""
    while True:
        family = str(rng.choice(list(FAMILIES)))
        tempo = str(rng.choice(list(TEMPI)))
        mode = str(rng.choice(MODES))
        texture = str(rng.choice(TEXTURES))
        if ((family, tempo, mode, texture) in held) == test:
            break
    program, instrument = FAMILIES[family][int(rng.integers(len(FAMILIES[family])))]
    lo, hi = TEMPI[tempo]
    return ClipParams(
        family=family, program=program, instrument=instrument, tempo=tempo, bpm=int(rng.integers(lo, hi + 1)),
        mode=mode, key=int(rng.integers(12)), texture=texture, bass=bool(rng.random() < 0.4),
        drums=str(rng.choice(DRUMS)), dynamics=str(rng.choice(DYNAMICS)),
        duration=float(np.round(rng.uniform(2.0, 10.0), 2)), seed=seed,
    )


def build_midi(p: ClipParams):
    """The clip's MIDI (a ``pretty_midi.PrettyMIDI``): chords per bar, texture, bass and drums."""
    import pretty_midi

    rng = np.random.default_rng(p.seed)
    beat = 60.0 / p.bpm
    bar = 4 * beat
    n_bars = int(np.ceil(p.duration / bar)) + 1
    scale = _SCALES[p.mode]
    root = 48 + p.key if p.key < 6 else 36 + p.key  # tonic near C3-F3
    prog = _PROGRESSIONS[p.mode][int(rng.integers(4))]
    vel = 55 if p.dynamics == "soft" else 100

    def degree_pitch(deg: int, octave: int = 0) -> int:
        return root + 12 * (octave + deg // 7) + scale[deg % 7]

    pm = pretty_midi.PrettyMIDI(initial_tempo=float(p.bpm))
    inst = pretty_midi.Instrument(program=p.program)
    for b in range(n_bars):
        t0 = b * bar
        deg = prog[b % len(prog)]
        triad = [degree_pitch(deg + i, 1) for i in (0, 2, 4)]
        if p.texture == "chords":
            hits = (0, 2) if p.tempo != "slow" else (0,)
            for h in hits:
                dur = (4 if len(hits) == 1 else 2) * beat * 0.95
                for pitch in triad:
                    inst.notes.append(pretty_midi.Note(velocity=vel, pitch=pitch, start=t0 + h * beat, end=t0 + h * beat + dur))
        elif p.texture == "arpeggio":
            seq = [triad[0], triad[1], triad[2], triad[1] + 0, triad[0] + 12, triad[2], triad[1], triad[2]]
            for i, pitch in enumerate(seq):
                s = t0 + i * beat / 2
                inst.notes.append(pretty_midi.Note(velocity=vel, pitch=pitch, start=s, end=s + beat / 2 * 0.9))
        else:  # melody: a random walk on the scale, landing on chord tones on strong beats
            pos, cur = 0.0, deg + 7
            while pos < 4 - 1e-6:
                length = float(rng.choice((0.5, 1.0, 1.0, 2.0) if p.tempo != "fast" else (0.5, 0.5, 1.0)))
                length = min(length, 4 - pos)
                if pos in (0.0, 2.0):
                    cur = deg + 7 + int(rng.choice((0, 2, 4)))
                else:
                    cur = int(np.clip(cur + int(rng.choice((-2, -1, 1, 2))), 3, 17))
                s = t0 + pos * beat
                inst.notes.append(pretty_midi.Note(velocity=vel, pitch=degree_pitch(cur, 1), start=s, end=s + length * beat * 0.9))
                pos += length
    pm.instruments.append(inst)
    if p.bass:
        bass = pretty_midi.Instrument(program=32)
        for b in range(n_bars):
            pitch = degree_pitch(prog[b % len(prog)], -1)
            for h in (0, 2):
                s = b * bar + h * beat
                bass.notes.append(pretty_midi.Note(velocity=vel, pitch=pitch, start=s, end=s + 2 * beat * 0.9))
        pm.instruments.append(bass)
    if p.drums != "none":
        dv = 45 if p.drums == "soft" else 95
        kit = pretty_midi.Instrument(program=0, is_drum=True)
        for b in range(n_bars):
            for i in range(8):
                s = b * bar + i * beat / 2
                kit.notes.append(pretty_midi.Note(velocity=dv - 15, pitch=42, start=s, end=s + 0.05))  # closed hat
                if i in (0, 4):
                    kit.notes.append(pretty_midi.Note(velocity=dv, pitch=36, start=s, end=s + 0.1))  # kick
                if i in (2, 6):
                    kit.notes.append(pretty_midi.Note(velocity=dv, pitch=38, start=s, end=s + 0.1))  # snare
        pm.instruments.append(kit)
    return pm


def render_batch(params: list[ClipParams], soundfont: str = SOUNDFONT, gain: float = 0.5, gap: float = 3.0) -> list[np.ndarray]:
    """Render up to 7 clips with one FluidSynth run (each clip on its own MIDI channels, one after
    another with ``gap`` seconds of silence between them; notes are cut at the clip's end) and
    return each as float32 mono at 16 kHz, exactly ``duration`` seconds."""
    import pretty_midi
    import soundfile as sf

    if len(params) > 7:
        raise ConfigError("render_batch takes at most 7 clips (two MIDI channels each, 15 usable).")
    pm = pretty_midi.PrettyMIDI(initial_tempo=120.0)
    starts, t = [], 0.0
    for p in params:
        starts.append(t)
        for inst in build_midi(p).instruments:
            inst.notes = [
                pretty_midi.Note(n.velocity, n.pitch, n.start + t, min(n.end, p.duration) + t)
                for n in inst.notes if n.start < p.duration - 0.02
            ]
            pm.instruments.append(inst)
        t += p.duration + gap
    with tempfile.TemporaryDirectory() as tmp:
        mid, wav = Path(tmp) / "c.mid", Path(tmp) / "c.wav"
        pm.write(str(mid))
        cmd = ["fluidsynth", "-ni", "-q", "-R", "0", "-C", "0", "-g", str(gain), "-r", str(SAMPLE_RATE), "-F", str(wav), soundfont, str(mid)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        audio, sr = sf.read(str(wav), dtype="float32", always_2d=True)
    if sr != SAMPLE_RATE:  # pragma: no cover - fluidsynth honours -r
        raise RuntimeError(f"fluidsynth wrote {sr} Hz instead of {SAMPLE_RATE}")
    mono = audio.mean(1)
    out = []
    for p, s in zip(params, starts):
        n = int(round(p.duration * SAMPLE_RATE))
        a = int(round(s * SAMPLE_RATE))
        clip = np.zeros(n, dtype=np.float32)
        seg = mono[a : a + n]
        clip[: seg.size] = seg
        out.append(np.clip(clip * 2.0, -1.0, 1.0))
    return out


def render(p: ClipParams, soundfont: str = SOUNDFONT, gain: float = 0.5) -> np.ndarray:
    """Render one clip (see :func:`render_batch`)."""
    return render_batch([p], soundfont, gain)[0]


def _check_tools(soundfont: str) -> None:
    if shutil.which("fluidsynth") is None:
        raise AssetNotFoundError("the fluidsynth program is missing; install it with `apt-get install fluidsynth` (or `make system-deps`).")
    if not Path(soundfont).exists():
        raise AssetNotFoundError(f"soundfont {soundfont} not found; install it with `apt-get install fluid-soundfont-gm`.")


def build(
    out_dir: str | os.PathLike | None = None,
    seed: int = 0,
    hours: float = 5.0,
    test_fraction: float = 0.08,
    soundfont: str = SOUNDFONT,
    force: bool = False,
) -> dict:
    """Build the corpus (``leapgen data audio-music``): about ``hours`` of training audio plus a
    held-out test split of ``test_fraction`` as many clips. Reuses a complete build with the same
    options unless ``force``. Returns the summary (also written to ``summary.json``)."""
    from tqdm.auto import tqdm

    if not (isinstance(hours, (int, float)) and 0 < hours <= 100):
        raise ConfigError(f"hours must be a number in (0, 100], got {hours!r}.")
    if not (isinstance(test_fraction, float) and 0 < test_fraction < 1):
        raise ConfigError(f"test_fraction must be a float in (0, 1), got {test_fraction!r}.")
    out = Path(out_dir) if out_dir is not None else DEFAULT_DIR
    out.mkdir(parents=True, exist_ok=True)
    options = {"version": _VERSION, "seed": seed, "hours": float(hours), "test_fraction": test_fraction}
    summary_path = out / "summary.json"
    if summary_path.exists() and not force:
        summary = json.loads(summary_path.read_text())
        if summary.get("options") == options:
            logger.info("corpus already built at %s", out)
            return summary
    _check_tools(soundfont)
    held = held_out_combos()
    n_train = max(2, int(round(hours * 3600 / 6.0)))  # mean duration 6 s
    n_test = max(2, int(round(n_train * test_fraction)))
    rng = np.random.default_rng(seed)
    summary: dict = {"options": options, "sample_rate": SAMPLE_RATE, "held_out_combos": sorted("|".join(c) for c in held)}
    for split, n in (("train", n_train), ("test", n_test)):
        clips, meta, offset = [], [], 0
        params = [sample_params(rng, int(rng.integers(2**31)), split == "test", held) for _ in range(n)]
        for j in tqdm(range(0, n, 7), desc=f"audio-music {split}", leave=False):
            for p, audio in zip(params[j : j + 7], render_batch(params[j : j + 7], soundfont)):
                descs = sorted({describe(p, rng) for _ in range(4)})
                clips.append((audio * 32767).astype(np.int16))
                meta.append({"offset": offset, "length": audio.size, "params": p.__dict__, "labels": p.labels(), "descriptions": descs})
                offset += audio.size
        np.save(out / f"{split}_audio.npy", np.concatenate(clips))
        with open(out / f"{split}.jsonl", "w") as f:
            for m in meta:
                f.write(json.dumps(m) + "\n")
        summary[split] = {"clips": n, "hours": round(offset / SAMPLE_RATE / 3600, 3)}
        logger.info("%s: %d clips, %.2f h", split, n, offset / SAMPLE_RATE / 3600)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


@dataclass
class MusicCorpus:
    """One split: ``audio[i]`` float32 mono at 16 kHz, ``meta[i]`` its parameters/labels/descriptions."""

    audio: list[np.ndarray]
    meta: list[dict]
    sample_rate: int = SAMPLE_RATE

    def __len__(self) -> int:
        return len(self.audio)

    def labels(self, name: str) -> np.ndarray:
        return np.array([m["labels"][name] for m in self.meta], dtype=np.int64)

    def descriptions(self, i: int) -> list[str]:
        return self.meta[i]["descriptions"]


def load_corpus(root: str | os.PathLike | None = None, split: str = "train") -> MusicCorpus:
    """Read a split built by :func:`build` (``root`` defaults to the cache folder)."""
    root = Path(root) if root is not None else DEFAULT_DIR
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}.")
    path = root / f"{split}.jsonl"
    if not path.exists():
        raise AssetNotFoundError(f"no audio-music corpus at {root}; build it with `leapgen data audio-music --out {root}`.")
    data = np.load(root / f"{split}_audio.npy", mmap_mode="r")
    meta = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    audio = [np.asarray(data[m["offset"] : m["offset"] + m["length"]], dtype=np.float32) / 32767.0 for m in meta]
    return MusicCorpus(audio, meta)
