"""ASR network and its contract views: a seeded short training whose loss falls by a fixed factor,
the AR decoder's KV cache against a full forward, speculative (NAR draft) == ar token for token,
ar_beam with one beam == ar, save / load."""

from __future__ import annotations

import random

import pytest
import torch
from asr_tiny import TINY, synth_clips, tiny_inputs, tiny_net

from leapgen.models.asr import ASRConfig, ASRModel
from leapgen.models.asr_lm import NARDraftLM, asr_views
from leapgen.samplers import DecodeConfig, get_sampler
from leapgen.tokenizers.asr_vocab import ASRVocab
from leapgen.tokenizers.speech_features import SpeechFrontend


def test_seeded_short_training_loss_falls(tmp_path):
    """~200 espeak utterances of a 10-word vocabulary; 60 steps of the joint loss (Paraformer with
    GLM + MAE + CTC + AR) must cut the first step's loss by 2.5x (mean of the last 5), and the same seed gives the same losses."""
    import soundfile as sf
    from asr_tiny import WORDS

    from leapgen.train.asr_en import batches, collate

    torch.set_num_threads(1)
    rows = synth_clips(tmp_path / "u", 200, seed=0)
    fe = SpeechFrontend()
    feats = [fe.features(sf.read(r["audio"], dtype="float32")[0]).half() for r in rows]
    fe.fit_cmvn([f.float() for f in feats])
    vocab = ASRVocab(sorted(WORDS))
    targets = [vocab.encode(r["text"]) for r in rows]

    def run(seed: int, steps: int = 60) -> list[float]:
        torch.manual_seed(seed)
        model = ASRModel(ASRConfig(vocab_size=len(vocab), d_model=64, heads=4, ff=128, encoder_layers=2,
                                   nar_layers=1, ar_layers=1, dropout=0.0))
        opt = torch.optim.AdamW(model.parameters(), 2e-3)
        gen, rng, losses = torch.Generator().manual_seed(seed), random.Random(seed), []
        lengths = [f.shape[0] for f in feats]
        while len(losses) < steps:
            for idx in batches(lengths, 16, rng):
                x, xl, y, yl = collate(idx, feats, targets, fe, torch.device("cpu"))
                loss = model.losses(x, xl, y, yl, generator=gen)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                if len(losses) == steps:
                    break
        return losses

    losses = run(0)
    assert sum(losses[-5:]) / 5 < losses[0] / 2.5, (losses[:3], losses[-5:])
    assert run(0, 5) == losses[:5]


def test_ar_cache_matches_full_forward():
    net = tiny_net(1)
    views = asr_views(net)
    lm = views["ar"]
    state = lm.encode(tiny_inputs(2))
    tokens = torch.tensor([[1, 5, 7, 9, 3], [1, 4, 4, 8, 2]])
    cache = lm.new_cache(2, state)
    full = lm(tokens, cache)
    cache2 = lm.new_cache(2, state)
    steps = torch.cat([lm(tokens[:, i : i + 1], cache2) for i in range(5)], 1)
    assert torch.allclose(full, steps, atol=1e-5)
    cache2.crop(3)
    again = lm(tokens[:, 3:], cache2)
    assert torch.allclose(again, full[:, 3:], atol=1e-5)


@pytest.mark.parametrize("draft", ["paraformer", "ctc"])
@pytest.mark.parametrize("batch", [1, 3])
def test_speculative_with_nar_draft_is_ar(draft, batch):
    net = tiny_net(2)
    views = asr_views(net)
    state = views["ar"].encode(tiny_inputs(batch, seed=4))
    cfg = DecodeConfig(max_new_tokens=14, eos_token_id=1)
    ar = get_sampler("ar").generate({"model": views["ar"]}, [[1]] * batch, cfg, cond=state)
    for params in ({}, {"num_draft_tokens": 32, "schedule": "confidence", "confidence_threshold": 0.01}):
        spec = get_sampler("speculative", **params).generate(
            {"model": views["ar"], "draft": NARDraftLM(views[draft])}, [[1]] * batch, cfg, cond=state)
        assert spec.sequences == ar.sequences
        assert spec.stats.draft_forwards > 0


