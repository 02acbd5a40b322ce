"""Diffusion-LM samplers on the masked engine: llada, fast_dllm, prophet, learn2pd, dkv_cache.

Hand-computed threshold / factor rules, >= 1 commit per step, cache-free == cached with refresh
interval 1, a bound on cached vs uncached logits, EoTP never truncating before a committed token,
seeded reproducibility, the balanced constraint, the Learn2PD filter round trip, bad input.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from leapgen.errors import ConfigError, InputError, ModelMismatchError
from leapgen.models.diffusion_lm import DiffusionLM, DiffusionLMConfig, training_attention
from leapgen.models.masked import TorchMaskedLM
from leapgen.models.masked_cache import MaskedCache, row_ranges, row_subsets
from leapgen.samplers.base import DecodeConfig, get_sampler
from leapgen.samplers.masked import MaskedInputs
from leapgen.samplers.masked.fast_dllm import factor_commit
from leapgen.samplers.masked.learn2pd import CommitFilter, egp_records, train_filter
from leapgen.samplers.masked.policies import Threshold

V, MASK = 33, 32
DLLM = ("llada", "fast_dllm", "prophet", "learn2pd", "dkv_cache")


def tiny(seed: int = 0, shift: bool = True) -> TorchMaskedLM:
    torch.manual_seed(seed)
    cfg = DiffusionLMConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=128, shift=shift)
    return TorchMaskedLM(DiffusionLM(cfg).eval(), mask_id=MASK, vocab_size=V)


def rows(n_mask: int = 24) -> MaskedInputs:
    return MaskedInputs.from_prompts([[1, 2, 3], [4, 5, 6, 7, 8]], n_mask, MASK)


def run(name: str, model=None, inputs=None, temperature: float = 0.0, seed: int | None = None, **params):
    model = model or tiny()
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    smp = get_sampler(name, **params)
    return smp.generate({"model": model}, inputs or rows(), DecodeConfig(temperature=temperature, eos_token_id=0), gen)


# ----------------------------------------------------------------------------------- commit rules
def test_threshold_rule_hand_computed():
    pol = Threshold(threshold=0.9)
    score = torch.tensor([[0.95, 0.5, 0.92, 0.1], [0.3, 0.2, 0.1, 0.05]], dtype=torch.float64)
    pool = torch.tensor([[True, True, True, True], [True, True, False, True]])
    keep = pol.select(score, pool, torch.zeros(2, dtype=torch.long), None)
    # row 0: 0.95 and 0.92 pass; row 1: none passes, the best (0.3) is committed anyway
    assert keep.tolist() == [[False, True, False, True], [False, True, False, True]]


def test_factor_rule_hand_computed():
    score = torch.tensor([[0.8, 0.99, 0.5, 0.9], [0.2, 0.1, 0.3, 0.15]], dtype=torch.float64)
    pool = torch.ones(2, 4, dtype=torch.bool)
    # f = 1: thresholds 1 - 1/(n+1) = .5, .667, .75, .8 for n = 1..4; sorted .99 .9 .8 .5 -> n = 3
    assert factor_commit(score, pool, 1.0).tolist() == [[True, True, False, True], [False, False, True, False]]
    # f = 0.5: thresholds .75, .833, .875 -> .99 and .9 pass, .8 fails -> n = 2
    assert factor_commit(score, pool, 0.5)[0].tolist() == [False, True, False, True]
    # the pool limits the commits; a unit outside the pool is never committed
    pool[0, 1] = False
    assert factor_commit(score, pool, 1.0)[0].tolist() == [True, False, False, True]


@pytest.mark.parametrize("name,params", [("llada", {}), ("fast_dllm", {"threshold": 1.0}), ("fast_dllm", {"policy": "factor", "factor": 1e-9}),
                                         ("prophet", {}), ("learn2pd", {}), ("dkv_cache", {})])
def test_at_least_one_commit_per_step(name, params):
    res = run(name, block_length=8, **params)
    steps = res.stats.accepted_per_step
    assert steps and all(min(s) >= 1 for s in steps)
    if name == "fast_dllm":  # nothing reaches the threshold: exactly one token per step
        assert res.stats.extra["steps"] == 24 + 0 and all(max(s) == 1 for s in steps)


def test_llada_steps_budget_and_uneven_blocks():
    res = run("llada", block_length=8, steps=6, inputs=MaskedInputs.from_prompts([[1, 2]], 20, MASK))
    # 20 masks = blocks of 8, 8, 4; 6 steps -> 2 per block: 4 + 4, 4 + 4, 2 + 2
    assert res.stats.extra["steps"] == 6 and res.stats.accepted_per_step == [[4], [4], [4], [4], [2], [2]]
    assert not bool((res.tokens == MASK).any())


def test_llada_default_steps_are_one_per_token_in_every_block():
    """``steps=None`` = one step per generated token, also when the length is not a multiple of
    the block length (40 tokens in blocks of 32 + 8 took 28 forwards: 20 steps per block)."""
    res = run("llada", block_length=8, inputs=MaskedInputs.from_prompts([[1, 2]], 20, MASK))
    assert res.stats.target_forwards == 20 and res.stats.accepted_per_step == [[1]] * 20
    res = run("llada", block_length=8, inputs=MaskedInputs.from_prompts([[1, 2], [3, 4]], [20, 15], MASK))
    assert res.stats.target_forwards == 20 and not bool((res.tokens == MASK).any())
    alone = run("llada", block_length=8, inputs=MaskedInputs.from_prompts([[3, 4]], 15, MASK))
    assert alone.stats.target_forwards == 15  # blocks of 8 + 7: one step per token, as in the batch
    assert torch.equal(res.tokens[1, : alone.tokens.shape[-1]], alone.tokens[0])


# ----------------------------------------------------------------------------------------- caches
@pytest.mark.parametrize("name,params", [("fast_dllm", {"cache": "dual"}), ("fast_dllm", {"cache": "prefix"}),
                                         ("fast_dllm", {"cache": "dual", "policy": "factor"}), ("dkv_cache", {}),
                                         ("dkv_cache", {"cache": "dkv_window", "scorer": "random"})])
def test_cached_equals_cache_free_with_refresh_every_step(name, params):
    model = tiny(1)
    cached = run(name, model, block_length=8, cache_refresh=1, seed=3, temperature=1.0, **params)
    free = run(name, model, block_length=8, seed=3, temperature=1.0, **{**params, "cache": "none"})
    assert torch.equal(cached.tokens, free.tokens)
    assert cached.stats.extra["cache_refreshes"] == cached.stats.extra["steps"] and cached.stats.extra["cache_reuses"] == 0
    reuse = run(name, model, block_length=8, **params)  # the default refresh really reuses
    assert reuse.stats.extra["cache_reuses"] > 0


def test_learn2pd_on_the_dual_cache_equals_cache_free_with_refresh_every_step():
    """The reference's L2P+EoT+dual_cache: EoTP's truncated forwards and the cache's windows agree
    (an EoT id the tiny model commits often, so rows are cut mid-decode)."""
    model = tiny(1)
    free0 = run("learn2pd", model, block_length=8, cache="none")
    gen = free0.tokens[:, -24:]
    eot = int(torch.bincount(gen.reshape(-1), minlength=V).argmax())
    cut = None
    for eot_id in (None, eot):
        cached = run("learn2pd", model, block_length=8, cache="dual", cache_refresh=1, eot_id=eot_id)
        free = run("learn2pd", model, block_length=8, cache="none", eot_id=eot_id)
        assert torch.equal(cached.tokens, free.tokens) and cached.stats.extra["cache_reuses"] == 0
        cut = cached.stats.extra["eot_truncated_rows"]
    assert cut > 0
    reuse = run("learn2pd", model, block_length=8, cache="dual", eot_id=eot)
    assert reuse.stats.extra["cache_reuses"] > 0 and not bool((reuse.tokens == MASK).any())


def test_cached_logits_bound():
    """Windowed / subset forwards equal the full forward right after a refresh, and after the
    window's tokens change they stay within a bound of the fresh logits (stale context only)."""
    model = tiny(2).module
    x = torch.randint(0, MASK, (2, 40))
    x[:, 16:] = MASK
    with torch.no_grad():
        cache = MaskedCache(2, "dual")
        full = model(x, cache=cache)
        cache.window = (16, 24)
        assert torch.allclose(model(x, cache=cache), full[:, 16:24], atol=1e-5)
        cache.window, cache.positions = None, torch.tensor([5, 17, 30])
        assert torch.allclose(model(x, cache=cache), full[:, [5, 17, 30]], atol=1e-5)
        # commit three tokens inside the block, then compare the windowed pass with a fresh one
        y = x.clone()
        y[:, 16:19] = torch.tensor([4, 5, 6])
        cache = MaskedCache(2, "dual")
        model(x, cache=cache)
        cache.window = (16, 24)
        approx = model(y, cache=cache)
        exact = model(y)[:, 16:24]
        stale = full[:, 16:24]  # what the block would read with no recomputation at all
        err, drift = (approx - exact).abs().max(), (stale - exact).abs().max()
        assert err < 0.5 * drift and err < 0.5, (float(err), float(drift))


