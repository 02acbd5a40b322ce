"""General-case audit of the diffusion-LM text pipeline: inputs and parameters no other test names.

Each test here failed before the fix it guards (batch invariance of End-of-Text truncation, the
progress bar of ``DiffusionTextPipeline``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from leapgen import Pipeline
from leapgen.samplers.masked import loop as masked_loop

ROOT = Path(__file__).resolve().parents[1]
ADAPTED = ROOT / "assets" / "text-code-diffusion-adapted"


@pytest.fixture(scope="module")
def pipe():
    if not (ADAPTED / "model_index.json").is_file():
        pytest.fail(f"{ADAPTED} is missing; build it with `leapgen train text-code-diffusion-adapted`")
    torch.set_num_threads(1)
    return Pipeline.from_pretrained(ADAPTED)


@pytest.mark.parametrize("cache", ["none", "dual"])
def test_eot_truncation_rows_decode_as_alone(pipe, cache):
    """EoTP cuts rows at different places; a row cut earlier than the batch's last cut must not see
    its own settled End-of-Text padding (it would not alone): greedy rows equal their solo decode.
    The newline is the End-of-Text id here so that the shipped model reaches it within 48 tokens."""
    newline = pipe.tokenizer("\n", add_special_tokens=False)["input_ids"][0]
    prompts = ["def add(a, b):\n    return a + b\n", "x = 1\n", "import os\n", "class A:\n    pass\n"]
    kw = dict(sampler="learn2pd", max_new_tokens=48, stop_at_eos=False, eot_id=newline, cache=cache)
    batch = pipe(prompts, **kw)
    assert batch.stats.extra["eot_truncated_rows"] >= 2  # the truncation path ran, with several cuts
    for i, p in enumerate(prompts):
        alone = pipe(p, **kw)
        assert batch.token_ids[i] == alone.token_ids[0], f"row {i} depends on its batch"


class _Bar:
    """A stand-in for tqdm that records its total and updates."""

    made: list[_Bar] = []

    def __init__(self, *args, total=None, **kwargs) -> None:
        self.total, self.n = total, 0
        _Bar.made.append(self)

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass


def test_progress_bar_advances(pipe, monkeypatch):
    """progress=True shows a bar that reaches the number of generated tokens (it stayed at 0: the
    step callback reads stats the masked loop fills only at the end)."""
    import tqdm.auto

    _Bar.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    monkeypatch.setattr(masked_loop, "tqdm", _Bar)
    out = pipe(["def f(x):", "import os\n"], sampler="fast_dllm", max_new_tokens=12, progress=True)
    assert out.stats.new_tokens == 24
    assert [(b.total, b.n) for b in _Bar.made] == [(24, 24)]


def test_no_progress_bar_by_default(pipe, monkeypatch):
    _Bar.made = []
    monkeypatch.setattr(masked_loop, "tqdm", _Bar)
    pipe("def f(x):", sampler="llada", max_new_tokens=4)
    assert _Bar.made == []
