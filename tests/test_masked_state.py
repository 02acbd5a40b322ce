"""The generalised masked state, the continuous-token contract and the masked cache.

Random-weight test models show each shape the masked loop must carry, decoded end to end:

* MAGNeT-like: K = 4 codebooks ``[B, K, T]``, codebook stages x 3-token spans, annealed CFG;
* MaskGCT-like: a fixed prompt prefix that is never overwritten, plus a (text-embedding) condition;
* LLaDA / Fast-dLLM-like: 1-D text, semi-autoregressive blocks, threshold commits, prefix and
  dual KV caches (cached against uncached logits are bounded; refresh every step = uncached, exactly);
* MAR-like: continuous tokens ``[B, T, D]`` sampled by a tiny per-token head from the caller's generator.

Invariants everywhere: every unknown position is committed by the end, known positions never
change, commit-only policies never change a committed value, seeded runs reproduce.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from leapgen.errors import ConfigError, InputError
from leapgen.models import TorchMaskedLM
from leapgen.models.masked_base import ContinuousMaskedModel, MaskedCache, MaskedState
from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.masked import MaskedInputs, MaskedSampler, MaskGIT

torch.set_num_threads(1)

V = 24
MASK = V  # outside the vocabulary (MaskGIT / MAGNeT style)
N_CLASSES = 3
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")])]


def gen(seed: int = 0, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


# ------------------------------------------------------------------------------------------
# random-weight models


class Block(nn.Module):
    """Pre-norm bidirectional attention + MLP with explicit q/k/v, so keys/values can be cached."""

    def __init__(self, d: int, heads: int = 4) -> None:
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.reshape(b, n, self.h, d // self.h).transpose(1, 2)

    def forward(self, x, key_mask, cache: MaskedCache | None, name: str):
        q, k, v = (self.split(t) for t in self.qkv(self.ln1(x)).chunk(3, -1))
        if cache is not None and cache.window is not None:  # windowed: the rest comes from the cache
            lo, hi = cache.window
            ck, cv = cache.get(name + "k"), cache.get(name + "v")
            k = torch.cat([ck[:, :, :lo], k, ck[:, :, hi:]], 2)
            v = torch.cat([cv[:, :, :lo], v, cv[:, :, hi:]], 2)
        elif cache is not None:  # refresh: store every position's keys and values
            cache.put(name + "k", k)
            cache.put(name + "v", v)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if key_mask is not None:
            att = att.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        x = x + self.out(y)
        return x + self.mlp(self.ln2(x))


class TinyBidirLM(nn.Module):
    """A 2-layer bidirectional masked LM over K codebooks with an optional condition and a KV cache.

    ``cond``: class ids ``[B]`` (long) or a text-like embedding ``[B, cond_dim]`` (float); None is
    the null condition. With ``cache`` it follows the MaskedCache contract (refresh / window).
    """

    def __init__(self, codebooks: int = 1, d: int = 32, max_len: int = 64, cond_dim: int = 8, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.k = codebooks
        self.emb = nn.ModuleList(nn.Embedding(V + 1, d) for _ in range(codebooks))
        self.pos = nn.Embedding(max_len, d)
        self.cls = nn.Embedding(N_CLASSES + 1, d)
        self.txt = nn.Linear(cond_dim, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(2))
        self.head = nn.Linear(d, codebooks * V)
        self.stages_seen: list[int | None] = []

    def forward(self, tokens, cond=None, stage=None, attention_mask=None, cache=None):
        self.stages_seen.append(stage)
        x = tokens if tokens.dim() == 3 else tokens[:, None]
        b, _, seq = x.shape
        lo, hi = (0, seq) if cache is None or cache.window is None else cache.window
        pos = torch.arange(lo, hi, device=x.device)
        h = sum(self.emb[i](x[:, i, lo:hi]) for i in range(self.k)) + self.pos(pos)[None]
        if cond is None:
            h = h + self.cls(torch.full((b,), N_CLASSES, device=x.device))[:, None]
        elif cond.dtype.is_floating_point:
            h = h + self.txt(cond)[:, None]
        else:
            h = h + self.cls(cond)[:, None]
        for i, blk in enumerate(self.blocks):
            h = blk(h, attention_mask, cache, f"l{i}")
        out = 4.0 * self.head(h).reshape(b, hi - lo, self.k, V).permute(0, 2, 1, 3)
        return out if tokens.dim() == 3 else out[:, 0]


class TinyMAR(ContinuousMaskedModel):
    """MAR-shaped: a bidirectional encoder over continuous tokens gives z per position; a tiny
    per-token denoising head turns (noise, z) into a token in a few steps, with the caller's generator."""

    def __init__(self, token_dim: int = 4, cond_dim: int = 16, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.token_dim, self.cond_dim = token_dim, cond_dim
        self.inp = nn.Linear(token_dim, cond_dim)
        self.mask_emb = nn.Parameter(torch.randn(cond_dim))
        self.pos = nn.Embedding(64, cond_dim)
        self.cls = nn.Embedding(N_CLASSES + 1, cond_dim)
        self.block = Block(cond_dim)
        self.head = nn.Sequential(nn.Linear(token_dim + cond_dim, 32), nn.SiLU(), nn.Linear(32, token_dim))
        self.head_calls = 0

    def _forward(self, values, known, cond, attention_mask):
        b, t, _ = values.shape
        h = torch.where(known[..., None], self.inp(values), self.mask_emb)
        h = h + self.pos(torch.arange(t, device=values.device))[None]
        label = torch.full((b,), N_CLASSES, device=values.device) if cond is None else cond
        h = h + self.cls(label)[:, None]
        return self.block(h, attention_mask, None, "l0")

    def sample_tokens(self, z, generator, temperature):
        self.head_calls += 1
        x = torch.randn(z.shape[0], self.token_dim, generator=generator, device=z.device)
        for _ in range(3):
            eps = self.head(torch.cat([x, z], -1))
            noise = torch.randn(x.shape, generator=generator, device=z.device)
            x = x - 0.5 * eps + 0.1 * temperature[:, None] * noise
        return x


# ------------------------------------------------------------------------------------------
# invariants


def check_decode(res, tokens: torch.Tensor, known: torch.Tensor, *, commit_only: bool = True) -> None:
    """Known values unchanged, every unknown position committed, commits never revised."""
    out = res.tokens
    assert out.shape == tokens.shape
    kn = known if not tokens.dtype.is_floating_point else known[..., None].expand_as(tokens)
    assert torch.equal(out[kn], tokens[kn]), "a known position changed"
    if not tokens.dtype.is_floating_point:
        assert not bool((out == MASK).any()) and not bool((out >= V).any()), "an unknown position was left"
    if res.trajectory is not None:
        prev = res.trajectory[0]
        assert torch.equal(prev, tokens)
        for cur in res.trajectory[1:]:
            assert torch.equal(cur[kn], tokens[kn])
            if commit_only:
                if tokens.dtype.is_floating_point:
                    was = (prev != 0).any(-1) & ~known
                    was = was[..., None].expand_as(prev)
                else:
                    was = (prev != MASK) & ~known
                assert torch.equal(cur[was], prev[was]), "a committed value changed"
            prev = cur
        assert torch.equal(prev, out)


# ------------------------------------------------------------------------------------------
# the state type


def test_masked_state_helpers_discrete_and_continuous():
    tok = torch.tensor([[1, MASK, 2, MASK], [MASK, MASK, 3, 0]])
    s = MaskedState.from_tokens(tok, MASK, attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]).bool())
    assert s.squeeze and s.values.shape == (2, 1, 4) and s.num_codebooks == 1 and not s.is_continuous
    assert s.num_unknown().tolist() == [2, 2]  # padding counts as known
    s.commit(torch.ones(2, 1, 4, dtype=torch.bool), torch.full((2, 1, 4), 7))
    assert s.model_tokens().tolist() == [[1, 7, 2, 7], [7, 7, 3, 0]], "known / padding positions were written"
    assert s.num_unknown().tolist() == [0, 0]
    s.remask(torch.tensor([[[False, True, False, False]]]), rows=torch.tensor([1]))
    assert s.model_tokens()[1].tolist() == [7, MASK, 3, 0] and s.num_unknown().tolist() == [0, 1]
    sub = s.select_rows(torch.tensor([1]))
    assert sub.batch_size == 1 and sub.model_tokens().tolist() == [[7, MASK, 3, 0]]

    s3 = MaskedState.from_tokens(torch.full((2, 4, 5), MASK), MASK)  # K = 4 codebooks
    assert s3.num_codebooks == 4 and s3.num_unknown().tolist() == [20, 20] and not s3.squeeze

    vals = torch.zeros(2, 5, 3)
    known = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]).bool()
    c = MaskedState(vals, known)
    assert c.is_continuous and c.token_dim == 3 and c.length == 5 and c.unknown.shape == (2, 1, 5)
    assert c.num_unknown().tolist() == [3, 4]
    c.commit(torch.ones(2, 1, 5, dtype=torch.bool), torch.ones(2, 5, 3))
    assert torch.equal(c.values[known], torch.zeros(3, 3)) and bool((c.values[~known] == 1).all())
    c64 = c.to(dtype=torch.float64)
    assert c64.values.dtype == torch.float64 and c64.known.dtype == torch.bool
    with pytest.raises(InputError, match="known must be"):
        MaskedState(vals, known[:, :3])
    with pytest.raises(InputError, match="mask_id"):
        MaskedState(tok, tok != MASK)