class _TokenByTokenDraft(NARDraftLM):
    """The same draft without the block path (the speculative loop queries it token by token)."""

    position_indexed = False


def test_position_indexed_draft_is_read_in_one_call_with_the_loop_s_output():
    """NARDraftLM is position-indexed: at T=0 ``speculative`` reads its greedy hypothesis in one
    draft call per decode (every step's chain is a host slice) and needs no prefill step; its
    tokens are the token-by-token loop's (and ar's), with and without re-alignment."""
    net = tiny_net(2)
    views = asr_views(net)
    state = views["ar"].encode(tiny_inputs(3, seed=4))
    cfg = DecodeConfig(max_new_tokens=14, eos_token_id=1)
    for params in ({}, {"num_draft_tokens": 32, "schedule": "confidence", "confidence_threshold": 0.01},
                   {"num_draft_tokens": 3, "schedule": "constant"}, {"anchor_window": 0}):
        smp = get_sampler("speculative", **params)
        block = smp.generate({"model": views["ar"], "draft": NARDraftLM(views["paraformer"])}, [[1]] * 3, cfg,
                             cond=state)
        loop = smp.generate({"model": views["ar"], "draft": _TokenByTokenDraft(views["paraformer"])}, [[1]] * 3,
                            cfg, cond=state)
        assert block.sequences == loop.sequences, params
        assert block.stats.draft_forwards == 1, params  # the greedy table, once per decode
        assert loop.stats.draft_forwards == 1, params  # reading the table token by token is no network pass


def _given_hypothesis(net, hyp: list[int]) -> NARDraftLM:
    """A Paraformer draft whose hypothesis is ``hyp`` (one-hot rows, then uniform rows)."""
    draft = NARDraftLM(asr_views(net)["paraformer"])
    table = torch.full((1, len(hyp) + 2, net.config.vocab_size), -1e4)
    table[0, torch.arange(len(hyp)), torch.tensor(hyp)] = 0.0
    table[0, len(hyp):] = 0.0
    draft.hypothesis = lambda st: table  # noqa: E731  (a given hypothesis instead of the NAR pass)
    return draft


def _counting_net() -> ASRModel:
    """A tiny ASR net whose AR decoder writes ``t + 1`` after ``t`` (distinct tokens, so a
    hypothesis can be re-aligned unambiguously): its layers add nothing to the residual stream,
    and the output head maps each token's embedding to the next token."""
    net = tiny_net(3)
    with torch.no_grad():
        for layer in net.ar_layers:
            for m in (layer.self_attn.o, layer.cross.o, layer.ff[-1]):
                m.weight.zero_()
                m.bias.zero_()
        e = torch.randn(net.ar_embed.weight.shape, generator=torch.Generator().manual_seed(0))
        e = torch.nn.functional.normalize(e, dim=-1) * 3
        net.ar_embed.weight.copy_(e)
        net.ar_out.weight.copy_(torch.roll(e, 1, 0) * 5)
        net.ar_out.bias.zero_()
    return net


def test_position_indexed_draft_re_aligns_after_an_inserted_token():
    """A hypothesis with one extra token is re-aligned after the verifier rejects it: 2 target
    forwards, against one per remaining token without re-alignment; output identical to ar."""
    net = _counting_net()
    views = asr_views(net)
    state = views["ar"].encode(tiny_inputs(1, seed=5))
    cfg = DecodeConfig(max_new_tokens=12, eos_token_id=1)
    y = get_sampler("ar").generate({"model": views["ar"]}, [[1]], cfg, cond=state).sequences[0]
    assert y == list(range(2, 14))
    extra = 20
    hyp = y[:2] + [extra] + y[2:]
    forwards = {}
    for window in (3, 0):
        res = get_sampler("speculative", num_draft_tokens=32, anchor_window=window).generate(
            {"model": views["ar"], "draft": _given_hypothesis(net, hyp)}, [[1]], cfg, cond=state)
        assert res.sequences[0] == y, window
        forwards[window] = res.stats.target_forwards
    assert forwards[3] == 2
    assert forwards[0] == len(y) - 2  # after the mismatch every draft is off by one: one token per forward


