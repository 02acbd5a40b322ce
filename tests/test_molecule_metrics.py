"""RDKit molecule metrics (``leapgen.bench.molecule_metrics``) on known molecules."""

from __future__ import annotations

import itertools
import logging

import pytest
import rdkit  # noqa: E402,F401  (the molecule extra; `make install-test` installs it)
from rdkit import Chem, DataStructs  # noqa: E402
from rdkit.Chem import QED, AllChem  # noqa: E402

from leapgen.bench import molecule_metrics as mm  # noqa: E402
from leapgen.errors import InputError  # noqa: E402

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
ASPIRIN_OTHER_SPELLING = "OC(=O)c1ccccc1OC(C)=O"
PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
IBUPROFEN = "CC(C)Cc1ccc(cc1)C(C)C(=O)O"
CELECOXIB = "Cc1ccc(-c2cc(C(F)(F)F)nn2-c2ccc(S(N)(=O)=O)cc2)cc1"
DIAZEPAM = "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21"
STRYCHNINE = "O=C1C[C@H]2OCC=C3CN4CC[C@@]56[C@H]4C[C@H]3[C@H]2[C@H]6N1c1ccccc15"
INVALID = ["C1CC", "c1ccccc", "not a smiles", "C(C)(C)(C)(C)C", "", None]


def test_qed_matches_rdkit_and_the_published_aspirin_value():
    ref = QED.qed(Chem.MolFromSmiles(ASPIRIN))
    assert mm.qed_score(ASPIRIN) == pytest.approx(ref, abs=1e-9)
    assert mm.qed_score(Chem.MolFromSmiles(ASPIRIN)) == pytest.approx(ref, abs=1e-9)
    # Bickerton et al. 2012 list aspirin's QED as 0.55
    assert mm.qed_score(ASPIRIN) == pytest.approx(0.55, abs=0.01)
    assert mm.qed_score(IBUPROFEN) > 0.6 > mm.qed_score(PARACETAMOL)
    assert mm.qed_score("C1CC") is None and mm.qed_score(None) is None


def test_sa_score_ranks_simple_drugs_easy_and_a_complex_alkaloid_hard():
    asp = mm.sa_score(ASPIRIN)
    # Ertl & Schuffenhauer's scorer gives aspirin about 1.6 (easy to make)
    assert asp == pytest.approx(1.58, abs=0.05)
    for s in (IBUPROFEN, CELECOXIB, DIAZEPAM):
        assert 1.0 <= mm.sa_score(s) <= 3.0
    assert mm.sa_score(STRYCHNINE) > 4.0  # many stereocentres, fused rings
    assert mm.sa_score(ASPIRIN_OTHER_SPELLING) == pytest.approx(asp)
    assert mm.sa_score("nonsense(") is None


def test_validity_counts_invalid_strings_and_none():
    samples = [ASPIRIN, IBUPROFEN, *INVALID]
    assert mm.validity(samples) == pytest.approx(2 / len(samples))
    assert mm.validity([ASPIRIN]) == 1.0
    assert mm.validity([None, "C1CC"]) == 0.0


def test_strict_validity_rejects_disconnected_raw_strings():
    assert mm.strict_validity([ASPIRIN, "c1ccccc1.CCO", "C1CC", None]) == pytest.approx(0.25)


def test_duplicates_lower_uniqueness_through_canonical_smiles():
    assert mm.uniqueness([ASPIRIN, IBUPROFEN, DIAZEPAM]) == 1.0
    # the same molecule spelled two ways is a duplicate
    assert mm.uniqueness([ASPIRIN, ASPIRIN_OTHER_SPELLING, IBUPROFEN, DIAZEPAM]) == pytest.approx(3 / 4)
    # uniqueness is over valid samples: invalid ones neither help nor hurt
    assert mm.uniqueness([ASPIRIN, ASPIRIN, None, "C1CC"]) == pytest.approx(1 / 2)
    assert mm.uniqueness([None, "C1CC"]) == 0.0


def test_novelty_against_a_canonical_training_set():
    train = mm.canonical_set([ASPIRIN_OTHER_SPELLING, PARACETAMOL, "C1CC"])
    assert train == {
        Chem.MolToSmiles(Chem.MolFromSmiles(ASPIRIN)),
        Chem.MolToSmiles(Chem.MolFromSmiles(PARACETAMOL)),
    }
    assert mm.novelty([ASPIRIN, IBUPROFEN, IBUPROFEN, None], train) == pytest.approx(1 / 2)
    assert mm.novelty([ASPIRIN, PARACETAMOL], list(train)) == 0.0
    assert mm.novelty([IBUPROFEN, DIAZEPAM], set()) == 1.0


def test_quality_is_unique_valid_with_qed_and_sa_over_all_samples():
    # ibuprofen, celecoxib, diazepam pass both; aspirin/paracetamol fail QED; strychnine fails SA
    samples = [IBUPROFEN, CELECOXIB, DIAZEPAM, ASPIRIN, PARACETAMOL, STRYCHNINE, None, "C1CC"]
    assert mm.quality(samples) == pytest.approx(3 / 8)
    # duplicates count once; the denominator stays the number of samples
    assert mm.quality([IBUPROFEN, IBUPROFEN, IBUPROFEN, None]) == pytest.approx(1 / 4)
    assert mm.quality([IBUPROFEN], qed_threshold=0.9) == 0.0
    assert mm.quality([None, "C1CC"]) == 0.0