# ------------------------------------------------------------------------------------------
# MAGNeT-like: K = 4 codebooks, codebook stages x spans, annealed CFG


def magnet_sampler(**extra) -> MaskedSampler:
    return MaskedSampler(
        region="codebook_stages",
        steps_per_stage=[4, 2, 2, 2],
        span_len=3,
        scorer="prob",
        span_score="max",
        guidance="cfg",
        cfg_scale=10.0,
        cfg_min_scale=1.0,
        cfg_anneal="mask_rate",
        temperature_anneal="linear",
        hooks=("trajectory",),
        **extra,
    )


def test_magnet_like_codebooks_stages_spans_cfg():
    k, seq, prompt = 4, 15, 3
    net = TinyBidirLM(codebooks=k, seed=5)
    m = TorchMaskedLM(net, mask_id=MASK, vocab_size=V, num_codebooks=k)
    tokens = torch.full((3, k, seq), MASK)
    tokens[:, :, :prompt] = torch.randint(0, V, (3, k, prompt), generator=gen(0))
    inputs = MaskedInputs(tokens, cond=torch.tensor([0, 1, 2]))
    cfg = DecodeConfig(temperature=3.0, top_p=0.9)
    res = magnet_sampler().generate({"model": m}, inputs, cfg, gen(1))
    check_decode(res, tokens, tokens != MASK)
    assert res.stats.extra["stages"] == k and res.stats.extra["steps"] == 10
    assert res.stats.target_forwards == 20  # conditional + null pass per step
    assert net.stages_seen[-20:] == [c for c, n in enumerate([4, 2, 2, 2]) for _ in range(2 * n)]
    span = torch.arange(seq) // 3
    for prev, cur in zip(res.trajectory, res.trajectory[1:]):
        newly = (prev == MASK) & (cur != MASK)
        for b in range(3):
            c = newly[b].any(1).nonzero().flatten().tolist()
            assert len(c) == 1 and not bool((cur[b, : c[0]] == MASK).any())  # one codebook at a time, in order
            for s in span[newly[b, c[0]]].unique().tolist():
                assert bool(newly[b, c[0]][(span == s) & (tokens[b, c[0]] == MASK)].all()), "partial span"
    again = magnet_sampler().generate({"model": m}, inputs, cfg, gen(1))
    other = magnet_sampler().generate({"model": m}, inputs, cfg, gen(2))
    assert torch.equal(res.tokens, again.tokens) and not torch.equal(res.tokens, other.tokens)


