"""`leapgen train` refuses an option a recipe lacks with a ConfigError that lists the recipe's options,
also for the recipes that take ``**options`` (image-nfig forwards them to image-var's main; image-mar and
image-dd collect the unknown ones), and `leapgen bench image-families` labels its table with the batch
size it ran and leaves the speedups out when `ar` was not run."""

from __future__ import annotations

import pytest

from leapgen.errors import ConfigError


def test_nfig_refuses_unknown_option_and_band_listing_options():
    from leapgen.train.image_var import main_nfig

    with pytest.raises(ConfigError, match=r"image-nfig.*zz_bogus.*--minutes"):
        main_nfig(zz_bogus=1)
    with pytest.raises(ConfigError, match=r"\['band'\]"):  # set by the recipe itself
        main_nfig(band="spatial")


@pytest.mark.parametrize("module,name", [("image_mar", "image-mar"), ("image_dd", "image-dd")])
def test_mar_dd_list_their_options(module, name, tmp_path):
    import importlib

    main = importlib.import_module(f"leapgen.train.{module}").main
    with pytest.raises(ConfigError, match=rf"{name}.*zz_bogus.*its options: --out-dir, --seed"):
        main(out_dir=tmp_path / "x", zz_bogus=1)


def test_cli_train_unknown_option_is_an_error_not_a_traceback(tmp_path, capsys):
    from leapgen.cli import main

    assert main(["train", "image-nfig", "--out", str(tmp_path / "x"), "--zz-bogus", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: recipe 'image-nfig' has no option(s) ['zz_bogus']") and "--batch-size" in err


def test_image_families_markdown_follows_batch_and_missing_ar():
    from leapgen.bench.image_families import format_markdown

    row = {"method": "var", "family": "var", "target_forwards_per_image": 9, "draft_forwards": 0, "other_forwards": 0,
           "wall_s_per_image_b1": 0.4, "wall_s_per_image_b8": 0.3, "fid_emoji": 20.0, "class_accuracy": 0.25,
           "nll_bits_per_image": 2428}
    result = {"settings": {"samples": 2, "batch": 2, "batch1_calls": 1, "cfg_scale": 3.0, "threads": 1},
              "machine": "test", "rows": [row], "skipped": {}}
    md = format_markdown(result)
    assert "wall s/img b2 | speedup b2" in md and "b8" not in md and "batch-2 call" in md
    assert "nan" not in md and "| 0.40 | - | 0.300 | - |" in md
