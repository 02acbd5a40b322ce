"""The shipped ``leapgen/tts-en`` asset: loads, and every T2S sampler runs on its shipped prompt clip
(few steps, so the test takes seconds)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from leapgen.pipelines import Pipeline, TTSPipeline, resolve_pretrained


@functools.cache
def shipped():
    pipe = Pipeline.from_pretrained("leapgen/tts-en")
    pipe.name_or_path_folder = resolve_pretrained("leapgen/tts-en")
    return pipe


@pytest.mark.parametrize("sampler", ["maskgct", "ar", "speculative"])
def test_shipped_asset_runs_every_sampler_on_its_clip(sampler):
    pipe = shipped()
    assert isinstance(pipe, TTSPipeline) and pipe.sample_rate == 16000
    params = {"steps": 4} if sampler == "maskgct" else {}
    out = pipe("the value of the object", sampler=sampler, seed=0, s2a_params={"steps_per_stage": (2, 1, 1, 1)}, **params)
    assert not any(out.errors)
    audio = out.audios[0]
    assert audio is not None and audio.dtype == np.float32 and audio.size >= 3 * 960 and np.isfinite(audio).all()
    if sampler == "maskgct":  # MaskGCT's length rule: #phones x the prompt's frames per phone
        assert len(out.semantic_tokens[0]) == audio.size // 960


def test_shipped_asset_refuses_bad_prompts():
    import soundfile as sf

    pipe = shipped()
    clip = sf.read(str(pipe.name_or_path_folder / "examples" / "prompt.wav"), dtype="float32")[0][:8000]  # 0.5 s
    out = pipe(["hello there", ""], prompt_audio=clip, sampling_rate=16000, prompt_text="hello there")
    assert "speaking rate" in out.errors[0] and "empty" in out.errors[1]


def test_speed_scales_the_masked_length_and_is_checked():
    """``speed`` divides MaskGCT's target length (phones x the prompt's frames per phone); the AR T2S
    and out-of-range values are refused with the reason."""
    from leapgen.errors import InputError

    pipe = shipped()
    kw = dict(seed=0, steps=2, s2a_params={"steps_per_stage": (1, 1, 1, 1)})
    frames = {sp: len(pipe("the brown bottle is on the table", speed=sp, **kw).semantic_tokens[0]) for sp in (0.5, 1, 2)}
    assert abs(frames[0.5] - 2 * frames[1]) <= 1 and abs(frames[2] - frames[1] / 2) <= 1, frames
    for bad in (0, 0.4, 2.5, "fast", True, float("nan")):
        with pytest.raises(InputError, match="speed must be a number"):
            pipe("hello there", speed=bad)
    with pytest.raises(InputError, match="ends at its own end token"):
        pipe("hello there", sampler="ar", speed=1.5)


def test_long_texts_are_spoken_sentence_by_sentence_and_joined():
    """A paragraph over ``LONG_TEXT_CHARS`` is split into chunks of whole sentences (after the text is
    normalised, so "Dr." and "$5.50" do not end sentences), spoken in one batch and joined with pauses;
    a text that fits is spoken whole; an unreadable text fails whole, with the reason."""
    from leapgen.pipelines.tts_text import LONG_TEXT_CHARS, PAUSE_SECONDS, split_text

    para = ("Dr. Smith paid $5.50 for 3 apples on May 2nd. The brown bottle is on the table, and the red cup is "
            "next to it, near the window where the light comes in every morning! Is it raining today?")
    chunks = split_text(para)
    assert len(chunks) == 3 and all(len(c) <= LONG_TEXT_CHARS for c in chunks)
    assert chunks[0] == "doctor Smith paid five dollars and fifty cents for three apples on May second."
    assert split_text("hello there. good day.") == ["hello there. good day."]
    words = " ".join(["word"] * 60)  # one sentence, no commas: cut between words
    assert all(len(c) <= LONG_TEXT_CHARS for c in split_text(words)) and " ".join(split_text(words)) == words
    assert split_text("a good day 🙂 to you. " * 8) == ["a good day 🙂 to you. " * 8]

    pipe = shipped()
    kw = dict(seed=0, steps=2, s2a_params={"steps_per_stage": (1, 1, 1, 1)})
    out = pipe([para, "hello there", "a good day 🙂 to you. " * 8], **kw)
    assert out.errors[0] is None and out.errors[1] is None and "symbols the voice would skip" in out.errors[2]
    assert out.stats.extra["chunks"] == 5 and out.audios[2] is None
    alone = pipe(chunks, **kw)
    pause = int(PAUSE_SECONDS * pipe.sample_rate)
    assert out.audios[0].size == sum(a.size for a in alone.audios) + 2 * pause
    assert len(out.semantic_tokens[0]) == sum(len(s) for s in alone.semantic_tokens)  # the draws differ with the batch
    assert out.audios[1].size == pipe("hello there", **kw).audios[0].size
