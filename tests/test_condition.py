"""Typed conditions (leapgen.models.condition): row operations, validation, and the kind check models use."""

from __future__ import annotations

import pytest
import torch

from leapgen.errors import InputError
from leapgen.models.base import KVCache
from leapgen.models.condition import (
    NULL_LABEL,
    AudioPrompt,
    ClassCondition,
    EncoderInputs,
    EncoderState,
    Guidance,
    TextEmbeddings,
    expect_condition,
)


def examples():
    return [
        ClassCondition(labels=torch.tensor([0, NULL_LABEL, 2]), text_ids=torch.arange(12).view(3, 4), guidance=Guidance(3.0, 5)),
        TextEmbeddings(embeddings=torch.randn(3, 5, 8), mask=torch.ones(3, 5, dtype=torch.bool)),
        EncoderInputs(input_ids=torch.arange(18).view(3, 6), attention_mask=torch.ones(3, 6, dtype=torch.long)),
        EncoderInputs(input_features=torch.randn(3, 8, 16)),
        EncoderState(memory=torch.randn(3, 4, 8), mask=torch.ones(3, 4, dtype=torch.bool), extra={"k": torch.randn(3, 2, 4, 4)}),
        AudioPrompt(codes=torch.randint(0, 10, (3, 4, 7)), mask=torch.ones(3, 7, dtype=torch.bool), speaker=torch.randn(3, 6)),
        AudioPrompt(features=torch.randn(3, 7, 5)),
    ]


@pytest.mark.parametrize("cond", examples(), ids=lambda c: type(c).__name__)
def test_row_operations(cond):
    assert cond.batch_size == len(cond) == 3
    sel = cond.select_rows(torch.tensor([2, 0]))
    assert sel.batch_size == 2 and type(sel) is type(cond)
    rep = cond.repeat_interleave(2)
    assert rep.batch_size == 6
    for name in cond.batch_fields:
        t = getattr(cond, name)
        if t is None:
            continue
        assert torch.equal(getattr(sel, name), t[[2, 0]])
        assert torch.equal(getattr(rep, name), t.repeat_interleave(2, 0))
    for k, t in cond.extra.items():
        assert torch.equal(sel.extra[k], t[[2, 0]])
    moved = cond.to("cpu")
    assert type(moved) is type(cond) and moved.batch_size == 3
    if isinstance(cond, ClassCondition):
        assert sel.guidance == cond.guidance and cond.unguided().guidance == Guidance()
    with pytest.raises(InputError, match="out of range"):
        cond.select_rows(torch.tensor([3]))
    with pytest.raises(InputError, match="positive int"):
        cond.repeat_interleave(0)


def test_the_cache_carries_the_condition_rows():
    class Layer:
        is_initialized = True

        def __init__(self):
            self.keys = torch.randn(3, 1, 2, 4)
            self.values = torch.randn(3, 1, 2, 4)

    class Backend:
        layers = [Layer()]

    cond = ClassCondition(labels=torch.tensor([4, 5, 6]))
    cache = KVCache(Backend(), 3, cond=cond)
    cache.appended(2)
    cache.select_rows(torch.tensor([2, 1]))
    assert cache.cond.labels.tolist() == [6, 5]


def test_validation():
    with pytest.raises(InputError, match="disagree on the batch size"):
        ClassCondition(labels=torch.tensor([0, 1]), text_ids=torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(InputError, match=r"shape \[B\]"):
        ClassCondition(labels=torch.tensor([0.5]))
    with pytest.raises(InputError, match=">= 0, or -1"):
        ClassCondition(labels=torch.tensor([-2]))
    with pytest.raises(InputError, match=r"\[B, T\]"):
        ClassCondition(labels=torch.tensor([0]), text_ids=torch.zeros(1, dtype=torch.long))
    with pytest.raises(InputError, match="guidance scale"):
        Guidance(float("nan"))
    with pytest.raises(InputError, match="from 0 to 1000"):  # inf guidance: NaN logits, or silently some image
        Guidance(float("inf"))
    with pytest.raises(InputError, match="from 0 to 1000"):  # past float range within the formula
        Guidance(1e6)
    assert Guidance(1000).scale == 1000.0
    with pytest.raises(InputError, match="interval"):
        Guidance(2.0, -3)
    with pytest.raises(InputError, match="must be a torch.Tensor"):
        ClassCondition(labels=[0, 1])
    with pytest.raises(InputError, match=r"float \[B, S, D\]"):
        TextEmbeddings(embeddings=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(InputError, match=r"mask must have shape \(2, 3\)"):
        TextEmbeddings(embeddings=torch.zeros(2, 3, 4), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(InputError, match="bool or integer"):
        EncoderState(memory=torch.zeros(2, 3, 4), mask=torch.ones(2, 3))
    with pytest.raises(InputError, match="exactly one of"):
        EncoderInputs(attention_mask=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(InputError, match=r"codes \[B, K, T\]"):
        AudioPrompt(codes=torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(InputError, match="not both"):
        AudioPrompt(codes=torch.zeros(2, 1, 5, dtype=torch.long), features=torch.zeros(2, 5, 3))
    with pytest.raises(InputError, match="holds no tensor"):
        AudioPrompt()
    with pytest.raises(InputError, match="needs codes"):
        AudioPrompt(mask=torch.ones(2, 5, dtype=torch.bool))
    assert AudioPrompt(codes=torch.zeros(2, 4, 5, dtype=torch.long)).num_codebooks == 4


def test_expect_condition_names_what_was_expected():
    c = ClassCondition(labels=torch.tensor([0]))
    assert expect_condition(c, ClassCondition, "m", 1) is c
    assert expect_condition(None, ClassCondition, "m") is None
    with pytest.raises(InputError, match="the x model takes a EncoderState .* got a ClassCondition"):
        expect_condition(c, EncoderState, "the x model")
    with pytest.raises(InputError, match="not raw tensors or token ids"):
        expect_condition(torch.tensor([1]), ClassCondition, "m")
    with pytest.raises(InputError, match="needs a condition"):
        expect_condition(None, ClassCondition, "m", required=True)
    with pytest.raises(InputError, match="1 rows but the batch has 2"):
        expect_condition(c, ClassCondition, "m", 2)
