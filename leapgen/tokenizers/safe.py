"""SAFE molecule tokenizer: SMILES <-> SAFE strings <-> token ids.

SAFE (Noutahi et al., "Gotta be SAFE: a new framework for molecular design", 2024; package
``safe-mol``, imported as ``safe``) writes a molecule as its fragments joined by ``.``, the cut bonds
becoming matching ring-closure digits across fragments, so a SAFE string is also valid SMILES and
fragments can be generated in any order (GenMol, SAFE-GPT).

Tokens come from SAFE's own splitter (``safe.split``: the standard SMILES atom regex: bracket atoms,
``Br``/``Cl``, atoms, bonds, branches, ring digits, ``%nn``, ``.``). The vocabulary is a word-level
table trained from data (:meth:`SAFETokenizer.train`): the special tokens first, with **fixed ids**

====== ====
token  id
====== ====
[PAD]  0
[BOS]  1
[EOS]  2
[MASK] 3
[UNK]  4
====== ====

then every token seen at least ``min_frequency`` times, most frequent first (ties by string).
Unknown tokens encode to ``[UNK]``; a sequence holding ``[UNK]`` is not decodable to a molecule.

``smiles_to_safe`` / ``safe_to_smiles`` wrap ``safe.encode`` / ``safe.decode``; ``safe_to_smiles(...,
fix=True)`` follows GenMol: SAFE's ``fix`` drops fragments that do not decode and **only the largest
``.``-separated component is kept** (report validity with that in mind). The batch helpers never
raise for one bad molecule: they return one result per input (None where it failed) and one error
message per input (None where it worked).

The vocabulary is saved as one JSON file (``safe_tokenizer.json``) by :meth:`save_pretrained` and
read back by :meth:`from_pretrained`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..configuration import ConfigMixin
from ..errors import AssetNotFoundError, ConfigError, InputError

logger = logging.getLogger(__name__)

PAD, BOS, EOS, MASK, UNK = "[PAD]", "[BOS]", "[EOS]", "[MASK]", "[UNK]"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, MASK, UNK)
PAD_ID, BOS_ID, EOS_ID, MASK_ID, UNK_ID = range(5)
FILE_NAME = "safe_tokenizer.json"
FORMAT_VERSION = 1


def _safe():
    try:
        import safe  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the SAFE tokenizer needs the `safe-mol` package (and RDKit): pip install 'safe-mol>=0.2.1' rdkit"
        ) from err
    return safe


def _quiet_rdkit() -> None:
    try:
        from rdkit import RDLogger  # noqa: PLC0415

        RDLogger.DisableLog("rdApp.*")
    except ImportError:  # pragma: no cover
        pass


def split(safe_str: str) -> list[str]:
    """SAFE's regex split of a SAFE (or SMILES) string into tokens; raises InputError if it fails."""
    if not isinstance(safe_str, str):
        raise InputError(f"expected a SAFE string, got {type(safe_str).__name__}.")
    try:
        return list(_safe().split(safe_str))
    except Exception as err:  # the splitter raises when the tokens do not rejoin to the input
        raise InputError(f"cannot tokenize {safe_str!r} with the SAFE splitter ({err}); is it a SAFE/SMILES string?") from err


def largest_fragment(smiles: str) -> str:
    """The largest ``.``-separated component of a SMILES (by heavy atoms), as canonical SMILES."""
    from rdkit import Chem  # noqa: PLC0415

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise InputError(f"{smiles!r} is not a valid SMILES.")
    frags = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=True)
    best = max(frags, key=lambda m: (m.GetNumHeavyAtoms(), m.GetNumAtoms()))
    return Chem.MolToSmiles(best)


def smiles_to_safe(smiles: str, *, slicer: str = "brics", allow_empty: bool = True, canonical: bool = True) -> str:
    """Encode a SMILES as SAFE (``safe.encode``, stereo ignored as in GenMol).

    ``allow_empty=True`` keeps molecules that the slicer cannot cut (one fragment, the SMILES
    itself). Raises :class:`InputError` for an invalid SMILES or a SAFE encoding failure.
    """
    if not isinstance(smiles, str) or not smiles.strip():
        raise InputError(f"expected a non-empty SMILES string, got {smiles!r}.")
    _quiet_rdkit()
    from rdkit import Chem  # noqa: PLC0415

    if Chem.MolFromSmiles(smiles) is None:
        raise InputError(f"{smiles!r} is not a valid SMILES (RDKit cannot parse it); check the string.")
    safe = _safe()
    try:
        return safe.SAFEConverter(slicer=slicer, ignore_stereo=True).encoder(
            smiles, canonical=canonical, allow_empty=allow_empty
        )
    except Exception as err:
        raise InputError(f"SAFE could not encode {smiles!r} ({type(err).__name__}: {err}).") from err


