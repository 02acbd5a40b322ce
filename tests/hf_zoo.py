"""Tiny random transformers causal LMs, one per architecture / attention variant.

Each entry of :data:`ZOO` builds a config (hidden 32, 2 layers, vocabulary 96) for one family;
:func:`build` instantiates it with peaky random weights (greedy decoding then sits far from
ties, so float rounding differences between code paths cannot flip an argmax), and
:func:`build_pair` adds a draft: a perturbed copy of the same model (same family, same
vocabulary), which agrees with the target often but not always, so drafts get accepted and
rejected and rows of a batch drift apart (holes in the cache).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

VOCAB = 96
HIDDEN = 32
LAYERS = 2
HEADS = 4
MAX_POS = 128


def _common(**extra: Any) -> dict[str, Any]:
    return dict(
        vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False, **extra
    )


def _llama_like(**extra: Any) -> dict[str, Any]:
    """Fields of the Llama-style configs (Llama, Mistral, Qwen2/3, Gemma, Cohere, OLMo ...)."""
    return _common(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=extra.pop("num_key_value_heads", 2),  # grouped-query attention
        max_position_embeddings=MAX_POS,
        **extra,
    )


def _cfg(config_cls: str, model_cls: str, **kwargs: Any) -> Callable[[], tuple[Any, type]]:
    def make() -> tuple[Any, type]:
        import transformers

        return getattr(transformers, config_cls)(**kwargs), getattr(transformers, model_cls)

    return make


#: name -> () -> (config, model class). One entry per family named in issue 10 and one per
#: further attention variant: windows narrower than the test sequences (prompt + 24 tokens)
#: are what make sliding-window handling matter.
ZOO: dict[str, Callable[[], tuple[Any, type]]] = {
    # absolute learned positions, fused Conv1D attention
    "gpt2": _cfg("GPT2Config", "GPT2LMHeadModel", **_common(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=MAX_POS)),
    # learned positions with an offset of 2
    "opt": _cfg(
        "OPTConfig",
        "OPTForCausalLM",
        **_common(hidden_size=HIDDEN, ffn_dim=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=MAX_POS, word_embed_proj_dim=HIDDEN),
    ),
    # parallel residual, partial rotary (rotary_pct)
    "gpt_neox": _cfg(
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        **_common(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=MAX_POS, rotary_pct=0.5),
    ),
    "qwen2": _cfg("Qwen2Config", "Qwen2ForCausalLM", **_llama_like()),
    # Qwen2 with use_sliding_window: layer 0 full, layer 1 sliding (a mix of layer kinds)
    "qwen2_sliding": _cfg(
        "Qwen2Config", "Qwen2ForCausalLM", **_llama_like(use_sliding_window=True, sliding_window=6, max_window_layers=1)
    ),
    # q/k RMS norm
    "qwen3": _cfg("Qwen3Config", "Qwen3ForCausalLM", **_llama_like(head_dim=8)),
    # GeGLU, scaled embeddings, multi-query attention
    "gemma": _cfg("GemmaConfig", "GemmaForCausalLM", **_llama_like(head_dim=8, num_key_value_heads=1)),
    # alternating sliding / full layers, attention and final logit soft-capping
    "gemma2": _cfg(
        "Gemma2Config",
        "Gemma2ForCausalLM",
        **_llama_like(head_dim=8, sliding_window=5, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    ),
    # sliding layers with a local rope base, q/k norm
    "gemma3": _cfg(
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        **_llama_like(head_dim=8, sliding_window=5, layer_types=["sliding_attention", "full_attention"]),
    ),
    # partial rotary, dense attention with biases
    "phi": _cfg(
        "PhiConfig",
        "PhiForCausalLM",
        **_common(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=MAX_POS, partial_rotary_factor=0.5),
    ),
    # fused qkv, sliding window on every layer
    "phi3_sliding": _cfg("Phi3Config", "Phi3ForCausalLM", **_llama_like(sliding_window=7)),
    # multi-query attention
    "gpt_bigcode": _cfg(
        "GPTBigCodeConfig",
        "GPTBigCodeForCausalLM",
        **_common(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=MAX_POS, multi_query=True),
    ),
    # rotary, multi-query, parallel attention
    "falcon": _cfg(
        "FalconConfig",
        "FalconForCausalLM",
        **_common(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=MAX_POS),
    ),
    # ALiBi instead of rotary (Falcon-RW style)
    "falcon_alibi": _cfg(
        "FalconConfig",
        "FalconForCausalLM",
        **_common(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=MAX_POS, alibi=True, multi_query=False, parallel_attn=False, bias=True),
    ),
    "stablelm": _cfg(
        "StableLmConfig", "StableLmForCausalLM", **_llama_like(partial_rotary_factor=0.25, use_qkv_bias=True)
    ),
    # interleaved rotary on part of the head
    "gptj": _cfg(
        "GPTJConfig",
        "GPTJForCausalLM",
        **_common(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=MAX_POS, rotary_dim=4),
    ),
    "llama": _cfg("LlamaConfig", "LlamaForCausalLM", **_llama_like()),
    # sliding window wider than any test sequence, and narrower
    "mistral_wide": _cfg("MistralConfig", "MistralForCausalLM", **_llama_like(sliding_window=64)),
    "mistral_narrow": _cfg("MistralConfig", "MistralForCausalLM", **_llama_like(sliding_window=6)),
    "starcoder2_sliding": _cfg("Starcoder2Config", "Starcoder2ForCausalLM", **_llama_like(sliding_window=7)),
    # ALiBi from a 2-D padding mask
    "bloom": _cfg("BloomConfig", "BloomForCausalLM", **_common(hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS)),
    # ALiBi relative to the last key, one bias for the whole batch
    "mpt": _cfg(
        "MptConfig",
        "MptForCausalLM",
        **_common(d_model=HIDDEN, n_layers=LAYERS, n_heads=HEADS, max_seq_len=MAX_POS, expansion_ratio=2),
    ),
    # parallel block, logit scale, interleaved rotary
    "cohere": _cfg("CohereConfig", "CohereForCausalLM", **_llama_like(logit_scale=1.0)),
    # sliding layers with rope, full layers without positions (NoPE)
    "cohere2": _cfg(
        "Cohere2Config",
        "Cohere2ForCausalLM",
        **_llama_like(logit_scale=1.0, sliding_window=5, layer_types=["sliding_attention", "full_attention"]),
    ),
    # post-norm with q/k norm
    "olmo2": _cfg("Olmo2Config", "Olmo2ForCausalLM", **_llama_like()),
    # partial rotary with q/k layer norm
    "persimmon": _cfg(
        "PersimmonConfig", "PersimmonForCausalLM", **_llama_like(num_key_value_heads=HEADS, partial_rotary_factor=0.5)
    ),
    # local attention whose window counts cache slots (refuses trees and ragged batches)
    "gpt_neo_local": _cfg(
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        **_common(hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, max_position_embeddings=MAX_POS,
                  attention_types=[[["global", "local"], 1]], window_size=6),
    ),
}


def build(name: str, seed: int = 0, logit_scale: float = 4.0) -> torch.nn.Module:
    """A tiny random fp32 model of family ``name`` with peaky next-token distributions: matrices
    are redrawn with std 1.5/sqrt(fan_in), embeddings with std 1, an untied LM head so that logits
    have a standard deviation of about ``logit_scale``; norms and biases keep their init."""
    config, cls = ZOO[name]()
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    g = torch.Generator().manual_seed(seed)
    out = model.get_output_embeddings().weight
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() < 2 or "norm" in pname or "ln" in pname.split(".")[-2:][0]:
                continue
            if p is emb or "wpe" in pname or "embed_positions" in pname:
                p.copy_(torch.randn(p.shape, generator=g))
            elif p is out:
                p.copy_(torch.randn(p.shape, generator=g) * logit_scale / p.shape[-1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 / p.shape[-1] ** 0.5)
    return model


def build_pair(name: str, seed: int = 0, noise: float = 0.1) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(target, draft)``: the draft is the target with relative Gaussian noise on every weight."""
    target = build(name, seed)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return target, draft
