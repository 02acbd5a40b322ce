"""Synthetic MS/MS spectra of tryptic-like peptides (``leapgen data peptide``).

Peptides: lengths 6-14, residues drawn from UniProt's amino-acid frequencies (leucine and
isoleucine merged into ``L``: they have the same mass, so no spectrum tells them apart), cysteine
carbamidomethylated (``C`` = 160.03065), the C-terminus K or R 85 % of the time (trypsin).
Held out by a hash of the sequence (10 %).

Spectrum of a peptide with precursor charge ``z`` (2 or 3, 10 % of them 3):

* theoretical **b** ions (``sum(prefix) + proton``) and **y** ions (``sum(suffix) + H2O + proton``)
  at fragment charge 1, and 2 (``(m + proton) / 2``) when ``z >= 2`` (kept with probability 0.3);
* **neutral losses** ``-H2O`` and ``-NH3`` of b / y ions (probability 0.15 each) and a-ions
  (``b - CO``, 0.1);
* **mass noise** (Gaussian, sigma 0.005-0.01 Da per spectrum), **missing peaks** (each dropped
  with a per-spectrum probability 0.15-0.4), **noise peaks** (10-40 uniform in 50..max m/z, weak);
* intensities log-normal (y > b > losses > noise), scaled to max 1; at most ``max_peaks`` peaks,
  the most intense kept;
* precursor ``m/z = (M + z * proton) / z``, ``M = sum(residues) + H2O``.

Files: ``<split>.npz`` (``mz``, ``intensity`` ``[N, max_peaks]`` zero padded, ``n_peaks``,
``precursor_mz``, ``charge``) and ``<split>.json`` (the sequences); splits ``train`` and ``test``
(held-out peptides). Deterministic per seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

PROTON = 1.007276
H2O = 18.010565
NH3 = 17.026549
CO = 27.994915
#: peaks are kept below this m/z: the range the shipped peptide model was trained on
MAX_MZ = 2500.0
#: monoisotopic residue masses (C carbamidomethylated; I merged into L)
RESIDUES: dict[str, float] = {
    "G": 57.02146, "A": 71.03711, "S": 87.03203, "P": 97.05276, "V": 99.06841, "T": 101.04768,
    "C": 160.03065, "L": 113.08406, "N": 114.04293, "D": 115.02694, "Q": 128.05858, "K": 128.09496,
    "E": 129.04259, "M": 131.04049, "H": 137.05891, "F": 147.06841, "R": 156.10111, "Y": 163.06333,
    "W": 186.07931,
}
ALPHABET = "".join(RESIDUES)
#: UniProt amino-acid frequencies (%); L includes I
FREQUENCIES: dict[str, float] = {
    "L": 15.8, "A": 8.3, "G": 7.1, "V": 6.9, "E": 6.8, "S": 6.6, "K": 5.8, "R": 5.5, "D": 5.5, "T": 5.3,
    "P": 4.7, "N": 4.1, "Q": 3.9, "F": 3.9, "Y": 2.9, "M": 2.4, "H": 2.3, "C": 1.4, "W": 1.1,
}


def default_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen")) / "peptide"


def peptide_mass(seq: str) -> float:
    """Neutral monoisotopic mass ``M = sum(residues) + H2O``."""
    return sum(RESIDUES[a] for a in seq) + H2O


def precursor_mz(seq: str, charge: int) -> float:
    return (peptide_mass(seq) + charge * PROTON) / charge


def b_ions(seq: str, charge: int = 1) -> np.ndarray:
    """b_1 .. b_{n-1} at ``charge``."""
    cum = np.cumsum([RESIDUES[a] for a in seq])[:-1]
    return (cum + charge * PROTON) / charge


def y_ions(seq: str, charge: int = 1) -> np.ndarray:
    """y_1 .. y_{n-1} at ``charge`` (y_i: the last i residues)."""
    cum = np.cumsum([RESIDUES[a] for a in seq[::-1]])[:-1]
    return (cum + H2O + charge * PROTON) / charge


def sample_peptide(rng: random.Random, min_len: int = 6, max_len: int = 14) -> str:
    letters, weights = zip(*FREQUENCIES.items())
    n = rng.randint(min_len, max_len)
    body = rng.choices(letters, weights, k=n - 1)
    last = rng.choice("KR") if rng.random() < 0.85 else rng.choices(letters, weights)[0]
    return "".join(body) + last


def is_held_out(seq: str, fraction: float = 0.1) -> bool:
    return int(hashlib.sha1(("pep:" + seq).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def simulate(seq: str, charge: int, rng: random.Random, max_peaks: int = 128) -> dict[str, Any]:
    """One noisy spectrum of ``seq`` (see the module docstring): ``mz``, ``intensity`` (sorted by m/z),
    ``precursor_mz``, ``charge``."""
    nr = np.random.default_rng(rng.randint(0, 2**31))
    sigma = rng.uniform(0.005, 0.01)
    p_miss = rng.uniform(0.15, 0.4)
    mz, inten = [], []

    def add(values: np.ndarray, scale: float) -> None:
        for v in values:
            if nr.random() >= p_miss:
                mz.append(v + nr.normal(0, sigma))
                inten.append(scale * nr.lognormal(0, 0.6))

    add(y_ions(seq), 1.0)
    add(b_ions(seq), 0.6)
    if charge >= 2:
        for fn in (b_ions, y_ions):
            ions = fn(seq, 2)
            add(ions[nr.random(ions.size) < 0.3], 0.3)
    for fn in (b_ions, y_ions):
        ions = fn(seq)
        for loss, p in ((H2O, 0.15), (NH3, 0.15)):
            add(ions[nr.random(ions.size) < p] - loss, 0.2)
    a = b_ions(seq) - CO
    add(a[nr.random(a.size) < 0.1], 0.2)
    top = peptide_mass(seq) + PROTON
    n_noise = rng.randint(10, 40)
    mz += list(nr.uniform(50, top, n_noise))
    inten += list(0.15 * nr.lognormal(0, 0.8, n_noise))
    mz_a, in_a = np.asarray(mz, dtype=np.float64), np.asarray(inten, dtype=np.float64)
    keep = (mz_a > 0) & (mz_a < MAX_MZ)
    mz_a, in_a = mz_a[keep], in_a[keep]
    if mz_a.size > max_peaks:
        top_idx = np.argsort(-in_a)[:max_peaks]
        mz_a, in_a = mz_a[top_idx], in_a[top_idx]
    order = np.argsort(mz_a)
    mz_a, in_a = mz_a[order], in_a[order]
    return {"mz": mz_a, "intensity": in_a / max(in_a.max(), 1e-9), "precursor_mz": precursor_mz(seq, charge),
            "charge": charge}


def plan(seed: int, n_train: int, n_test: int) -> dict[str, list[tuple[str, int]]]:
    """Deterministic ``(sequence, charge)`` lists; the test peptides are held out from training."""
    rng = random.Random(seed)
    out: dict[str, list[tuple[str, int]]] = {"train": [], "test": []}
    guard = 0
    while len(out["train"]) < n_train or len(out["test"]) < n_test:
        guard += 1
        if guard > 100 * (n_train + n_test) + 1000:
            raise ConfigError("could not draw enough peptides; lower n_train / n_test")
        seq = sample_peptide(rng)
        split = "test" if is_held_out(seq) else "train"
        if len(out[split]) < (n_test if split == "test" else n_train):
            out[split].append((seq, 3 if rng.random() < 0.1 else 2))
    return out


def build(out_dir: str | Path | None = None, seed: int = 0, n_train: int = 100_000, n_test: int = 1000,
          max_peaks: int = 128) -> dict[str, Any]:
    """Simulate the corpus into ``out_dir`` (default ``~/.cache/leapgen/peptide``); returns ``meta``."""
    root = Path(out_dir) if out_dir else default_dir()
    root.mkdir(parents=True, exist_ok=True)
    jobs = plan(seed, int(n_train), int(n_test))
    for k, (split, rows) in enumerate(jobs.items()):
        rng = random.Random(seed * 1000 + k)
        mz = np.zeros((len(rows), max_peaks), dtype=np.float32)
        inten = np.zeros_like(mz)
        n = np.zeros(len(rows), dtype=np.int32)
        prec = np.zeros(len(rows), dtype=np.float64)
        charge = np.zeros(len(rows), dtype=np.int32)
        for i, (seq, z) in enumerate(rows):
            s = simulate(seq, z, rng, max_peaks)
            n[i] = s["mz"].size
            mz[i, : n[i]], inten[i, : n[i]] = s["mz"], s["intensity"]
            prec[i], charge[i] = s["precursor_mz"], z
        np.savez(root / f"{split}.npz", mz=mz, intensity=inten, n_peaks=n, precursor_mz=prec, charge=charge)
        (root / f"{split}.json").write_text(json.dumps([s for s, _ in rows]))
    meta = {"seed": seed, "counts": {s: len(r) for s, r in jobs.items()}, "max_peaks": max_peaks,
            "alphabet": ALPHABET}
    (root / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def load_split(root: str | Path, split: str) -> tuple[dict[str, np.ndarray], list[str]]:
    root = Path(root)
    if not (root / f"{split}.npz").exists():
        raise ConfigError(f"{root / (split + '.npz')} does not exist; build it with `leapgen data peptide --out {root}`.")
    data = np.load(root / f"{split}.npz")
    return {k: data[k] for k in data.files}, json.loads((root / f"{split}.json").read_text())


__all__ = ["ALPHABET", "H2O", "MAX_MZ", "PROTON", "RESIDUES", "b_ions", "build", "load_split", "peptide_mass", "plan",
           "precursor_mz", "simulate", "y_ions"]
