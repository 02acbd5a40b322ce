"""The general case, as a user who never read the tests would call it (the audit of 2026-11-28):
prompts and generation lengths near the model's limits, sampler parameters at their edges, models
brought with their own tokenizers. Each case failed before its fix: a tokenizer's BOS silently
dropped, or a parameter that ran for minutes or died with a raw MemoryError instead of being refused."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import transformers as T

from leapgen import Pipeline, TextPipeline
from leapgen.errors import ConfigError

torch.set_num_threads(1)


@functools.cache
def _text() -> Pipeline:
    return Pipeline.from_pretrained("leapgen/text-code")


# ------------------------------------------------------------------------------------------ your own tokenizer
def _bos_tokenizer(add_eos: bool = False) -> T.PreTrainedTokenizerFast:
    """A Llama-style tokenizer (``<s>`` before every text, as Llama / Mistral / Gemma tokenizers add)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(60)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return T.LlamaTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                pad_token="<pad>", add_bos_token=True, add_eos_token=add_eos)


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)  # a model whose greedy continuation of "w5 w6" depends on the BOS before it
    return T.LlamaForCausalLM(T.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, max_position_embeddings=64, bos_token_id=1,
                                            eos_token_id=2, pad_token_id=0)).eval()


@pytest.mark.parametrize("runtime", ["lean", "transformers"])
def test_the_bos_a_tokenizer_adds_is_kept_as_transformers_generate_keeps_it(runtime):
    """The prompt was encoded with ``add_special_tokens=False``: a Llama tokenizer's ``<s>`` was
    dropped, so the model saw another sequence than ``model.generate(**tokenizer(prompt))`` and
    continued it with other tokens, without a word."""
    tok, model = _bos_tokenizer(), _llama()
    enc = tok("w5 w6", return_tensors="pt")
    assert enc.input_ids[0, 0] == 1  # <s>
    want = model.generate(**enc, do_sample=False, max_new_tokens=8, min_new_tokens=8)[0, enc.input_ids.shape[1]:].tolist()
    out = TextPipeline(model, tok, runtime=runtime)("w5 w6", max_new_tokens=8, stop_at_eos=False)
    assert out.prompt_token_ids[0] == enc.input_ids[0].tolist()
    assert out.token_ids[0] == want


def test_an_eos_the_tokenizer_appends_does_not_end_the_prompt():
    tok = _bos_tokenizer(add_eos=True)
    assert tok("w5 w6").input_ids == [1, 9, 10, 2]
    out = TextPipeline(_llama(), tok)(["w5 w6", "w7"], max_new_tokens=4, stop_at_eos=False)
    assert out.prompt_token_ids == [[1, 9, 10], [1, 11]]


def test_the_shipped_tokenizer_adds_nothing_so_its_prompts_are_unchanged():
    pipe = _text()
    assert pipe.encode("def f():") == [pipe.tokenizer("def f():", add_special_tokens=False).input_ids]


# ------------------------------------------------------------------------------------------ parameters at their edges
@pytest.mark.parametrize("sampler, params, match", [
    ("lookahead", {"level": 1000}, r"level=1000 and window=7 puts up to \d+ window tokens"),
    ("lookahead", {"window": 10**6}, "more than the model's context window of 1024"),
    ("hidden_transfer", {"branches": 1000}, r"4001 nodes, more than the model's context window of 1024; use branches <= 255"),
    ("superposed", {"k": 10**6}, r"k=1000000 drafts exceed the vocabulary \(4096 tokens\)"),
])
def test_a_sampler_setting_larger_than_the_model_is_refused_before_decoding(sampler, params, match):
    """``lookahead(level=1000)`` and ``hidden_transfer(branches=1000)`` ran for minutes (forwards wider
    than the whole context window), ``level=10**6`` died with numpy's MemoryError and ``superposed(k=10**6)``
    with torch's allocator error (32 GB)."""
    with pytest.raises(ConfigError, match=match):
        _text()(["def f(a, b):", "import os"], sampler=sampler, max_new_tokens=4, **params)


def test_lookahead_at_a_wide_setting_that_fits_still_runs_exactly():
    pipe = _text()
    want = pipe("def f(a, b):", max_new_tokens=6).token_ids
    assert pipe("def f(a, b):", sampler="lookahead", level=20, window=50, max_new_tokens=6).token_ids == want


def test_a_huge_anchor_window_costs_no_more_than_the_hypothesis():
    """``gad(anchor_window=10**6)`` sorted two million offsets at every step (0.4 s each): an image
    (256 steps) did not finish in a minute. The search now stops at the hypothesis' ends."""
    import time

    from leapgen.samplers.proposers.hypothesis import nearest_anchor

    hyp = list(range(300))
    t0 = time.perf_counter()
    assert nearest_anchor(hyp, 150, 7, 10**7) == 7 and nearest_anchor(hyp, 150, -1, 10**7) is None
    assert time.perf_counter() - t0 < 0.5
    assert nearest_anchor([5, 1, 5], 1, 5, 1) == 0 and nearest_anchor([5, 1, 5], 1, 5, 0) is None  # nearest, left first
    pipe = _text()
    want = pipe("def f(a, b):", max_new_tokens=16).token_ids
    assert pipe("def f(a, b):", sampler="gad", anchor_window=10**6, max_new_tokens=16).token_ids == want


# ------------------------------------------------------------------------------------------ batches
def test_first_routes_each_row_as_it_would_alone():
    """FiRST's routers read the mean hidden state of the prefill forward, right-padding included: a
    short prompt batched with a long one skipped other layers (other tokens) than alone. The mean
    now covers each row's own tokens (the runtime tells the model the rows' real lengths)."""
    pipe = _text()
    prompts = ["import os\n", open(__file__).read()[:1500]]
    batched = pipe(prompts, sampler="first", max_new_tokens=16, stop_at_eos=False).token_ids
    alone = [pipe(p, sampler="first", max_new_tokens=16, stop_at_eos=False).token_ids[0] for p in prompts]
    assert batched == alone


@pytest.mark.parametrize("sampler", ["ar", "speculative", "sjd"])
def test_a_vanishing_temperature_decodes_greedily_on_the_raster_samplers(sampler):
    """temperature=1e-300 overflowed the scaled logits (NaN probabilities: token 0 at every cell);
    below MIN_SAMPLING_TEMPERATURE it decodes greedily, as vLLM does."""
    from leapgen import Pipeline
    from leapgen.samplers.base import MIN_SAMPLING_TEMPERATURE, DecodeConfig

    assert DecodeConfig(temperature=MIN_SAMPLING_TEMPERATURE / 2).temperature == 0.0
    assert DecodeConfig(temperature=MIN_SAMPLING_TEMPERATURE).temperature == MIN_SAMPLING_TEMPERATURE
    pipe = Pipeline.from_pretrained(Path(__file__).resolve().parents[1] / "assets" / "image-emoji")
    greedy = pipe("animals", sampler=sampler, temperature=0.0, seed=0).token_ids
    tiny = pipe("animals", sampler=sampler, temperature=1e-300, seed=1).token_ids
    assert torch.equal(tiny, greedy) and int(greedy.max()) > 0
