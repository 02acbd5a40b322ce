"""The molecule and audio pipelines in the general case, as a user who never read the tests would
call them (the audit of 2026-11-29): unusual but valid SMILES (salts, stereo, charged atoms),
fragments made only of attachment points, sampler settings of the wrong type, the shortest clips.
Each case failed before its fix with a raw error from deep inside the library, a message about a
parameter the user never set, or a result that silently was not what was asked."""

from __future__ import annotations

import functools
import logging

import pytest
import torch

from leapgen.errors import ConfigError, InputError
from leapgen.pipelines import Pipeline

torch.set_num_threads(1)


@functools.cache
def _pipe(name: str) -> Pipeline:
    return Pipeline.from_pretrained(f"leapgen/{name}")


# ------------------------------------------------------------------------------------------ molecules
def test_a_temperature_that_is_not_a_number_is_a_clear_error():
    """``temperature="hot"`` raised ``ValueError: could not convert string to float: 'hot'``."""
    with pytest.raises(ConfigError, match="temperature must be a number"):
        _pipe("molecule-safe")(num_samples=2, temperature="hot", seed=0)


@pytest.mark.parametrize("task, fragments", [
    ("motif", ["[*]c1ccccc1.Cl"]),
    ("scaffold", ["[*]c1ccc([*])nc1.O"]),
    ("superstructure", ["c1ccc2[nH]ccc2c1.Cl"]),
    ("linker", ["[*]c1ccccc1.Cl", "[*]C1CCNCC1"]),
])
def test_a_fragment_in_several_pieces_is_refused(task, fragments):
    """A salt (``'[*]c1ccccc1.Cl'``) was taken as a fragment: the model writes one molecule (its
    largest component kept), so the counter-ion was never in it and every output was filtered out."""
    with pytest.raises(InputError, match="disconnected parts"):
        _pipe("molecule-safe")(num_samples=2, task=task, fragments=fragments, seed=0)


def test_a_ring_bond_written_across_a_dot_is_still_one_fragment():
    out = _pipe("molecule-safe")(num_samples=1, task="motif", fragments=["[*]C1CC%10CC1.C%10"], seed=0)
    assert len(out.smiles) == 1


def test_a_fragment_of_attachment_points_only_is_refused():
    """``'[*][*]'`` was accepted: its query (any two bonded atoms) is in every molecule, so the
    task's promise that the output contains the fragment constrained nothing."""
    with pytest.raises(InputError, match="no atom besides its attachment points"):
        _pipe("molecule-safe")(num_samples=2, task="motif", fragments=["[*][*]"], seed=0)


def test_stereo_the_model_cannot_keep_is_not_dropped_silently(caplog):
    """``'[*]/C=C/c1ccccc1'`` (a trans double bond) or ``'[*]C[C@H](C)O'``: SAFE is encoded without
    stereo, so the outputs had none, without a word."""
    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.molecule_tasks"):
        out = _pipe("molecule-safe")(num_samples=1, task="motif", fragments=["[*]/C=C/c1ccccc1"], seed=0)
    assert len(out.smiles) == 1
    assert any("stereo" in r.getMessage() and "/C=C/" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="leapgen.pipelines.molecule_tasks"):
        _pipe("molecule-safe")(num_samples=1, task="motif", fragments=["[*]c1ccc(F)cc1"], seed=0)
    assert not any("stereo" in r.getMessage() for r in caplog.records)


def test_lead_opt_molecules_that_are_not_a_list_are_a_clear_error():
    """``molecules=5`` raised ``TypeError: object of type 'int' has no len()``."""
    with pytest.raises(InputError, match="molecules must be a SMILES string or a list"):
        _pipe("molecule-safe")(task="lead_opt", molecules=5, num_rounds=1, num_samples=2, seed=0)


