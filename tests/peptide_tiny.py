"""Tiny random peptide models and inputs shared by the peptide tests and tests/harness_peptide.py."""

from __future__ import annotations

import torch

from leapgen.models.condition import EncoderInputs
from leapgen.models.peptide import PeptideConfig, PeptideModel

TINY = dict(d_model=32, heads=2, ff=64, enc_layers=1, nar_layers=1, ar_layers=1, ctc_slots=8, dropout=0.0, mass_inputs=True, ion_inputs=True)


def tiny_net(seed: int = 0, device: str = "cpu") -> PeptideModel:
    torch.manual_seed(seed)
    return PeptideModel(PeptideConfig(**TINY)).eval().to(device)


def tiny_inputs(batch: int, peaks: int = 12, seed: int = 0, device: str = "cpu") -> EncoderInputs:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 2, peaks, generator=g)
    x[:, 0] *= 900
    mask = torch.ones(batch, peaks, dtype=torch.long)
    for b in range(batch):
        mask[b, peaks - 2 * b :] = 0 if b else 1
    from leapgen.data.peptide import peptide_mass

    peptides = ("GGA", "GASP", "VTCK", "WAN")
    mass = torch.tensor([peptide_mass(peptides[b % 4]) for b in range(batch)], dtype=torch.float64)
    return EncoderInputs(input_features=(x * mask[:, None]).to(device), attention_mask=mask.to(device),
                         extra={"precursor_mass": mass.to(device), "charge": torch.full((batch,), 2, device=device)})
