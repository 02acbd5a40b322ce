"""OCR family: corpus rendering, CPPD targets and read-out, views, samplers, pipeline (tiny random models)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from ocr_tiny import tiny_inputs, tiny_net

from leapgen.data import ocr as corpus
from leapgen.errors import InputError
from leapgen.models.ocr import EOS, cppd_targets, cut_at_eos
from leapgen.models.ocr_lm import CPPDDraftLM, ocr_views
from leapgen.pipelines import Pipeline
from leapgen.pipelines.ocr import OCRPipeline
from leapgen.samplers import DecodeConfig, get_sampler


def test_cppd_count_and_order_targets_on_hand_made_labels():
    net = tiny_net()
    labels = [net.encode_text("hello"), net.encode_text("a1a1a"), []]
    t = cppd_targets(labels, max_len=6, vocab_size=38)
    h, e, ell, o, a, one = (net.encode_text(c)[0] for c in "heloa1")
    assert t["count"][0, ell] == 2 and t["count"][0, h] == t["count"][0, e] == t["count"][0, o] == 1
    assert t["count"][0].sum() == 5 + 1 and t["count"][0, EOS] == 1 and t["count"][0, 0] == 0
    assert t["count"][1, a] == 3 and t["count"][1, one] == 2
    assert t["count"][2].tolist() == [0, 1] + [0] * 36  # an empty word: only the end token
    assert t["order"].tolist() == [[1] * 6 + [0], [1] * 6 + [0], [1] + [0] * 6]
    assert t["edge"][0].tolist() == labels[0] + [EOS, -100]
    assert t["edge"][2].tolist() == [EOS] + [-100] * 6
    # counts are clipped to the counting head's classes, labels to max_len
    long = cppd_targets([[5] * 9], max_len=6, vocab_size=38)
    assert long["count"][0, 5] == 5 and long["order"][0].tolist() == [1.0] * 7


def test_end_token_cut_in_the_cppd_sampler():
    assert cut_at_eos([5, 6, EOS, 7, EOS]) == [5, 6] and cut_at_eos([5, 6]) == [5, 6] and cut_at_eos([EOS, 3]) == []
    net = tiny_net()
    views = ocr_views(net)
    rows = [[5, 6, EOS, 7, 8, 9, EOS], [EOS, 4, 4, 4, 4, 4, 4], [9, 9, 9, 9, 9, 9, 9]]
    fixed = torch.full((3, 7, 38), -5.0)
    for r, row in enumerate(rows):
        fixed[r, torch.arange(7), torch.tensor(row)] = 5.0
    net.cppd_logits = lambda memory: fixed[: memory.shape[0]]
    cfg = DecodeConfig(max_new_tokens=7, eos_token_id=EOS, pad_token_id=0)
    res = get_sampler("cppd").generate({"model": views["cppd"]}, [[EOS]] * 3, cfg, cond=tiny_inputs(3))
    assert res.sequences == [[5, 6, EOS], [EOS], [9] * 7]
    assert res.stats.target_forwards == 1 and res.stats.new_tokens == 3 + 1 + 7
    assert views["cppd"].propose(views["ar"].encode(tiny_inputs(3)))["token_num"].tolist() == [2, 0, 7]


@pytest.mark.parametrize("batch", [1, 4])
def test_speculative_with_cppd_draft_is_greedy_exact_to_ar(batch):
    net = tiny_net(1)
    views = ocr_views(net)
    state = views["ar"].encode(tiny_inputs(batch, seed=3))
    cfg = DecodeConfig(max_new_tokens=7, eos_token_id=EOS, pad_token_id=0)
    ar = get_sampler("ar").generate({"model": views["ar"]}, [[EOS]] * batch, cfg, cond=state)
    spec = get_sampler("speculative", num_draft_tokens=7, schedule="confidence", confidence_threshold=0.01).generate(
        {"model": views["ar"], "draft": CPPDDraftLM(views["cppd"])}, [[EOS]] * batch, cfg, cond=state)
    assert spec.sequences == ar.sequences
    assert spec.stats.target_forwards <= ar.stats.target_forwards


def test_speculative_accepts_a_draft_equal_to_the_ar_reading_in_one_verification():
    net = tiny_net(2)
    views = ocr_views(net)
    state = views["ar"].encode(tiny_inputs(1, seed=5))
    cfg = DecodeConfig(max_new_tokens=7, eos_token_id=EOS, pad_token_id=0)
    ar = get_sampler("ar").generate({"model": views["ar"]}, [[EOS]], cfg, cond=state).sequences[0]
    fixed = torch.full((1, 7, 38), -5.0)
    for k, t in enumerate((ar + [EOS] * 7)[:7]):
        fixed[0, k, t] = 5.0
    net.cppd_logits = lambda memory: fixed
    spec = get_sampler("speculative", num_draft_tokens=7, schedule="confidence", confidence_threshold=0.01).generate(
        {"model": views["ar"], "draft": CPPDDraftLM(views["cppd"])}, [[EOS]], cfg, cond=state)
    assert spec.sequences[0] == ar
    assert spec.stats.target_forwards == 1  # one verification with the prompt (position-indexed draft: no prefill)


def test_rendering_is_seeded_and_held_out_sets_are_disjoint():
    fonts = corpus.find_fonts()
    train_f, held_f = corpus.split_fonts(fonts)
    assert held_f and not set(train_f) & set(held_f)
    a = corpus.render_word("sample", train_f[0], random.Random(3))
    b = corpus.render_word("sample", train_f[0], random.Random(3))
    c = corpus.render_word("sample", train_f[0], random.Random(4))
    assert a.shape == (32, 100) and a.dtype == np.uint8 and np.array_equal(a, b) and not np.array_equal(a, c)
    words = [f"w{i}x{i * 7}" for i in range(400)]
    tr, held = corpus.split_words(words)
    assert held and not set(tr) & set(held) and set(tr) | set(held) == set(words)


def test_build_writes_reproducible_splits(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "vocabulary", lambda: [f"word{c}" for c in "abcdefghijklmnopqrstuvwxyz"] * 1 + ["zz", "yy"])
    m1 = corpus.build(tmp_path / "a", seed=1, n_train=12, n_test=4)
    corpus.build(tmp_path / "b", seed=1, n_train=12, n_test=4)
    assert m1["counts"] == {"train": 12, "test_words": 4, "test_fonts": 4}
    for split in ("train", "test_words", "test_fonts"):
        ia, la = corpus.load_split(tmp_path / "a", split)
        ib, lb = corpus.load_split(tmp_path / "b", split)
        assert np.array_equal(ia, ib) and la == lb and ia.shape == (len(la), 32, 100)
    _, test_words = corpus.load_split(tmp_path / "a", "test_fonts")
    _, train_words = corpus.load_split(tmp_path / "a", "train")
    assert not set(test_words) & set(train_words)


def test_losses_backpropagate_into_every_part():
    net = tiny_net().train()
    parts = net.losses(tiny_inputs(2).input_features, [net.encode_text("ab1"), net.encode_text("zz")])
    assert set(parts) == {"count", "order", "edge", "ar", "loss"} and torch.isfinite(parts["loss"])
    parts["loss"].backward()
    for name in ("encoder.stem.0.weight", "cppd.char_fc.weight", "cppd.pos_fc.weight", "cppd.edge_fc.weight", "ar_out.weight"):
        assert net.get_parameter(name).grad.abs().sum() > 0, name


def test_auxiliary_ctc_loss_trains_the_encoder_and_matches_the_ctc_definition():
    """With ``ctc_weight`` the loss gains the encoder's CTC term: it reaches the encoder, and it is
    the CTC negative log-likelihood of the columns (checked against a brute-force sum over the
    alignments of a 1-character label: every frame path of blanks and that character, collapsing to it)."""
    import dataclasses
    import itertools

    from leapgen.models.ocr import OCRModel

    torch.manual_seed(0)
    base = tiny_net()
    net = OCRModel(dataclasses.replace(base.config, ctc_weight=0.5)).train()
    labels = [net.encode_text("ab1"), net.encode_text("z")]
    parts = net.losses(tiny_inputs(2).input_features, labels)
    assert "ctc" in parts and torch.isfinite(parts["ctc"])
    no_ctc = parts["loss"] - 0.5 * parts["ctc"]
    assert torch.allclose(no_ctc, sum(parts[k] for k in ("count", "order", "edge", "ar")))
    parts["loss"].backward()
    assert net.ctc_head.weight.grad.abs().sum() > 0 and net.encoder.stem[0].weight.grad.abs().sum() > 0
    # brute force on a short column sequence: a 16-px-wide config has 4 columns
    small = OCRModel(dataclasses.replace(base.config, ctc_weight=1.0, width=16)).eval()
    mem = torch.randn(1, 2 * 4, small.config.width2)
    z = small.encode_text("z")
    logp = small.ctc_head(mem.view(1, 2, 4, -1).mean(1)).log_softmax(-1)[0]
    total = torch.tensor(0.0)
    for path in itertools.product([0, z[0]], repeat=4):
        collapsed = [t for i, t in enumerate(path) if t != 0 and (i == 0 or path[i - 1] != t)]
        if collapsed == z:
            total = total + logp[torch.arange(4), torch.tensor(path)].sum().exp()
    assert torch.allclose(small.aux_ctc_loss(mem, [z]), -total.log(), atol=1e-5)


@pytest.fixture(scope="module")
def tiny_pipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ocr")
    OCRPipeline(model=tiny_net(1)).save_pretrained(folder)
    return Pipeline.from_pretrained(folder)


def test_pipeline_inputs_bad_items_and_samplers(tiny_pipe, tmp_path):
    from PIL import Image

    img = Image.fromarray((np.random.default_rng(0).random((40, 120, 3)) * 255).astype(np.uint8))
    img.save(tmp_path / "w.png")
    (tmp_path / "bad.png").write_text("not an image")
    items = [img, str(tmp_path / "w.png"), np.zeros((0, 5)), str(tmp_path / "bad.png"), str(tmp_path / "nope.png"),
             np.asarray(img)]
    out = tiny_pipe(items)
    assert out.texts[0] is not None and out.texts[0] == out.texts[1] == out.texts[5]
    assert [e is None for e in out.errors] == [True, True, False, False, False, True]
    assert "non-empty" in out.errors[2] and "not a readable image" in out.errors[3] and "does not exist" in out.errors[4]
    assert len(out.confidences[0]) == len(out.texts[0]) and all(0 < c <= 1 for c in out.confidences[0])
    assert out.stats.batch_size == 3 and out.stats.target_forwards == 1
    ar = tiny_pipe(items, sampler="ar")
    spec = tiny_pipe(items, sampler="speculative")
    assert ar.texts == spec.texts and spec.stats.target_forwards <= ar.stats.target_forwards
    assert len(ar.confidences[0]) == len(ar.texts[0])
    with pytest.raises(InputError):
        tiny_pipe([])
    odd = tiny_pipe([None, 7, Image.new("RGB", (0, 0)), img])  # not images, an empty picture: each alone
    assert all(odd.errors[:3]) and odd.errors[3] is None and odd.texts[3] == out.texts[0]
    blank = tiny_pipe([Image.new("L", (120, 40), 255), np.full((40, 120), 0.3), img])  # nothing to read: no guess
    assert "blank" in blank.errors[0] and "blank" in blank.errors[1] and blank.texts[:2] == [None, None]
    assert blank.texts[2] == out.texts[0]
    from leapgen.errors import ModelMismatchError

    with pytest.raises(ModelMismatchError):
        tiny_pipe(img, sampler="maskgit")


@pytest.mark.parametrize("kwargs", [dict(batch_size=0), dict(batch_size=-1), dict(batch_size=2.0),
                                    dict(max_new_tokens=0), dict(max_new_tokens=-2)])
def test_bad_batch_size_or_budget_is_refused_not_ignored(tiny_pipe, kwargs):
    """batch_size=-1 used to return every text None with no error, 0 a raw ValueError, and
    max_new_tokens=0 silently fell back to the default budget."""
    img = (np.random.default_rng(0).random((40, 120)) * 255).astype(np.uint8)
    with pytest.raises(InputError, match=next(iter(kwargs))):
        tiny_pipe([img, img], sampler="ar", **kwargs)


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(sampler="gsd"), dict(sampler="lantern")])
def test_a_bad_call_raises_instead_of_failing_every_item(tiny_pipe, kwargs):
    """An error of the call itself (a bad temperature, a sampler this model cannot feed) used to come
    back as the same per-item error on every image."""
    from leapgen.errors import ConfigError

    img = (np.random.default_rng(0).random((40, 120)) * 255).astype(np.uint8)
    with pytest.raises(ConfigError):
        tiny_pipe([img, img], **kwargs)


def test_bench_sample_picture_with_fewer_images_than_its_rows(tmp_path):
    """``leapgen bench ocr --max-images 3`` wrote no sample picture: it was handed 12 images for 3
    labels and the IndexError was swallowed as a warning."""
    from types import SimpleNamespace

    from leapgen.bench.common import machine_info
    from leapgen.bench.recognition import _write_ocr

    labels = ["cat", "dog", "ox"]
    images = np.full((12, 32, 128), 255, dtype=np.uint8)  # what bench_ocr hands it: up to 12 images
    per = {"word_accuracy": 1.0, "cer": 0.0, "target_forwards_per_batch": 1.0}
    split = {"n": len(labels), "samplers": {"cppd": per}, "labels": labels}
    res = {"pipeline": "x", "machine": machine_info(), "splits": {"test_words": split, "test_fonts": split},
           "latency": {"cppd": {"batch1_ms": 1.0, "batch32_ms_per_image": 1.0}}}

    def pipe(batch, sampler):
        return SimpleNamespace(texts=labels[: len(batch)])

    _write_ocr(res, tmp_path, images, pipe)
    assert (tmp_path / "bench_ocr_samples.png").exists() and (tmp_path / "bench_ocr.md").exists()