# ------------------------------------------------------------------------------------------
# MaskGCT-like: fixed prompt prefix (never overwritten) + a text-like condition


def test_maskgct_like_prompt_prefix_and_condition():
    net = TinyBidirLM(seed=7)
    m = TorchMaskedLM(net, mask_id=MASK, vocab_size=V, null_cond=lambda c: None)
    prompt_len, target = [5, 3, 7], 12
    g = gen(3)
    rows = [torch.randint(0, V, (p,), generator=g).tolist() + [MASK] * target for p in prompt_len]
    text = torch.randn(3, 8, generator=g)  # the "phone" condition
    inputs = MaskedInputs.from_prompts([r[:p] for r, p in zip(rows, prompt_len)], target, MASK, cond=text, pad_id=0)
    smp = MaskedSampler(
        schedule="sin", scorer="prob_gumbel", choice_temperature=1.0, noise_anneal="maskgct", steps=6,
        guidance="cfg", cfg_scale=2.5, hooks=("trajectory",),
    )
    res = smp.generate({"model": m}, inputs, DecodeConfig(temperature=0.9, top_k=5), gen(4))
    check_decode(res, inputs.tokens, inputs.tokens != MASK)
    for b, p in enumerate(prompt_len):
        assert res.sequences[b][:p] == rows[b][:p] and len(res.sequences[b]) == p + target
    assert res.stats.target_forwards == 2 * res.stats.extra["steps"]
    # the condition matters: a different text gives different speech tokens (same seed)
    other = smp.generate({"model": m}, MaskedInputs(inputs.tokens, -text, inputs.attention_mask), DecodeConfig(temperature=0.9, top_k=5), gen(4))
    assert not torch.equal(res.tokens, other.tokens)


