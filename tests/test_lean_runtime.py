"""The lean decode runtime (leapgen.models.lean): same greedy tokens as transformers, in-place cache.

* :class:`StaticKVCache` follows the reference :class:`KVCache` bookkeeping (lengths, holes, masks,
  crop / keep_new / select / select_rows) step for step on random operation sequences;
* :class:`LeanCausalLM` gives transformers' logits on tiny random Llamas (GQA, MHA, biases) for
  every kind of forward (prefill, one token, trees, holes);
* on the shipped assets (``assets/text-code``), every greedy-exact sampler on the lean runtime
  gives transformers' ``generate`` tokens at batch 1 and 4, and ``TextPipeline`` picks the lean
  runtime by default and transformers with ``runtime="transformers"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_llama
from transformers import DynamicCache

from leapgen.errors import ConfigError
from leapgen.models import HFCausalLM, KVCache
from leapgen.models.lean import LeanCausalLM, StaticKVCache, lean_or_hf, lean_supported
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "assets" / "text-code"
EXACT_SAMPLERS = [s.name for s in list_samplers() if s.guarantee in ("greedy-exact", "distribution-exact")
                  and "causal" in s.contracts]


# ----------------------------------------------------------------------------- the cache alone
def _fill(cache, n, val):
    """Write n slots of value ``val`` (a distinct float per slot) into every layer of either cache."""
    b = cache.batch_size
    k = torch.arange(n, dtype=torch.float32)[None, None, :, None].expand(b, 1, n, 2) + val
    if isinstance(cache, StaticKVCache):
        cache.reserve(n)
        for layer in cache.backend.layers:
            layer.append(k, k + 0.5)
    else:
        for i in range(2):
            cache.backend.update(k.clone(), k.clone() + 0.5, i)
    cache.appended(n)


def _rows(cache: KVCache) -> list[list[float]]:
    """Per row, the keys of its valid slots in order (what the row's tokens wrote)."""
    valid = cache.valid if cache.valid is not None else torch.ones(cache.batch_size, cache.n_slots, dtype=torch.bool)
    keys = cache.backend.layers[1].keys[:, 0, :, 0]
    return [keys[b, valid[b]].tolist() for b in range(cache.batch_size)]


def _seen(cache: KVCache, n: int, block) -> list:
    """Per row and new token: the keys of the cache slots it may see, and its mask over the new tokens."""
    s = cache.n_slots
    m = cache.attention_mask(n, block, torch.float32)
    if m is None:
        allowed = torch.ones(cache.batch_size, n, s + n, dtype=torch.bool)
        if n > 1:
            allowed &= torch.ones(n, s + n, dtype=torch.bool).tril(s)
    else:
        m = m[:, 0].expand(cache.batch_size, n, s + n)
        allowed = m if m.dtype == torch.bool else m == 0
    keys = cache.backend.layers[1].keys[:, 0, :, 0]
    return [[(keys[b, allowed[b, i, :s]].tolist(), allowed[b, i, s:].tolist()) for i in range(n)]
            for b in range(cache.batch_size)]


def _same(ref: KVCache, got: StaticKVCache) -> None:
    assert got.n_slots == ref.n_slots
    assert got.lengths.tolist() == ref.lengths.tolist()
    assert _rows(got) == _rows(ref)
    for n, block in ((1, None), (3, None), (2, torch.tensor([[[1, 0], [1, 1]]], dtype=torch.bool))):
        assert _seen(got, n, block) == _seen(ref, n, block), (n, block)


@pytest.mark.parametrize("seed", range(6))
def test_static_cache_follows_reference_bookkeeping(seed):
    g = torch.Generator().manual_seed(seed)
    b = 3
    ref = KVCache(DynamicCache(), b)
    got = StaticKVCache(2, b, 1, 2, torch.float32, capacity=4)  # small: it must grow
    val = 0.0
    for _ in range(25):
        op = int(torch.randint(0, 5, (1,), generator=g))
        if ref.n_slots == 0 or op == 0:
            n = int(torch.randint(1, 5, (1,), generator=g))
            val += 100
            _fill(ref, n, val)
            _fill(got, n, val)
        elif op == 1:
            start = int(torch.randint(0, ref.n_slots + 1, (1,), generator=g))
            counts = torch.randint(0, ref.n_slots - start + 1, (b,), generator=g)
            ref.keep_new(start, counts)
            got.keep_new(start, counts)
        elif op == 2:
            n = int(torch.randint(0, ref.n_slots + 1, (1,), generator=g))
            ref.crop(n)
            got.crop(n)
        elif op == 3:
            width = int(torch.randint(1, 4, (1,), generator=g))
            start = ref.n_slots - width
            if start < 0:
                continue
            index = torch.stack([torch.randperm(width, generator=g) for _ in range(b)])
            counts = torch.randint(0, width + 1, (b,), generator=g)
            ref.select(start, index, counts)
            got.select(start, index, counts)
        elif op == 4 and b > 1:
            rows = torch.tensor(sorted(torch.randperm(b, generator=g)[: b - 1].tolist()))
            ref.select_rows(rows)
            got.select_rows(rows)
            b -= 1
        _same(ref, got)


# ----------------------------------------------------------------------------- logits vs transformers
@pytest.mark.parametrize("kind", ["gqa", "mha", "bias"])
def test_lean_logits_match_transformers(kind):
    kw = {"gqa": {}, "mha": dict(kv_heads=4), "bias": dict(kv_heads=4, bias=True)}[kind]
    model = _tiny_llama(**kw)
    assert lean_supported(model) is None
    hf, lean = HFCausalLM(model), LeanCausalLM.from_hf(model)
    g = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        ca, cb = hf.new_cache(2), lean.new_cache(2, capacity=4)
        x = torch.randint(0, 64, (2, 7), generator=g)
        torch.testing.assert_close(lean(x, cb), hf(x, ca), rtol=1e-5, atol=1e-5)
        for cache in (ca, cb):
            cache.keep_new(3, torch.tensor([4, 2]))  # holes in row 1
        y = torch.randint(0, 64, (2, 1), generator=g)
        torch.testing.assert_close(lean(y, cb), hf(y, ca), rtol=1e-5, atol=1e-5)
        block = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)[None]  # a tree
        pos = ca.position_ids(3, torch.tensor([[0, 1, 1]]))
        z = torch.randint(0, 64, (2, 3), generator=g)
        torch.testing.assert_close(
            lean(z, cb, position_ids=pos, attn_mask=block), hf(z, ca, position_ids=pos, attn_mask=block),
            rtol=1e-5, atol=1e-5,
        )
        idx = torch.tensor([[0, 2, 1], [0, 1, 2]])
        for cache in (ca, cb):
            cache.select(cache.n_slots - 3, idx, torch.tensor([2, 1]))
        w = torch.randint(0, 64, (2, 2), generator=g)
        torch.testing.assert_close(lean(w, cb), hf(w, ca), rtol=1e-5, atol=1e-5)


