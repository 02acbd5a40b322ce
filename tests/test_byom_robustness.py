"""Bringing your own model: what a black-box sweep with architectures and inputs no other test names
found (2026-11-27). Each case either decoded wrong tokens without a word, or failed with a raw error
from deep inside transformers or torch."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from leapgen import DecodeConfig, TextPipeline, get_sampler
from leapgen.errors import ConfigError, InputError, ModelMismatchError
from leapgen.models import TorchMaskedLM
from leapgen.models.condition import EncoderInputs, EncoderState
from leapgen.models.hf import as_causal_lm
from leapgen.models.hf_seq2seq import as_seq2seq_lm

torch.set_num_threads(1)
SMALL = {"vocab_size": 97}


def _llama(vocab: int = 97) -> torch.nn.Module:
    torch.manual_seed(0)
    return T.LlamaForCausalLM(T.LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64)).eval()


# ------------------------------------------------------------------------------------------ what is no causal LM
@pytest.mark.parametrize("build, match", [
    (lambda: T.RwkvForCausalLM(T.RwkvConfig(hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                            intermediate_size=64, context_length=128, **SMALL)), "recurrent state"),
    (lambda: T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, **SMALL)), "TorchMaskedLM"),
    (lambda: T.XLNetLMHeadModel(T.XLNetConfig(d_model=32, n_layer=2, n_head=4, d_inner=64, **SMALL)), "permutation"),
], ids=["rwkv", "bert-mlm", "xlnet"])
def test_what_is_no_causal_lm_over_a_kv_cache_is_refused_when_wrapped(build, match):
    """RWKV decoded other tokens than transformers' generate with every sampler (ar included), a
    masked LM gave arbitrary tokens, XLNet claimed a context window of -1."""
    with pytest.raises(ModelMismatchError, match=match):
        as_causal_lm(build().eval())


def test_a_decoder_bert_is_still_a_causal_lm():
    bert = T.BertLMHeadModel(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                          is_decoder=True, **SMALL)).eval()
    assert as_causal_lm(bert).vocab_size == 97


# ------------------------------------------------------------------------------------------ seq2seq relatives
def _seq2seq_greedy(model: torch.nn.Module, sampler: str = "ar") -> tuple[list[int], list[int]]:
    lm = as_seq2seq_lm(model.eval())
    src = torch.tensor([[5, 6, 7, 8]])
    ours = get_sampler(sampler).generate({"model": lm, "draft": lm}, [lm.start_ids()], DecodeConfig(max_new_tokens=6),
                                         cond=EncoderInputs(input_ids=src)).sequences[0]
    ref = model.generate(src, do_sample=False, max_new_tokens=6, min_new_tokens=6)[0, 1:].tolist()
    return ours, ref


def test_umt5_and_switch_transformers_decode_like_transformers():
    """UMT5 crashed in the relative-bias hook (one table per layer); SwitchTransformers' decoder reads
    the encoder output's router logits, which a plain BaseModelOutput lacks."""
    torch.manual_seed(0)
    umt5 = T.UMT5ForConditionalGeneration(T.UMT5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                                       decoder_start_token_id=0, **SMALL))
    ours, ref = _seq2seq_greedy(umt5)
    assert ours == ref
    switch = T.SwitchTransformersForConditionalGeneration(T.SwitchTransformersConfig(
        d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, num_experts=2, expert_capacity=64,
        num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, decoder_start_token_id=0, **SMALL))
    ours, ref = _seq2seq_greedy(switch)
    assert ours == ref
    # an encoder state made outside encode() (a fresh wrapper, as a pipeline's cached state would be)
    lm = as_seq2seq_lm(switch)
    with torch.inference_mode():
        memory = switch.get_encoder()(input_ids=torch.tensor([[5, 6, 7, 8]])).last_hidden_state
    state = EncoderState(memory=memory, mask=None, source=lm.source_name())
    fresh = get_sampler("ar").generate({"model": as_seq2seq_lm(switch)}, [lm.start_ids()], DecodeConfig(max_new_tokens=6),
                                       cond=state).sequences[0]
    assert fresh == ref


def test_prophetnet_refuses_the_samplers_that_verify_several_tokens_per_forward():
    torch.manual_seed(0)
    net = T.ProphetNetForConditionalGeneration(T.ProphetNetConfig(
        hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64, num_encoder_layers=2, num_decoder_layers=2,
        num_encoder_attention_heads=4, num_decoder_attention_heads=4, decoder_start_token_id=0, ngram=2, **SMALL))
    with pytest.raises(ModelMismatchError, match="multi_token"):
        _seq2seq_greedy(net, "speculative")
    assert len(_seq2seq_greedy(net, "ar")[0]) == 6


