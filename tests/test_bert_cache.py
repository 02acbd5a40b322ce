"""The masked-model cache on transformers' BertForMaskedLM (models/bert_cache.py) and GenMol on it."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from leapgen.models.bert_cache import CachedBertMLM, with_masked_cache
from leapgen.models.masked import TorchMaskedLM
from leapgen.models.masked_cache import MaskedCache, row_subsets

V, L, B = 23, 17, 5


def _bert(seed: int = 0, **kw) -> BertForMaskedLM:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=32, type_vocab_size=1, pad_token_id=0)
    cfg.update(kw)
    return BertForMaskedLM(BertConfig(**cfg)).eval()


def _inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, V, (B, L), generator=g)
    am = torch.ones(B, L, dtype=torch.bool)
    am[1, 12:] = False  # right padding of shorter rows
    am[3, 5:] = False
    return tokens, am


def _setup() -> tuple[BertForMaskedLM, CachedBertMLM, torch.Tensor, torch.Tensor, torch.Tensor, MaskedCache]:
    """A BERT, its cached forward, inputs, the transformers logits and an empty cache."""
    bert = _bert()
    tokens, am = _inputs()
    with torch.no_grad():
        ref = bert(tokens, attention_mask=am).logits
    return bert, CachedBertMLM(bert), tokens, am, ref, MaskedCache(B, "dual")


@torch.no_grad()
def test_refresh_equals_the_transformers_forward_and_fills_the_cache():
    _, net, tokens, am, ref, cache = _setup()
    torch.testing.assert_close(net(tokens, attention_mask=am), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(net(tokens, attention_mask=am, cache=cache), ref, atol=1e-5, rtol=1e-5)
    assert all(f"{kv}{i}" in cache for kv in "kv" for i in range(2))


@torch.no_grad()
def test_window_and_subsets_after_a_refresh_match_the_full_logits():
    _, net, tokens, am, ref, cache = _setup()
    net(tokens, attention_mask=am, cache=cache)
    cache.window = (4, 11)
    torch.testing.assert_close(net(tokens, attention_mask=am, cache=cache), ref[:, 4:11], atol=1e-5, rtol=1e-5)
    cache.window = None
    shared = torch.tensor([0, 3, 9, 16])
    cache.positions = shared
    torch.testing.assert_close(net(tokens, attention_mask=am, cache=cache), ref[:, shared], atol=1e-5, rtol=1e-5)
    need = torch.rand(B, L, generator=torch.Generator().manual_seed(2)) < 0.4
    rows = row_subsets(need)
    cache.positions = rows
    want = ref.gather(1, rows[..., None].expand(-1, -1, V))
    torch.testing.assert_close(net(tokens, attention_mask=am, cache=cache), want, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_a_subset_forward_sees_new_tokens_at_its_positions_and_stale_keys_elsewhere():
    bert, net, tokens, am, ref, cache = _setup()
    net(tokens, attention_mask=am, cache=cache)
    changed = tokens.clone()
    changed[:, 2] = (changed[:, 2] % (V - 1)) + 1  # a different id at position 2 of every row
    fresh = bert(changed, attention_mask=am).logits
    # position 2 recomputed: its own embedding is new, so its logits move towards the fresh ones
    cache.positions = torch.tensor([2, 7])
    got = net(changed, attention_mask=am, cache=cache)
    stale = ref[:, [2, 7]]
    assert (got[:, 0] - fresh[:, 2]).abs().max() < (stale[:, 0] - fresh[:, 2]).abs().max()
    # recomputing every position is a refresh in all but name: exact again
    cache.positions = torch.arange(L)
    torch.testing.assert_close(net(changed, attention_mask=am, cache=cache), fresh, atol=1e-5, rtol=1e-5)


def test_only_plain_bert_masked_lms_are_wrapped():
    bert = _bert()
    assert isinstance(with_masked_cache(bert), CachedBertMLM)
    other = torch.nn.Linear(3, 3)
    assert with_masked_cache(other) is other
    decoder = _bert(is_decoder=True)
    assert with_masked_cache(decoder) is decoder
    with pytest.raises(TypeError, match="BertForMaskedLM"):
        CachedBertMLM(other)
    model = TorchMaskedLM(bert, mask_id=3, vocab_size=V)
    assert model.supports_cache and model.supports_cache_positions and model.supports_row_positions
    assert model.module is bert  # the component is the transformers model, weights shared
    assert not TorchMaskedLM(decoder, mask_id=3, vocab_size=V).supports_cache


def _pipeline():
    from test_molecule_pipeline import _tiny_pipeline

    return _tiny_pipeline()


def test_genmol_on_the_cache_refreshing_every_step_equals_no_cache():
    pipe = _pipeline()
    plain = pipe(num_samples=6, sampler="genmol", seed=3, batch_size=6)
    every = pipe(num_samples=6, sampler="genmol", seed=3, batch_size=6, cache="dkv_delayed", cache_refresh=1)
    assert every.token_ids == plain.token_ids


def test_genmol_on_the_delayed_cache_recomputes_fewer_positions():
    pipe = _pipeline()
    seen: list[int] = []
    net = pipe._masked._net
    hook = net.register_forward_pre_hook(lambda mod, args, kw: seen.append(
        args[0].numel() if kw.get("cache") is None or (kw["cache"].positions is None and kw["cache"].window is None)
        else kw["cache"].positions.numel()), with_kwargs=True)
    try:
        plain = pipe(num_samples=6, sampler="genmol", seed=3, batch_size=6)
        full = sum(seen)
        seen.clear()
        cached = pipe(num_samples=6, sampler="genmol", seed=3, batch_size=6, cache="dkv_delayed", cache_refresh=8)
    finally:
        hook.remove()
    assert cached.stats.target_forwards == plain.stats.target_forwards  # one token per step either way
    extra = cached.stats.extra
    assert extra["cache"] == "dkv_delayed" and extra["cache_refreshes"] >= 1
    assert extra["cache_refreshes"] + extra["cache_reuses"] == cached.stats.target_forwards
    assert sum(seen) < 0.8 * full
    assert all(len(r) >= 2 for r in cached.token_ids)