def test_row_subsets_sorted_and_padded_by_repeating_the_rows_last_position():
    need = torch.tensor([[False, True, False, True, False], [False, False, True, False, False], [False] * 5])
    # padding repeats a needed position (it adds no recomputed position), never an unneeded one
    assert row_subsets(need).tolist() == [[1, 3], [2, 2], [0, 0]]
    assert row_subsets(torch.zeros(2, 4, dtype=torch.bool)) is None
    assert row_ranges(torch.tensor([2, 5, 0]), torch.tensor([5, 6, 0])).tolist() == [[2, 3, 4], [5, 5, 5], [0, 0, 0]]


BATCHED = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [14]]


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("name,params", [
    ("fast_dllm", {"cache": "dual"}), ("fast_dllm", {"cache": "prefix"}), ("fast_dllm", {"cache": "dual", "policy": "factor"}),
    ("llada", {"cache": "dual", "cache_refresh": 3}), ("prophet", {"cache": "prefix"}),
    ("dkv_cache", {}), ("dkv_cache", {"cache": "dkv_window"}), ("fast_dllm", {"cache": "none"}),
])
def test_cached_rows_decode_as_they_would_alone(name, params, shift):
    """An approximate cache must not make a row depend on its batch: prompts of different lengths
    put the rows' blocks at different positions, and each row recomputes only its own window
    (the union would recompute, and so refresh, positions a row alone reads from the cache)."""
    model = tiny(2, shift=shift)
    smp = get_sampler(name, block_length=8, **params)
    cfg = DecodeConfig(temperature=0.0, eos_token_id=0)
    batch = smp.generate({"model": model}, MaskedInputs.from_prompts(BATCHED, 24, MASK), cfg, None)
    for i, prompt in enumerate(BATCHED):
        alone = smp.generate({"model": model}, MaskedInputs.from_prompts([prompt], 24, MASK), cfg, None)
        assert batch.sequences[i] == alone.sequences[0], (i, params)
    if params.get("cache") != "none":
        assert batch.stats.extra["cache_reuses"] > 0


