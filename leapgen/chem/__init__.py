"""Chemistry helpers (RDKit / SAFE) shared by the molecule pipeline, its benchmark and its recipe.

To the side of the layers: pipelines, bench and train import it; it imports only
``leapgen.errors`` and the SAFE tokenizer. RDKit and safe-mol are imported lazily (the
``molecule`` extra).
"""

from .fragments import (
    attachment_variants,
    contains_all,
    contains_fragment,
    fragment_query,
    link_two_step,
    num_attachment_points,
    safe_or_empty,
)
from .mols import as_mol, qed_score, qed_scores, quiet_rdkit, rdkit_chem, smiles_text, to_mol

__all__ = [
    "as_mol",
    "attachment_variants",
    "contains_all",
    "contains_fragment",
    "fragment_query",
    "link_two_step",
    "num_attachment_points",
    "qed_score",
    "qed_scores",
    "quiet_rdkit",
    "rdkit_chem",
    "smiles_text",
    "to_mol",
    "safe_or_empty",
]
