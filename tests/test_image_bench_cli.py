"""``leapgen bench image`` (fast mode) and ``leapgen generate image`` on a tiny randomly initialised
image pipeline saved to a temporary folder (with a random feature classifier beside it), plus the
bench on the shipped ``leapgen/image-emoji`` assets when they are installed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from leapgen.cli import main

CLASSES = ("faces", "animals", "food")


@pytest.fixture(scope="module")
def tiny_pipe_dir(tmp_path_factory):
    from leapgen.bench.image_metrics import EmojiFeatureClassifier
    from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
    from leapgen.pipelines.image import ImageARPipeline
    from leapgen.tokenizers.vq_image import VQConfig, VQModel

    torch.manual_seed(0)
    vq = VQModel(VQConfig(codebook_size=16, codebook_embed_dim=4, ch=8, ch_mult=(1, 2), z_channels=8,
                          norm_groups=4, image_size=8)).eval()
    gcfg = dict(vocab_size=16, n_head=2, multiple_of=16, num_classes=len(CLASSES), class_names=CLASSES, grid_size=4,
                token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0)
    model = LlamaGenGPT(GPTConfig(dim=32, n_layer=2, **gcfg)).eval()
    draft = LlamaGenGPT(GPTConfig(dim=16, n_layer=1, **gcfg)).eval()
    with torch.no_grad():  # the reference zero-initialises the head: give it random, fairly peaky logits
        model.output.weight.normal_(0.0, 0.5)
        draft.output.weight.copy_(model.output.weight[:, :16] * 1.2)
    pipe = ImageARPipeline(vq=vq, model=model, draft=draft)
    folder = tmp_path_factory.mktemp("tiny-image")
    pipe.save_pretrained(folder)
    clf = EmojiFeatureClassifier(len(CLASSES), channels=(4, 8, 8, 8), feature_dim=6, class_names=CLASSES).eval()
    clf.save_pretrained(folder / "feature_classifier", metrics={"heldout_accuracy": float("nan")})
    return folder


@pytest.fixture()
def reference_stub(monkeypatch):
    """Reference images for the tiny pipeline: random 8x8 images instead of the emoji dataset."""
    import leapgen.bench.image as bench_image

    g = np.random.default_rng(0)
    refs = torch.from_numpy(g.integers(0, 256, (24, 8, 8, 3), dtype=np.uint8))
    monkeypatch.setattr(bench_image, "reference_images_for", lambda pipe: refs)
    return refs


def test_bench_image_fast_mode(tiny_pipe_dir, reference_stub, tmp_path, capsys) -> None:
    js, md, pngs = tmp_path / "b.json", tmp_path / "b.md", tmp_path / "png"
    rc = main([
        "bench", "image", "--pipeline", str(tiny_pipe_dir), "--runs", "2", "--samples", "4", "--batch-size", "2",
        "--samplers", "speculative,sjd,gsd,lantern,not_a_sampler", "--exclude", "spec_tree", "--cfg-scale", "2.0",
        "--json", str(js), "--markdown", str(md), "--png-dir", str(pngs),
    ])
    assert rc == 0
    res = json.loads(js.read_text())
    st = res["settings"]
    assert (st["runs"], st["samples"], st["batch_size"], st["cfg_scale"], st["temperature"]) == (2, 4, 2, 2.0, 1.0)
    rows = res["results"]
    assert rows, "no entries ran"
    assert list(rows)[0] == "ar"
    skipped = {s["sampler"]: s["reason"] for s in res["skipped"]}
    assert skipped["not_a_sampler"] == "not registered"
    assert skipped["spec_tree"] == "excluded by --exclude"
    for name in ("speculative", "sjd", "gsd", "lantern"):
        assert name in rows, (name, skipped.get(name))
    # the parallel samplers need fewer target forwards than ar on the same prompts and seeds
    assert rows["sjd"]["target_forwards"] < rows["ar"]["target_forwards"]
    assert rows["speculative"]["draft_forwards"] > 0
    ar = rows["ar"]
    # 2 runs x 4 samples of 16 tokens; ar: one forward per token per batch (prefill produces the first)
    assert ar["images"] == 8 and ar["new_tokens"] == 8 * 16
    assert ar["step_compression"] == pytest.approx(1.0)
    assert ar["mean_accepted"] == pytest.approx(1.0)
    assert ar["speedup_vs_ar"] == pytest.approx(1.0)
    for row in rows.values():
        assert row["forward_counter_agrees"], row["name"]
        assert row["new_tokens"] == 8 * 16
        assert row["target_forwards"] == row["calls"] * row["target_forwards_per_call"]
        assert row["step_compression"] == pytest.approx(row["ar_steps"] / row["target_forwards"])
        assert len(row["fid_runs"]) == 2 and all(f >= 0 for f in row["fid_runs"])
        assert 0.0 <= row["class_accuracy"] <= 1.0
        assert np.isfinite(row["mean_nll"]) and row["mean_nll"] > 0
        assert len(row["decode_s_runs"]) == 2 and row["decode_s"] > 0
    # lantern at the delta
    assert rows["lantern"]["params"] == {"delta": 0.1}
    assert np.isfinite(res["noise"]["fid_noise_ar"])
    assert res["classifier"]["feature_dim"] == 6
    text = md.read_text()
    assert text.startswith("# Image benchmark\n")
    assert "FID (emoji features)" in text and "cfg_scale=2.0" in text and "temperature=1.0" in text
    assert "skipped: not registered" in text
    for name in rows:
        img = Image.open(pngs / f"image_samples_{name}.png")
        assert img.size[0] > 16 and img.size[1] > 16
    assert Image.open(pngs / "image_acceptance_maps.png").size[0] > 16
    assert "| ar " in capsys.readouterr().out


def test_bench_image_speed_report(tiny_pipe_dir, reference_stub, tmp_path, capsys) -> None:
    js, png = tmp_path / "s.json", tmp_path / "speedup.png"
    rc = main([
        "bench", "image", "--pipeline", str(tiny_pipe_dir), "--runs", "1", "--samples", "2", "--batch-size", "2",
        "--samplers", "speculative,sjd,spec_tree", "--compare-schedules", "--sweep-batch-sizes", "1,2",
        "--plot-batch-sweep", str(png), "--json", str(js), "--device", "cpu",
    ])
    assert rc == 0
    res = json.loads(js.read_text())
    rows = res["results"]
    for row in rows.values():
        assert row["efficiency"] == pytest.approx(row["speedup_vs_ar"] / row["step_compression"])
    assert "speculative[schedule=heuristic]" in rows and rows["speculative[schedule=heuristic]"]["params"] == {
        "schedule": "heuristic"
    }
    assert {s["sampler"] for s in res["schedules"]} == {"speculative", "spec_tree"}
    cost = res["draft_cost"]
    assert "ar" not in cost and cost["speculative"]["draft_forwards"] > 0 and cost["sjd"]["draft_forwards"] == 0
    assert set(res["batch_sweep"]["rows"]) == {"ar", "speculative", "sjd"}
    assert Image.open(png).size[0] > 200
    out = capsys.readouterr().out
    assert "device cpu" in out and "efficiency" in out and "draft fwd / accepted" in out


def test_bench_image_errors(tiny_pipe_dir, reference_stub, capsys) -> None:
    assert main(["bench", "image", "--pipeline", str(tiny_pipe_dir), "--samples", "1"]) == 2
    assert "--samples" in capsys.readouterr().err
    assert main(["bench", "image", "--pipeline", "leapgen/text-code", "--quick"]) == 2
    assert "not an image pipeline" in capsys.readouterr().err


def test_generate_image_writes_pngs_and_maps(tiny_pipe_dir, tmp_path, capsys) -> None:
    out = tmp_path / "gen"
    rc = main([
        "generate", "image", "food", "--pipeline", str(tiny_pipe_dir), "--sampler", "ar,sjd",
        "--num-images", "2", "--seed", "3", "--out", str(out), "--save-map", "--cfg-scale", "1.5",
    ])
    assert rc == 0
    printed = capsys.readouterr().out
    for s in ("ar", "sjd"):
        assert f"--- {s} ---" in printed
        for i in range(2):
            img = Image.open(out / f"food_{s}_{i}.png")
            assert img.size == (8, 8)
            assert Image.open(out / f"food_{s}_{i}_map.png").size[0] >= 8
    assert printed.count("step_compression=") == 2
    # same seed, same sampler: same image
    rc = main(["generate", "image", "food", "--pipeline", str(tiny_pipe_dir), "--seed", "3", "--num-images", "2",
               "--out", str(tmp_path / "again"), "--cfg-scale", "1.5"])
    assert rc == 0
    assert np.array_equal(np.asarray(Image.open(out / "food_ar_0.png")),
                          np.asarray(Image.open(tmp_path / "again" / "food_ar_0.png")))


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["not-a-class"], "unknown class"),
        (["food", "--sampler", "nope"], "unknown sampler"),
        (["food", "--num-images", "0"], "--num-images"),
        (["food", "--cfg-scale", "-1"], "cfg_scale"),
        (["food", "--sampler", ""], "--sampler"),
    ],
)
def test_generate_image_bad_input(tiny_pipe_dir, tmp_path, capsys, argv, msg) -> None:
    rc = main(["generate", "image", *argv, "--pipeline", str(tiny_pipe_dir), "--out", str(tmp_path / "x")])
    assert rc == 2
    assert msg in capsys.readouterr().err
    assert not list((tmp_path / "x").glob("*.png")) if (tmp_path / "x").exists() else True


def test_generate_image_out_is_a_file(tiny_pipe_dir, tmp_path, capsys) -> None:
    f = tmp_path / "file.png"
    f.write_bytes(b"")
    assert main(["generate", "image", "food", "--pipeline", str(tiny_pipe_dir), "--out", str(f)]) == 2
    assert "not a folder" in capsys.readouterr().err


def _shipped() -> bool:
    from leapgen.pipelines.base import list_shipped

    return "leapgen/image-emoji" in list_shipped()


def test_bench_image_on_shipped_assets(tmp_path) -> None:
    assert _shipped(), "leapgen/image-emoji is missing (build it with leapgen train image-emoji)"
    js = tmp_path / "b.json"
    assert main(["bench", "image", "--quick", "--batch-size", "4", "--samplers", "sjd", "--json", str(js)]) == 0
    res = json.loads(js.read_text())
    assert set(res["results"]) == {"ar", "sjd"}
    assert res["results"]["ar"]["new_tokens"] == 4 * 256
    assert res["reference_images"] > 1000
    assert res["classifier"]["metrics"]["heldout_accuracy"] > 1.5 / len(res["classifier"]["class_names"])


def test_bench_image_entries_take_parameters(tiny_pipe_dir) -> None:
    from leapgen import Pipeline
    from leapgen.bench.image import select_entries
    from leapgen.errors import ConfigError

    pipe = Pipeline.from_pretrained(str(tiny_pipe_dir))
    entries, skipped = select_entries(pipe, ["sjd", "sjd[window=4]", "lantern", "lantern[k=500]",
                                             "lantern[delta=0.2]", "nope[x=1]"])
    by = {e.name: e for e in entries}
    # the bench's own lantern setting (delta 0.1) holds unless the entry gives its own
    assert by["lantern[k=500]"].params == {"delta": 0.1, "k": 500}
    assert by["lantern[delta=0.2]"].params == {"delta": 0.2}
    assert by["sjd[window=4]"].sampler == "sjd" and by["sjd[window=4]"].params == {"window": 4}
    assert by["sjd"].params == {} and by["lantern"].params == {"delta": 0.1}
    assert {"sampler": "nope[x=1]", "reason": "not registered"} in skipped
    with pytest.raises(ConfigError, match="no parameter"):
        select_entries(pipe, ["sjd[windw=4]"])
