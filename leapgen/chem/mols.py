"""RDKit basics shared by the molecule pipeline, its benchmark and its training recipe.

RDKit is the ``molecule`` extra: :func:`rdkit_chem` imports it with an error that says how to
install it; :func:`quiet_rdkit` silences RDKit's C++ log (parse errors of invalid SMILES) inside a
block; :func:`to_mol` parses SMILES to a ``Mol`` or None; :func:`qed_score` / :func:`qed_scores`
are RDKit's QED (Bickerton et al. 2012, default weights), the pipeline's default lead-optimisation
score.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ConfigError, InputError


def rdkit_chem() -> Any:
    """``rdkit.Chem``, or a ConfigError saying how to install RDKit."""
    try:
        from rdkit import Chem
    except ImportError as err:  # pragma: no cover - rdkit is a declared extra
        raise ConfigError(
            "molecules need RDKit; install the molecule extra: pip install 'leapgen[molecule]' (or pip install rdkit)."
        ) from err
    return Chem


@contextlib.contextmanager
def quiet_rdkit() -> Iterator[None]:
    """Silence RDKit's C++ log (parse errors of invalid SMILES) inside the block."""
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")
    try:
        yield
    finally:
        RDLogger.EnableLog("rdApp.*")


def smiles_text(what: str, smiles: str) -> str:
    """A user's SMILES string without surrounding whitespace, refused (``InputError``, naming ``what``)
    when whitespace or a non-ASCII character is left inside: RDKit reads the text after a space as
    the molecule's name and stops at a non-ASCII character, so ``'CC O'`` would silently be ``'CC'``."""
    text = smiles.strip()
    bad = [c for c in text if c.isspace() or not c.isascii()]
    if bad:
        raise InputError(f"{what} = {smiles!r} has {bad[0]!r} inside; SMILES is one word of ASCII characters "
                         f"(RDKit would read only the part before it). Remove it or pass one SMILES per list item.")
    return text


def to_mol(smiles: Any) -> Any:
    """RDKit ``Mol`` for a SMILES string, or None when it is None, empty, not a string or invalid."""
    if not isinstance(smiles, str) or not smiles.strip():
        return None
    Chem = rdkit_chem()
    with quiet_rdkit():
        mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def as_mol(x: Any) -> Any:
    """A ``Mol`` from SMILES (via :func:`to_mol`) or an RDKit ``Mol`` passed through."""
    if isinstance(x, str) or x is None:
        return to_mol(x)
    return x


def qed_score(mol_or_smiles: Any) -> float | None:
    """QED (0..1, higher = more drug-like) of a Mol or SMILES; None for an invalid molecule."""
    mol = as_mol(mol_or_smiles)
    if mol is None:
        return None
    from rdkit.Chem import QED

    with quiet_rdkit():
        return float(QED.qed(mol))


def qed_scores(molecules: Sequence[Any]) -> list[float | None]:
    """QED of each molecule (SMILES or Mol); None where there is no molecule."""
    return [qed_score(m) for m in molecules]


__all__ = ["as_mol", "qed_score", "qed_scores", "quiet_rdkit", "rdkit_chem", "smiles_text", "to_mol"]