def test_position_indexed_draft_keeps_the_ar_distribution():
    """At T=1 the joint of two new tokens from ``speculative`` with a block-read Paraformer draft
    matches the AR decoder's exact joint (enumeration over 24 x 24 outcomes, 20,000 samples)."""
    from test_distribution import tv, tv_bound

    net = tiny_net(5)
    views = asr_views(net)
    lm, v = views["ar"], TINY["vocab_size"]
    one = lm.encode(tiny_inputs(1, seed=6))
    with torch.inference_mode():  # exact joint: p(t1) p(t2 | t1) by teacher forcing every t1
        cache = lm.new_cache(v, one.select_rows(torch.zeros(v, dtype=torch.long)))
        logits = lm(torch.stack([torch.ones(v, dtype=torch.long), torch.arange(v)], 1), cache)
    p1, p2 = logits[0, 0].double().softmax(-1), logits[:, 1].double().softmax(-1)
    exact = (p1[:, None] * p2).flatten().numpy()
    batch, n = 5000, 20000
    state = one.select_rows(torch.zeros(batch, dtype=torch.long))
    cfg = DecodeConfig(max_new_tokens=2, temperature=1.0)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(v * v, dtype=torch.float64)
    drafted = accepted = 0
    for _ in range(n // batch):
        res = get_sampler("speculative").generate({"model": lm, "draft": NARDraftLM(views["paraformer"])},
                                                  [[1]] * batch, cfg, gen, cond=state)
        seqs = torch.tensor([s[:2] for s in res.sequences])
        counts += torch.bincount(seqs[:, 0] * v + seqs[:, 1], minlength=v * v).double()
        drafted, accepted = drafted + res.stats.drafted_tokens, accepted + res.stats.accepted_draft_tokens
    dist, bound = tv((counts / counts.sum()).numpy(), exact), tv_bound(exact, n)
    assert dist < bound, (dist, bound)
    assert 0 < accepted < drafted  # both branches of the verification ran


def test_nar_draft_of_a_perfect_hypothesis_is_accepted_in_one_forward():
    """A draft that equals the AR output is verified in one target forward (no prefill step: the
    draft is position-indexed)."""
    net = tiny_net(3)
    views = asr_views(net)
    state = views["ar"].encode(tiny_inputs(1, seed=5))
    cfg = DecodeConfig(max_new_tokens=10, eos_token_id=1)
    ar = get_sampler("ar").generate({"model": views["ar"]}, [[1]], cfg, cond=state)
    draft = _given_hypothesis(net, ar.sequences[0])
    spec = get_sampler("speculative", num_draft_tokens=16).generate({"model": views["ar"], "draft": draft}, [[1]], cfg,
                                                                    cond=state)
    assert spec.sequences == ar.sequences
    assert spec.stats.target_forwards == 1 < ar.stats.target_forwards


def test_beam_of_one_is_ar_and_beams_are_valid():
    net = tiny_net(4)
    views = asr_views(net)
    state = views["ar"].encode(tiny_inputs(3, seed=6))
    cfg = DecodeConfig(max_new_tokens=9, eos_token_id=1)
    ar = get_sampler("ar").generate({"model": views["ar"]}, [[1]] * 3, cfg, cond=state)
    one = get_sampler("ar_beam", beam_size=1).generate({"model": views["ar"]}, [[1]] * 3, cfg, cond=state)
    assert one.sequences == ar.sequences
    four = get_sampler("ar_beam", beam_size=4).generate({"model": views["ar"]}, [[1]] * 3, cfg, cond=state)
    assert all(0 < len(s) <= 9 for s in four.sequences)


def test_save_and_load(tmp_path):
    net = tiny_net(5)
    net.save_pretrained(tmp_path / "m")
    again = ASRModel.from_pretrained(tmp_path / "m")
    assert again.config == ASRConfig(**TINY)
    x = tiny_inputs(2)
    a = asr_views(net)["paraformer"]
    b = asr_views(again)["paraformer"]
    pa = a.propose(a.encode(x))
    pb = b.propose(b.encode(x))
    assert torch.allclose(pa["logits"], pb["logits"], atol=1e-5)


def test_ar_token_dropout_changes_only_the_ar_loss():
    """``ar_token_dropout`` replaces AR input words by ``<unk>``: the other losses are unchanged,
    the AR loss moves, and 0.0 is the default."""
    net = tiny_net(0)
    x = torch.randn(2, 20, 560, generator=torch.Generator().manual_seed(0))
    xl, y, yl = torch.tensor([20, 16]), torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]]), torch.tensor([4, 3])

    def run(**kw):
        return net.losses(x, xl, y, yl, generator=torch.Generator().manual_seed(1), **kw)

    base, zero, full = run(), run(ar_token_dropout=0.0), run(ar_token_dropout=1.0)
    assert all(torch.equal(base[k], zero[k]) for k in base)
    for k in ("nar", "mae", "ctc"):
        assert torch.allclose(base[k], full[k]), k
    assert not torch.allclose(base["ar"], full["ar"])


