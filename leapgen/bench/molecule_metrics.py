"""Molecule-generation metrics with RDKit alone (offline): validity, uniqueness, novelty, quality,
internal diversity, QED and SA.

Definitions follow GenMol's evaluation (Lee et al. 2025, ICML; ``scripts/exps/denovo/run.py`` of
NVIDIA-Digital-Bio/genmol, which calls TDC's oracles) -- reference notes masked.md §4:

* **validity** = #samples that RDKit parses (a non-empty molecule) / #samples (N). GenMol counts
  the SMILES its decoder returns after ``fix=True`` (largest fragment kept); that repair happens in
  the pipeline, so the molecule pipeline's ``out.smiles`` is what is measured here. The bench also
  reports *strict* validity (the raw SAFE string is one connected molecule without repair).
* **uniqueness** = #distinct canonical SMILES among the valid samples / #valid samples.
* **novelty** = #distinct valid canonical SMILES not in the training set / #distinct valid
  (TDC's definition: computed on the unique set).
  The training set the bench measures it against: :func:`load_training_set` (MOSES train split).
* **quality** = #distinct valid molecules with QED >= 0.6 **and** SA <= 4 / N -- GenMol's
  definition: duplicates count once, invalid samples count in the denominator, so quality is at
  most validity x uniqueness.
* **internal diversity** = 1 - mean pairwise Tanimoto similarity of Morgan fingerprints (radius 2,
  2048 bits, no chirality) over the pairs i < j. With ``dedupe=True`` (TDC ``Evaluator('diversity')``,
  what GenMol reports) the molecules are first reduced to distinct canonical SMILES; with
  ``dedupe=False`` every valid sample counts (duplicates pull diversity down). Fewer than two
  molecules give 0.0 (no pair is diverse), where TDC would return NaN.
* **QED**: :func:`rdkit.Chem.QED.qed` (Bickerton et al. 2012, default weights).
* **SA**: Ertl & Schuffenhauer 2009 synthetic accessibility, 1 (easy) .. 10 (hard), from the
  ``SA_Score/sascorer.py`` that ships in the rdkit wheel's Contrib folder (with its
  ``fpscores.pkl.gz``), so nothing is downloaded.

RDKit's parse warnings are silenced (``RDLogger.DisableLog("rdApp.*")``) while these run: invalid
generated strings are expected and counted, not logged. The RDKit basics (``to_mol``, QED, fragment
queries, the quiet block) are :mod:`leapgen.chem`'s, shared with the pipeline, and re-exported here.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Iterable, Sequence
from functools import lru_cache
from types import ModuleType
from typing import Any

from ..chem import as_mol, contains_fragment, fragment_query, qed_score, quiet_rdkit, rdkit_chem, to_mol
from ..errors import ConfigError, InputError

QED_THRESHOLD = 0.6
SA_THRESHOLD = 4.0
FP_RADIUS = 2
FP_BITS = 2048

__all__ = [
    "FP_BITS",
    "FP_RADIUS",
    "QED_THRESHOLD",
    "SA_THRESHOLD",
    "canonical_set",
    "canonicalize",
    "contains_fragment",
    "fragment_query",
    "internal_diversity",
    "load_training_set",
    "molecule_report",
    "novelty",
    "qed_score",
    "quality",
    "quiet_rdkit",
    "sa_score",
    "strict_validity",
    "to_mol",
    "uniqueness",
    "validity",
]


# ============================================================================== rdkit plumbing


def canonicalize(smiles: Any) -> str | None:
    """RDKit canonical SMILES (isomeric), or None for an invalid / empty input."""
    mol = to_mol(smiles)
    if mol is None:
        return None
    return rdkit_chem().MolToSmiles(mol)


def canonical_set(smiles: Iterable[Any]) -> set[str]:
    """The set of canonical SMILES of the valid entries of ``smiles`` (e.g. a training set)."""
    out = set()
    for s in smiles:
        c = canonicalize(s)
        if c is not None:
            out.add(c)
    return out


def _check_samples(smiles: Any) -> list[Any]:
    if isinstance(smiles, str):
        raise InputError(
            "expected a list of SMILES strings (None for failed samples), got a single string; wrap it in a list."
        )
    try:
        out = list(smiles)
    except TypeError:
        raise InputError(f"expected a list of SMILES strings, got {type(smiles).__name__}.") from None
    if not out:
        raise InputError("no samples were given; metrics need at least one (possibly invalid) sample.")
    return out


def _canonical_list(smiles: Sequence[Any]) -> list[str | None]:
    return [canonicalize(s) for s in smiles]


# ============================================================================== scores


@lru_cache(maxsize=1)
def _sascorer() -> ModuleType:
    """Load RDKit's Contrib ``SA_Score/sascorer.py`` (shipped in the rdkit wheel) as a module."""
    from rdkit import RDConfig

    path = os.path.join(RDConfig.RDContribDir, "SA_Score", "sascorer.py")
    if not os.path.isfile(path):
        raise ConfigError(
            f"RDKit's SA_Score contrib module is missing ({path}); install an rdkit wheel that ships Contrib "
            "(pip install rdkit) to compute SA scores."
        )
    spec = importlib.util.spec_from_file_location("leapgen_rdkit_sascorer", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def sa_score(mol_or_smiles: Any) -> float | None:
    """Synthetic accessibility (1 easy .. 10 hard) of a Mol or SMILES; None for an invalid molecule."""
    mol = as_mol(mol_or_smiles)
    if mol is None:
        return None
    with quiet_rdkit():
        v = _sascorer().calculateScore(mol)
    return None if v is None else float(v)


# ============================================================================== set metrics


def validity(smiles: Sequence[Any]) -> float:
    """Fraction of samples that are valid molecules (None / empty / unparsable count as invalid)."""
    s = _check_samples(smiles)
    return sum(to_mol(x) is not None for x in s) / len(s)


def strict_validity(safe_strings: Sequence[Any]) -> float:
    """Fraction of raw generated strings (SAFE strings are SMILES) that parse as **one** connected
    molecule with no repair: GenMol's ``fix=True`` largest-fragment step not applied."""
    s = _check_samples(safe_strings)
    n = 0
    for x in s:
        mol = to_mol(x)
        if mol is not None and len(rdkit_chem().GetMolFrags(mol)) == 1:
            n += 1
    return n / len(s)


def uniqueness(smiles: Sequence[Any]) -> float:
    """Distinct canonical SMILES among the valid samples / valid samples (0.0 when none is valid)."""
    can = [c for c in _canonical_list(_check_samples(smiles)) if c is not None]
    return len(set(can)) / len(can) if can else 0.0


def novelty(smiles: Sequence[Any], training_set: Iterable[str]) -> float:
    """Distinct valid generated molecules absent from ``training_set`` / distinct valid molecules.

    ``training_set`` holds **canonical** SMILES (RDKit ``MolToSmiles``; build it with
    :func:`canonical_set`); a set is used as is, any other iterable is turned into one.
    0.0 when no sample is valid.
    """
    train = training_set if isinstance(training_set, (set, frozenset)) else set(training_set)
    uniq = {c for c in _canonical_list(_check_samples(smiles)) if c is not None}
    if not uniq:
        return 0.0
    return sum(c not in train for c in uniq) / len(uniq)


def load_training_set(source: str | Iterable[str] | None = "moses") -> tuple[set[str] | None, str]:
    """The canonical training SMILES for novelty, and a description of where they come from.

    ``"moses"``: the MOSES training split (1.58M SMILES, read from the molsets wheel by
    :func:`leapgen.data.molecules.read_moses_smiles`), taken as canonical (MOSES stores RDKit
    canonical SMILES; 99.95% of a 20k sample are unchanged by RDKit 2026.09's canonicalisation).
    An iterable: canonicalised here. None: no novelty.
    """
    if source is None:
        return None, "none"
    if isinstance(source, str):
        if source != "moses":
            raise ConfigError(f"training_set must be 'moses', an iterable of SMILES or None, got {source!r}.")
        from ..data.molecules import read_moses_smiles

        smiles = read_moses_smiles("train")
        return set(smiles), f"MOSES train split ({len(smiles):,} SMILES, molsets wheel)"
    train = canonical_set(source)
    return train, f"{len(train):,} given SMILES"


def quality(
    smiles: Sequence[Any],
    qed_threshold: float = QED_THRESHOLD,
    sa_threshold: float = SA_THRESHOLD,
) -> float:
    """GenMol's quality: distinct valid molecules with QED >= 0.6 and SA <= 4, divided by N (all samples)."""
    s = _check_samples(smiles)
    uniq = {c for c in _canonical_list(s) if c is not None}
    good = 0
    for c in uniq:
        mol = to_mol(c)
        q, sa = qed_score(mol), sa_score(mol)
        if q is not None and sa is not None and q >= qed_threshold and sa <= sa_threshold:
            good += 1
    return good / len(s)


def _fingerprints(mols: Sequence[Any]) -> list[Any]:
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=FP_RADIUS, fpSize=FP_BITS, includeChirality=False)
    return [gen.GetFingerprint(m) for m in mols]


