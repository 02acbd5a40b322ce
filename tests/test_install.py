"""A non-editable install carries the shipped assets and loads them without network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_non_editable_install_loads_shipped_asset(tmp_path: Path) -> None:
    assert (ROOT / "assets" / "text-code" / "model_index.json").is_file(), (
        "assets/text-code is missing; build it with `leapgen train text-code`"
    )
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "--target", str(target), str(ROOT)],
        check=True,
        cwd=tmp_path,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    code = (
        "import leapgen, leapgen_assets, pathlib;"
        "from leapgen import Pipeline;"
        "p = Pipeline.from_pretrained('leapgen/text-code');"
        f"assert str(pathlib.Path(leapgen.__file__).resolve()).startswith({str(target.resolve())!r}), leapgen.__file__;"
        "out = p('def f(x):', max_new_tokens=8);"
        "print(len(out.token_ids[0]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "8"
