"""Shared fixtures: tiny random Llama targets/drafts, a tiny BPE tokenizer and a TextPipeline.

Everything is fp32, CPU, one thread. Random weights are scaled up so that next-token
distributions are peaky (greedy decoding is then well separated from ties, and a perturbed
copy of the target, used as a draft, often agrees with it).
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

settings.register_profile(
    "leapgen",
    deadline=None,
    derandomize=True,  # reproducible examples: the statistical tests then never flake between runs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("leapgen")

TOKENIZER_TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n    return parser.parse_args(argv)\n",
    "import os\nimport sys\nprint(os.getcwd(), sys.argv)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    "the quick brown fox jumps over the lazy dog. the dog sleeps.",
]
EOS = "<|endoftext|>"


def make_llama(
    vocab_size: int,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 64,
    max_pos: int = 128,
    seed: int = 0,
    logit_scale: float = 4.0,
):
    """A tiny random ``LlamaForCausalLM`` (fp32, eval mode) with peaky next-token distributions.

    All weights are redrawn with std ~ 1/sqrt(fan_in) (so activations stay O(1) through the
    layers), and the LM head so that logits have a standard deviation of about ``logit_scale``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            if "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=g) * logit_scale / hidden**0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 / p.shape[-1] ** 0.5)
    return model


def perturbed_copy(model, noise: float, seed: int):
    """A draft that resembles ``model``: every weight gets relative Gaussian noise."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return draft


def hf_lm(model):
    from leapgen.models import HFCausalLM

    return HFCausalLM(model)


# ------------------------------------------------------------------------------------------
# models over a small integer vocabulary (no tokenizer needed)

VOCAB = 48


@pytest.fixture(scope="session")
def target_model():
    return make_llama(VOCAB, seed=1)


@pytest.fixture(scope="session")
def draft_close(target_model):
    """Perturbed copy of the target: agrees with it often, not always."""
    return perturbed_copy(target_model, noise=0.1, seed=2)


@pytest.fixture(scope="session")
def draft_far():
    """An unrelated, smaller draft (other width, one layer): mostly disagrees."""
    return make_llama(VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, seed=3)


@pytest.fixture(scope="session")
def draft_same(target_model):
    """The target itself as draft: every draft token must be accepted."""
    return copy.deepcopy(target_model)


@pytest.fixture(scope="session")
def target_mha():
    """A second target configuration (multi-head attention without GQA, 3 layers)."""
    return make_llama(VOCAB, hidden=24, layers=3, heads=3, kv_heads=3, intermediate=48, seed=4)


# ------------------------------------------------------------------------------------------
# tokenizer and pipeline


@pytest.fixture(scope="session")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TOKENIZER_TEXTS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    assert fast.eos_token_id == fast.pad_token_id == tok.token_to_id(EOS)
    return fast


@pytest.fixture(scope="session")
def pipe_models(tokenizer):
    v = len(tokenizer)
    target = make_llama(v, seed=11, max_pos=64)
    draft = perturbed_copy(target, noise=0.1, seed=12)
    return target, draft


@pytest.fixture()
def pipe(tokenizer, pipe_models):
    """A fresh TextPipeline around the session's tiny models (context window 64 tokens)."""
    from leapgen import TextPipeline

    target, draft = pipe_models
    return TextPipeline(model=target, tokenizer=tokenizer, draft=draft)


# The registry harness merges the family harnesses (tests/harness_<family>.py) when it is first
# imported. It is imported here, at the end (it uses this module's helpers), before any test module:
# a test module that imported a family harness first would make that harness load half-initialised
# (a circular import) and its benches would be missing from the harness.
import registry_harness  # noqa: E402, F401
