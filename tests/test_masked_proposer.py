"""TokenProposer on a codebook stage (MAGNeT, MaskGCT S2A): only the stage's codebook is filtered and drawn."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.masked.parts import Stage
from leapgen.samplers.masked.step import TokenProposer


def _state(codebook: int | None, seed: int, **config: float) -> SimpleNamespace:
    k, length = 4, 6
    stage = Stage(eligible=torch.ones(1, k, length, dtype=torch.bool), steps=4, codebook=codebook)
    return SimpleNamespace(
        continuous=False, mask_id=None, stage=stage, config=DecodeConfig(**config),
        generator=torch.Generator().manual_seed(seed),
    )


def test_codebook_stage_filters_and_draws_only_its_codebook() -> None:
    logits = torch.randn(2, 4, 6, 32, generator=torch.Generator().manual_seed(0))
    proposal, log_probs = TokenProposer()(logits, _state(2, 0, temperature=1.0, top_k=1))
    # top-k 1 on the stage's codebook: the draw is its argmax and the filtered distribution one-hot
    assert torch.equal(proposal[:, 2], logits[:, 2].argmax(-1))
    assert torch.equal(torch.isfinite(log_probs[:, 2]).sum(-1), torch.ones(2, 6, dtype=torch.long))
    # the other codebooks (never committed on this stage) are not filtered: raw log-probs, argmax
    for c in (0, 1, 3):
        assert torch.allclose(log_probs[:, c], logits[:, c].log_softmax(-1))
        assert torch.equal(proposal[:, c], logits[:, c].argmax(-1))


def test_codebook_stage_draw_matches_drawing_that_codebook_alone() -> None:
    logits = torch.randn(1, 4, 6, 32, generator=torch.Generator().manual_seed(1))
    cfg = dict(temperature=1.0, top_p=0.9)
    staged, staged_lp = TokenProposer()(logits, _state(1, 7, **cfg))
    alone, alone_lp = TokenProposer()(logits[:, 1:2], _state(None, 7, **cfg))
    assert torch.equal(staged[:, 1:2], alone)
    assert torch.allclose(staged_lp[:, 1:2], alone_lp)