def safe_to_smiles(safe_str: str, fix: bool = True) -> str | None:
    """Decode a SAFE string to canonical SMILES, or None when it is not a molecule.

    ``fix=True`` (GenMol): SAFE's fixer drops fragments that do not decode and the largest
    remaining component is returned. ``fix=False``: the whole string must decode, and a
    disconnected result (several components) is returned as it is.
    """
    if not isinstance(safe_str, str) or not safe_str:
        return None
    _quiet_rdkit()
    safe = _safe()
    try:
        smi = safe.decode(safe_str, canonical=True, fix=fix, ignore_errors=True)
    except Exception:  # noqa: BLE001 - any decoder failure means "not a molecule"
        return None
    if not smi:
        return None
    if not fix:
        return smi
    try:
        return largest_fragment(smi)
    except InputError:
        return None


@dataclass
class BatchResult:
    """Per-molecule results of a batch helper: ``values[i]`` is None exactly when ``errors[i]`` is set."""

    values: list[Any]
    errors: list[str | None] = field(default_factory=list)

    @property
    def ok(self) -> list[bool]:
        return [e is None for e in self.errors]

    @property
    def num_failed(self) -> int:
        return sum(e is not None for e in self.errors)


class SAFETokenizer(ConfigMixin):
    """Word-level tokenizer over SAFE tokens with fixed special ids (see the module docstring)."""

    config_name = FILE_NAME

    pad_token, bos_token, eos_token, mask_token, unk_token = SPECIAL_TOKENS
    pad_token_id, bos_token_id, eos_token_id, mask_token_id, unk_token_id = PAD_ID, BOS_ID, EOS_ID, MASK_ID, UNK_ID

    def __init__(self, vocab: Sequence[str] | dict[str, int]) -> None:
        tokens = sorted(vocab, key=vocab.get) if isinstance(vocab, dict) else list(vocab)
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ConfigError(
                f"a SAFE vocabulary must start with the special tokens {list(SPECIAL_TOKENS)} (ids 0-4), "
                f"got {tokens[:5]}."
            )
        if len(set(tokens)) != len(tokens):
            raise ConfigError("the SAFE vocabulary has duplicate tokens.")
        self.id_to_token: list[str] = tokens
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(tokens)}

    # ------------------------------------------------------------------------------ training
    @classmethod
    def train(cls, safe_strings: Iterable[str], min_frequency: int = 1, max_vocab: int | None = None) -> SAFETokenizer:
        """Build the vocabulary from SAFE strings (strings the splitter rejects are skipped)."""
        counts: Counter[str] = Counter()
        skipped = 0
        for s in safe_strings:
            try:
                counts.update(split(s))
            except InputError:
                skipped += 1
        if skipped:
            logger.warning("SAFETokenizer.train: skipped %d strings the SAFE splitter rejected", skipped)
        for t in SPECIAL_TOKENS:
            counts.pop(t, None)
        ranked = sorted((t for t, c in counts.items() if c >= min_frequency), key=lambda t: (-counts[t], t))
        if max_vocab is not None:
            ranked = ranked[: max(0, max_vocab - len(SPECIAL_TOKENS))]
        if not ranked:
            raise InputError("no SAFE tokens to build a vocabulary from; pass a non-empty list of SAFE strings.")
        return cls(list(SPECIAL_TOKENS) + ranked)

    # ------------------------------------------------------------------------------ ids
    def __len__(self) -> int:
        return len(self.id_to_token)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(range(len(SPECIAL_TOKENS)))

    def tokenize(self, safe_str: str) -> list[str]:
        return split(safe_str)

    def encode(self, safe_str: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of a SAFE string (``[BOS] ... [EOS]`` around it with ``add_special_tokens``)."""
        ids = [self.token_to_id.get(t, UNK_ID) for t in split(safe_str)]
        return [BOS_ID, *ids, EOS_ID] if add_special_tokens else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The SAFE string of ``ids``; with ``skip_special_tokens`` (default) specials are dropped.

        Raises :class:`InputError` for ids outside the vocabulary.
        """
        out = []
        n = len(self.id_to_token)
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise InputError(f"token id {i} is outside this SAFE vocabulary (0..{n - 1}).")
            if i < len(SPECIAL_TOKENS) and skip_special_tokens:
                continue
            out.append(self.id_to_token[i])
        return "".join(out)

    # ------------------------------------------------------------------------------ chemistry
    smiles_to_safe = staticmethod(smiles_to_safe)
    safe_to_smiles = staticmethod(safe_to_smiles)

    def encode_smiles(self, smiles: str, add_special_tokens: bool = False) -> list[int]:
        """SMILES -> SAFE -> ids; raises InputError for an invalid SMILES."""
        return self.encode(smiles_to_safe(smiles), add_special_tokens=add_special_tokens)

    def decode_to_smiles(self, ids: Sequence[int], fix: bool = True) -> str | None:
        """ids -> SAFE -> SMILES (None when the ids do not make a molecule or hold ``[UNK]``)."""
        body = [int(i) for i in ids if int(i) not in (PAD_ID, BOS_ID, EOS_ID)]
        if MASK_ID in body or UNK_ID in body:
            return None
        return safe_to_smiles(self.decode(body), fix=fix)

    def batch_smiles_to_safe(self, smiles: Sequence[str], **kwargs: Any) -> BatchResult:
        """SAFE strings for a list of SMILES; a failed molecule gives None and an error message."""
        values, errors = [], []
        for i, s in enumerate(smiles):
            try:
                values.append(smiles_to_safe(s, **kwargs))
                errors.append(None)
            except InputError as err:
                values.append(None)
                errors.append(f"molecule {i}: {err}")
        return BatchResult(values, errors)

    def batch_safe_to_smiles(self, safe_strings: Sequence[str], fix: bool = True) -> BatchResult:
        """SMILES for a list of SAFE strings; undecodable ones give None and an error message."""
        values, errors = [], []
        for i, s in enumerate(safe_strings):
            smi = safe_to_smiles(s, fix=fix)
            values.append(smi)
            errors.append(None if smi is not None else f"molecule {i}: SAFE string {s!r} does not decode to a molecule")
        return BatchResult(values, errors)

    def batch_encode(self, safe_strings: Sequence[str], add_special_tokens: bool = False) -> BatchResult:
        """Token ids for a list of SAFE strings; strings the splitter rejects give None and a message."""
        values, errors = [], []
        for i, s in enumerate(safe_strings):
            try:
                values.append(self.encode(s, add_special_tokens=add_special_tokens))
                errors.append(None)
            except InputError as err:
                values.append(None)
                errors.append(f"molecule {i}: {err}")
        return BatchResult(values, errors)

    def batch_decode_to_smiles(self, sequences: Sequence[Sequence[int]], fix: bool = True) -> BatchResult:
        """SMILES for a batch of id sequences; None plus an error message where there is no molecule."""
        values, errors = [], []
        for i, ids in enumerate(sequences):
            try:
                smi = self.decode_to_smiles(ids, fix=fix)
            except InputError as err:
                values.append(None)
                errors.append(f"molecule {i}: {err}")
                continue
            values.append(smi)
            errors.append(None if smi is not None else f"molecule {i}: the generated SAFE string does not decode to a molecule")
        return BatchResult(values, errors)

    # ------------------------------------------------------------------------------ save / load
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "leapgen-safe-tokenizer",
            "version": FORMAT_VERSION,
            "splitter": "safe.split (SAFESplitter regex)",
            "special_tokens": {t: i for i, t in enumerate(SPECIAL_TOKENS)},
            "vocab": self.id_to_token,
        }

    def config_dict(self) -> dict[str, Any]:
        """What ``save_pretrained`` writes (:class:`leapgen.configuration.ConfigMixin`, the path every
        leapgen component uses) to ``safe_tokenizer.json``."""
        return self.to_dict()

    @classmethod
    def from_config(cls, config: dict[str, Any], **_: Any) -> SAFETokenizer:
        if config.get("format") != "leapgen-safe-tokenizer" or "vocab" not in config:
            raise AssetNotFoundError("the file is not a leapgen SAFE tokenizer file (no 'format'/'vocab' entries).")
        return cls(config["vocab"])

    def __repr__(self) -> str:
        return f"SAFETokenizer(vocab_size={self.vocab_size})"


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MASK_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "BatchResult",
    "SAFETokenizer",
    "largest_fragment",
    "safe_to_smiles",
    "smiles_to_safe",
    "split",
]
