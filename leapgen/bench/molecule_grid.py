"""The picture of generated molecules: a grid of valid ones drawn by RDKit with QED / SA legends.

Written by ``leapgen bench molecule`` (``docs/molecule_samples.png``, from
:func:`leapgen.bench.molecule.run_molecule_bench`, which re-exports :func:`save_grid`) and by
``leapgen generate molecule``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from . import molecule_metrics as mm


def save_grid(
    smiles: Sequence[Any],
    path: str | Path,
    n: int = 16,
    per_row: int = 4,
    sub_size: int = 260,
    title: str | None = None,
) -> dict[str, Any]:
    """Draw the first ``n`` valid molecules of ``smiles`` in a grid (RDKit) with QED / SA legends."""
    from rdkit.Chem import Draw

    mols, legends, picked = [], [], []
    for s in smiles:
        mol = mm.to_mol(s)
        if mol is None:
            continue
        q, sa = mm.qed_score(mol), mm.sa_score(mol)
        mols.append(mol)
        legends.append(f"QED {q:.2f}  SA {sa:.1f}")
        picked.append(mm.canonicalize(s))
        if len(mols) == n:
            break
    if not mols:
        raise InputError("no valid molecule to draw.")
    img = Draw.MolsToGridImage(mols, molsPerRow=per_row, subImgSize=(sub_size, sub_size), legends=legends)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    img.save(p)
    return {"path": str(p), "smiles": picked, "legends": legends, "title": title, "size": list(img.size)}
