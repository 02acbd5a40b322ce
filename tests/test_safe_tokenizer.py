"""SAFE tokenizer: fixed special ids, word-level vocabulary over SAFE's splitter, SMILES <-> SAFE,
GenMol's largest-fragment fix, per-molecule errors in batch helpers, save / load."""

from __future__ import annotations

import json

import pytest
import rdkit  # noqa: E402,F401  (the molecule extra; `make install-test` installs it)
import safe  # noqa: E402,F401
from rdkit import Chem  # noqa: E402

from leapgen.errors import AssetNotFoundError, ConfigError, InputError  # noqa: E402
from leapgen.tokenizers import safe as st  # noqa: E402

SMILES = [
    "CC(=O)Nc1ccc(O)cc1",
    "CCOC(=O)c1ccc(NC(=O)CCc2ccccc2)cc1",
    "Cc1c(Cl)cccc1Nc1ncccc1C(=O)OCC(O)CO",
    "CC(C)(C)C(=O)C(Oc1ccc(Cl)cc1)n1ccnc1",
    "COc1ccc2[nH]cc(CCN)c2c1",
    "O=C(O)c1ccccc1O",
    "CN1CCC[C@H]1c1cccnc1",
    "c1ccc2ccccc2c1",
    "CC[NH+](CC)CC",
    "FC(F)(F)c1ccc(Br)cc1",
]


def canon(s: str) -> str:
    return Chem.MolToSmiles(Chem.MolFromSmiles(s))


@pytest.fixture(scope="module")
def safes() -> list[str]:
    return [st.smiles_to_safe(s) for s in SMILES]


@pytest.fixture(scope="module")
def tok(safes) -> st.SAFETokenizer:
    return st.SAFETokenizer.train(safes)


def test_special_ids_are_fixed(tok):
    assert tok.id_to_token[:5] == ["[PAD]", "[BOS]", "[EOS]", "[MASK]", "[UNK]"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id, tok.unk_token_id) == (0, 1, 2, 3, 4)
    assert (st.PAD_ID, st.BOS_ID, st.EOS_ID, st.MASK_ID, st.UNK_ID) == (0, 1, 2, 3, 4)
    with pytest.raises(ConfigError, match="special tokens"):
        st.SAFETokenizer(["C", "[PAD]", "[BOS]", "[EOS]", "[MASK]", "[UNK]"])
    with pytest.raises(ConfigError, match="duplicate"):
        st.SAFETokenizer(list(st.SPECIAL_TOKENS) + ["C", "C"])


def test_vocabulary_is_the_splitter_tokens_most_frequent_first(tok, safes):
    from collections import Counter

    counts = Counter(t for s in safes for t in st.split(s))
    assert set(tok.id_to_token[5:]) == set(counts)
    freqs = [counts[t] for t in tok.id_to_token[5:]]
    assert freqs == sorted(freqs, reverse=True)
    assert "Cl" in tok.token_to_id and "Br" in tok.token_to_id and "[nH]" in tok.token_to_id  # multi-char atoms
    small = st.SAFETokenizer.train(safes, min_frequency=3)
    assert all(counts[t] >= 3 for t in small.id_to_token[5:]) and len(small) < len(tok)


def test_encode_decode_round_trip(tok, safes):
    for s in safes:
        ids = tok.encode(s)
        assert all(i >= 5 for i in ids)
        assert tok.decode(ids) == s
        with_special = tok.encode(s, add_special_tokens=True)
        assert with_special[0] == st.BOS_ID and with_special[-1] == st.EOS_ID and with_special[1:-1] == ids
        assert tok.decode(with_special) == s
        assert tok.decode(with_special, skip_special_tokens=False) == "[BOS]" + s + "[EOS]"


def test_smiles_safe_round_trip_gives_the_same_molecule(safes):
    for smi, sf in zip(SMILES, safes):
        assert Chem.MolFromSmiles(sf) is not None  # a SAFE string is SMILES too
        back = st.safe_to_smiles(sf)
        assert back is not None
        want = Chem.MolToSmiles(Chem.MolFromSmiles(smi), isomericSmiles=False)
        assert Chem.MolToSmiles(Chem.MolFromSmiles(back), isomericSmiles=False) == want
    multi = [s for s in safes if "." in s]
    assert len(multi) >= 5  # BRICS really cut most of them into fragments


