"""Encoder-decoder models under every chain-style sampler: encode once, decode with a cross-attention cache.

Tiny random transformers seq2seq models (Bart: learned positions; T5: relative position bias;
Whisper: input features and decoder position ids) run behind :class:`HFSeq2SeqLM`, with the source
given to the sampler as ``cond=EncoderInputs(...)`` (each model, target and draft, encodes it
itself). The registry-driven harness (``tests/registry_harness.py``) runs every chain and tree
sampler on these models: greedy identity with transformers' own greedy decoding at batch 1 and 3
(Bart, T5, Whisper; sources of different lengths, so rows accept different numbers of drafts and
leave holes in the cache), enumeration exactness on a vocabulary-6 Bart (:func:`tiny_pair`), the
stated bound and valid outputs of the others. Here:

* the reference is transformers' own ``generate``; the encoder runs once and the cross-attention
  cache follows row selection while rollback leaves it alone; declared capability gaps;
* bad input: a condition of the wrong kind or shape, no source, another encoder's state, and an
  encoder-decoder model given to the decoder-only text path.
"""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from test_distribution import exact_joint
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    T5Config,
    T5ForConditionalGeneration,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

from leapgen.errors import InputError, ModelMismatchError
from leapgen.models.condition import ClassCondition, EncoderInputs, EncoderState
from leapgen.models.encdec import EncoderDecoderLM
from leapgen.models.hf import as_causal_lm
from leapgen.models.hf_seq2seq import HFSeq2SeqLM, as_seq2seq_lm
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers

NEW = 10
EXACT = ("greedy-exact", "distribution-exact")
CHAIN = [s for s in list_samplers() if s.family != "masked" and set(s.needs) <= {"model", "draft"}]
GREEDY = [s.name for s in CHAIN if s.guarantee in EXACT]

SRC = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 3, 3, 3], [20, 21, 22, 23, 24, 3]])
SRC_MASK = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1] * 5 + [0]])


def _bart(seed: int, vocab: int = 64) -> BartForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = BartConfig(vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                     pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                     forced_eos_token_id=None, forced_bos_token_id=None)
    return BartForConditionalGeneration(cfg).eval()


def _t5(seed: int) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg).eval()


def _whisper(seed: int) -> WhisperForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = WhisperConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                        max_source_positions=8, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None)
    return WhisperForConditionalGeneration(cfg).eval()


BUILD = {"bart": _bart, "t5": _t5, "whisper": _whisper}


@functools.cache
def pair(arch: str) -> tuple[HFSeq2SeqLM, HFSeq2SeqLM]:
    return HFSeq2SeqLM(BUILD[arch](0)), HFSeq2SeqLM(BUILD[arch](1))


def source(arch: str, rows: list[int]) -> EncoderInputs:
    if arch == "whisper":
        feats = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(0))
        return EncoderInputs(input_features=feats[rows])
    return EncoderInputs(input_ids=SRC[rows], attention_mask=SRC_MASK[rows])


@functools.cache
def reference(arch: str, row: int) -> list[int]:
    """transformers' greedy continuation of one source (no cache: the full decoder every step)."""
    model = pair(arch)[0].model
    start = pair(arch)[0].start_ids()
    src = source(arch, [row])
    seq = list(start)
    with torch.no_grad():
        if src.input_features is not None:
            enc = {"input_features": src.input_features}
        else:
            n = int(src.attention_mask.sum())
            enc = {"input_ids": src.input_ids[:, :n], "attention_mask": src.attention_mask[:, :n]}
        for _ in range(NEW):
            logits = model(**enc, decoder_input_ids=torch.tensor([seq])).logits
            seq.append(int(logits[0, -1].argmax()))
    return seq[len(start) :]


def test_registry_has_chain_samplers():
    assert {"ar", "speculative", "prompt_lookup", "jacobi", "lookahead", "aded", "sjd"} <= set(GREEDY)


def test_reference_uses_transformers_generate():
    """The no-cache reference equals transformers' own ``generate(do_sample=False)``."""
    model = pair("bart")[0].model
    for row in range(3):
        n = int(SRC_MASK[row].sum())
        out = model.generate(SRC[row : row + 1, :n], attention_mask=SRC_MASK[row : row + 1, :n], do_sample=False,
                             num_beams=1, max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=None,
                             no_repeat_ngram_size=0)
        assert out[0, 1:].tolist() == reference("bart", row)


# greedy identity with transformers (Bart, T5, Whisper at batch 1 and 3), valid outputs of the bounded /
# lossy samplers and enumeration exactness of the distribution-exact ones run in the registry-driven
# harness, on CPU and CUDA: tests/registry_harness.py (encdec_greedy_identity, runs_validly,
# encdec_step_bound, encdec_enumeration on this module's models)


# ------------------------------------------------------------------------------------------ distribution


class _TeacherForced:
    """``model(decoder_ids).logits`` of a seq2seq model on one fixed source (what exact_joint calls)."""

    def __init__(self, model, src: torch.Tensor) -> None:
        self.model, self.src = model, src

    def __call__(self, dec: torch.Tensor):
        return self.model(input_ids=self.src.expand(len(dec), -1), decoder_input_ids=dec)


