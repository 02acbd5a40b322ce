"""Fragments with attachment points: substructure queries, attachment variants, two-step linking.

A fragment is SMILES with attachment points (``[*]``, ``[1*]``, ``[*:1]``). :func:`fragment_query`
turns it into an RDKit query whose attachment points match any atom, so a molecule contains the
fragment when the fragment's real atoms are there **and** something is bonded at every attachment
point (stricter than GenMol's filter, which deletes the attachment atoms and so also accepts the
bare fragment). :func:`link_two_step` is GenMol v1 / SAFE-GPT's two-step linker design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from .mols import as_mol, quiet_rdkit, rdkit_chem


def fragment_query(fragment: str) -> Any:
    """An RDKit query for a fragment SMILES whose attachment points (``*``, ``[*]``, ``[1*]``, ...)
    match any atom. InputError for an invalid fragment."""
    Chem = rdkit_chem()
    if not isinstance(fragment, str) or not fragment.strip():
        raise InputError(f"a fragment must be a non-empty SMILES string, got {fragment!r}.")
    with quiet_rdkit():
        mol = Chem.MolFromSmiles(fragment)
    if mol is None:
        raise InputError(f"fragment {fragment!r} is not valid SMILES; write attachment points as [*] or [1*].")
    for atom in mol.GetAtoms():
        if atom.GetAtomicNum() == 0:  # attachment labels ([1*], [*:1]) must not restrict the match
            atom.SetIsotope(0)
            atom.SetAtomMapNum(0)
    params = Chem.AdjustQueryParameters.NoAdjustments()
    params.makeDummiesQueries = True
    return Chem.AdjustQueryProperties(mol, params)


def contains_fragment(smiles: Any, fragment: str | Any) -> bool:
    """True when the molecule ``smiles`` has ``fragment`` (SMILES with attachment points, or a
    query from :func:`fragment_query`) as a substructure; False for an invalid molecule."""
    mol = as_mol(smiles)
    if mol is None:
        return False
    query = fragment_query(fragment) if isinstance(fragment, str) else fragment
    return bool(mol.HasSubstructMatch(query))


def contains_all(smiles: str, queries: Sequence[Any]) -> bool:
    """True when the molecule holds every query of :func:`fragment_query` (False if invalid)."""
    Chem = rdkit_chem()
    mol = Chem.MolFromSmiles(smiles)
    return mol is not None and all(mol.HasSubstructMatch(q) for q in queries)


def num_attachment_points(smiles: str) -> int:
    mol = rdkit_chem().MolFromSmiles(smiles)
    return 0 if mol is None else sum(a.GetAtomicNum() == 0 for a in mol.GetAtoms())


def attachment_variants(mol_or_smiles: Any, depth: int) -> list[str]:
    """The molecule with one attachment point added at each possible atom (SAFE's
    ``list_individual_attach_points``), sorted: SAFE returns a set, whose order changes with
    ``PYTHONHASHSEED``, so seeded runs sort it."""
    from safe.utils import list_individual_attach_points

    mol = rdkit_chem().MolFromSmiles(mol_or_smiles) if isinstance(mol_or_smiles, str) else mol_or_smiles
    return sorted(list_individual_attach_points(mol, depth=depth))


def link_two_step(
    frags: Sequence[str], side_smiles: Sequence[str | None], n: int
) -> tuple[list[str | None], list[str | None], dict[str, Any]]:
    """GenMol / SAFE-GPT two-step linking: ``side_smiles`` alternate completions of ``frags[0]`` and
    ``frags[1]``; each one that contains its fragment is cut head-linker-tail with SAFE's
    ``MolSlicer`` (shortest linker, the fragment as head), and every linker found joins the two
    fragments (``MolSlicer.link_fragments``). Returns n SMILES (None where too few products),
    error messages and counts (``side_completions_kept``, ``linkers``, ``linker_count``)."""
    from safe.utils import MolSlicer

    Chem = rdkit_chem()
    slicer = MolSlicer(shortest_linker=True, require_ring_system=False, min_linker_size=0)
    cores = [Chem.DeleteSubstructs(Chem.MolFromSmiles(f), Chem.MolFromSmarts("[#0]")) for f in frags]
    queries = [fragment_query(f) for f in frags]
    linkers: list[str] = []
    side_ok = 0
    for k, smi in enumerate(side_smiles):
        j = k % 2
        if smi is None or not contains_all(smi, [queries[j]]):
            continue
        side_ok += 1
        try:
            _, linker, _ = slicer(smi, cores[j])
        except Exception:  # noqa: BLE001 - SAFE's slicer raises on molecules it cannot cut
            continue
        if linker is not None:
            linkers.append(Chem.MolToSmiles(linker))
    products: list[str] = []
    for linker in linkers:
        try:
            made = MolSlicer.link_fragments(linker, frags[0], frags[1]) or []
        except Exception:  # noqa: BLE001
            continue
        for p in made:
            mol = Chem.MolFromSmiles(p) if p else None
            if mol is not None and not any(a.GetAtomicNum() == 0 for a in mol.GetAtoms()):
                products.append(Chem.MolToSmiles(mol))
        if len(products) >= n:
            break
    products = products[:n]
    k = len(products)
    smiles: list[str | None] = [*products, *([None] * (n - k))]
    errors = [
        None if i < k else f"molecule {i}: two-step linking made only {k} molecules ({len(linkers)} linkers from "
        f"{side_ok} side completions that kept their fragment); ask for more samples or use linker_mode='one_step'"
        for i in range(n)
    ]
    return smiles, errors, {"side_completions_kept": side_ok, "linkers": linkers, "linker_count": len(linkers)}


def safe_or_empty(smiles: str) -> str:
    """The SAFE string of a molecule, or "" when SAFE cannot encode it."""
    from ..tokenizers.safe import smiles_to_safe

    try:
        return smiles_to_safe(smiles)
    except InputError:
        return ""


__all__ = [
    "attachment_variants",
    "contains_all",
    "contains_fragment",
    "fragment_query",
    "link_two_step",
    "num_attachment_points",
    "safe_or_empty",
]
