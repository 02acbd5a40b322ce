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
