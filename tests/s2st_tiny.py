"""Tiny random S2ST models shared by the S2ST tests and tests/harness_s2st.py."""

from __future__ import annotations

import torch

from leapgen.models.s2st import S2STConfig, S2STModel

TINY = dict(vocab_size=24, d_model=32, heads=2, ff=64, encoder_layers=1, decoder_layers=1, link_heads=2, dropout=0.0,
            tts_d=32, tts_heads=2, tts_ff=64, tts_layers=1, n_mels=80)


def tiny_net(seed: int = 0, device: str = "cpu") -> S2STModel:
    torch.manual_seed(seed)
    return S2STModel(S2STConfig(**TINY)).eval().to(device)
