"""The offline emoji dataset (leapgen.data.emoji): counts, shapes, classes, names, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from leapgen.data.emoji import (
    CLASS_NAMES,
    DEFAULT_FONT,
    build_emoji_dataset,
    class_counts,
    classify_code_point,
)
from leapgen.errors import AssetNotFoundError

# CI installs the font (`make install-test`); without it these tests fail rather than skip
assert Path(DEFAULT_FONT).is_file(), "the emoji tests need the font: apt-get install fonts-noto-color-emoji"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_emoji_dataset(size=64, cache=tmp_path_factory.mktemp("emoji") / "emoji_64.npz")


def test_shapes_counts_and_classes(dataset):
    n = len(dataset)
    assert n > 1000  # Noto Color Emoji has ~1400 single code points plus ~250 flags
    assert dataset.images.shape == (n, 64, 64, 3) and dataset.images.dtype == torch.uint8
    assert dataset.labels.shape == (n,) and dataset.labels.dtype == torch.long
    assert len(dataset.names) == n and all(isinstance(s, str) and s.strip() for s in dataset.names)
    assert dataset.class_names == CLASS_NAMES
    counts = class_counts(dataset)
    assert all(c >= 50 for c in counts.values()), counts
    assert sum(counts.values()) == n
    assert "red apple" in dataset.names and "grinning face" in dataset.names and "flag: us" in dataset.names
    assert dataset.class_names[dataset.labels[dataset.names.index("red apple")]] == "food"
    assert dataset.class_names[dataset.labels[dataset.names.index("flag: us")]] == "flags"
    assert dataset.class_names[dataset.labels[dataset.names.index("grinning face")]] == "faces"
    # white background, and the images are not blank
    assert (dataset.images[:, 0, 0] > 240).float().mean() > 0.8
    assert dataset.images.float().std(dim=(1, 2, 3)).min() > 5


def test_deterministic_and_cached(dataset, tmp_path):
    again = build_emoji_dataset(size=64, cache=tmp_path / "other.npz")  # fresh render
    assert torch.equal(again.images, dataset.images) and again.names == dataset.names
    assert torch.equal(again.labels, dataset.labels)
    cached = build_emoji_dataset(size=64, cache=tmp_path / "other.npz")  # from the cache file
    assert torch.equal(cached.images, dataset.images) and cached.names == dataset.names


def test_augment(dataset):
    idx = torch.arange(32)
    a = dataset.augment(torch.Generator().manual_seed(0), idx)
    b = dataset.augment(torch.Generator().manual_seed(0), idx)
    c = dataset.augment(torch.Generator().manual_seed(1), idx)
    assert a.shape == (32, 3, 64, 64) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert 0.0 <= float(a.min()) and float(a.max()) <= 1.0
    plain = dataset.as_float(idx)
    diff = (a - plain).abs().mean().item()
    assert 0.0 < diff < 0.25  # small perturbation, not a different image


def test_classify_and_missing_font(tmp_path):
    assert classify_code_point(0x1F34E, "red apple") == "food"
    assert classify_code_point(0x1F436, "dog face") == "animals"
    assert classify_code_point(0x1F680, "rocket") == "travel"
    with pytest.raises(AssetNotFoundError, match="fonts-noto-color-emoji"):
        build_emoji_dataset(font_path=str(tmp_path / "missing.ttf"), cache=tmp_path / "x.npz")


def test_enumeration_without_fonttools_matches(monkeypatch):
    import sys

    import fontTools.ttLib  # noqa: F401  (the image extra installs fonttools)

    from leapgen.data.emoji import enumerate_emoji
    with_ft = enumerate_emoji(DEFAULT_FONT)
    monkeypatch.setitem(sys.modules, "fontTools.ttLib", None)  # `import fontTools.ttLib` now raises ImportError
    without = enumerate_emoji(DEFAULT_FONT)
    assert without == with_ft and len(without) > 1000


def test_training_metrics_tables_of_the_shipped_asset_from_any_directory(tmp_path, monkeypatch):
    """metrics_markdown() read the relative path assets/image-emoji/... and failed outside the repo root."""
    from leapgen.train.image_emoji import metrics_markdown

    monkeypatch.chdir(tmp_path)
    md = metrics_markdown()
    assert "| VQ |" in md and "target GPT" in md
