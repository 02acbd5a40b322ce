"""Tiny random ASR models and inputs shared by the ASR tests and tests/harness_asr.py."""

from __future__ import annotations

import torch

from leapgen.models.asr import ASRConfig, ASRModel
from leapgen.models.condition import EncoderInputs

TINY = dict(vocab_size=24, d_model=32, heads=2, ff=64, encoder_layers=1, nar_layers=1, ar_layers=1, dropout=0.0)


def tiny_net(seed: int = 0, device: str = "cpu") -> ASRModel:
    torch.manual_seed(seed)
    net = ASRModel(ASRConfig(**TINY)).eval()
    with torch.no_grad():  # make the CIF predictor fire every ~2 frames so outputs are non-empty
        net.pred_out.bias.fill_(0.0)
    return net.to(device)


def tiny_inputs(batch: int, frames: int = 24, seed: int = 0, device: str = "cpu") -> EncoderInputs:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 560, frames, generator=g)
    mask = torch.ones(batch, frames, dtype=torch.long)
    for b in range(batch):
        mask[b, frames - 4 * b :] = 0 if b else 1  # rows of different lengths
    return EncoderInputs(input_features=(x * mask[:, None]).to(device), attention_mask=mask.to(device))


WORDS = ("red", "green", "blue", "one", "two", "three", "stop", "go", "left", "right")


def synth_clips(folder, n: int, seed: int = 0) -> list[dict]:
    """``n`` short espeak-ng utterances (3-5 words of WORDS) in ``folder``: manifest rows."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from leapgen.data.speech import SEEN_ACCENTS, SEEN_VARIANTS, _synth

    rng = random.Random(seed)
    jobs = [{"id": f"u{i:04d}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 5))),
             "voice": f"{rng.choice(SEEN_ACCENTS)}+{rng.choice(SEEN_VARIANTS)}", "rate": rng.randint(150, 200),
             "pitch": rng.randint(30, 70), "fx": {}} for i in range(n)]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(lambda j: _synth(j, folder), jobs))
    for r in rows:
        r["audio"] = str(folder.parent / r["audio"])
    return rows
