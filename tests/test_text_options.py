"""The text pipeline's generation controls that transformers and vLLM users expect: ``min_p``,
``min_new_tokens``, ``num_return_sequences`` and ``logprobs`` (the sampler-level guarantees of the
first two are checked registry-wide in ``tests/test_processing_guarantees.py``)."""

from __future__ import annotations

import pytest
import torch

from leapgen import Pipeline
from leapgen.errors import ConfigError

torch.set_num_threads(1)

PROMPT = "def parse_args(argv):\n"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.from_pretrained("leapgen/text-code")


# ------------------------------------------------------------------------------------------ min_p


def test_min_p_one_samples_only_the_top_token(pipe):
    """min_p=1 keeps only the most likely token: sampling at temperature 1 is greedy decoding."""
    greedy = pipe(PROMPT, max_new_tokens=24).token_ids[0]
    for seed in (0, 1):
        sampled = pipe(PROMPT, max_new_tokens=24, temperature=1.0, min_p=1.0, seed=seed).token_ids[0]
        assert sampled == greedy
    loose = [pipe(PROMPT, max_new_tokens=24, temperature=1.5, seed=s).token_ids[0] for s in (0, 1)]
    assert any(x != greedy for x in loose)  # without min-p, temperature 1.5 leaves the greedy path


def test_min_p_reaches_the_speculative_samplers(pipe):
    greedy = pipe(PROMPT, max_new_tokens=24).token_ids[0]
    out = pipe(PROMPT, sampler="speculative", max_new_tokens=24, temperature=1.0, min_p=1.0, seed=3)
    assert out.token_ids[0] == greedy


@pytest.mark.parametrize("bad", [-0.5, 2.0, float("nan")])
def test_bad_min_p_is_a_config_error(pipe, bad):
    with pytest.raises(ConfigError, match="min_p must be in"):
        pipe(PROMPT, max_new_tokens=4, temperature=1.0, min_p=bad)
