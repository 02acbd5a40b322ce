"""`leapgen generate molecule`: SMILES per sample (or the reason it is not a molecule), one stats
line per sampler, the optional RDKit grid, and clear errors for bad input."""

from __future__ import annotations

from test_cli_bench import run_cli


def test_generate_molecule_prints_smiles_stats_and_png(tmp_path) -> None:
    png = tmp_path / "mols.png"
    res = run_cli("generate", "molecule", "--num-samples", "4", "--sampler", "genmol,ar", "--seed", "0", "--png", str(png))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "--- genmol (de_novo) ---" in out and "--- ar (de_novo) ---" in out
    assert out.count("sampler=") == 2 and out.count("valid ") == 2
    lines = [ln for ln in out.splitlines() if ln[:3].strip().isdigit()]
    assert len(lines) == 8  # one line per sample and sampler
    written = [p for p in tmp_path.iterdir() if p.suffix == ".png"]
    assert written and all(p.stat().st_size > 0 for p in written)


def test_generate_molecule_bad_input_is_a_clear_error() -> None:
    res = run_cli("generate", "molecule", "--task", "linker", "--fragments", "CCO", "--num-samples", "2")
    assert res.returncode == 2
    assert "takes 2 fragment(s)" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("generate", "molecule", "--sampler", "nope")
    assert res.returncode == 2 and "unknown sampler" in res.stderr