# ------------------------------------------------------------------------------------------
# LLaDA / Fast-dLLM-like: semi-AR blocks, threshold commits, prefix and dual caches


def llada_model(seed: int = 11) -> TorchMaskedLM:
    return TorchMaskedLM(TinyBidirLM(seed=seed), mask_id=MASK, vocab_size=V)


def llada_rows(batch: int, gen_len: int = 24) -> list[list[int]]:
    g = gen(21)
    return [torch.randint(0, V, (2 + 3 * (i % 3),), generator=g).tolist() + [MASK] * gen_len for i in range(batch)]


def fast_dllm(**extra) -> MaskedSampler:
    params = {"region": "blocks", "block_length": 8, "schedule": "per_block", "scorer": "prob", "steps": 24,
              "hooks": ("trajectory",), **extra}
    return MaskedSampler(**params)


def test_model_declares_cache_support():
    assert llada_model().supports_cache
    plain = TorchMaskedLM(nn.Linear(1, 1), mask_id=MASK, vocab_size=V)
    assert not plain.supports_cache
    with pytest.raises(ConfigError, match="supports a cache"):
        MaskGIT(cache="prefix").generate({"model": plain}, [[1, MASK]], DecodeConfig(), gen())
    with pytest.raises(ConfigError, match="no effect"):
        MaskGIT(cache_refresh=2)
    with pytest.raises(ConfigError, match="cache_refresh"):
        MaskGIT(cache="dual", cache_refresh=0)
    with pytest.raises(ConfigError, match="unknown cache policy"):
        MaskGIT(cache="delayed")


def test_cached_logits_are_close_to_uncached_and_exact_before_any_change():
    m = llada_model()
    inputs = MaskedInputs.coerce(llada_rows(3), mask_id=MASK, num_codebooks=1)
    x, am = inputs.tokens, inputs.attention_mask
    lo, hi = 10, 18  # a block inside the generation
    with torch.inference_mode():
        for mode in ("prefix", "dual"):
            cache = m.new_cache(3, mode)
            full0 = m(x, attention_mask=am, cache=cache)  # refresh
            assert torch.equal(full0, m(x, attention_mask=am)), "a refresh must equal the uncached forward"
            window = (lo, x.shape[1]) if mode == "prefix" else (lo, hi)
            cache.window = window
            same = m(x, attention_mask=am, cache=cache)
            assert same.shape == (3, window[1] - window[0], V)
            torch.testing.assert_close(same, full0[:, window[0] : window[1]], atol=1e-5, rtol=1e-5)
            # commit a few tokens inside the block: the cached keys of the rest are now stale
            x1 = x.clone()
            x1[:, lo : lo + 3] = torch.tensor([4, 5, 6])
            exact = m(x1, attention_mask=am)[:, window[0] : window[1]]
            approx = m(x1, attention_mask=am, cache=cache)
            diff = (approx.softmax(-1) - exact.softmax(-1)).abs().amax()
            assert 0 < float(diff) < 0.05, f"{mode}: cached probabilities differ by {float(diff)}"


