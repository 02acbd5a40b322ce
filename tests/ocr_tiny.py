"""Tiny random OCR models and inputs shared by the OCR tests and tests/harness_ocr.py."""

from __future__ import annotations

import torch

from leapgen.models.condition import EncoderInputs
from leapgen.models.ocr import OCRConfig, OCRModel

TINY = dict(dim=16, width2=32, heads=2, heads2=2, local_blocks=1, global_blocks=0, stage2_blocks=1, cppd_layers=1,
            ar_layers=1, max_len=6, dropout=0.0)


def tiny_net(seed: int = 0, device: str = "cpu") -> OCRModel:
    torch.manual_seed(seed)
    net = OCRModel(OCRConfig(**TINY)).eval()
    with torch.no_grad():  # make </s> less likely in the first slots so readings are non-empty
        net.cppd.edge_fc.bias[1] = -2.0
    return net.to(device)


def tiny_inputs(batch: int, seed: int = 0, device: str = "cpu") -> EncoderInputs:
    g = torch.Generator().manual_seed(seed)
    return EncoderInputs(input_features=(torch.rand(batch, 32, 100, generator=g) * 2 - 1).to(device))