def _tiny_llama(kv_heads: int = 2, bias: bool = False):
    model = make_llama(64, hidden=32, layers=2, heads=4, kv_heads=kv_heads, intermediate=48, seed=3)
    if bias:
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(**{**model.config.to_dict(), "attention_bias": True, "mlp_bias": True})
        biased = LlamaForCausalLM(cfg).float().eval()
        missing = biased.load_state_dict(model.state_dict(), strict=False).missing_keys
        g = torch.Generator().manual_seed(4)
        with torch.no_grad():
            for name in missing:
                p = biased.get_parameter(name)
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        model = biased
    return model


def test_lean_or_hf_choice(target_model):
    assert isinstance(lean_or_hf(target_model), LeanCausalLM)
    assert isinstance(lean_or_hf(target_model, "transformers"), HFCausalLM)
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=32))
    assert lean_supported(gpt2) is not None
    assert isinstance(lean_or_hf(gpt2), HFCausalLM)


# ----------------------------------------------------------------------------- shipped assets
@pytest.fixture(scope="module")
def shipped():
    if not (ASSET / "model_index.json").is_file():
        pytest.fail(f"{ASSET} is missing; the shipped text pipeline is part of the repository")
    from leapgen.pipelines import TextPipeline

    return TextPipeline.from_pretrained(str(ASSET))


PROMPTS = ["def parse_args(argv):\n", "class Stack:\n    def push(self, x):\n", "import os\n", "for i in range("]
NEW = 24


@pytest.fixture(scope="module")
def reference(shipped):
    """transformers' own greedy ``generate`` of every prompt, one row at a time."""
    out = []
    for ids in shipped.encode(PROMPTS):
        x = torch.tensor([ids])
        with torch.no_grad():
            y = shipped.model.generate(
                x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                pad_token_id=0, eos_token_id=None,
            )
        out.append(y[0, len(ids):].tolist())
    return out


def test_pipeline_runtime_choice(shipped):
    assert isinstance(shipped._lms["model"], LeanCausalLM)
    assert isinstance(shipped._lms["draft"], LeanCausalLM)
    from leapgen.pipelines import TextPipeline

    hf = TextPipeline(shipped.model, shipped.tokenizer, shipped.draft, runtime="transformers")
    assert isinstance(hf._lms["model"], HFCausalLM)
    with pytest.raises(ConfigError, match="runtime"):
        TextPipeline(shipped.model, shipped.tokenizer, runtime="onnx")


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", EXACT_SAMPLERS)
def test_shipped_lean_matches_transformers_generate(shipped, reference, name, batch):
    prompts = shipped.encode(PROMPTS[:batch])
    config = DecodeConfig(max_new_tokens=NEW, pad_token_id=0)
    res = get_sampler(name).generate(shipped._lms, prompts, config, torch.Generator().manual_seed(0))
    assert res.sequences == reference[:batch], name