@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("policy", ["topk", "threshold"])
def test_cache_with_refresh_every_step_equals_uncached(mode, policy):
    m = llada_model()
    rows = llada_rows(4)
    extra = {"policy": "threshold", "threshold": 0.6} if policy == "threshold" else {}
    cfg = DecodeConfig(temperature=1.0)
    plain = fast_dllm(**extra).generate({"model": m}, rows, cfg, gen(5))
    cached = fast_dllm(cache=mode, cache_refresh=1, **extra).generate({"model": m}, rows, cfg, gen(5))
    assert torch.equal(plain.tokens, cached.tokens)
    assert plain.stats.accepted_per_step == cached.stats.accepted_per_step
    assert cached.stats.extra["cache_reuses"] == 0
    assert cached.stats.extra["cache_refreshes"] == cached.stats.target_forwards == plain.stats.target_forwards


def test_guidance_passes_keep_their_own_cache():
    m = llada_model()
    rows = llada_rows(3)
    inputs = MaskedInputs.coerce(rows, mask_id=MASK, num_codebooks=1)
    inputs.cond = torch.tensor([0, 1, 2])
    cfg = DecodeConfig(temperature=1.0)
    plain = fast_dllm(guidance="cfg", cfg_scale=2.0).generate({"model": m}, inputs, cfg, gen(6))
    every = fast_dllm(guidance="cfg", cfg_scale=2.0, cache="dual", cache_refresh=1).generate({"model": m}, inputs, cfg, gen(6))
    assert torch.equal(plain.tokens, every.tokens)
    lazy = fast_dllm(guidance="cfg", cfg_scale=2.0, cache="dual").generate({"model": m}, inputs, cfg, gen(6))
    check_decode(lazy, inputs.tokens, inputs.tokens != MASK)
    st = lazy.stats.extra
    assert st["cache_refreshes"] == 2 * st["stages"]  # conditional and null pass, once per block
    assert st["cache_refreshes"] + st["cache_reuses"] == lazy.stats.target_forwards == 2 * st["steps"]


@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_llada_like_blocks_with_cache_decode_end_to_end(mode):
    m = llada_model()
    rows = llada_rows(4)
    inputs = MaskedInputs.coerce(rows, mask_id=MASK, num_codebooks=1)
    smp = fast_dllm(cache=mode, policy="threshold", threshold=0.5)
    res = smp.generate({"model": m}, inputs, DecodeConfig(temperature=0.0), gen(0))
    check_decode(res, inputs.tokens, inputs.tokens != MASK)
    st = res.stats.extra
    assert st["stages"] == 3 and st["cache_refreshes"] == 3 and st["cache_reuses"] == res.stats.target_forwards - 3
    assert st["cache_reuses"] > 0
    # semi-autoregressive: no position of block j + 1 is committed before block j is complete
    first = [r.index(MASK) for r in rows]
    for prev, cur in zip(res.trajectory, res.trajectory[1:]):
        newly = (prev == MASK) & (cur != MASK)
        for b, f in enumerate(first):
            pos = newly[b].nonzero().flatten()
            if pos.numel():
                block = (pos - f) // 8
                assert block.unique().numel() == 1
                assert not bool((prev[b, f : f + 8 * int(block[0])] == MASK).any())
    again = smp.generate({"model": m}, inputs, DecodeConfig(temperature=0.0), gen(0))
    assert torch.equal(res.tokens, again.tokens)
    # a greedy cached decode stays close to the uncached one on this random model
    plain = fast_dllm(policy="threshold", threshold=0.5).generate({"model": m}, inputs, DecodeConfig(temperature=0.0), gen(0))
    gen_pos = inputs.tokens == MASK
    agree = (plain.tokens[gen_pos] == res.tokens[gen_pos]).double().mean()
    assert float(agree) > 0.9


# ------------------------------------------------------------------------------------------
# MAR-like: continuous tokens and a per-token head


def mar_inputs(batch: int = 3, t: int = 12, d: int = 4) -> MaskedInputs:
    g = gen(8)
    values = torch.randn(batch, t, d, generator=g)
    known = torch.zeros(batch, t, dtype=torch.bool)
    known[:, :3] = True  # a known prefix (e.g. given patches)
    known[0, 7] = True
    values = values.masked_fill(~known[..., None], 0.0)
    return MaskedInputs(values, cond=torch.tensor([0, 1, 2])[:batch], known=known)


