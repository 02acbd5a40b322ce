"""KVCache rollback operations against recomputation from scratch (fp32, atol 1e-5).

Reference logits come from a plain transformers forward over the whole sequence, without any
cache, one row at a time: whatever the cache did (crop, holes, compaction, dropped rows), the
next logits must be those of the text each row actually holds.
"""

from __future__ import annotations

import pytest
import torch

from leapgen.models import HFCausalLM
from leapgen.samplers.trees import accepted_slots, ancestor_mask, depth

ATOL = 1e-5


def fresh(model, seq):
    """Logits [len(seq), V] of a cache-free forward over one row."""
    with torch.no_grad():
        return model(torch.tensor([list(seq)])).logits[0].float()


def rand_tokens(shape, seed, vocab):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(params=["target_model", "target_mha"])
def model(request):
    return request.getfixturevalue(request.param)


def test_crop_equals_recompute(model):
    v = model.config.vocab_size
    lm = HFCausalLM(model)
    prompt, extra, cont = rand_tokens((2, 6), 0, v), rand_tokens((2, 4), 1, v), rand_tokens((2, 3), 2, v)
    cache = lm.new_cache(2)
    first = lm(prompt, cache)
    lm(extra, cache)
    assert len(cache) == 10 and cache.lengths.tolist() == [10, 10]
    cache.crop(6)
    assert len(cache) == 6 and cache.lengths.tolist() == [6, 6]
    out = lm(cont, cache)
    for b in range(2):
        ref = fresh(model, prompt[b].tolist() + cont[b].tolist())
        torch.testing.assert_close(first[b], ref[:6], atol=ATOL, rtol=0)
        torch.testing.assert_close(out[b], ref[6:], atol=ATOL, rtol=0)
    with pytest.raises(ValueError):
        cache.crop(100)


def test_keep_new_with_per_row_counts_equals_fresh_runs(model):
    """Rows keep different numbers of the slots just written; the rest become holes. Two rounds,
    including a row that keeps nothing, then per-row next-token logits are compared."""
    v = model.config.vocab_size
    lm = HFCausalLM(model)
    b = 3
    prompt = rand_tokens((b, 5), 3, v)
    texts = [prompt[i].tolist() for i in range(b)]
    cache = lm.new_cache(b)
    lm(prompt, cache)
    for rnd, counts in enumerate(([1, 4, 2], [3, 0, 3])):
        chunk = rand_tokens((b, 4), 10 + rnd, v)
        start = len(cache)
        logits = lm(chunk, cache)
        # logits of the kept slots are those of the row's text continued by the chunk
        for i in range(b):
            ref = fresh(model, texts[i] + chunk[i].tolist())
            torch.testing.assert_close(
                logits[i, : counts[i]], ref[len(texts[i]) : len(texts[i]) + counts[i]], atol=ATOL, rtol=0
            )
        cache.keep_new(start, torch.tensor(counts))
        assert len(cache) == start + max(counts), "trailing slots no row uses must be dropped"
        for i in range(b):
            texts[i] += chunk[i, : counts[i]].tolist()
        assert cache.lengths.tolist() == [len(t) for t in texts]
    nxt = rand_tokens((b, 2), 20, v)
    out = lm(nxt, cache)
    for i in range(b):
        ref = fresh(model, texts[i] + nxt[i].tolist())
        torch.testing.assert_close(out[i], ref[-2:], atol=ATOL, rtol=0)


def test_keep_new_keeping_everything_stays_on_the_fast_path(target_model):
    lm = HFCausalLM(target_model)
    cache = lm.new_cache(2)
    lm(rand_tokens((2, 4), 0, 48), cache)
    start = len(cache)
    lm(rand_tokens((2, 3), 1, 48), cache)
    cache.keep_new(start, torch.tensor([2, 2]))
    assert cache.valid is None and len(cache) == 6 and cache.lengths.tolist() == [6, 6]


def test_select_tree_path_equals_recompute(model):
    """Feed a draft tree with its ancestor mask, keep one root-to-node path per row (compacted
    to contiguous slots), continue: logits equal a fresh run over prompt + path."""
    v = model.config.vocab_size
    lm = HFCausalLM(model)
    parents = [[-1, 0, 0, 1, 1, 2, 5], [-1, 0, 1, 0, 3, 3, 4]]
    paths = [[0, 2, 5, 6], [0, 3]]
    tokens = rand_tokens((2, 7), 30, v)
    prompt = rand_tokens((2, 5), 31, v)
    cache = lm.new_cache(2)
    lm(prompt, cache)
    anc = ancestor_mask(torch.tensor(parents))
    pos = cache.position_ids(7, depth(anc))
    start = len(cache)
    lm(tokens, cache, position_ids=pos, attn_mask=anc)
    idx, counts = accepted_slots(paths, max(len(p) for p in paths))
    cache.select(start, idx, counts)
    texts = [prompt[b].tolist() + tokens[b, paths[b]].tolist() for b in range(2)]
    assert cache.lengths.tolist() == [len(t) for t in texts]
    nxt = rand_tokens((2, 3), 32, v)
    out = lm(nxt, cache)
    for b in range(2):
        ref = fresh(model, texts[b] + nxt[b].tolist())
        torch.testing.assert_close(out[b], ref[-3:], atol=ATOL, rtol=0)


def test_select_rows_drops_rows(model):
    v = model.config.vocab_size
    lm = HFCausalLM(model)
    b = 4
    prompt = rand_tokens((b, 4), 40, v)
    texts = [prompt[i].tolist() for i in range(b)]
    cache = lm.new_cache(b)
    lm(prompt, cache)
    chunk = rand_tokens((b, 5), 41, v)
    start = len(cache)
    lm(chunk, cache)
    counts = [1, 5, 0, 2]  # row 1 alone uses the last slots
    cache.keep_new(start, torch.tensor(counts))
    for i in range(b):
        texts[i] += chunk[i, : counts[i]].tolist()
    keep = [0, 2, 3]
    cache.select_rows(torch.tensor(keep))
    assert cache.batch_size == 3
    assert cache.lengths.tolist() == [len(texts[i]) for i in keep]
    assert len(cache) == start + max(counts[i] for i in keep), "columns no remaining row uses are dropped"
    nxt = rand_tokens((3, 2), 42, v)
    out = lm(nxt, cache)
    for j, i in enumerate(keep):
        ref = fresh(model, texts[i] + nxt[j].tolist())
        torch.testing.assert_close(out[j], ref[-2:], atol=ATOL, rtol=0)
    # and down to a single row
    cache.select_rows(torch.tensor([1]))
    out = lm(rand_tokens((1, 1), 43, v), cache)
    ref = fresh(model, texts[2] + nxt[1].tolist() + rand_tokens((1, 1), 43, v)[0].tolist())
    torch.testing.assert_close(out[0], ref[-1:], atol=ATOL, rtol=0)


def test_position_beyond_the_window_is_an_input_error(target_model):
    from leapgen.errors import InputError

    lm = HFCausalLM(target_model)
    cache = lm.new_cache(1)
    with pytest.raises(InputError, match="context window"):
        lm(torch.zeros(1, lm.max_length + 1, dtype=torch.long), cache)
