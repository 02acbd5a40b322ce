"""Networks behind the small contracts the samplers rely on (this package never imports samplers).

* :class:`CausalLM` + :class:`KVCache` -- autoregressive decoders (any transformers causal LM through
  :class:`HFCausalLM`), with declared capabilities (``require``);
* :class:`EncoderDecoderLM` -- encode once, then a causal decoder with a cross-attention cache
  (transformers' Bart / T5 / Whisper through :class:`HFSeq2SeqLM`);
* :class:`MaskedTokenModel` / :class:`ContinuousMaskedModel` over a :class:`MaskedState`, with an
  optional :class:`MaskedCache`;
* typed conditions (:mod:`leapgen.models.condition`) that reach a model at ``new_cache``.
"""

from .asr import ASRConfig, ASRModel  # noqa: F401
from .base import CausalLM, KVCache
from .cif import cif  # noqa: F401  (the public CIF: ``from leapgen.models import cif``)
from .condition import (
    AudioPrompt,
    ClassCondition,
    Condition,
    EncoderInputs,
    EncoderState,
    Guidance,
    TextEmbeddings,
)
from .encdec import EncDecKVCache, EncoderDecoderLM
from .hf import HFCausalLM, as_causal_lm
from .hf_seq2seq import HFSeq2SeqLM, as_seq2seq_lm
from .masked import TorchMaskedLM
from .masked_base import ContinuousMaskedModel, MaskedCache, MaskedModel, MaskedState, MaskedTokenModel

__all__ = [
    "CausalLM", "KVCache", "EncoderDecoderLM", "EncDecKVCache", "HFCausalLM", "HFSeq2SeqLM",
    "as_causal_lm", "as_seq2seq_lm", "MaskedModel", "MaskedTokenModel", "ContinuousMaskedModel",
    "MaskedState", "MaskedCache", "TorchMaskedLM", "Condition", "ClassCondition", "TextEmbeddings",
    "EncoderInputs", "EncoderState", "AudioPrompt", "Guidance",
]