@functools.cache
def tiny_pair() -> tuple[HFSeq2SeqLM, HFSeq2SeqLM]:
    target, draft = _bart(21, vocab=6), _bart(22, vocab=6)
    with torch.no_grad():  # spread distributions (max joint p ~0.26); target and draft differ (TV ~0.3)
        target.lm_head.weight.mul_(3.0)
        draft.lm_head.weight.mul_(3.0)
    return HFSeq2SeqLM(target), HFSeq2SeqLM(draft)


# ------------------------------------------------------------------------------------------ contract


def test_encode_once_and_cross_cache_follows_rows():
    lm, _ = pair("bart")
    state = lm.encode(source("bart", [0, 1, 2]))
    assert state.memory.shape == (3, 6, 32) and state.mask.dtype == torch.bool
    cache = lm.new_cache(3, state)
    start = torch.tensor([lm.start_ids()] * 3)
    lm(start, cache)
    cross = cache.cross_layers()
    assert cross and cross[0].keys.shape[0] == 3
    s0 = len(cache)
    lm(torch.tensor([[7, 8], [9, 10], [11, 12]]), cache)
    cache.keep_new(s0, torch.tensor([1, 2, 0]))  # rollback touches self-attention only
    assert cache.cross_layers()[0].keys.shape[2] == 6
    cache.select_rows(torch.tensor([2, 0]))
    assert cache.cond.batch_size == 2 and cache.cross_layers()[0].keys.shape[0] == 2
    assert torch.equal(cache.cond.memory, state.memory[[2, 0]])
    got = lm(torch.tensor([[13], [14]]), cache)[:, -1]
    for k, (row, toks) in enumerate([(2, [13]), (0, [7, 14])]):
        c = lm.new_cache(1, state.select_rows(torch.tensor([row])))
        want = lm(torch.tensor([lm.start_ids() + toks]), c)[0, -1]
        assert torch.allclose(got[k], want, atol=1e-5)
    assert isinstance(lm, EncoderDecoderLM) and as_seq2seq_lm(lm.model) is not lm.model


def test_unknown_architecture_declares_position_gaps():
    torch.manual_seed(0)
    cfg = MarianConfig(vocab_size=32, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                       decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
                       pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    lm = HFSeq2SeqLM(MarianMTModel(cfg).eval())
    assert not lm.supports("tree_mask") and not lm.supports("ragged_rows")
    with pytest.raises(ModelMismatchError, match="tree_mask"):
        lm.require("tree_mask", sampler="spec_tree")
    assert all(pair(a)[0].supports("tree_mask") and pair(a)[0].supports("ragged_rows") for a in BUILD)


def test_bad_conditions_are_refused():
    lm, other = pair("bart")
    with pytest.raises(InputError, match="needs a condition: a EncoderInputs"):
        lm.new_cache(1)
    with pytest.raises(InputError, match="EncoderInputs .* or a EncoderState .* got a ClassCondition"):
        lm.new_cache(1, ClassCondition(labels=torch.tensor([0])))
    with pytest.raises(InputError, match="3 rows but the batch has 2"):
        lm.new_cache(2, source("bart", [0, 1, 2]))
    with pytest.raises(InputError, match="computed by"):
        lm.new_cache(1, other.encode(source("bart", [0])))
    with pytest.raises(InputError, match="width 8"):
        lm.new_cache(1, EncoderState(memory=torch.zeros(1, 3, 8)))
    with pytest.raises(InputError, match="exactly one of input_ids"):
        EncoderInputs(input_ids=SRC, input_features=torch.zeros(3, 8, 16))
    with pytest.raises(InputError, match=r"attention_mask must have shape \(3, 6\)"):
        EncoderInputs(input_ids=SRC, attention_mask=SRC_MASK[:, :4])
    # through a sampler: no source -> the same clear error when the call starts
    with pytest.raises(InputError, match="needs a condition"):
        get_sampler("ar").generate({"model": lm}, [lm.start_ids()], DecodeConfig(max_new_tokens=2))


def test_decoder_only_path_refuses_an_encoder_decoder_model():
    lm, _ = pair("t5")
    for m in (lm.model, lm):
        with pytest.raises(ModelMismatchError, match="encoder-decoder"):
            as_causal_lm(m)
    with pytest.raises(ModelMismatchError, match="not an encoder-decoder"):
        from transformers import GPT2Config, GPT2LMHeadModel

        HFSeq2SeqLM(GPT2LMHeadModel(GPT2Config(vocab_size=16, n_embd=8, n_layer=1, n_head=2)))


def test_text_pipeline_refuses_an_encoder_decoder_model():
    from leapgen.pipelines import TextPipeline

    with pytest.raises(ModelMismatchError, match="encoder-decoder"):
        TextPipeline(pair("bart")[0].model, tokenizer=object())


def test_exact_joint_sums_to_one():
    target, _ = tiny_pair()
    joint = exact_joint(_TeacherForced(target.model, torch.tensor([[3, 4]])), target.start_ids(), 2, 6,
                        DecodeConfig(max_new_tokens=2, temperature=1.0))
    assert joint.shape == (36,) and abs(joint.sum() - 1) < 1e-9
    assert len(list(itertools.product(range(6), repeat=2))) == 36
