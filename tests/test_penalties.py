"""Presence / frequency penalties (OpenAI / vLLM): the coded context and its counts along drafted
chains and trees, checked against counts written out here; nothing changes while they are off.

The registry-driven exactness checks (every distribution-exact sampler by enumeration, a broken
variant, greedy identity with ``ar``, refusals) are in tests/test_processing_guarantees.py; the
kernel against vLLM's formula in tests/test_kernels.py; the text pipeline and CLI in
tests/test_text_options.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from leapgen.samplers import DecodeConfig
from leapgen.samplers.logits import LogitsProcessor, chain_seen, context, tree_seen
from leapgen.samplers.penalties import coded_context
from leapgen.samplers.trees import ancestor_mask

torch.set_num_threads(1)
V = 9


def _expected(prompt: list[int], generated: list[int]) -> torch.Tensor:
    """``2 * count(generated) + (token in prompt)``, one token at a time."""
    out = torch.zeros(V, dtype=torch.int32)
    for t in set(prompt):
        out[t] = 1
    for t in generated:
        out[t] += 2
    return out


ROWS = SimpleNamespace(tokens=[[1, 2, 2, 5, 5, 5, 3], [4, 4], [0, 7, 0, 0]], prompt_len=[3, 2, 1])


def test_the_coded_context_counts_generated_tokens_only():
    got = coded_context(ROWS.tokens, ROWS.prompt_len, V)
    for i, (toks, n) in enumerate(zip(ROWS.tokens, ROWS.prompt_len)):
        assert torch.equal(got[i], _expected(toks[:n], toks[n:])), i
    assert int(got[0, 2]) == 1  # twice in the prompt: seen (repetition penalty), count 0
    assert int(got[0, 5]) == 6 and int(got[2, 0]) == 5  # generated three times / twice (and in the prompt)


def test_context_is_the_bool_mask_unless_a_count_penalty_is_on():
    assert context(LogitsProcessor(DecodeConfig()), ROWS, [0, 1], V, "cpu") is None
    rep = context(LogitsProcessor(DecodeConfig(repetition_penalty=1.2)), ROWS, [0, 2], V, "cpu")
    assert rep.dtype == torch.bool and rep[1, 7] and not rep[1, 8]
    for cfg in (DecodeConfig(presence_penalty=0.5), DecodeConfig(frequency_penalty=-1.0, repetition_penalty=1.2)):
        proc = LogitsProcessor(cfg)
        assert proc.uses_context and proc.counts_tokens
        got = context(proc, ROWS, [2, 0], V, "cpu")
        assert got.dtype == torch.int32
        assert torch.equal(got, coded_context([ROWS.tokens[2], ROWS.tokens[0]], [1, 3], V))
    assert not LogitsProcessor(DecodeConfig(repetition_penalty=1.2)).counts_tokens


def test_a_drafted_token_counts_for_the_chain_positions_after_it():
    base = coded_context(ROWS.tokens[:2], ROWS.prompt_len[:2], V)
    chain = torch.tensor([[5, 8, 5], [4, 4, 1]])
    got = chain_seen(base, chain)
    assert got.shape == (2, 4, V) and got.dtype == torch.int32
    for b in range(2):
        toks, n = ROWS.tokens[b], ROWS.prompt_len[b]
        for i in range(4):
            assert torch.equal(got[b, i], _expected(toks[:n], toks[n:] + chain[b, :i].tolist())), (b, i)
    bool_base = base != 0  # the repetition penalty's path is unchanged: the same mask as before
    assert torch.equal(chain_seen(bool_base, chain), got != 0)


def test_a_drafted_token_counts_for_its_descendants_in_a_tree():
    # root 0; 1, 2 children of the root; 3 child of 1; 4 child of 3; 5 child of 2
    parent = torch.tensor([[-1, 0, 0, 1, 3, 2]])
    tokens = torch.tensor([[3, 5, 6, 5, 6, 6]])
    base = coded_context(ROWS.tokens[:1], ROWS.prompt_len[:1], V)
    anc = ancestor_mask(parent)
    got = tree_seen(base, tokens, anc)
    paths = {0: [], 1: [5], 2: [6], 3: [5, 5], 4: [5, 5, 6], 5: [6, 6]}
    toks, n = ROWS.tokens[0], ROWS.prompt_len[0]
    for node, path in paths.items():
        assert torch.equal(got[0, node], _expected(toks[:n], toks[n:] + path)), node
    assert torch.equal(tree_seen(base != 0, tokens, anc), got != 0)


def test_penalties_at_zero_leave_processing_untouched():
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(0))
    coded = coded_context(ROWS.tokens, ROWS.prompt_len, V)
    proc = LogitsProcessor(DecodeConfig(temperature=0.7, repetition_penalty=1.3))
    assert torch.equal(proc.process(logits, coded), proc.process(logits, coded != 0))
    pen = LogitsProcessor(DecodeConfig(frequency_penalty=0.5, presence_penalty=0.25))
    want = logits - 0.5 * (coded >> 1).float() - 0.25 * ((coded >> 1) > 0).float()  # greedy: penalties only
    assert torch.equal(pen.process(logits, coded), want)
    assert torch.equal(pen.argmax(logits, coded), want.argmax(-1))