def test_spec_augment_masks_mel_bands_in_every_stacked_frame_and_spans_within_each_row():
    """SpecAugment on LFR features: the same mel bins are zeroed in all 7 stacked frames of a row,
    time spans stay within the row's length, widths are bounded, and the seed fixes the masks."""
    from leapgen.train.asr_en import spec_augment

    x = torch.randn(4, 60, 560, generator=torch.Generator().manual_seed(0)) + 5.0  # no accidental zeros
    lengths = torch.tensor([60, 40, 20, 8])
    y = spec_augment(x, lengths, torch.Generator().manual_seed(3), freq_masks=2, freq_width=15, time_masks=2, time_ratio=0.1)
    assert y.shape == x.shape and not torch.equal(x, y)
    assert torch.equal(y, spec_augment(x, lengths, torch.Generator().manual_seed(3), freq_masks=2, freq_width=15,
                                       time_masks=2, time_ratio=0.1))
    zero = (y == 0).view(4, 60, 7, 80)
    frame_zero = zero.all(-1).all(-1)  # [B, T] whole frames masked in time
    band = zero[~frame_zero].view(-1, 7, 80) if (~frame_zero).any() else None
    assert band is not None and torch.equal(band, band[:, :1].expand_as(band)), "bands differ across stacked frames"
    for b, n in enumerate(lengths.tolist()):
        bands = zero[b][~frame_zero[b]][0, 0]  # the mel bins zeroed in a frame not masked in time
        assert int(bands.sum()) <= 2 * 15
        assert int(frame_zero[b, :n].sum()) <= 2 * int(0.1 * n)
        assert not frame_zero[b, n:].any(), "a time mask reached past the row's length"
    for seed in range(20):  # wider spans: they must still stay inside every row
        wide = (spec_augment(x, lengths, torch.Generator().manual_seed(seed), time_ratio=0.4) == 0).view(4, 60, -1).all(-1)
        assert all(not wide[b, n:].any() for b, n in enumerate(lengths.tolist()))


def test_unpadded_batch_skips_the_mask_with_the_same_result():
    """Host-side lengths equal to the frame count let the encoder run without the key-padding mask
    (a CPU speed-up); the memory equals the masked pass, and a padded row of a batch still equals
    that row encoded alone."""
    net = tiny_net(1).eval()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 30, net.config.input_dim, generator=g)
    with torch.no_grad():
        fast, mask = net.encode(x[:1], torch.tensor([30]))
        masked = net.encoder(x[:1], mask, padded=True)
        assert torch.allclose(fast, masked, atol=1e-5)
        batch, _ = net.encode(torch.cat([x[1:, :30], torch.cat([x[:1, :20], torch.zeros(1, 10, x.shape[-1])], 1)]),
                              torch.tensor([30, 20]))
        alone, _ = net.encode(x[:1, :20], torch.tensor([20]))
        assert torch.allclose(batch[1, :20], alone[0], atol=1e-5) and float(batch[1, 20:].abs().max()) == 0.0


