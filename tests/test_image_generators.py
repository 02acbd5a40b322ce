"""diffusers' per-image generators (``generator=[g0, g1, ...]``) on the raster image pipelines
(``leapgen/image-emoji``, ``leapgen/image-emoji-nar``): each image is what a call with its prompt
alone and its generator gives, whatever else is in the batch; bad lists are refused with what to do."""

from __future__ import annotations

import pytest
import torch
from test_image_pipeline import make_pipe

from leapgen.errors import InputError
from leapgen.pipelines import ImageARPipeline, Pipeline
from leapgen.samplers import sampler_info

#: every sampler the raster pipeline runs (the registry's, by its contracts, every component present)
SAMPLERS = ImageARPipeline.runnable_samplers(index={c: ["leapgen", c] for c in ImageARPipeline.components})


@pytest.fixture(scope="module")
def pipe():
    torch.set_num_threads(1)
    return Pipeline.from_pretrained("leapgen/image-emoji")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("sampler", ["ar", "sjd"])
def test_each_image_is_reproducible_whatever_the_batch(pipe, sampler):
    kw = {"sampler": sampler, "cfg_scale": 1.0}  # unguided: half the work, the same per-image rule
    batch = pipe(["red apple", "animals", "cat face"], generator=[gen(1), gen(2), gen(3)], **kw)
    solo = pipe(["animals"], generator=gen(2), **kw)
    other = pipe(["cat face", "animals"], generator=[gen(7), gen(2)], **kw)
    assert torch.equal(batch.token_ids[1], solo.token_ids[0]) and torch.equal(other.token_ids[1], solo.token_ids[0])
    assert batch.images[1].tobytes() == solo.images[0].tobytes()
    # ... and the generators matter: another seed gives another image (sampled at temperature 1)
    assert not torch.equal(batch.token_ids[0], pipe(["red apple"], generator=gen(4), **kw).token_ids[0])
    # statistics add up over the per-image decodes
    assert batch.stats.batch_size == 3 and batch.stats.new_tokens == 3 * 256
    assert len(batch.token_steps) == 3 and all(len(s) == 256 for s in batch.token_steps)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return make_pipe()


def test_the_sampler_list_is_the_pipelines(tiny):
    assert sorted(SAMPLERS) == sorted(tiny.runnable_samplers()) and {"ar", "sjd", "lantern", "speculative"} <= set(SAMPLERS)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_gives_each_image_its_own_generator(tiny, sampler):
    """Registry-driven, on a tiny raster pipeline: every sampler it runs gives each image what that
    prompt alone with that generator gives (sampler instances carry nothing from one image to the next)."""
    kw = {"sampler": sampler, "temperature": 0.0 if sampler_info(sampler).guarantee == "greedy-exact" else 1.0}
    batch = tiny(["faces", "red apple", "animals"], generator=[gen(1), gen(2), gen(3)], **kw)
    for i, (prompt, seed) in enumerate([("faces", 1), ("red apple", 2), ("animals", 3)]):
        assert torch.equal(batch.token_ids[i], tiny([prompt], generator=gen(seed), **kw).token_ids[0]), (sampler, i)


def test_one_generator_per_image_with_several_images_per_prompt_and_a_failed_prompt(pipe):
    out = pipe(["zzzqqq", "red apple"], num_images_per_prompt=2, cfg_scale=1.0, generator=[gen(s) for s in range(4)])
    assert out.errors[:2] != [None, None] and out.errors[2:] == [None, None]
    assert out.images[:2] == [None, None] and out.stats.batch_size == 2
    for i in (2, 3):  # the failed prompt's generators are left unused; the others go to their images
        assert torch.equal(out.token_ids[i], pipe(["red apple"], cfg_scale=1.0, generator=gen(i)).token_ids[0]), i


def test_the_nar_pipeline_takes_a_list_too():
    nar = Pipeline.from_pretrained("leapgen/image-emoji-nar")
    batch = nar(["red apple", "animals"], generator=[gen(1), gen(2)])
    assert torch.equal(batch.token_ids[1], nar(["animals"], generator=gen(2)).token_ids[0])


def test_bad_generator_lists_are_refused_with_what_to_do(pipe):
    with pytest.raises(InputError, match="2 generators for 3 images"):
        pipe(["red apple", "animals", "cat face"], generator=[gen(1), gen(2)])
    with pytest.raises(InputError, match="4 images"):
        pipe(["red apple", "animals"], num_images_per_prompt=2, generator=[gen(1), gen(2)])
    with pytest.raises(InputError, match=r"generator\[1\] must be a torch.Generator"):
        pipe(["red apple", "animals"], generator=[gen(1), 5])
    with pytest.raises(InputError, match="not both"):
        pipe(["red apple", "animals"], generator=[gen(1), gen(2)], seed=0)
    g = gen(1)
    with pytest.raises(InputError, match="twice"):
        pipe(["red apple", "animals"], generator=[g, g])


def test_pipelines_without_the_list_form_say_what_to_do_instead():
    text = Pipeline.from_pretrained("leapgen/text-code")
    with pytest.raises(InputError, match="Pass one generator.*call once per prompt") as err:
        text(["def f():", "import os"], generator=[gen(1), gen(2)], max_new_tokens=4)
    assert "TextPipeline" in str(err.value) and "ImageARPipeline" in str(err.value)