@pytest.mark.parametrize("shift", [True, False])
def test_per_row_subset_forward_matches_full_and_shared(shift):
    """Per-row positions ``[B, n]`` after a refresh give the full forward's logits at each row's
    positions; where the rows' positions coincide they equal the shared (1-D) subset forward; the
    keys / values written back are the same either way."""
    model = tiny(3, shift=shift).module
    x = torch.randint(0, MASK, (2, 40))
    x[:, 16:] = MASK
    with torch.no_grad():
        full = model(x)
        per_row = torch.tensor([[3, 17, 30], [0, 20, 39]])
        cache = MaskedCache(2, "dual")
        model(x, cache=cache)
        cache.positions = per_row
        got = model(x, cache=cache)
        assert torch.allclose(got, full.gather(1, per_row[..., None].expand(-1, -1, V)), atol=1e-5)
        # commit some tokens, then a per-row pass over the same set as a shared pass
        y = x.clone()
        y[:, 16:19] = torch.tensor([4, 5, 6])
        out, kv = [], []
        for pos in (torch.tensor([5, 17, 30]), torch.tensor([[5, 17, 30], [5, 17, 30]])):
            cache = MaskedCache(2, "dual")
            model(x, cache=cache)
            cache.positions = pos
            out.append(model(y, cache=cache))
            kv.append(cache.get("k0"))
        assert torch.allclose(out[0], out[1], atol=1e-5) and torch.allclose(kv[0], kv[1], atol=1e-6)


