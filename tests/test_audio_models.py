"""Audio family: codebook patterns, the MusicGen-style AR model (causal contract), the MAGNeT sampler's
stage / span schedule, CFG at scale 1, the codec round trip and the corpus builder (tiny, random)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from harness_audio import FRAMES, K, V, text_cond, tiny_audio_nets

from leapgen.errors import ConfigError, InputError
from leapgen.models.audio_lm import MagnetMaskedLM
from leapgen.models.codebook_patterns import get_pattern
from leapgen.models.condition import Guidance, TextEmbeddings
from leapgen.models.musicgen import MusicGenLM
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.tokenizers.audio_codec import AudioCodec


# ------------------------------------------------------------------------------------------ patterns
@pytest.mark.parametrize("name", ["delay", "parallel", "flattened"])
def test_pattern_round_trip_and_partial_streams(name):
    p = get_pattern(name)
    codes = torch.randint(0, V, (2, K, 7), generator=torch.Generator().manual_seed(0))
    stream = p.to_stream(codes, V)
    back, known = p.from_stream(stream, K, 7)
    assert torch.equal(back, codes) and bool(known.all())
    n = p.prefix_length(K, 7, 3)  # enough cells for frames 0..2
    part, known = p.from_stream(stream[:, :n], K, 7)
    assert bool(known[:, :, :3].all()) and torch.equal(part[:, :, :3], codes[:, :, :3])
    assert int(known.sum()) == 2 * n - 2 * int(p.empty_mask(K, 7)[:n].sum())


def test_delay_pattern_layout():
    p = get_pattern("delay")
    idx = p.index_map(K, 5)
    assert idx.numel() == (5 + K - 1) * K
    # step s holds codebook k of frame s - k: the first step only codebook 0 of frame 0
    assert idx[:K].tolist() == [0, -1, -1, -1]
    assert int(p.empty_mask(K, 5).sum()) == K * (K - 1)
    with pytest.raises(ConfigError, match="unknown codebook pattern"):
        get_pattern("spiral")


# ------------------------------------------------------------------------------------------ AR model
def test_ar_model_structure_and_incremental_forward_match():
    _, ar = tiny_audio_nets()
    lm = MusicGenLM(ar)
    c = ar.config
    cond = text_cond(2)
    codes = torch.randint(0, V, (2, K, 6), generator=torch.Generator().manual_seed(1))
    stream = c.train_stream(codes)
    seq = torch.cat([torch.full((2, 1), c.bos_id), stream[:, :-1]], 1)
    n = seq.shape[1]
    full = ar(seq, torch.arange(n)[None].expand(2, n), cond)
    cache = lm.new_cache(2, cond)
    inc = torch.cat([lm(seq[:, i : i + 1], cache) for i in range(n)], 1)
    assert torch.allclose(inc, full, atol=1e-5)
    empty = c.empty_cells(n)
    best = full.argmax(-1)
    assert bool((best[:, empty] == c.empty_id).all()), "empty cells must hold all their mass on empty_id"
    assert not bool((best[:, ~empty] == c.empty_id).any()) and not bool((best == c.bos_id).any())


def test_ar_guidance_scale_one_is_the_conditional_model():
    _, ar = tiny_audio_nets()
    cond = text_cond(2)
    seq = torch.full((2, 1), ar.config.bos_id)
    plain = MusicGenLM(ar)(seq, MusicGenLM(ar).new_cache(2, cond))
    one = TextEmbeddings(embeddings=cond.embeddings, mask=cond.mask, guidance=Guidance(1.0))
    lm = MusicGenLM(ar)
    assert torch.equal(lm(seq, lm.new_cache(2, one)), plain)
    three = TextEmbeddings(embeddings=cond.embeddings, mask=cond.mask, guidance=Guidance(3.0))
    lm = MusicGenLM(ar)
    assert not torch.allclose(lm(seq, lm.new_cache(2, three)), plain)


def test_speculative_is_exact_against_ar_at_temperature_zero():
    _, ar = tiny_audio_nets()
    torch.manual_seed(3)
    from harness_audio import TEXT_DIM, MusicGenConfig, MusicGenTransformer

    draft = MusicGenTransformer(MusicGenConfig(num_codebooks=K, codebook_size=V, dim=16, num_layers=1, num_heads=2,
                                               text_dim=TEXT_DIM, max_frames=64)).eval()
    for batch in (1, 3):
        cond = text_cond(batch)
        cfg = DecodeConfig(max_new_tokens=ar.config.stream_tokens(FRAMES), temperature=0.0)
        prompts = [[ar.config.bos_id]] * batch
        ref = get_sampler("ar").generate({"model": MusicGenLM(ar)}, prompts, cfg, torch.Generator().manual_seed(0), cond=cond)
        got = get_sampler("speculative").generate({"model": MusicGenLM(ar), "draft": MusicGenLM(draft)}, prompts, cfg,
                                                  torch.Generator().manual_seed(0), cond=cond)
        assert got.sequences == ref.sequences
        assert got.stats.target_forwards < ref.stats.target_forwards


# ------------------------------------------------------------------------------------------ MAGNeT schedule
def test_magnet_stages_in_order_spans_whole_every_position_revealed():
    magnet, _ = tiny_audio_nets()
    steps = (4, 3, 2, 2)
    smp = get_sampler("magnet", steps_per_stage=list(steps), hooks=("trajectory",))
    grid = torch.full((2, K, FRAMES), V, dtype=torch.long)
    res = smp.generate({"model": MagnetMaskedLM(magnet)}, grid, DecodeConfig(temperature=3.0, top_p=0.9),
                       torch.Generator().manual_seed(0), cond=text_cond(2))
    traj = res.trajectory[1:]  # the first entry is the initial state
    assert len(traj) == sum(steps) == res.stats.extra["steps"]
    known = [t != V for t in traj]
    assert bool(known[-1].all()), "every position is revealed by the end"
    spans = FRAMES // 3
    at = 0
    for k, n in enumerate(steps):
        for j in range(n):
            kn = known[at + j]
            assert bool(kn[:, :k].all()), "earlier codebooks are complete before stage k"
            assert not bool(kn[:, k + 1 :].any()), "later codebooks stay masked during stage k"
            blocks = kn[:, k].reshape(2, spans, 3)
            assert bool((blocks.all(-1) | ~blocks.any(-1)).all()), "spans are revealed whole"
            revealed = int(blocks.all(-1).sum())
            assert 0 < revealed <= 2 * spans
        assert bool(known[at + n - 1][:, k].all()), f"stage {k} ends with its codebook complete"
        at += n


def test_magnet_cfg_scale_one_equals_the_conditional_model():
    magnet, _ = tiny_audio_nets()
    grid = torch.full((2, K, FRAMES), V, dtype=torch.long)
    cfg = DecodeConfig(temperature=0.0)
    outs = []
    for params in ({"cfg_scale": 1.0, "cfg_min_scale": 1.0, "cfg_batch": True}, {"guidance": "none", "cfg_scale": 10.0, "cfg_min_scale": 1.0}):
        params = {k: v for k, v in params.items() if not (params.get("guidance") == "none" and k.startswith("cfg"))}
        outs.append(get_sampler("magnet", **params).generate({"model": MagnetMaskedLM(magnet)}, grid, cfg,
                                                             torch.Generator().manual_seed(0), cond=text_cond(2)))
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    # the unconditional pass ran: in the same forward as the conditional one (a doubled batch) ...
    assert outs[0].stats.target_forwards == outs[1].stats.target_forwards
    assert outs[0].stats.extra["guidance_batched"] == outs[0].stats.extra["steps"]
    # ... or, with cfg_batch=False, as a second forward per step
    apart = get_sampler("magnet", cfg_scale=1.0, cfg_min_scale=1.0, cfg_batch=False).generate(
        {"model": MagnetMaskedLM(magnet)}, grid, cfg, torch.Generator().manual_seed(0), cond=text_cond(2))
    assert torch.equal(apart.tokens, outs[1].tokens)
    assert apart.stats.target_forwards == 2 * outs[1].stats.target_forwards
    strong = get_sampler("magnet", cfg_scale=30.0, cfg_min_scale=30.0).generate(
        {"model": MagnetMaskedLM(magnet)}, grid, cfg, torch.Generator().manual_seed(0), cond=text_cond(2))
    assert not torch.equal(strong.tokens, outs[1].tokens)


def test_magnet_refuses_bad_parameters():
    with pytest.raises(ConfigError, match="cfg_scale"):
        get_sampler("magnet", cfg_scale=-1.0)
    with pytest.raises(ConfigError, match="rescore_weight"):
        get_sampler("magnet_rescored", rescore_weight=1.5)
    with pytest.raises(ConfigError, match="ar_seconds"):
        get_sampler("magnet_hybrid", ar_seconds=0.0)
    magnet, _ = tiny_audio_nets()
    grid = torch.full((1, K, FRAMES), V, dtype=torch.long)
    with pytest.raises(ConfigError, match="steps_per_stage"):
        get_sampler("magnet", steps_per_stage=[5, 5]).generate({"model": MagnetMaskedLM(magnet)}, grid, DecodeConfig(),
                                                               torch.Generator(), cond=text_cond(1))


# ------------------------------------------------------------------------------------------ codec
@pytest.fixture(scope="module")
def tiny_codec() -> AudioCodec:
    torch.manual_seed(0)
    return AudioCodec(num_filters=4, hidden_size=16, codebook_size=16).eval()


def test_codec_round_trip_shapes_and_sample_rate(tiny_codec, tmp_path):
    c = tiny_codec
    assert (c.sample_rate, c.frame_rate, c.hop_length, c.num_codebooks) == (16000, 50, 320, 4)
    wav = np.random.default_rng(0).uniform(-0.5, 0.5, 16000 + 100).astype(np.float32)
    codes = c.encode(wav)
    assert codes.shape == (1, 4, 51) and codes.dtype == torch.long
    out = c.decode(codes)
    assert out.shape == (1, 51 * 320) and out.dtype == torch.float32 and float(out.abs().max()) <= 1.0
    c.save_pretrained(tmp_path / "codec")
    again = AudioCodec.from_pretrained(tmp_path / "codec")
    assert torch.equal(again.encode(wav), codes)


def test_codec_resamples_and_downmixes_with_a_log_line(tiny_codec, caplog):
    c = tiny_codec
    stereo = np.random.default_rng(1).uniform(-0.5, 0.5, (1, 2, 8000)).astype(np.float32)
    with caplog.at_level(logging.WARNING):
        assert c.encode(stereo).shape == (1, 4, 25)
        assert c.encode(stereo[:, 0], sample_rate=8000).shape == (1, 4, 50)
    text = caplog.text
    assert "2 channels" in text and "resampling audio from 8000 Hz" in text


def test_codec_bad_inputs(tiny_codec):
    c = tiny_codec
    with pytest.raises(InputError, match="shape"):
        c.encode(np.zeros((2, 3, 4, 5), dtype=np.float32))
    with pytest.raises(InputError, match="NaN"):
        c.encode(np.full(400, np.nan, dtype=np.float32))
    with pytest.raises(InputError, match="codes must lie"):
        c.decode(torch.full((1, 4, 3), 99))
    with pytest.raises(InputError, match="codes must be integer"):
        c.decode(torch.zeros(1, 3, 5, dtype=torch.long))
    with pytest.raises(InputError, match="sample_rate"):
        c.encode(np.zeros(400, dtype=np.float32), sample_rate=-5)


# ------------------------------------------------------------------------------------------ training objective
def test_span_mask_rate_and_whole_spans():
    from leapgen.train.audio_music import span_mask

    g = torch.Generator().manual_seed(0)
    rate = torch.full((400,), 0.5)
    m = span_mask(400, 150, rate, 3, g)
    assert abs(float(m.float().mean()) - 0.5) < 0.05
    assert bool(m.any(1).all())
    low = span_mask(400, 150, torch.full((400,), 0.01), 3, g)
    assert bool(low.any(1).all()) and float(low.float().mean()) < 0.05
