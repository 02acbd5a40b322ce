"""The audio-codec recipe: crops mixed from music and speech, and a smoke run that mixes them."""

from __future__ import annotations

import numpy as np
import pytest

from leapgen.errors import ConfigError
from leapgen.train.audio_codec import main, mixed_crops


def test_mixed_crops_take_each_count_from_its_source() -> None:
    rng = np.random.default_rng(0)
    music = [np.full(4000, 1.0, dtype=np.float32), np.full(3000, 1.0, dtype=np.float32)]
    speech = [np.full(5000, 2.0, dtype=np.float32)]
    x = mixed_crops([music, speech], [3, 5], 1000, rng)
    assert x.shape == (8, 1000)
    assert (x[:3] == 1.0).all() and (x[3:] == 2.0).all()
    assert mixed_crops([music, speech], [4, 0], 1000, rng).shape == (4, 1000)


def test_speech_fraction_is_checked(tmp_path) -> None:
    with pytest.raises(ConfigError, match="speech_fraction"):
        main(out_dir=tmp_path / "c", corpus_dir=tmp_path / "music", speech_corpus=tmp_path / "speech", speech_fraction=1.0)


def test_smoke_run_with_speech_mixed_in(tmp_path) -> None:
    from leapgen.data.tts_en import build as build_speech

    build_speech(tmp_path / "speech", seen_speakers=2, unseen_speakers=1, per_speaker=2, prompts_per_speaker=1,
                 test_per_speaker=1, seen_test_speakers=1)
    m = main(out_dir=tmp_path / "codec", corpus_dir=tmp_path / "music", corpus_hours=0.004, steps=3, minutes=None,
             batch_size=4, crop_seconds=0.2, num_filters=4, hidden_size=16, codebook_size=16,
             speech_corpus=tmp_path / "speech", speech_fraction=0.5)
    assert m["steps_done"] == 3 and m["options"]["speech_fraction"] == 0.5
    assert np.isfinite(m["test"]["mel_distance"]) and np.isfinite(m["test_speech"]["mel_distance"])
    assert (tmp_path / "codec" / "model.safetensors").is_file()


def test_decoder_only_fine_tuning_keeps_every_code(tmp_path) -> None:
    """``decoder_from``: the encoder and codebooks are frozen (same codes for any audio, so the
    token models on that codec stay valid), the decoder learns, the earlier metrics are kept."""
    import torch

    from leapgen.tokenizers.audio_codec import AudioCodec

    first = main(out_dir=tmp_path / "codec", corpus_dir=tmp_path / "music", corpus_hours=0.004, steps=2, minutes=None,
                 batch_size=4, crop_seconds=0.2, num_filters=4, hidden_size=16, codebook_size=16)
    m = main(out_dir=tmp_path / "dec", corpus_dir=tmp_path / "music", corpus_hours=0.004, steps=3, minutes=None,
             batch_size=4, crop_seconds=0.2, lr=1e-2, num_filters=32, decoder_from=tmp_path / "codec")
    assert m["steps_done"] == 3 and m["reseeded_codes"] == 0
    assert m["decoder_from_metrics"]["steps_done"] == first["steps_done"]
    a, b = AudioCodec.from_pretrained(tmp_path / "codec"), AudioCodec.from_pretrained(tmp_path / "dec")
    assert b.config.num_filters == 4  # the architecture comes from the earlier codec, not the options
    wav = torch.randn(2, 8000, generator=torch.Generator().manual_seed(0)) * 0.1
    assert torch.equal(a.encode(wav, 16000), b.encode(wav, 16000))
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(pa, pb) != name.startswith("decoder."), name
