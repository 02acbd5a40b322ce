"""An image pipeline's VQ decoder is put in its decoding layout (channels-last) when the pipeline
records its components (leapgen.pipelines.freshness.settle_layouts), so the first decode changes
nothing and later calls do not rebuild the adapters; a real change is still followed."""

from __future__ import annotations

import logging

import pytest
import torch

from leapgen.pipelines import Pipeline
from leapgen.pipelines.freshness import rebuild_count
from leapgen.tokenizers.vq_image import VQModel

VQ_IMAGE_PIPELINES = ["leapgen/image-emoji", "leapgen/image-emoji-ctf", "leapgen/image-emoji-var",
                      "leapgen/image-emoji-dd", "leapgen/image-emoji-nar"]


@pytest.mark.parametrize("name", VQ_IMAGE_PIPELINES)
def test_second_and_third_call_do_not_rebuild(name, caplog):
    torch.set_num_threads(1)
    pipe = Pipeline.from_pretrained(name)
    pipe.set_progress_bar_config(disable=True)
    assert isinstance(pipe.vq, VQModel)
    with caplog.at_level(logging.INFO, logger="leapgen.pipelines.freshness"):
        first = pipe(0, seed=0).images[0]
        second = pipe(0, seed=0).images[0]
        third = pipe(0, seed=0).images[0]
    assert rebuild_count(pipe) == 0
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
    assert first.tobytes() == second.tobytes() == third.tobytes()
    assert pipe.vq.decoder.conv_in.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_real_change_is_still_followed_once():
    torch.set_num_threads(1)
    pipe = Pipeline.from_pretrained("leapgen/image-emoji")
    pipe.set_progress_bar_config(disable=True)
    pipe(0, seed=0)
    with torch.no_grad():
        pipe.model.tok_embeddings.weight.mul_(1.0) if hasattr(pipe.model, "tok_embeddings") else \
            next(pipe.model.parameters()).mul_(1.0)  # an in-place change (bumps the version counter)
    pipe(0, seed=0)
    assert rebuild_count(pipe) == 1
    pipe(0, seed=0)
    assert rebuild_count(pipe) == 1


def test_vq_training_forward_keeps_the_decoder_layout():
    """The training forward (with gradients) never switches the decoder to channels-last."""
    torch.manual_seed(0)
    vq = Pipeline.from_pretrained("leapgen/image-emoji").vq
    fresh = VQModel(vq.config)
    size = vq.config.image_size
    recon, _, _ = fresh(torch.rand(1, 3, size, size) * 2 - 1)
    recon.mean().backward()
    assert not fresh.decoder.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