def test_a_lead_with_a_token_the_vocabulary_lacks_fails_alone_instead_of_never_being_optimised():
    """``'CCOc1ccc(CC(=O)[O-])cc1'`` (several SAFE fragments, one with ``[O-]``) went in with an
    ``[UNK]`` kept in every candidate: all were invalid, and the starting molecule came back as the
    valid "best" one with no error (a one-fragment molecule with such a token was refused)."""
    good = "CCOc1ccc(CC(=O)N2CCCC2)cc1"
    out = _pipe("molecule-safe")(task="lead_opt", molecules=["CCOc1ccc(CC(=O)[O-])cc1", good],
                                 num_rounds=1, num_samples=2, seed=0)
    assert out.smiles[0] is None and out.valid[0] is False and out.scores[0] is None
    assert "[O-]" in out.errors[0] and "vocabulary" in out.errors[0]
    assert out.valid[1] and out.errors[1] is None


# ------------------------------------------------------------------------------------------ audio
@pytest.mark.parametrize("params, match", [
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"top_p": "x"}, "top_p must be a number"),
    ({"top_k": 2.7}, "top_k must be an integer"),
    ({"top_k": "3"}, "top_k must be an integer"),
])
@pytest.mark.parametrize("sampler", ["magnet", "ar"])
def test_audio_sampling_settings_of_the_wrong_type_are_refused_not_converted(sampler, params, match):
    """``temperature="hot"`` raised a bare ``ValueError`` from ``float()``; ``top_k=2.7`` ran as 2 and
    ``top_k="3"`` as 3 (``int()``), without a word."""
    with pytest.raises(ConfigError, match=match):
        _pipe("audio-music")("calm piano melody", sampler=sampler, duration=0.1, seed=0, **params)


def test_a_duration_of_exactly_half_a_frame_is_the_one_frame_the_message_promises():
    """``duration=0.01`` (half of a 20 ms frame) was refused with "give at least 0.01 s": ``round``
    rounds half to even, so it gave no frame."""
    audio = _pipe("audio-music")
    half = 0.5 / audio.frame_rate
    assert audio.frames_for(half) == 1
    out = audio("calm piano melody", sampler="magnet", duration=half, seed=0)
    assert out.audios[0].shape[0] == audio.codec.hop_length
    with pytest.raises(InputError, match="shorter than half a code frame"):
        audio("calm piano melody", duration=half * 0.99)


def test_magnet_hybrid_on_a_one_frame_clip_says_what_is_wrong():
    """A one-frame clip (0.02 s) left no frame for the AR prefix: ``ConfigError: max_new_tokens must be
    a positive integer, got 0; pass e.g. max_new_tokens=128``, a parameter the user never set."""
    audio = _pipe("audio-music")
    with pytest.raises(InputError, match="magnet_hybrid needs at least 2 frames"):
        audio("calm piano melody", sampler="magnet_hybrid", duration=1 / audio.frame_rate, seed=0)
    out = audio("calm piano melody", sampler="magnet_hybrid", duration=2 / audio.frame_rate, seed=0)
    assert out.audios[0].shape[0] == 2 * audio.codec.hop_length


def test_magnet_hybrid_says_when_its_ar_prefix_covers_the_whole_clip(caplog):
    """``ar_seconds`` (1 s by default) at least the clip's length left MAGNeT one frame: the output was
    the AR model's, labelled hybrid, with nothing said."""
    audio = _pipe("audio-music")
    with caplog.at_level("WARNING", logger="leapgen.samplers.masked.magnet"):
        audio("calm piano melody", sampler="magnet_hybrid", duration=0.3, seed=0, steps_per_stage=[2, 1, 1, 1])
    assert "covers the whole 0.3 s clip" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="leapgen.samplers.masked.magnet"):
        audio("calm piano melody", sampler="magnet_hybrid", duration=0.3, seed=0, ar_seconds=0.1, steps_per_stage=[2, 1, 1, 1])
    assert "covers the whole" not in caplog.text