def test_fix_keeps_the_largest_fragment():
    # two fragments joined by ring-closure digit 5, plus a disconnected ethane
    joined = canon("c15ccccc1.C1CCNCC15")  # a SAFE string is SMILES: RDKit joins the two fragments
    assert "." not in joined
    assert st.safe_to_smiles("c15ccccc1.C1CCNCC15.CC", fix=True) == joined
    assert st.safe_to_smiles("c15ccccc1.C1CCNCC15.CC", fix=False) == canon(joined + ".CC")
    # an unmatched attachment: fix drops the bond and the largest piece is kept
    assert st.safe_to_smiles("c15ccccc1.C1CCNCC1", fix=True) == canon("C1CCNCC1") or st.safe_to_smiles(
        "c15ccccc1.C1CCNCC1", fix=True
    ) == canon("c1ccccc1")
    assert st.safe_to_smiles("c15ccccc1.C1CCNCC1", fix=False) is None


def test_invalid_inputs(tok):
    with pytest.raises(InputError, match="not a valid SMILES"):
        st.smiles_to_safe("C1CC(")
    with pytest.raises(InputError):
        st.smiles_to_safe("")
    assert st.safe_to_smiles("C1CC(((") is None
    assert st.safe_to_smiles("") is None
    with pytest.raises(InputError, match="outside this SAFE vocabulary"):
        tok.decode([len(tok) + 3])
    assert tok.decode_to_smiles([st.BOS_ID, st.MASK_ID, st.EOS_ID]) is None
    # tokens the vocabulary never saw map to [UNK], and [UNK] is never a molecule
    ids = tok.encode("[Se]1cccc1")
    assert st.UNK_ID in ids
    assert tok.decode_to_smiles(ids) is None
    with pytest.raises(InputError):
        st.SAFETokenizer.train([])


def test_batch_helpers_report_per_molecule_errors(tok):
    res = tok.batch_smiles_to_safe(["CCO", "not a smiles", "c1ccccc1O"])
    assert res.ok == [True, False, True] and res.num_failed == 1
    assert res.values[1] is None and "molecule 1" in res.errors[1] and "not a valid SMILES" in res.errors[1]
    assert st.safe_to_smiles(res.values[0]) == "CCO"
    dec = tok.batch_safe_to_smiles(["CCO", "C1CC(((", "c15ccccc1.C1CCNCC15"])
    assert dec.ok == [True, False, True]
    assert dec.values[1] is None and "molecule 1" in dec.errors[1]
    enc = tok.batch_encode(["CCO", 5])
    assert enc.ok == [True, False] and enc.values[1] is None
    seqs = tok.batch_decode_to_smiles([tok.encode("c1ccccc1O", add_special_tokens=True), [st.BOS_ID, 10**6], [st.MASK_ID]])
    assert seqs.ok == [True, False, False]
    assert seqs.values[0] == canon("Oc1ccccc1")


def test_save_and_load(tok, tmp_path):
    path = tok.save_pretrained(tmp_path / "tok")
    data = json.loads(path.read_text())
    assert data["special_tokens"] == {"[PAD]": 0, "[BOS]": 1, "[EOS]": 2, "[MASK]": 3, "[UNK]": 4}
    again = st.SAFETokenizer.from_pretrained(tmp_path / "tok")
    assert again.id_to_token == tok.id_to_token
    s = st.smiles_to_safe(SMILES[1])
    assert again.encode(s) == tok.encode(s)
    with pytest.raises(AssetNotFoundError):
        st.SAFETokenizer.from_pretrained(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / st.FILE_NAME).write_text("{}")
    with pytest.raises(AssetNotFoundError, match="not a leapgen SAFE tokenizer"):
        st.SAFETokenizer.from_pretrained(tmp_path / "bad")
