"""Registry-harness benches for the TTS contracts ``tts-semantic`` (MaskGCT T2S) and
``tts-acoustic`` (MaskGCT S2A): tiny random :class:`~leapgen.models.tts.T2SNet` /
:class:`~leapgen.models.tts.S2ANet` behind their masked views, each with a known prompt prefix.
Merged into tests/registry_harness.py."""

from __future__ import annotations

import functools
from typing import Any

import torch
from registry_harness import Bench, on, runs_validly

from leapgen.models.tts import S2AConfig, S2ANet, T2SConfig, T2SNet
from leapgen.models.tts_lm import S2AMaskedLM, T2SMaskedLM
from leapgen.samplers import DecodeConfig

SEM, PHONES, K, V = 16, 12, 3, 16
PROMPT, TARGET = 4, 8


@functools.cache
def tiny_tts_nets(seed: int = 0) -> tuple[T2SNet, S2ANet]:
    torch.manual_seed(seed)
    t2s = T2SNet(T2SConfig(phone_vocab=PHONES, semantic_size=SEM, d_model=32, heads=2, ff=64, layers=1, max_positions=64)).eval()
    s2a = S2ANet(S2AConfig(semantic_size=SEM, num_codebooks=K, codebook_size=V, d_model=32, heads=2, ff=64, layers=1,
                           max_frames=64)).eval()
    return t2s, s2a


def t2s_inputs(batch: int, device: str = "cpu") -> tuple[torch.Tensor, dict[str, Any]]:
    g = torch.Generator().manual_seed(3)
    tokens = torch.full((batch, PROMPT + TARGET), SEM, dtype=torch.long)
    tokens[:, :PROMPT] = torch.randint(0, SEM, (batch, PROMPT), generator=g)
    phones = torch.randint(2, PHONES, (batch, 6), generator=g)
    cond = {"phones": phones.to(device), "prompt_len": torch.full((batch,), PROMPT, device=device), "uncond": False}
    return tokens.to(device), cond


def s2a_inputs(batch: int, device: str = "cpu") -> tuple[torch.Tensor, dict[str, Any]]:
    g = torch.Generator().manual_seed(4)
    frames = 3 * (PROMPT + TARGET) // 2
    tokens = torch.full((batch, K, frames), V, dtype=torch.long)
    tokens[:, :, :6] = torch.randint(0, V, (batch, K, 6), generator=g)
    sem = torch.randint(0, SEM, (batch, frames // 3), generator=g)
    cond = {"semantic": sem.to(device), "prompt_len": torch.full((batch,), 6, device=device), "uncond": False}
    return tokens.to(device), cond


class _TTSBench(Bench):
    roles = ("model",)
    batches = (1, 3)
    vocab = V

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=1, temperature=temperature)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        x, _ = self.inputs(batch)
        out = res.tokens
        assert tuple(out.shape) == tuple(x.shape)
        assert bool(((out >= 0) & (out < self.vocab)).all()), "a position was left masked or is out of range"
        known = x != models["model"].mask_id
        assert torch.equal(out[known], x[known]), "the prompt prefix was written"
        st = res.stats
        assert st.new_tokens == int((~known).sum())
        assert st.target_forwards == models["model"].forwards > 0


class TTSSemanticBench(_TTSBench):
    """Tiny T2S: 4 prompt frames + 8 masked target frames, 6 phones per row."""

    contract = "tts-semantic"
    vocab = SEM

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = on(device, tiny_tts_nets()[0])

    def models(self) -> dict[str, Any]:
        return {"model": T2SMaskedLM(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return t2s_inputs(batch, self.device)


class TTSAcousticBench(_TTSBench):
    """Tiny S2A: 3 codebooks of 16 codes, 18 frames of which 6 are the acoustic prompt."""

    contract = "tts-acoustic"

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = on(device, tiny_tts_nets()[1])

    def models(self) -> dict[str, Any]:
        return {"model": S2AMaskedLM(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return s2a_inputs(batch, self.device)


BENCHES = {"tts-semantic": TTSSemanticBench, "tts-acoustic": TTSAcousticBench}
CHECKS = {("lossy", "tts-semantic"): (runs_validly,), ("lossy", "tts-acoustic"): (runs_validly,)}