def test_dkv_delayed_recomputes_each_rows_own_positions():
    """dKV-Cache-Decode asks for per-row subsets ([A, n]) on a model that takes them, and the
    rows share their union on one that does not; both decode every position."""
    seen = []
    model = tiny(1)
    inner = model.module.forward

    def spy(tokens, *a, cache=None, **k):
        if cache is not None and cache.positions is not None:
            seen.append(cache.positions.dim())
        return inner(tokens, *a, cache=cache, **k)

    model.module.forward = spy
    out = run("dkv_cache", model, block_length=8)
    assert seen and set(seen) == {2} and not bool((out.tokens == MASK).any())
    seen.clear()
    model.supports_row_positions = False
    out = run("dkv_cache", model, block_length=8)
    assert seen and set(seen) == {1} and not bool((out.tokens == MASK).any())
    x = torch.full((2, 12), MASK)
    cache = MaskedCache(2, "dual")
    model(x, cache=cache)
    cache.positions = torch.tensor([[1, 2], [3, 4]])
    with pytest.raises(InputError, match="1-D set"):  # this model said it takes shared subsets only
        model(x, cache=cache)
    model.supports_row_positions = True
    assert model(x, cache=cache).shape == (2, 2, V)
    cache.positions = torch.tensor([[1, 2], [3, 4], [5, 6]])
    with pytest.raises(InputError, match=r"\[2, n\]"):  # one row of positions per batch row
        model(x, cache=cache)


def test_dkv_per_row_positions_compose_with_eot_truncation():
    """EoTP cuts rows mid-decode while dKV-Cache-Decode reuses its cache: the truncated forwards
    take the rows' union of positions inside the cut, every position is decoded, and with a
    refresh every step the tokens equal the cache-free decode's."""
    model = tiny(1)
    gen = run("llada", model, block_length=8).tokens[:, -24:]
    eot = int(torch.bincount(gen.reshape(-1), minlength=V).argmax())
    cfg = DecodeConfig(temperature=0.0, eos_token_id=eot)

    def decode(**params):
        return get_sampler("dkv_cache", block_length=8, hooks=("eot_predict",), **params).generate({"model": model}, rows(), cfg, None)

    out = decode()
    assert out.stats.extra["eot_truncated_rows"] > 0 and out.stats.extra["cache_reuses"] > 0
    assert not bool((out.tokens == MASK).any())
    assert torch.equal(decode(cache_refresh=1).tokens, decode(cache="none").tokens)


def test_diffusion_lm_adapted_from_causal_matches_it_under_causal_attention():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    ar = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)).eval()
    m = DiffusionLM.from_causal_lm(ar).eval()
    assert m.config.mask_id == 32 and m.config.vocab_size == 33
    x = torch.randint(0, 32, (2, 12))
    with torch.no_grad():
        a = ar(x).logits
        d = m(x, attn_mask=training_attention(12, 0.0, None, 2, x.device))
    assert torch.allclose(a[:, :-1], d[:, 1:, :32], atol=1e-4)


# ------------------------------------------------------------------------------------------- EoTP
class Scripted(nn.Module):
    """Logits that put 10 on ``target[i]`` at every position i (no shift)."""

    def __init__(self, target: list[int]) -> None:
        super().__init__()
        self.target = torch.tensor(target)
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, tokens, attention_mask=None):
        out = torch.zeros(*tokens.shape, V)
        out[..., self.target[: tokens.shape[-1]]] = 0.0
        out.scatter_(-1, self.target[: tokens.shape[-1]].expand(tokens.shape)[..., None], 10.0)
        return out


def test_eotp_never_truncates_before_a_committed_token():
    # generation positions 2..13: text, EoT, text, then EoT; the order of commits is by confidence
    target = [1, 2, 9, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 0]
    model = TorchMaskedLM(Scripted(target), mask_id=MASK, vocab_size=V)
    inputs = MaskedInputs.from_prompts([[1, 2]], 12, MASK)
    res = get_sampler("learn2pd", region="full", block_length=32).generate(
        {"model": model}, inputs, DecodeConfig(temperature=0.0, eos_token_id=0))
    assert res.tokens[0].tolist() == target  # the 7 after the first EoT survives
    assert res.stats.extra["eot_truncated_rows"] == 1
    # a committed text token after an EoT: the fill starts after it, never before
    t2 = [1, 2, 0, 0, 5, 0, 0, 0]
    model = TorchMaskedLM(Scripted(t2), mask_id=MASK, vocab_size=V)
    res = get_sampler("learn2pd", region="full", block_length=32).generate(
        {"model": model}, MaskedInputs.from_prompts([[1, 2]], 6, MASK), DecodeConfig(temperature=0.0, eos_token_id=0))
    assert res.tokens[0].tolist() == t2


