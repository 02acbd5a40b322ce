"""The shipped recognition assets (assets/ocr-en, assets/peptide): load offline, run every sampler,
keep the exactness and constraint guarantees on real inputs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from leapgen.data import ocr as ocr_corpus
from leapgen.data import peptide as pep_corpus
from leapgen.pipelines import Pipeline


@pytest.fixture(scope="module")
def ocr_pipe():
    return Pipeline.from_pretrained("leapgen/ocr-en")


@pytest.fixture(scope="module")
def pep_pipe():
    return Pipeline.from_pretrained("leapgen/peptide")


def test_shipped_ocr_reads_held_out_fonts_and_speculative_equals_ar(ocr_pipe):
    _, held = ocr_corpus.split_fonts(ocr_corpus.find_fonts())
    rng = random.Random(0)
    images = [ocr_corpus.render_word(w, held[i % len(held)], rng) for i, w in enumerate(["probe", "values", "x9k2"])]
    cppd = ocr_pipe(images)
    ar = ocr_pipe(images, sampler="ar")
    spec = ocr_pipe(images, sampler="speculative")
    assert spec.texts == ar.texts
    assert cppd.stats.target_forwards == 1 and ar.stats.target_forwards >= 1
    for out in (cppd, ar):
        assert all(t is not None and set(t) <= set(ocr_corpus.CHARSET) for t in out.texts)
        assert all(len(c) == len(t) for c, t in zip(out.confidences, out.texts))


def test_shipped_peptide_pmc_meets_every_precursor(pep_pipe):
    rng = random.Random(1)
    spectra = []
    for seq in ("PEPTLDEK", "GASPVTK", "LLDEAVR"):
        s = pep_corpus.simulate(seq, 2, rng)
        spectra.append({"mz": s["mz"], "intensity": s["intensity"], "precursor_mz": s["precursor_mz"], "charge": 2})
    out = pep_pipe(spectra, sampler="ctc_pmc")
    assert all(ok for ok in out.precursor_ok), out.mass_error
    bi = pep_pipe(spectra, sampler="ar_bidirectional")
    assert all(s is not None for s in bi.sequences) and bi.stats.other_forwards == 1
    assert np.all(np.isfinite([x for x in bi.scores]))
