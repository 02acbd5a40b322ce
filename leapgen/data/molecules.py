"""MOSES molecules as SAFE strings: the offline training data of the ``molecule-safe`` recipe.

Source: the MOSES benchmark (Polykovskiy et al. 2020) training split, 1,584,663 SMILES shipped
inside the ``molsets`` wheel at ``moses/dataset/data/train.csv.gz``. It is found with
``importlib.util.find_spec("moses")`` and read directly (``import moses`` itself needs
dependencies that are not installed). Install it with ``pip install --no-deps molsets==0.3.1``.

:func:`load_safe_dataset` takes a seeded random subset of the training SMILES, SAFE-encodes it
(BRICS slicer, molecules the slicer cannot cut kept as one fragment, stereo ignored; failures are
skipped and counted), optionally with a process pool, caches the result as JSON under
``~/.cache/leapgen/`` (keyed by the subset size, seed and safe-mol version) and splits it into
train / held-out. :func:`length_histogram` counts tokens per molecule (GenMol samples the de novo
length from this histogram).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AssetNotFoundError

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install --no-deps molsets==0.3.1"


def moses_path(split: str = "train") -> Path:
    """Path of the MOSES ``<split>.csv.gz`` inside the installed ``molsets`` wheel."""
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        raise AssetNotFoundError(
            f"the MOSES data (package `molsets`) is not installed; install it with `{INSTALL_HINT}` "
            "(--no-deps: its pinned dependencies are not needed to read the data)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "dataset" / "data" / f"{split}.csv.gz"
    if not path.is_file():
        raise AssetNotFoundError(f"{path} is missing; reinstall the data with `{INSTALL_HINT}`.")
    return path


def read_moses_smiles(split: str = "train") -> list[str]:
    """All SMILES of a MOSES split (first CSV column, header skipped)."""
    path = moses_path(split)
    with gzip.open(path, "rt") as f:
        header = f.readline().strip().split(",")
        if header[0] != "SMILES":
            raise AssetNotFoundError(f"unexpected MOSES header {header} in {path}")
        return [line.split(",", 1)[0].strip() for line in f if line.strip()]


def _encode_chunk(smiles: Sequence[str]) -> tuple[list[tuple[str, str]], int]:
    """(smiles, safe) pairs for the SMILES that encode, and the number that failed."""
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")
    import safe

    conv = safe.SAFEConverter(slicer="brics", ignore_stereo=True)
    out, failed = [], 0
    for s in smiles:
        try:
            enc = conv.encoder(s, canonical=True, allow_empty=True)
            safe.split(enc)  # must tokenize
            out.append((s, enc))
        except Exception:  # noqa: BLE001 - any encoder failure: skip the molecule, count it
            failed += 1
    return out, failed


def default_cache_dir() -> Path:
    return Path(os.environ.get("LEAPGEN_CACHE", Path.home() / ".cache" / "leapgen"))


@dataclass
class SafeDataset:
    train_smiles: list[str]
    train_safe: list[str]
    heldout_smiles: list[str]
    heldout_safe: list[str]
    counts: dict[str, Any] = field(default_factory=dict)

    def training_smiles_hash(self) -> str:
        """sha256 over the sorted training SMILES (for novelty checks without shipping the data)."""
        return smiles_hash(self.train_smiles)


def smiles_hash(smiles: Sequence[str]) -> str:
    h = hashlib.sha256()
    for s in sorted(smiles):
        h.update(s.encode())
        h.update(b"\n")
    return h.hexdigest()


def load_safe_dataset(
    num_molecules: int = 150_000,
    heldout_frac: float = 0.02,
    seed: int = 0,
    workers: int = 2,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> SafeDataset:
    """A seeded subset of MOSES train, SAFE-encoded (cached), split into train / held-out."""
    import safe
    from tqdm.auto import tqdm

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = f"moses_safe_n{num_molecules}_s{seed}_safe{safe.__version__}.json"
    path = cache / key
    t0 = time.perf_counter()
    if use_cache and path.is_file():
        data = json.loads(path.read_text())
        pairs, failed, total = data["pairs"], data["failed"], data["total"]
        logger.info("MOSES SAFE data: %d molecules from cache %s", len(pairs), path)
    else:
        all_smiles = read_moses_smiles("train")
        total = len(all_smiles)
        rng = random.Random(seed)
        subset = rng.sample(all_smiles, min(num_molecules, total))
        chunks = [subset[i : i + 2000] for i in range(0, len(subset), 2000)]
        pairs, failed = [], 0
        bar = tqdm(total=len(subset), desc="SAFE-encode MOSES", mininterval=2.0)
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=workers) as pool:
                for (p, f), chunk in zip(pool.map(_encode_chunk, chunks), chunks):
                    pairs.extend(p)
                    failed += f
                    bar.update(len(chunk))
        else:
            for chunk in chunks:
                p, f = _encode_chunk(chunk)
                pairs.extend(p)
                failed += f
                bar.update(len(chunk))
        bar.close()
        if use_cache:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # per writer: concurrent builds never share a file
            tmp.write_text(json.dumps({"pairs": pairs, "failed": failed, "total": total}))
            tmp.replace(path)
        logger.info("MOSES SAFE data: encoded %d, failed %d, in %.0fs", len(pairs), failed, time.perf_counter() - t0)
    rng = random.Random(seed + 1)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    n_held = max(1, int(len(pairs) * heldout_frac))
    held, train = order[:n_held], order[n_held:]
    counts = {
        "source": "MOSES train.csv.gz (molsets wheel)",
        "moses_train_total": total,
        "requested": num_molecules,
        "encoded": len(pairs),
        "encode_failed": failed,
        "train": len(train),
        "heldout": len(held),
        "slicer": "brics (allow_empty: uncuttable molecules kept whole), stereo ignored",
        "load_s": time.perf_counter() - t0,
    }
    return SafeDataset(
        train_smiles=[pairs[i][0] for i in train],
        train_safe=[pairs[i][1] for i in train],
        heldout_smiles=[pairs[i][0] for i in held],
        heldout_safe=[pairs[i][1] for i in held],
        counts=counts,
    )


def length_histogram(token_lists: Sequence[Sequence[int]]) -> dict[int, int]:
    """{number of tokens (no BOS/EOS): count} over the molecules."""
    return dict(sorted(Counter(len(t) for t in token_lists).items()))


__all__ = [
    "INSTALL_HINT",
    "SafeDataset",
    "default_cache_dir",
    "length_histogram",
    "load_safe_dataset",
    "moses_path",
    "read_moses_smiles",
    "smiles_hash",
]