def test_eotp_saves_steps_and_truncates_forwards():
    target = [1, 2, 9, 9, 0] + [0] * 27
    model = TorchMaskedLM(Scripted(target), mask_id=MASK, vocab_size=V)
    inputs = MaskedInputs.from_prompts([[1, 2]], 30, MASK)
    cfg = DecodeConfig(temperature=0.0, eos_token_id=0)
    base = get_sampler("llada", block_length=8).generate({"model": model}, inputs, cfg)
    fast = get_sampler("learn2pd", block_length=8).generate({"model": model}, inputs, cfg)
    assert torch.equal(base.tokens, fast.tokens)
    assert fast.stats.target_forwards < base.stats.target_forwards / 3


# ---------------------------------------------------------------------------------- reproducibility
@pytest.mark.parametrize("name", DLLM)
def test_seeded_reproducibility(name):
    model = tiny(4)
    a = run(name, model, temperature=1.0, seed=11, block_length=8)
    b = run(name, model, temperature=1.0, seed=11, block_length=8)
    assert torch.equal(a.tokens, b.tokens)


# ---------------------------------------------------------------------------------- learn2pd filter
def test_learn2pd_filter_round_trip(tmp_path):
    model = tiny(5)
    conf, correct = egp_records(model, [[1, 2, 3]], gen_length=16, block_length=8)
    assert conf.shape[1] == 8 and conf.shape == correct.shape and conf.shape[0] >= 2
    filt, metrics = train_filter(conf, correct, epochs=50)
    assert sum(p.numel() for p in filt.parameters()) == 8 * 8 * 2 + 8 * 2 and metrics["records"] == conf.shape[0]
    filt.save(tmp_path / "f.safetensors")
    back = CommitFilter.load(tmp_path / "f.safetensors")
    assert torch.allclose(back(conf), filt(conf))
    res = run("learn2pd", model, block_length=8, commit_filter=str(tmp_path / "f.safetensors"))
    assert not bool((res.tokens == MASK).any())
    with pytest.raises(ConfigError, match="blocks of 8"):
        get_sampler("learn2pd", block_length=16, commit_filter=back)


# ------------------------------------------------------------------------------------- constraint
def test_balanced_constraint_forces_the_open_digit():
    class Flat(nn.Module):
        def forward(self, tokens):
            out = torch.zeros(*tokens.shape, V)
            out[..., 20] = 5.0  # the model wants token 20 everywhere
            return out

    model = TorchMaskedLM(Flat(), mask_id=MASK, vocab_size=V)
    # digit 7 appears once, bracket 10 open once: with 2 masks both must be closed
    inputs = MaskedInputs(torch.tensor([[1, 7, 10, MASK, MASK]]))
    res = get_sampler("genmol", constraint="balanced", pair_ids=[7, 8], bracket_pairs=[[10, 11]]).generate(
        {"model": model}, inputs, DecodeConfig(temperature=0.0))
    assert sorted(res.tokens[0, 3:].tolist()) == [7, 11]
    free = get_sampler("genmol").generate({"model": model}, inputs, DecodeConfig(temperature=0.0))
    assert free.tokens[0, 3:].tolist() == [20, 20]
    with pytest.raises(ConfigError, match="pair_ids"):
        get_sampler("genmol", constraint="balanced")


# -------------------------------------------------------------------------------------- bad input
def test_masked_sampler_on_a_causal_model_names_the_right_samplers():
    from transformers import LlamaConfig, LlamaForCausalLM

    from leapgen.models.hf import HFCausalLM

    ar = HFCausalLM(LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                 num_key_value_heads=2, intermediate_size=32)))
    with pytest.raises((ModelMismatchError, ConfigError), match="ar|speculative|causal"):
        get_sampler("fast_dllm").generate({"model": ar}, [[1, 2]], DecodeConfig())
    with pytest.raises((ModelMismatchError, ConfigError), match="masked|llada|fast_dllm"):
        get_sampler("ar").generate({"model": tiny()}, [[1, 2]], DecodeConfig(max_new_tokens=2))