def mar_sampler(**extra) -> MaskedSampler:
    return MaskedSampler(**{"scorer": "random", "schedule": "cosine", "steps": 5, "hooks": ("trajectory",), **extra})


def test_mar_like_continuous_tokens_end_to_end():
    m = TinyMAR()
    inputs = mar_inputs()
    cfg = DecodeConfig(temperature=1.0)
    res = mar_sampler(guidance="cfg", cfg_scale=2.0).generate({"model": m}, inputs, cfg, gen(3))
    check_decode(res, inputs.tokens, inputs.known)
    assert res.tokens.shape == (3, 12, 4) and res.tokens.dtype == torch.float32
    assert bool((res.tokens[~inputs.known] != 0).all()), "an unknown vector was never committed"
    assert res.generated.shape == (3, 12) and torch.equal(res.generated, ~inputs.known)
    assert res.stats.extra["steps"] == 5 and res.stats.target_forwards == 10 and m.head_calls == 5
    assert res.stats.new_tokens == int((~inputs.known).sum())
    again = mar_sampler(guidance="cfg", cfg_scale=2.0).generate({"model": m}, inputs, cfg, gen(3))
    other = mar_sampler(guidance="cfg", cfg_scale=2.0).generate({"model": m}, inputs, cfg, gen(4))
    assert torch.equal(res.tokens, again.tokens) and not torch.equal(res.tokens, other.tokens)
    # the head is the only randomness besides the order: temperature 0 with a fixed order is deterministic
    st = MaskedState(inputs.tokens, inputs.known)
    res_state = mar_sampler().generate({"model": m}, st, DecodeConfig(temperature=0.0), gen(9))
    check_decode(res_state, inputs.tokens, inputs.known)


def test_continuous_model_errors():
    m = TinyMAR()
    with pytest.raises(ConfigError, match="continuous model"):
        MaskGIT().generate({"model": m}, mar_inputs(), DecodeConfig(temperature=1.0), gen())
    with pytest.raises(InputError, match="known-mask"):
        mar_sampler().generate({"model": m}, MaskedInputs(torch.zeros(1, 4, 4)), DecodeConfig(), gen())
    with pytest.raises(InputError, match=r"\[B, L, 4\]"):
        mar_sampler().generate({"model": m}, torch.zeros(1, 4, 3), DecodeConfig(), gen())
    with pytest.raises(ConfigError, match="early_exit"):
        mar_sampler(hooks=("early_exit",)).generate({"model": m}, mar_inputs(), DecodeConfig(), gen())
    with pytest.raises(ConfigError, match="fragments"):
        mar_sampler(region="fragments").generate({"model": m}, mar_inputs(), DecodeConfig(), gen())


# ------------------------------------------------------------------------------------------
# devices


def test_generator_on_another_device_is_refused():
    m = llada_model()

    class FakeGen:
        device = torch.device("meta")

    with pytest.raises(InputError, match="generator is on"):
        MaskGIT().generate({"model": m}, [[1, MASK]], DecodeConfig(), FakeGen())


@pytest.mark.parametrize("device", DEVICES)
def test_every_shape_decodes_on_the_device(device):
    """All maths on the model's device, randomness from a generator there (CUDA when present)."""
    net = TinyBidirLM(seed=11).to(device)
    m = TorchMaskedLM(net, mask_id=MASK, vocab_size=V)
    inputs = MaskedInputs.coerce(llada_rows(2), mask_id=MASK, num_codebooks=1)
    res = fast_dllm(cache="dual").generate({"model": m}, inputs, DecodeConfig(temperature=1.0), gen(0, device))
    assert res.tokens.device.type == device
    check_decode(res, inputs.tokens.to(device), (inputs.tokens != MASK).to(device))
    mar = TinyMAR()
    for mod in (mar.inp, mar.pos, mar.cls, mar.block, mar.head):
        mod.to(device)
    mar.mask_emb = nn.Parameter(mar.mask_emb.detach().to(device))
    mi = mar_inputs()
    out = mar_sampler().generate({"model": _OnDevice(mar, device)}, mi, DecodeConfig(temperature=1.0), gen(0, device))
    assert out.tokens.device.type == device