def internal_diversity(smiles: Sequence[Any], dedupe: bool = True) -> float:
    """1 - mean pairwise (i < j) Tanimoto similarity of Morgan r=2, 2048-bit fingerprints.

    Invalid samples are ignored. ``dedupe=True``: over distinct canonical molecules (TDC / GenMol);
    ``dedupe=False``: over every valid sample. Fewer than two molecules: 0.0.
    """
    from rdkit import DataStructs

    can = [c for c in _canonical_list(_check_samples(smiles)) if c is not None]
    if dedupe:
        can = sorted(set(can))
    if len(can) < 2:
        return 0.0
    fps = _fingerprints([to_mol(c) for c in can])
    total, pairs = 0.0, 0
    for i in range(len(fps) - 1):
        sims = DataStructs.BulkTanimotoSimilarity(fps[i], fps[i + 1 :])
        total += float(sum(sims))
        pairs += len(sims)
    return 1.0 - total / pairs


# ============================================================================== report


def molecule_report(
    smiles: Sequence[Any],
    training_set: Iterable[str] | None = None,
    *,
    safe_strings: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Every metric of this module for one set of samples, computed in one pass.

    Returns ``num_samples, num_valid, num_unique, validity, uniqueness, novelty`` (None without a
    training set), ``quality``, ``diversity`` (TDC, distinct molecules), ``diversity_all`` (every
    valid sample), ``qed_mean``, ``sa_mean`` (over distinct valid molecules), ``frac_qed_ok``,
    ``frac_sa_ok`` (over distinct valid), and ``strict_validity`` when ``safe_strings`` are given.
    """
    s = _check_samples(smiles)
    n = len(s)
    can = _canonical_list(s)
    valid = [c for c in can if c is not None]
    uniq = sorted(set(valid))
    qeds, sas, good = [], [], 0
    for c in uniq:
        mol = to_mol(c)
        q, sa = qed_score(mol), sa_score(mol)
        qeds.append(q)
        sas.append(sa)
        if q is not None and sa is not None and q >= QED_THRESHOLD and sa <= SA_THRESHOLD:
            good += 1
    nov = None
    if training_set is not None:
        train = training_set if isinstance(training_set, (set, frozenset)) else set(training_set)
        nov = sum(c not in train for c in uniq) / len(uniq) if uniq else 0.0
    rep: dict[str, Any] = {
        "num_samples": n,
        "num_valid": len(valid),
        "num_unique": len(uniq),
        "validity": len(valid) / n,
        "uniqueness": len(uniq) / len(valid) if valid else 0.0,
        "novelty": nov,
        "quality": good / n,
        "diversity": internal_diversity(uniq, dedupe=True) if uniq else 0.0,
        "diversity_all": internal_diversity(valid, dedupe=False) if valid else 0.0,
        "qed_mean": _mean([q for q in qeds if q is not None]),
        "sa_mean": _mean([x for x in sas if x is not None]),
        "frac_qed_ok": _mean([float(q is not None and q >= QED_THRESHOLD) for q in qeds]),
        "frac_sa_ok": _mean([float(x is not None and x <= SA_THRESHOLD) for x in sas]),
    }
    if safe_strings is not None:
        if len(list(safe_strings)) != n:
            raise InputError(
                f"safe_strings has {len(list(safe_strings))} entries for {n} samples; give one per sample."
            )
        rep["strict_validity"] = strict_validity(safe_strings)
    return rep


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else math.nan
