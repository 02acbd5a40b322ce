from .base import CausalLM, KVCache, MaskedTokenModel
from .hf import HFCausalLM, as_causal_lm

__all__ = ["CausalLM", "KVCache", "MaskedTokenModel", "HFCausalLM", "as_causal_lm"]