def test_explicit_cache_on_a_model_without_one_is_refused():
    class Plain(nn.Module):
        def forward(self, tokens):
            return torch.zeros(*tokens.shape, V)

    model = TorchMaskedLM(Plain(), mask_id=MASK, vocab_size=V)
    assert run("fast_dllm", model).stats.extra["cache"] == "none"  # the default falls back
    with pytest.raises(ConfigError, match="supports a cache"):
        run("fast_dllm", model, cache="dual")


def test_per_row_windows_fall_back_to_the_union_on_models_without_row_subsets():
    """On a model with shared subsets only the rows' windows become their union (1-D positions);
    on one with windows only, the union window; both decode every position."""
    seen = []
    model = tiny(2)
    inner = model.module.forward

    def spy(tokens, *a, cache=None, **k):
        if cache is not None and (cache.positions is not None or cache.window is not None):
            seen.append("window" if cache.positions is None else cache.positions.dim())
        return inner(tokens, *a, cache=cache, **k)

    model.module.forward = spy
    inputs = MaskedInputs.from_prompts(BATCHED, 24, MASK)
    cfg = DecodeConfig(temperature=0.0, eos_token_id=0)
    for flags, want in (((True, True), {2}), ((True, False), {1}), ((False, False), {"window"})):
        seen.clear()
        model.supports_cache_positions, model.supports_row_positions = flags
        out = get_sampler("fast_dllm", block_length=8, cache="dual").generate({"model": model}, inputs, cfg, None)
        assert set(seen) == want and not bool((out.tokens == MASK).any())


EOT_ROWS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [14], [15, 16], [17, 18, 19, 20], [21]]


@pytest.mark.parametrize("seed,shift", [(0, True), (3, True), (4, False), (5, True)])
def test_eot_truncation_on_a_cache_decodes_rows_as_alone(seed, shift):
    """End-of-Text truncation on a cache: a row whose cut moves refreshes alone (its sequence got
    shorter) while the batch's cut may not move; each such row recomputes all its positions in the
    batch's forward (a row refresh), so every row equals its solo decode. Before, these seeds
    mismatched in 1-6 rows of 6 for every cache (the batch refreshed when the *batch's* cut moved)."""
    model = tiny(seed, shift=shift)
    cfg0 = DecodeConfig(temperature=0.0, eos_token_id=0)
    plain = get_sampler("llada", block_length=8).generate({"model": model}, MaskedInputs.from_prompts(EOT_ROWS, 24, MASK), cfg0, None)
    eot = int(torch.bincount(plain.tokens.reshape(-1), minlength=V)[:MASK].argmax())  # a token it writes often
    cfg = DecodeConfig(temperature=0.0, eos_token_id=eot)
    for name, params in [("dkv_cache", {"cache": "dkv_window"}), ("dkv_cache", {}), ("fast_dllm", {"cache": "dual"}),
                         ("fast_dllm", {"cache": "prefix"}), ("llada", {"cache": "dual", "cache_refresh": 3})]:
        smp = get_sampler(name, block_length=8, hooks=("eot_predict",), **params)
        batch = smp.generate({"model": model}, MaskedInputs.from_prompts(EOT_ROWS, 24, MASK), cfg, None)
        assert batch.stats.extra["eot_truncated_rows"] >= 2 and batch.stats.extra["cache_reuses"] > 0
        for i, row in enumerate(EOT_ROWS):
            alone = smp.generate({"model": model}, MaskedInputs.from_prompts([row], 24, MASK), cfg, None)
            assert batch.sequences[i] == alone.sequences[0], (name, params, i)


@pytest.mark.parametrize("eot_id", [2.5, 0.0, float("inf"), -1, [3, -2], [], True])
def test_learn2pd_eot_id_is_checked(eot_id):
    with pytest.raises(ConfigError, match="eot_id"):
        get_sampler("learn2pd", eot_id=eot_id)


def test_learn2pd_eot_id_outside_the_vocabulary_and_missing_filter_file_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="outside this model's 33 tokens"):
        run("learn2pd", eot_id=10**9, block_length=8)
    with pytest.raises(ConfigError, match="is not a file"):
        get_sampler("learn2pd", commit_filter=str(tmp_path / "missing.safetensors"))
