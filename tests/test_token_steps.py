"""``DecodeResult.token_steps``: which target forward produced each generated token (the data
behind acceptance maps), recorded by the shared ``Rows.commit`` for every AR-family loop."""

from __future__ import annotations

import pytest

from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler

PROMPTS = [[5, 17, 3, 17, 5, 9], [1, 2], [40, 40, 40, 7, 8, 9, 10]]


@pytest.mark.parametrize("name", ["ar", "speculative", "prompt_lookup", "lookahead", "spec_tree"])
def test_token_steps_cover_every_token_and_every_forward(name, target_model, draft_close):
    models = {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_close)}
    cfg = DecodeConfig(max_new_tokens=24, temperature=0.0)
    res = get_sampler(name).generate(models, PROMPTS, cfg)
    assert len(res.token_steps) == len(PROMPTS)
    for seq, steps in zip(res.sequences, res.token_steps):
        assert len(steps) == len(seq)
        assert steps == sorted(steps), "steps must be non-decreasing along the sequence"
        assert steps[0] == 0, "the first token comes from the prefill forward"
        assert max(steps) < res.stats.target_forwards
    if name == "ar":
        assert all(steps == list(range(len(steps))) for steps in res.token_steps)
    # the number of distinct producing forwards of the longest row equals the decode steps it took
    assert max(len(set(s)) for s in res.token_steps) <= res.stats.target_forwards
