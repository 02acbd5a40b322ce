from .base import CausalLM, KVCache, MaskedTokenModel
from .hf import HFCausalLM, as_causal_lm
from .masked import TorchMaskedLM

__all__ = ["CausalLM", "KVCache", "MaskedTokenModel", "HFCausalLM", "TorchMaskedLM", "as_causal_lm"]