def test_lean_nar_decoder_equals_the_module_and_stays_finite():
    """The inference forward of the Paraformer decoder (fused projections + SDPA) equals
    ``nn.TransformerDecoder`` in eval on real tokens, with padded tokens and frames; a row with no
    token stays finite (the module gives NaN there)."""
    from leapgen.models.speech_encoder import sinusoid

    net = tiny_net(1).eval()
    d = net.config.d_model
    g = torch.Generator().manual_seed(0)
    mem, emb = torch.randn(3, 25, d, generator=g), torch.randn(3, 6, d, generator=g)
    mask = torch.ones(3, 25, dtype=torch.bool)
    mask[1, 18:] = mask[2, 9:] = False
    tm = torch.ones(3, 6, dtype=torch.bool)
    tm[1, 4:] = tm[2, :] = False
    with torch.no_grad():
        lean = net.nar_logits(mem, mask, emb, tm)
        x = net.nar(emb + sinusoid(torch.arange(6), d)[None], mem, tgt_key_padding_mask=~tm, memory_key_padding_mask=~mask)
        ref = net.nar_out(net.nar_norm(x))
        assert torch.allclose(lean[tm], ref[tm], atol=1e-5) and bool(torch.isfinite(lean).all())
        assert torch.allclose(net.nar_logits(mem[:1], mask[:1], emb[:1], tm[:1]), ref[:1], atol=1e-5)  # no mask at all
        from leapgen.models.torch_lean import decoder_forward

        post = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, 2, 32, batch_first=True), 1).eval()
        want = post(emb, mem, tgt_key_padding_mask=~tm, memory_key_padding_mask=~mask)  # post-norm: not the lean maths
        assert torch.equal(decoder_forward(post, emb, mem, ~tm, ~mask)[tm], want[tm])
        net.train()  # training keeps the module (dropout)
        torch.manual_seed(0)
        a = net.nar_logits(mem, mask, emb, tm)
        torch.manual_seed(0)
        x = net.nar(emb + sinusoid(torch.arange(6), d)[None], mem, tgt_key_padding_mask=~tm, memory_key_padding_mask=~mask)
        assert torch.allclose(a[tm], net.nar_out(net.nar_norm(x))[tm], atol=1e-6)


def test_remap_vocab_keeps_shared_tokens_rows():
    """Continuing a model on a corpus with another word list: every token-indexed tensor keeps the
    rows of the shared tokens under their new ids, new tokens are fresh, other weights are copied;
    so the CTC and decoder scores of shared tokens are unchanged."""
    from leapgen.train.asr_en import remap_vocab

    net = tiny_net(2)
    v = net.config.vocab_size
    old = ["<blank>", "<s>", "<unk>"] + [f"w{i}" for i in range(3, v)]
    new = old[:3] + [f"w{i}" for i in range(v - 1, 2, -1) if i % 4] + ["x1", "x2", "x3"]
    grown = remap_vocab(net, old, new).eval()
    assert grown.config.vocab_size == len(new) and net.config.vocab_size == v
    shared = [(j, old.index(w)) for j, w in enumerate(new) if w in old]
    nj, oi = (torch.tensor(t) for t in zip(*shared))
    x = torch.randn(1, 20, net.config.input_dim)
    with torch.no_grad():
        m_old, mask = net.encode(x, torch.tensor([20]))
        m_new, _ = grown.encode(x, torch.tensor([20]))
        assert torch.allclose(m_old, m_new)
        assert torch.allclose(net.ctc.proj(m_old)[..., oi], grown.ctc.proj(m_new)[..., nj])
        assert torch.equal(grown.ar_embed.weight[nj], net.ar_embed.weight[oi])
        assert torch.equal(grown.nar_out.bias[nj], net.nar_out.bias[oi])
