"""Regression tests for what a hostile but realistic user of the text, image and molecule pipelines
found: each test names the input that misbehaved before its fix."""

from __future__ import annotations

import pytest
import torch

from leapgen import Pipeline

_PIPES: dict[str, Pipeline] = {}


def pipe(name: str) -> Pipeline:
    if name not in _PIPES:
        _PIPES[name] = Pipeline.from_pretrained(f"leapgen/{name}")
    return _PIPES[name]


# ------------------------------------------------------------------- continuous image families: row i is image i
@pytest.mark.parametrize("name, kwargs, fill", [("image-emoji-mar", {"num_iter": 2}, "nan"), ("image-emoji-dd", {}, -1)])
def test_tokens_row_i_is_image_i_when_a_prompt_fails(name: str, kwargs: dict, fill: object) -> None:
    # was: out.tokens and out.token_steps held only the good rows, so tokens[1] was "food"'s, not the bad prompt's
    p = pipe(name)
    out = p(["animals", "", "food"], seed=0, **kwargs)
    alone = p(["animals", "food"], seed=0, **kwargs)
    assert out.tokens.shape[0] == len(out.images) == len(out.token_steps) == 3
    assert torch.equal(out.tokens[0], alone.tokens[0]) and torch.equal(out.tokens[2], alone.tokens[1])
    assert out.token_steps[1] == [] and out.token_steps[2] == alone.token_steps[1]
    bad = out.tokens[1]
    assert bad.isnan().all() if fill == "nan" else (bad == fill).all()


# ------------------------------------------------------------------- molecules: SMILES with a space or non-ASCII inside
@pytest.mark.parametrize("text", ["[*]c1ccccc1 C", "[*]c1cc ccc1", "[*]c1ccccc1é", "[*]c1ccccc1\tN"])
def test_fragment_with_a_space_or_non_ascii_inside_is_refused(text: str) -> None:
    # was: RDKit read the text after a space as a name and stopped at 'é', so the fragment silently lost atoms
    from leapgen.errors import InputError

    with pytest.raises(InputError, match=r"fragment = .* inside; SMILES is one word"):
        pipe("molecule-safe")(num_samples=2, task="motif", fragments=[text], seed=0)


def test_fragment_surrounding_whitespace_is_stripped() -> None:
    p = pipe("molecule-safe")
    padded = p(num_samples=2, task="motif", fragments=["  [*]c1ccc(F)cc1\n"], seed=0)
    plain = p(num_samples=2, task="motif", fragments=["[*]c1ccc(F)cc1"], seed=0)
    assert padded.smiles == plain.smiles and padded.unfiltered_smiles == plain.unfiltered_smiles


def test_lead_opt_molecule_with_a_space_inside_fails_alone() -> None:
    # was: molecules=["CC O"] optimised "CC" (RDKit's name convention) without a word
    out = pipe("molecule-safe")(task="lead_opt", molecules=["CC O", "CCOc1ccccc1"], num_rounds=1, num_samples=2, seed=0)
    assert out.smiles[0] is None and "' ' inside" in out.errors[0] and out.errors[1] is None


# ------------------------------------------------------------------- peptides: max_new_tokens beyond the decoder
def test_peptide_max_new_tokens_beyond_the_decoder_is_refused_up_front() -> None:
    # was: max_new_tokens=10**6 made every spectrum fail alone with "position 64 is outside the model's context
    # window ... shorten the prompt" (ar_bidirectional, ar_beam), and passed with samplers that stopped earlier
    import numpy as np

    from leapgen.errors import InputError

    p = pipe("peptide")
    rng = np.random.default_rng(0)
    spec = {"mz": np.sort(rng.uniform(100, 1200, 40)), "intensity": rng.uniform(0, 1, 40), "precursor_mz": 523.77,
            "charge": 2}
    room = p.views["ar"].max_length - 1
    for sampler in ("ar_bidirectional", "ar_beam", "ar"):
        with pytest.raises(InputError, match=rf"max_new_tokens must be <= {room}, got {10**6}"):
            p([spec, spec], sampler=sampler, max_new_tokens=10**6)
    out = p([spec, spec], sampler="ar_beam", max_new_tokens=room)
    assert out.errors == [None, None] and all(out.sequences)


def test_molecule_num_samples_beyond_the_per_call_cap_is_refused_at_once() -> None:
    # was: num_samples=10**9 laid out every row before decoding: no error, the memory filled up
    import time

    from leapgen.errors import InputError
    from leapgen.pipelines.molecule import MAX_NUM_SAMPLES

    t0 = time.perf_counter()
    with pytest.raises(InputError, match="num_samples must be <= 100,000 per call"):
        pipe("molecule-safe")(num_samples=10**9, seed=0)
    assert time.perf_counter() - t0 < 5.0
    assert MAX_NUM_SAMPLES == 100_000
    assert len(pipe("molecule-safe")(num_samples=2, sampler="ar", seed=0).smiles) == 2
