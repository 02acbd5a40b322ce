"""The tokenizer of the ``text-code`` recipe and the corpus as training sequences.

A byte-level BPE (vocab :data:`VOCAB_SIZE`, ``<|endoftext|>`` = id 0 as bos/eos/pad) trained on the
Python sources and checked to round-trip code exactly (:func:`train_tokenizer`,
:func:`check_roundtrip`), and the corpus encoded with ``<|endoftext|>`` before each document and
packed into :data:`SEQ_LEN`-token rows (:func:`encode_corpus`, :func:`pack`). Used by
:mod:`leapgen.train.text_code`, which re-exports these names.
"""

from __future__ import annotations

import torch

EOT = "<|endoftext|>"
VOCAB_SIZE = 4096
SEQ_LEN = 512
MODEL_MAX_LENGTH = 1024


def train_tokenizer(texts, vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE trained on ``texts``, wrapped as a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.token_to_id(EOT) != 0:
        raise RuntimeError(f"{EOT} must be token id 0, got {tok.token_to_id(EOT)}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOT,
        eos_token=EOT,
        pad_token=EOT,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def check_roundtrip(tokenizer, texts) -> None:
    """Raise if decoding the encoding of any text does not give the text back exactly."""
    for text in texts:
        ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            k = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b), min(len(back), len(text)))
            raise RuntimeError(
                f"tokenizer does not round-trip: first difference at char {k}: "
                f"{text[max(0, k - 20) : k + 20]!r} -> {back[max(0, k - 20) : k + 20]!r}"
            )


def encode_corpus(tokenizer, texts: list[str]) -> torch.Tensor:
    """All documents as one id stream, each document preceded by ``<|endoftext|>``."""
    eot = tokenizer.convert_tokens_to_ids(EOT)
    encs = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    stream: list[int] = []
    for enc in encs:
        stream.append(eot)
        stream.extend(enc.ids)
    return torch.tensor(stream, dtype=torch.long)


def pack(stream: torch.Tensor, seq_len: int = SEQ_LEN) -> torch.Tensor:
    """Cut an id stream into ``(n, seq_len)`` rows, dropping the incomplete tail."""
    n = stream.numel() // seq_len
    if n == 0:
        raise RuntimeError(f"corpus has {stream.numel()} tokens, fewer than one {seq_len}-token sequence")
    return stream[: n * seq_len].view(n, seq_len)
