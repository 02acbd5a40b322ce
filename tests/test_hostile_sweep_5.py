"""Hostile sweep (5) of the non-speech pipelines and the CLI, as realistic users try them: inputs no
other test names. Each test here failed before its fix; tiny models, module-scoped fixtures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import make_llama

from leapgen.pipelines.freshness import rebuild_count
from leapgen.pipelines.text_logprobs import token_logprobs

torch.set_num_threads(1)


# ---------------------------------------------------------------- freshness: buffers count


class _BufferCodebook(torch.nn.Module):
    """A VQ codebook held as a buffer (an EMA VQ's codebook is one: updated in place, no gradient)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())


@pytest.fixture(scope="module")
def image_pipe():
    from test_image_pipeline import make_pipe

    pipe = make_pipe()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_a_codebook_buffer_changed_in_place_rebuilds_the_adapters(image_pipe):
    """The image pipeline copies the VQ codebook into its adapters (token latents, read by LANTERN).
    A codebook registered as a buffer and edited in place (an EMA update) was not in the freshness
    key, so every later call ran on the stale copy; now buffers are keyed like parameters."""
    pipe = image_pipe
    quant = pipe.vq.quantize
    quant.embedding = _BufferCodebook(quant.embedding.weight)  # a replaced submodule: followed before too
    pipe("faces", sampler="ar", seed=0)
    before = rebuild_count(pipe)
    with torch.no_grad():
        quant.embedding.weight.copy_(torch.randn_like(quant.embedding.weight))  # the in-place EMA step
    pipe("faces", sampler="ar", seed=0)
    assert rebuild_count(pipe) == before + 1
    want = F.normalize(quant.embedding.weight.float(), p=2, dim=-1) if pipe.vq.config.codebook_l2_norm \
        else quant.embedding.weight.float()
    assert torch.equal(pipe.lms["model"].token_latents(), want)
    pipe("faces", sampler="ar", seed=0)
    assert rebuild_count(pipe) == before + 1  # nothing changed: no rebuild


# ---------------------------------------------------------------- logprobs of a mixed-length batch


def test_logprobs_of_a_mixed_length_batch_keep_only_the_generated_positions():
    """A long prompt beside a short one: the teacher-forced forward kept every position from the
    shortest prompt's end (right padding), nearly the whole batch's logits; the prompts are now
    left-padded to one end column (with their own position ids), so it keeps the longest output + 1,
    and the values still equal an unbatched forward of each row."""
    model = make_llama(40, seed=4)
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.logits.shape)))
    prompts, outs = [list(range(1, 38)), [5], [7, 8, 9]], [[3, 4], [6, 7, 8, 9, 10], []]
    try:
        lps, tops = token_logprobs(model, prompts, outs, 3)
    finally:
        hook.remove()
    assert shapes == [(3, 6, 40)]  # max output 5, + 1 (was 42 - 1 + 1 = 42)
    for p, o, lp, top in zip(prompts, outs, lps, tops):
        assert len(lp) == len(top) == len(o)
        if not o:
            continue
        with torch.no_grad():
            ref = model(torch.tensor([p + o])).logits[0].double().log_softmax(-1)[len(p) - 1 : len(p) - 1 + len(o)]
        assert torch.allclose(torch.tensor(lp, dtype=torch.double), ref[torch.arange(len(o)), torch.tensor(o)], atol=1e-5)
        assert [list(d) for d in top] == ref.topk(3, dim=-1).indices.tolist()