def _brute_force_diversity(smiles: list[str]) -> float:
    """The TDC / GCPN formula with RDKit's classic Morgan bit-vector API."""
    fps = [
        AllChem.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(s), 2, nBits=2048, useChirality=False)
        for s in smiles
    ]
    sims = [DataStructs.TanimotoSimilarity(a, b) for a, b in itertools.combinations(fps, 2)]
    return 1.0 - sum(sims) / len(sims)


def test_internal_diversity_matches_the_pairwise_formula_and_is_zero_for_identical_sets():
    mols = [ASPIRIN, IBUPROFEN, CELECOXIB, DIAZEPAM, PARACETAMOL]
    div = mm.internal_diversity(mols)
    assert 0.5 < div < 1.0
    assert div == pytest.approx(_brute_force_diversity(mols), abs=1e-9)
    # identical sets: no diversity, with or without deduplication
    assert mm.internal_diversity([ASPIRIN] * 5) == 0.0
    assert mm.internal_diversity([ASPIRIN] * 5, dedupe=False) == pytest.approx(0.0, abs=1e-12)
    assert mm.internal_diversity([ASPIRIN, ASPIRIN_OTHER_SPELLING], dedupe=False) == pytest.approx(
        0.0, abs=1e-12
    )
    # without deduplication, repeats pull diversity down; with it (TDC) they do not matter
    dup = [ASPIRIN, ASPIRIN, ASPIRIN, IBUPROFEN]
    assert (
        mm.internal_diversity(dup, dedupe=False)
        < mm.internal_diversity(dup)
        == pytest.approx(_brute_force_diversity([ASPIRIN, IBUPROFEN]))
    )
    assert mm.internal_diversity([ASPIRIN, None, "C1CC"]) == 0.0


def test_molecule_report_agrees_with_the_single_metrics():
    samples = [IBUPROFEN, CELECOXIB, DIAZEPAM, ASPIRIN, ASPIRIN_OTHER_SPELLING, STRYCHNINE, None, "C1CC", "x"]
    train = mm.canonical_set([DIAZEPAM])
    rep = mm.molecule_report(samples, train, safe_strings=samples)
    assert rep["num_samples"] == 9 and rep["num_valid"] == 6 and rep["num_unique"] == 5
    assert rep["validity"] == pytest.approx(mm.validity(samples))
    assert rep["uniqueness"] == pytest.approx(mm.uniqueness(samples))
    assert rep["novelty"] == pytest.approx(mm.novelty(samples, train)) == pytest.approx(4 / 5)
    assert rep["quality"] == pytest.approx(mm.quality(samples)) == pytest.approx(3 / 9)
    assert rep["diversity"] == pytest.approx(mm.internal_diversity(samples))
    assert rep["diversity_all"] == pytest.approx(mm.internal_diversity(samples, dedupe=False))
    assert rep["strict_validity"] == pytest.approx(6 / 9)
    assert 0 < rep["qed_mean"] < 1 and 1 <= rep["sa_mean"] <= 10
    assert mm.molecule_report(samples)["novelty"] is None
    empty = mm.molecule_report([None, "C1CC"])
    assert empty["validity"] == 0.0 and empty["quality"] == 0.0 and empty["diversity"] == 0.0


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="single string"):
        mm.validity(ASPIRIN)
    with pytest.raises(InputError, match="at least one"):
        mm.molecule_report([])
    with pytest.raises(InputError, match="list of SMILES"):
        mm.uniqueness(42)
    with pytest.raises(InputError, match="one per sample"):
        mm.molecule_report([ASPIRIN, IBUPROFEN], safe_strings=[ASPIRIN])


def test_rdkit_parse_errors_are_not_logged(capfd, caplog):
    with caplog.at_level(logging.DEBUG):
        assert mm.validity(INVALID) == 0.0
    err = capfd.readouterr().err
    assert "SMILES Parse Error" not in err and "Explicit valence" not in err


def test_contains_fragment_handles_attachment_points():
    # an attachment point needs a neighbour: benzene alone does not contain phenyl-[*]
    assert mm.contains_fragment("c1ccccc1CC1CCNCC1", "[*]c1ccccc1")
    assert not mm.contains_fragment("c1ccccc1", "[*]c1ccccc1")
    # labelled attachment points ([1*], [*:1]) match any neighbour too
    assert mm.contains_fragment("Cc1ccccc1", "[1*]c1ccccc1")
    assert mm.contains_fragment("Cc1ccccc1", "[*:2]c1ccccc1")
    # two attachment points: ortho-disubstituted benzene in aspirin, not in phenyl acetate
    assert mm.contains_fragment(ASPIRIN, "[*]c1ccccc1[*]")
    assert not mm.contains_fragment("CC(=O)Oc1ccccc1", "[*]c1ccccc1[*]")
    assert not mm.contains_fragment("CC1CCNCC1", "[*]c1ccccc1")
    assert mm.contains_fragment(DIAZEPAM, "c1ccccc1")  # no attachment point: plain substructure
    assert not mm.contains_fragment(None, "c1ccccc1") and not mm.contains_fragment("C1CC", "C")
    with pytest.raises(InputError, match="not valid SMILES"):
        mm.contains_fragment(ASPIRIN, "[*]c1cccc")
    with pytest.raises(InputError, match="non-empty"):
        mm.fragment_query("")