# ------------------------------------------------------------------------------------------ prompts and ids
@pytest.mark.parametrize("sampler", ["ar", "speculative", "prompt_lookup", "jacobi", "spec_tree"])
@pytest.mark.parametrize("prompts, kwargs, match", [
    ([[1, 97]], {}, "token id 97, outside"),
    ([[1, -1]], {}, "integers >= 0"),
    ([[1.9, 2.5]], {}, "integers >= 0"),
    (["ab"], {}, "tokenize text first"),
    ([[1, 2], []], {}, "prompt 1 is empty"),
    ([[1, 2], [3]], {"pad_token_id": 97}, "pad_token_id 97"),
])
def test_bad_prompt_ids_are_named_before_any_forward(sampler, prompts, kwargs, match):
    lm = as_causal_lm(_llama())
    with pytest.raises(InputError, match=match):
        get_sampler(sampler).generate({"model": lm, "draft": lm}, prompts, DecodeConfig(max_new_tokens=4, **kwargs))


def test_a_prompt_the_model_cannot_embed_fails_alone_in_the_text_pipeline():
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(94)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = T.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    out = TextPipeline(_llama(vocab=50), tok)(["w1 w2", "w80 w90"], max_new_tokens=4)
    assert out.texts[0] is not None and out.texts[1] is None and "outside the model's vocabulary" in out.errors[1]


# ------------------------------------------------------------------------------------------ masked LMs
def test_torch_masked_lm_reads_the_limits_of_a_transformers_model():
    bert = T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                          max_position_embeddings=64, **SMALL)).eval()
    assert TorchMaskedLM(bert, mask_id=4, vocab_size=97).max_length == 64
    with pytest.raises(InputError, match="longer than the model's maximum of 64"):
        get_sampler("maskgit").generate({"model": TorchMaskedLM(bert, mask_id=4, vocab_size=97)}, [[10] + [4] * 79],
                                        DecodeConfig(max_new_tokens=4))
    with pytest.raises(ConfigError, match="mask_id 97 is outside"):
        TorchMaskedLM(bert, mask_id=97, vocab_size=97)


def test_torch_masked_lm_counts_roberta_positions_after_the_pad():
    """RoBERTa's position ids start at ``padding_idx + 1``: 34 position rows embed 32 tokens."""
    rob = T.RobertaForMaskedLM(T.RobertaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                               intermediate_size=64, max_position_embeddings=34, pad_token_id=1)).eval()
    model = TorchMaskedLM(rob, mask_id=4, vocab_size=97)
    assert model.max_length == 32
    out = get_sampler("maskgit").generate({"model": model}, [[10] + [4] * 31], DecodeConfig(max_new_tokens=4))
    assert len(out.sequences[0]) == 32
    with pytest.raises(InputError, match="longer than the model's maximum of 32"):
        get_sampler("maskgit").generate({"model": model}, [[10] + [4] * 32], DecodeConfig(max_new_tokens=4))


def test_llada_rows_decode_as_they_would_alone():
    """``steps=None`` was resolved from the longest row and split over the batch's blocks: a 5-mask
    row next to an 8-mask row got 4 steps per block instead of 2 (one token per step instead of two)."""
    torch.manual_seed(0)
    bert = T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                          max_position_embeddings=64, **SMALL)).eval()
    lm, mask = TorchMaskedLM(bert, mask_id=4, vocab_size=97), 4
    row = [20] + [mask] * 5
    alone = get_sampler("llada", block_length=4).generate({"model": lm}, [row], DecodeConfig(max_new_tokens=16))
    assert [s[0] for s in alone.stats.accepted_per_step] == [1] * 5  # 5 tokens in blocks of 4 + 1: one step per token
    for other in ([10] + [mask] * 8, [10, 11, 12] + [mask] * 8 + [13], [30, mask]):
        res = get_sampler("llada", block_length=4).generate({"model": lm}, [other, row], DecodeConfig(max_new_tokens=16))
        assert res.sequences[1] == alone.sequences[0], other
        if len(other) > len(row):  # the row is active (with the longer one) in exactly its own steps
            assert sum(len(s) == 2 for s in res.stats.accepted_per_step) == alone.stats.target_forwards, other


def test_prompts_as_an_array_or_numpy_ints_decode_like_lists():
    import numpy as np

    lm = as_causal_lm(_llama())
    ref = get_sampler("ar").generate({"model": lm}, [[1, 2, 3], [4, 5, 6]], DecodeConfig(max_new_tokens=4)).sequences
    for prompts in (torch.tensor([[1, 2, 3], [4, 5, 6]]), [np.array([1, 2, 3]), [np.int64(4), 5, 6]]):
        assert get_sampler("ar").generate({"model": lm}, prompts, DecodeConfig(max_new_tokens=4)).sequences == ref
