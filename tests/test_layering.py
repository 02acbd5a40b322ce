"""Layering and size of the code base, as the issue asks (item 6 of issue 10).

* The import-linter contracts of ``pyproject.toml`` (``[tool.importlinter]``) hold: arrows point down
  ``cli > bench | demo | distributed > pipelines > samplers > models > tokenizers > kernels >
  configuration > errors``, never back; ``train``, ``data`` and ``chem`` sit to the side (nothing in
  the stack imports ``train``; ``train`` imports neither ``bench`` nor ``cli``; ``data`` and ``chem``
  import no decoding, pipeline, bench, train or cli code). ``lint-imports`` runs in a subprocess on
  this checkout; its report names every backward import with file and line.
* No module under ``leapgen/`` is longer than :data:`MAX_LINES` lines (the style rule is "about 500";
  the slack keeps the test from failing on a docstring).
* Every package under ``leapgen/`` is listed in ``[tool.setuptools] packages`` (otherwise a
  non-editable install silently leaves it out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "leapgen"
MAX_LINES = 550


def _lint_imports_command() -> list[str]:
    exe = shutil.which("lint-imports")
    if exe is not None:
        return [exe]
    # the console script may be missing from PATH (e.g. a --user install); the module always works
    return [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def test_import_contracts_hold() -> None:
    try:
        import importlinter  # noqa: F401
    except ImportError as err:  # a declared test dependency: fail, do not skip
        raise AssertionError(
            "import-linter is not installed; install the test extra: pip install -e '.[test]'"
        ) from err
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [*_lint_imports_command(), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = res.stdout + res.stderr
    assert res.returncode == 0, "backward imports (import-linter, see [tool.importlinter] in pyproject.toml):\n" + (
        report[report.find("Broken contracts") :] if "Broken contracts" in report else report[-4000:]
    )
    assert "0 broken" in report, report[-2000:]


def _module_lengths() -> dict[str, int]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        with path.open(encoding="utf-8") as f:
            out[path.relative_to(ROOT).as_posix()] = sum(1 for _ in f)
    return out


def test_no_module_is_too_long() -> None:
    lengths = _module_lengths()
    assert lengths, f"no modules found under {PACKAGE}"
    offenders = sorted(((n, p) for p, n in lengths.items() if n > MAX_LINES), reverse=True)
    assert not offenders, (
        f"{len(offenders)} module(s) longer than {MAX_LINES} lines; split them by responsibility:\n"
        + "\n".join(f"  {p}: {n} lines" for n, p in offenders)
    )


def _listed_packages() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return set(tomllib.loads(text)["tool"]["setuptools"]["packages"])


def test_every_package_is_listed_in_pyproject() -> None:
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(found - _listed_packages())
    assert not missing, (
        "packages missing from [tool.setuptools] packages in pyproject.toml (a non-editable install would "
        f"leave them out): {', '.join(missing)}"
    )
    stale = sorted(n for n in _listed_packages() if re.match(r"leapgen(\.|$)", n) and n not in found)
    assert not stale, f"pyproject.toml lists packages that do not exist: {', '.join(stale)}"