class _OnDevice(ContinuousMaskedModel):
    """TinyMAR reporting the device its parameters were moved to."""

    def __init__(self, inner: TinyMAR, device: str) -> None:
        self.inner, self._device = inner, torch.device(device)
        self.token_dim, self.cond_dim = inner.token_dim, inner.cond_dim

    @property
    def device(self) -> torch.device:
        return self._device

    def _forward(self, values, known, cond, attention_mask):
        return self.inner._forward(values, known, cond, attention_mask)

    def sample_tokens(self, z, generator, temperature):
        return self.inner.sample_tokens(z, generator, temperature)


# ------------------------------------------------------------------------------------------
# classifier-free guidance in one forward over the doubled batch (cfg_batch)


def test_concat_rows_stacks_conditions_or_refuses():
    from leapgen.models.condition import ClassCondition, Guidance, TextEmbeddings
    from leapgen.samplers.masked.state import concat_rows

    a = TextEmbeddings(embeddings=torch.randn(2, 5, 4), mask=torch.ones(2, 5, dtype=torch.bool))
    b = TextEmbeddings(embeddings=torch.randn(3, 5, 4), mask=torch.zeros(3, 5, dtype=torch.bool))
    both = concat_rows(a, b)
    assert both.batch_size == 5 and torch.equal(both.embeddings[2:], b.embeddings) and not bool(both.mask[2:].any())
    assert concat_rows(None, None) is None
    labels = concat_rows(ClassCondition(labels=torch.tensor([1, 2])), ClassCondition(labels=torch.tensor([-1])))
    assert labels.labels.tolist() == [1, 2, -1] and labels.text_ids is None
    d = concat_rows({"x": torch.ones(2, 3), "n": 7, "l": [1, 2]}, {"x": torch.zeros(1, 3), "n": 7, "l": [3]})
    assert d["x"].shape == (3, 3) and d["n"] == 7 and d["l"] == [1, 2, 3]
    for x, y in [
        (a, None),  # the model's own unconditional path
        (torch.ones(2, 3), torch.ones(2, 4)),  # shapes
        (torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)),  # dtypes
        ({"x": torch.ones(1)}, {"x": torch.ones(1), "uncond": True}),  # keys (MaskGCT's flag)
        (a, TextEmbeddings(embeddings=a.embeddings, mask=a.mask, guidance=Guidance(scale=3.0))),  # shared field
        (torch.tensor(1.0), torch.tensor(2.0)),  # scalars
        (ClassCondition(labels=torch.tensor([1]), text_ids=torch.tensor([[3, 4]])), ClassCondition(labels=torch.tensor([0]))),
        (a, TextEmbeddings(embeddings=torch.randn(1, 6, 4))),  # sequence lengths
    ]:
        with pytest.raises(ValueError):
            concat_rows(x, y)


class RowsSeen(TorchMaskedLM):
    """Records the batch size of every forward."""

    def _forward(self, tokens, cond, stage, attention_mask):
        self.rows_seen.append(tokens.shape[0])
        return super()._forward(tokens, cond, stage, attention_mask)


