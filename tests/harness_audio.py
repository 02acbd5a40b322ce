"""Registry-harness bench for the ``audio-masked`` contract (MAGNeT samplers): a tiny random
:class:`~leapgen.models.audio_lm.MagnetTransformer` (K = 4 codebooks of 16 codes) with a text
condition, and a tiny delay-pattern :class:`~leapgen.models.musicgen.MusicGenTransformer` as the
``ar_model`` role (rescorer / hybrid prefix). Merged into tests/registry_harness.py."""

from __future__ import annotations

import functools
from typing import Any

import torch
from registry_harness import Bench, on, runs_validly

from leapgen.models.audio_lm import MagnetConfig, MagnetMaskedLM, MagnetTransformer
from leapgen.models.condition import TextEmbeddings
from leapgen.models.musicgen import MusicGenConfig, MusicGenLM, MusicGenTransformer
from leapgen.samplers import DecodeConfig

K, V, FRAMES, TEXT_DIM = 4, 16, 12, 16


@functools.cache
def tiny_audio_nets(seed: int = 0) -> tuple[MagnetTransformer, MusicGenTransformer]:
    torch.manual_seed(seed)
    magnet = MagnetTransformer(MagnetConfig(num_codebooks=K, codebook_size=V, dim=32, num_layers=1, num_heads=2,
                                            text_dim=TEXT_DIM, max_frames=64)).eval()
    ar = MusicGenTransformer(MusicGenConfig(num_codebooks=K, codebook_size=V, dim=32, num_layers=1, num_heads=2,
                                            text_dim=TEXT_DIM, max_frames=64)).eval()
    return magnet, ar


def tiny_audio_pipeline(words: list[str]) -> Any:
    """An AudioPipeline of tiny random components (codec, text encoder, MAGNeT, MusicGen and its draft;
    2 s at most) whose vocabulary holds ``words``' words, seeded."""
    from leapgen.models.audio_lm import AudioTextEncoder, TextEncoderConfig
    from leapgen.pipelines.audio import AudioPipeline
    from leapgen.tokenizers.audio_codec import AudioCodec
    from leapgen.tokenizers.word_vocab import WordVocab

    torch.manual_seed(0)
    vocab = WordVocab.build(words)
    codec = AudioCodec(num_filters=4, hidden_size=16, codebook_size=16)
    enc = AudioTextEncoder(TextEncoderConfig(vocab_size=len(vocab), d_model=16, num_layers=1, num_heads=2, d_ff=32))
    magnet = MagnetTransformer(MagnetConfig(codebook_size=16, dim=32, num_layers=1, num_heads=2, text_dim=16, max_frames=100))
    ar = MusicGenTransformer(MusicGenConfig(codebook_size=16, dim=32, num_layers=1, num_heads=2, text_dim=16, max_frames=100))
    draft = MusicGenTransformer(MusicGenConfig(codebook_size=16, dim=16, num_layers=1, num_heads=2, text_dim=16, max_frames=100))
    return AudioPipeline(codec.eval(), enc.eval(), vocab, magnet.eval(), ar.eval(), draft.eval(), max_duration=2.0)


def text_cond(batch: int, device: str = "cpu") -> TextEmbeddings:
    g = torch.Generator().manual_seed(7)
    emb = torch.randn(3, 4, TEXT_DIM, generator=g)[:batch]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)[:batch]
    return TextEmbeddings(embeddings=emb.to(device), mask=mask.to(device))


class AudioMaskedBench(Bench):
    """Tiny MAGNeT + AR pair; grids of 12 frames x 4 codebooks, all masked, one text per row."""

    contract = "audio-masked"
    roles = ("model", "ar_model")
    batches = (1, 3)
    vocab = V

    def __init__(self, device: str) -> None:
        super().__init__(device)
        magnet, ar = tiny_audio_nets()
        self.magnet, self.ar = on(device, magnet), on(device, ar)

    def models(self) -> dict[str, Any]:
        return {"model": MagnetMaskedLM(self.magnet), "ar_model": MusicGenLM(self.ar)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return torch.full((batch, K, FRAMES), V, dtype=torch.long, device=self.device), text_cond(batch, self.device)

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=1, temperature=temperature, top_p=0.9 if temperature else 1.0)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        out = res.tokens
        assert tuple(out.shape) == (batch, K, FRAMES)
        assert bool(((out >= 0) & (out < V)).all()), "a cell was left masked or is out of range"
        st = res.stats
        assert st.new_tokens == batch * K * FRAMES
        assert st.target_forwards == models["model"].forwards > 0
        assert [len(s) for s in res.sequences] == [K * FRAMES] * batch


BENCHES = {"audio-masked": AudioMaskedBench}
CHECKS = {("lossy", "audio-masked"): (runs_validly,)}