def test_batched_cfg_equals_two_forwards_and_halves_them():
    k, seq = 4, 15
    net = TinyBidirLM(codebooks=k, seed=5)
    m = RowsSeen(net, mask_id=MASK, vocab_size=V, num_codebooks=k, null_cond=lambda c: torch.full_like(c, N_CLASSES))
    tokens = torch.full((3, k, seq), MASK)
    tokens[:, :, :3] = torch.randint(0, V, (3, k, 3), generator=gen(0))
    tokens[2, :, 12:] = 0  # row 2 shorter: padding must follow it into the doubled batch
    am = torch.ones(3, seq, dtype=torch.bool)
    am[2, 12:] = False
    inputs = MaskedInputs(tokens, attention_mask=am, cond=torch.tensor([0, 1, 2]))
    cfg = DecodeConfig(temperature=3.0, top_p=0.9)
    m.rows_seen = []
    two = magnet_sampler(cfg_batch=False).generate({"model": m}, inputs, cfg, gen(1))
    assert two.stats.target_forwards == 20 and "guidance_batched" not in two.stats.extra
    apart_rows, m.rows_seen = m.rows_seen, []
    assert apart_rows[0::2] == apart_rows[1::2] and apart_rows[:3] == [3, 3, 3]  # conditional pass, then null pass
    auto = magnet_sampler().generate({"model": m}, inputs, cfg, gen(1))  # "auto": 3 rows on a CPU run apart
    assert auto.stats.target_forwards == 20 and "guidance_batched" not in auto.stats.extra
    m.rows_seen = []
    one = magnet_sampler(cfg_batch=True).generate({"model": m}, inputs, cfg, gen(1))
    assert one.stats.target_forwards == one.stats.extra["steps"] == one.stats.extra["guidance_batched"] == 10
    assert m.rows_seen == [2 * r for r in apart_rows[0::2]]  # both passes in one forward (row 2 ends stages sooner)
    assert torch.equal(one.tokens, two.tokens)
    for a, b in zip(one.trajectory, two.trajectory):
        assert torch.equal(a, b)
    # the guided logits agree up to float rounding
    from leapgen.samplers.masked.guidance import ClassifierFreeGuidance
    from leapgen.samplers.masked.loop import _start_state

    parts = magnet_sampler().build_parts()
    st = _start_state(m, inputs, parts, cfg, gen(1))
    st.rows, st.all_rows, st.step = torch.arange(3), True, 0
    st.n_masked_units, st.n_initial = torch.full((3,), 5), torch.full((3,), 10)
    g = ClassifierFreeGuidance(cfg_scale=4.0, cfg_min_scale=1.0, cfg_anneal="mask_rate", cfg_batch=True)
    batched = g.guided_forward(m, st)
    g.cfg_batch = False
    apart = g.guided_forward(m, st)
    assert torch.allclose(batched, apart, atol=1e-5, rtol=1e-5)


def test_cfg_runs_two_forwards_where_the_null_condition_does_not_stack():
    k, seq = 4, 15
    net = TinyBidirLM(codebooks=k, seed=5)
    m = RowsSeen(net, mask_id=MASK, vocab_size=V, num_codebooks=k)  # null_cond: None (the network's own path)
    m.rows_seen = []
    inputs = MaskedInputs(torch.full((2, k, seq), MASK), cond=torch.tensor([0, 1]))
    res = magnet_sampler(cfg_batch=True).generate({"model": m}, inputs, DecodeConfig(temperature=1.0), gen(1))
    check_decode(res, inputs.tokens, inputs.tokens != MASK)
    assert res.stats.target_forwards == 20 and m.rows_seen == [2] * 20 and "guidance_batched" not in res.stats.extra


def test_cfg_batch_auto_batches_one_row_on_a_cpu_and_checks_its_value():
    k, seq = 4, 15
    m = RowsSeen(TinyBidirLM(codebooks=k, seed=5), mask_id=MASK, vocab_size=V, num_codebooks=k,
                 null_cond=lambda c: torch.full_like(c, N_CLASSES))
    m.rows_seen = []
    res = magnet_sampler().generate({"model": m}, MaskedInputs(torch.full((1, k, seq), MASK), cond=torch.tensor([1])),
                                    DecodeConfig(temperature=1.0), gen(1))
    assert res.stats.extra["guidance_batched"] == res.stats.target_forwards == 10 and m.rows_seen == [2] * 10
    for bad in (1, "yes", None):
        with pytest.raises(ConfigError, match="cfg_batch"):
            magnet_sampler(cfg_batch=bad)


def test_batched_cfg_on_continuous_tokens_equals_two_forwards():
    class NullClassMAR(TinyMAR):
        def null_cond(self, cond):
            return None if cond is None else torch.full_like(cond, N_CLASSES)

    m = NullClassMAR()
    inputs = mar_inputs()
    cfg = DecodeConfig(temperature=1.0)
    one = mar_sampler(guidance="cfg", cfg_scale=2.0, cfg_batch=True).generate({"model": m}, inputs, cfg, gen(3))
    two = mar_sampler(guidance="cfg", cfg_scale=2.0, cfg_batch=False).generate({"model": m}, inputs, cfg, gen(3))
    check_decode(one, inputs.tokens, inputs.known)
    assert one.stats.target_forwards == one.stats.extra["guidance_batched"] == 5 and two.stats.target_forwards == 10
    assert torch.allclose(one.tokens, two.tokens, atol=1e-5)
