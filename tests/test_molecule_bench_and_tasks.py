"""Molecule bench, the masked engine under the bench's multi-token GenMol settings, and the
molecule pipeline's fragment tasks.

* Engine invariants that ``tests/test_masked_engine.py`` does not already cover: the exact
  multi-token ``genmol`` configurations the bench runs (GenMol scorer + cosine schedule / threshold
  policy, ``noise_anneal="genmol"``) on molecule-shaped rows (``[BOS] fragment . [MASK]*n [EOS]``,
  right-padded): >= 1 token revealed per step, committed tokens never change, given tokens never
  overwritten, step counts as configured, seeded reproducibility at batch 1 and 8. (Temperature 0
  + commit-all = one argmax forward, and the other presets, are covered there.)
* The bench's bookkeeping against a stand-in pipeline with known forwards (speedups, forwards per
  molecule, repeat check, targets), and ``leapgen bench molecule --quick`` on the shipped pipeline
  writing JSON / markdown / PNG with the expected fields.
* Fragment tasks on the shipped ``leapgen/molecule-safe`` pipeline: outputs contain the given
  fragments as substructures (attachment points ``[*]`` turned into query atoms), and bad input
  raises clear errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import rdkit  # noqa: E402,F401  (the molecule extra; `make install-test` installs it)
import torch
from torch import nn

from leapgen.bench import molecule as mb  # noqa: E402
from leapgen.bench import molecule_metrics as mm  # noqa: E402
from leapgen.errors import ConfigError  # noqa: E402
from leapgen.models import TorchMaskedLM  # noqa: E402
from leapgen.samplers.base import DecodeConfig, DecodeStats, get_sampler  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "assets" / "molecule-safe"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

# ============================================================================ engine invariants

V, PAD, BOS, EOS, MASK, DOT = 40, 0, 1, 2, 3, 4


class TinyBidirectional(nn.Module):
    """A random 1-layer bidirectional transformer over a SAFE-like vocabulary (mask inside it)."""

    def __init__(self, seed: int = 0, d: int = 32) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Embedding(96, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(d, V)

    def forward(self, tokens, attention_mask=None):
        h = self.emb(tokens) + self.pos(torch.arange(tokens.shape[1]))[None]
        h = self.enc(h, src_key_padding_mask=None if attention_mask is None else ~attention_mask)
        return 3.0 * self.head(h)


@pytest.fixture(scope="module")
def masked_model():
    return TorchMaskedLM(TinyBidirectional(), mask_id=MASK, vocab_size=V)


@pytest.fixture(scope="module")
def cached_masked_model():
    """A random 1-layer BERT masked LM: it runs on the masked cache (models/bert_cache.py)."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=96, type_vocab_size=1, pad_token_id=PAD)
    model = TorchMaskedLM(BertForMaskedLM(cfg).eval(), mask_id=MASK, vocab_size=V)
    assert model.supports_cache_positions
    return model


def molecule_rows(batch: int, seed: int = 0) -> list[list[int]]:
    """``[BOS] (fragment .) [MASK]*n [EOS]`` rows of different lengths (de novo rows have no fragment)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(batch):
        n = int(torch.randint(12, 40, (1,), generator=g))
        frag = torch.randint(5, V, (int(torch.randint(0, 8, (1,), generator=g)),), generator=g).tolist()
        rows.append([BOS] + (frag + [DOT] if frag and i % 2 else []) + [MASK] * n + [EOS])
    return rows


def bench_masked_configs() -> dict[str, tuple[str, dict]]:
    """The masked entries ``leapgen bench molecule`` runs (and a threshold variant)."""
    out = {}
    for m in mb.default_methods(multi_steps=6, maskgit_steps=5, threshold=-0.7):
        if m.sampler != "ar":
            out[m.label] = (m.sampler, dict(m.params))
    return out


@pytest.mark.parametrize("label", sorted(bench_masked_configs()))
@pytest.mark.parametrize("batch", [1, 8])
def test_bench_masked_configs_keep_the_engine_invariants(masked_model, cached_masked_model, label, batch):
    name, params = bench_masked_configs()[label]
    if "cache" in params:
        masked_model = cached_masked_model
    smp = get_sampler(name, **params, hooks=("trajectory",))
    rows = molecule_rows(batch, seed=batch)
    res = smp.generate(
        {"model": masked_model}, rows, DecodeConfig(temperature=0.5), torch.Generator().manual_seed(3)
    )
    width = max(len(r) for r in rows)
    traj = res.trajectory
    first = traj[0]
    gen = res.generated
    for b, row in enumerate(rows):
        assert first[b, : len(row)].tolist() == row
    for prev, cur in zip(traj, traj[1:]):
        assert torch.equal(cur[~gen], first[~gen]), "a given (BOS/fragment/EOS/pad) token was overwritten"
        was = (prev != MASK) & gen
        assert torch.equal(cur[was], prev[was]), "a committed token changed"
        before, after = ((prev == MASK) & gen).sum(1), ((cur == MASK) & gen).sum(1)
        active = before > 0
        assert bool(((before - after)[active] >= 1).all()), "a step revealed nothing"
    assert not bool((res.tokens[gen] == MASK).any())
    assert [len(s) for s in res.sequences] == [len(r) for r in rows] and res.tokens.shape[1] == width
    n_masks = [r.count(MASK) for r in rows]
    steps = res.stats.target_forwards
    if params.get("schedule") == "cosine" or name == "maskgit":
        assert steps == params["steps"]  # every row has more masks than steps
        for per_step in res.stats.accepted_per_step[:-1]:
            assert all(1 <= k for k in per_step)
    elif params.get("policy") == "threshold":
        assert 1 <= steps <= max(n_masks)
    else:  # GenMol default: one token per step
        assert steps == max(n_masks) and res.stats.step_compression == 1.0
        assert all(k == 1 for per_step in res.stats.accepted_per_step for k in per_step)
    again = smp.generate(
        {"model": masked_model}, rows, DecodeConfig(temperature=0.5), torch.Generator().manual_seed(3)
    )
    assert torch.equal(res.tokens, again.tokens), "seeded decoding did not reproduce"
    other = smp.generate(
        {"model": masked_model}, rows, DecodeConfig(temperature=0.5), torch.Generator().manual_seed(4)
    )
    assert not torch.equal(res.tokens, other.tokens)


def test_multi_token_genmol_uses_far_fewer_forwards_than_one_per_step(masked_model):
    rows = molecule_rows(8)
    one = get_sampler("genmol").generate(
        {"model": masked_model}, rows, DecodeConfig(temperature=0.5), torch.Generator().manual_seed(0)
    )
    multi = get_sampler("genmol", schedule="cosine", steps=6).generate(
        {"model": masked_model}, rows, DecodeConfig(temperature=0.5), torch.Generator().manual_seed(0)
    )
    assert multi.stats.target_forwards == 6 < one.stats.target_forwards == max(r.count(MASK) for r in rows)
    assert multi.stats.step_compression == pytest.approx(one.stats.target_forwards / 6)
    assert multi.stats.new_tokens == one.stats.new_tokens


# ============================================================================ bench bookkeeping

POOL = [
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "Cc1ccc(-c2cc(C(F)(F)F)nn2-c2ccc(S(N)(=O)=O)cc2)cc1",
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",
    "CC(=O)Oc1ccccc1C(=O)O",
    "CC(=O)Nc1ccc(O)cc1",
    "C1CC",
    None,
    "CCOC(=O)N1CCC(=C2c3ccc(Cl)cc3CCc3cccnc32)CC1",
]


@dataclass
class FakeOut:
    smiles: list
    safe: list
    stats: DecodeStats
    valid: list = field(default_factory=list)


class StandInPipeline:
    """Known forwards per batch for each sampler; SMILES cycled from POOL (offset by sampler)."""

    name_or_path = "stand-in"
    forwards_per_batch = {"ar": 40, "genmol": 38, "maskgit": 5}

    def __init__(self, drift: str | None = None) -> None:
        self.calls: list[tuple] = []
        self.drift = drift

    def __call__(self, num_samples, sampler, seed, batch_size, temperature=None, **params):
        self.calls.append((sampler, num_samples, batch_size, temperature, tuple(sorted(params.items()))))
        off = {"ar": 0, "genmol": 1, "maskgit": 2}[sampler] + (
            len(self.calls) if sampler == self.drift else 0
        )
        smiles = [POOL[(i + off) % len(POOL)] for i in range(num_samples)]
        per = params.get("steps", self.forwards_per_batch[sampler])
        n_batches = -(-num_samples // batch_size)
        stats = DecodeStats(
            sampler=sampler,
            batch_size=batch_size,
            target_forwards=per * n_batches,
            baseline_steps=38 * n_batches,
            new_tokens=30 * num_samples,
        )
        return FakeOut(smiles=smiles, safe=list(smiles), stats=stats)


def test_bench_bookkeeping_with_a_stand_in_pipeline(tmp_path):
    pipe = StandInPipeline()
    methods = mb.default_methods(multi_steps=6, maskgit_steps=4)
    res = mb.run_molecule_bench(
        pipe,
        num_samples=20,
        runs=2,
        batch_size=8,
        methods=methods,
        training_set=["CC(=O)Oc1ccccc1C(=O)O"],
        progress=False,
        grid_path=tmp_path / "g.png",
    )
    labels = [m.label for m in methods]
    assert labels == ["ar", "genmol", "genmol[schedule=cosine, steps=6]", "genmol[cache=dkv_delayed, cache_refresh=8]",
                      "genmol[schedule=cosine, steps=6, cache=dkv_delayed, cache_refresh=4]", "maskgit[steps=4]"]
    assert list(res["results"]) == labels
    # 20 samples in batches of 8: 8, 8, 4; each batch timed twice per entry, plus one warm-up batch each
    timed_calls = pipe.calls[len(methods) :]
    assert len(timed_calls) == 2 * 3 * len(methods)
    k = len(methods)
    assert [c[1] for c in timed_calls] == [n for _ in range(2) for n in (8,) * k + (8,) * k + (4,) * k]
    assert {c[2] for c in pipe.calls} == {8}
    # interleaved: the entry order is rotated from batch to batch
    orders = [tuple(c[0] + str(c[4]) for c in timed_calls[i : i + k]) for i in range(0, len(timed_calls), k)]
    assert len(set(orders)) > 1
    ar = res["results"]["ar"]
    for row in res["results"].values():
        assert [len(w) for w in row["batch_walls_s"]] == [2, 2, 2]
        per_batch = [sum(w) / 2 for w in row["batch_walls_s"]]
        assert row["wall_s"] == pytest.approx(sum(per_batch))
        assert row["speedup_vs_ar"] == pytest.approx(ar["wall_s"] / row["wall_s"])
        assert row["molecules_per_s"] == pytest.approx(20 / row["wall_s"])
        assert row["identical_across_runs"] is True
        assert row["num_samples"] == 20
    multi = res["results"]["genmol[schedule=cosine, steps=6]"]
    assert multi["forwards"] == 6 * 3 and multi["forwards_per_batch"] == 6.0
    assert multi["forwards_per_molecule"] == pytest.approx(18 / 20)
    assert multi["step_compression"] == pytest.approx(38 / 6)
    assert res["results"]["genmol"]["forwards"] == 38 * 3
    # metrics computed from the returned SMILES of every batch
    smiles = [POOL[(i + 1) % len(POOL)] for n in (8, 8, 4) for i in range(n)]
    rep = mm.molecule_report(smiles, mm.canonical_set(["CC(=O)Oc1ccccc1C(=O)O"]))
    for k in ("validity", "uniqueness", "novelty", "quality", "diversity"):
        assert res["results"]["genmol"][k] == pytest.approx(rep[k]), k
    assert res["settings"]["multi_entry"] == "genmol[schedule=cosine, steps=6]"
    targets = {t["target"]: t for t in res["targets"]}
    speed = targets["genmol multi-token molecules/s >= 2x ar (same batch size)"]
    assert speed["measured"] == pytest.approx(multi["speedup_vs_ar"]) and speed["met"] == (
        multi["speedup_vs_ar"] >= 2.0
    )
    qual = targets["genmol multi-token quality >= ar's"]
    assert qual["reference"] == pytest.approx(ar["quality"]) and qual["met"] == (
        multi["quality"] >= ar["quality"]
    )
    strict = targets["genmol (one token per step) strict validity >= 0.85"]
    assert strict["measured"] == pytest.approx(res["results"]["genmol"]["strict_validity"])
    # the picture: first 16 valid molecules of the multi-token entry (here fewer exist)
    assert (tmp_path / "g.png").stat().st_size > 1000
    assert res["grid"]["entry"] == "genmol[schedule=cosine, steps=6]" and all(
        s is not None for s in res["grid"]["smiles"]
    )
    md = mb.format_markdown(res)
    assert md.startswith("# Molecule benchmark\n") and "| entry" in md and "## Targets" in md
    for label in labels:
        assert f"| {label}" in md


def test_bench_reports_outputs_that_change_between_runs():
    res = mb.run_molecule_bench(
        StandInPipeline(drift="maskgit"),
        num_samples=8,
        runs=2,
        batch_size=8,
        training_set=None,
        progress=False,
        warmup=False,
    )
    assert res["results"]["maskgit[steps=12]"]["identical_across_runs"] is False
    assert res["results"]["ar"]["identical_across_runs"] is True
    assert res["results"]["ar"]["novelty"] is None
    assert "outputs differed across runs" in mb.format_markdown(res)


def test_bench_rejects_bad_settings():
    pipe = StandInPipeline()
    with pytest.raises(ConfigError, match="num_samples"):
        mb.run_molecule_bench(pipe, num_samples=0)
    with pytest.raises(ConfigError, match="runs"):
        mb.run_molecule_bench(pipe, num_samples=4, runs=0)
    with pytest.raises(ConfigError, match="'ar' baseline"):
        mb.run_molecule_bench(pipe, num_samples=4, methods=[mb.MoleculeMethod("genmol")])
    with pytest.raises(ConfigError, match="duplicate"):
        mb.run_molecule_bench(pipe, num_samples=4, methods=[mb.MoleculeMethod("ar"), mb.MoleculeMethod("ar")])


def test_batch_sweep_reports_every_entry_at_every_batch_size():
    pipe = StandInPipeline()
    methods = mb.default_methods(multi_steps=6, maskgit_steps=4)
    res = mb.run_molecule_bench(
        pipe, num_samples=8, runs=1, batch_size=8, methods=methods, training_set=None, progress=False
    )
    res["batch_sweep"] = mb.run_batch_sweep(pipe, [1, 4], num_samples=4, methods=methods, progress=False)
    assert set(res["batch_sweep"]) == {1, 4}
    one = res["batch_sweep"][1]["results"]
    assert list(one) == [m.label for m in methods]
    assert one["genmol[schedule=cosine, steps=6]"]["forwards_per_batch"] == 6.0
    assert one["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert {c[2] for c in pipe.calls[-(4 + 4 * 4 + 4 + 1 * 4) :]} == {1, 4}
    md = mb.format_markdown(res)
    assert "## Speed at other batch sizes" in md and md.count("genmol[schedule=cosine, steps=6]") >= 3


# ============================================================================ shipped pipeline

#: GenMol's fragment tasks on small drug fragments (attachment points as [*] / [1*])
FRAGMENT_TASKS = {
    "motif": ["[*]c1ccc(F)cc1"],
    "scaffold": ["[*]C1CCN(C(=O)c2ccccc2)CC1"],
    "superstructure": ["c1ccc2[nH]ccc2c1"],
    "linker": ["[*]c1ccccc1", "[1*]C1CCNCC1"],
}


@pytest.fixture(scope="module")
def shipped():
    from leapgen.pipelines import MoleculePipeline

    assert ASSET.is_dir(), (
        f"the shipped molecule assets are missing at {ASSET}; run: leapgen train molecule-safe --out {ASSET}"
    )
    return MoleculePipeline.from_pretrained("leapgen/molecule-safe")


@pytest.mark.parametrize("sampler", ["genmol", "ar"])
@pytest.mark.parametrize("task", sorted(FRAGMENT_TASKS))
def test_fragment_tasks_keep_the_fragments_as_substructures(shipped, task, sampler):
    frags = FRAGMENT_TASKS[task]
    n = 16 if task == "linker" else 8  # one-step linking is the hardest task (GenMol v1: 16.7% valid)
    out = shipped(num_samples=n, task=task, fragments=frags, sampler=sampler, seed=0, batch_size=n)
    assert len(out.smiles) == n
    kept = [s for s in out.smiles if s is not None]
    assert kept, f"{task}: no molecule kept out of {n} ({out.num_filtered} filtered; errors {out.errors[:2]})"
    for s in kept:
        for f in frags:
            # the fragment's real atoms, with a neighbour at every attachment point
            assert mm.contains_fragment(s, f), f"{task}: {s} does not contain {f}"
    # the pipeline's filter removed exactly the valid outputs that an independent check rejects
    lost = [
        s
        for s in out.unfiltered_smiles
        if s is not None and not all(mm.contains_fragment(s, f) for f in frags)
    ]
    assert out.num_filtered == len(lost)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task": "motif", "fragments": ["[*]c1ccc(F)c"]}, "not a valid SMILES"),
        ({"task": "motif", "fragments": ["c1ccc(F)cc1"]}, "no attachment point"),
        ({"task": "linker", "fragments": ["[*]c1ccccc1", "C1CCNCC1"]}, "no attachment point"),
        ({"task": "scaffold", "fragments": []}, "non-empty list"),
        ({"task": "linker", "fragments": ["[*]c1ccccc1"]}, "2 fragment"),
        ({"task": "motif"}, "needs fragments"),
        ({"task": "lead_opt", "molecules": []}, "at least one"),
        ({"task": "lead_opt", "molecules": ["C1CC"]}, "not a valid SMILES"),
        ({"task": "docking"}, "unknown task"),
        ({"num_samples": 0}, "num_samples"),
    ],
)
def test_shipped_pipeline_rejects_bad_input(shipped, kwargs, match):
    from leapgen.errors import InputError

    with pytest.raises(InputError, match=match):
        shipped(**{"num_samples": 2, "seed": 0, **kwargs})


def test_bench_fast_mode_writes_json_markdown_and_png(tmp_path):
    paths = {k: tmp_path / f"bench_molecule.{k}" for k in ("json", "md", "png")}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "leapgen",
            "bench",
            "molecule",
            "--quick",
            "--json",
            str(paths["json"]),
            "--markdown",
            str(paths["md"]),
            "--png",
            str(paths["png"]),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(paths["json"].read_text())
    s = data["settings"]
    assert s["quick"] is True and s["num_samples"] == 8 and s["batch_size"] == 8 and s["runs"] == 1
    assert s["pipeline"] == "leapgen/molecule-safe" and s["training_set"].startswith("MOSES train")
    assert list(data["results"]) == ["ar", "genmol", "genmol[schedule=cosine, steps=4]",
                                     "genmol[cache=dkv_delayed, cache_refresh=8]",
                                     "genmol[schedule=cosine, steps=4, cache=dkv_delayed, cache_refresh=4]", "maskgit[steps=4]"]
    fields = {
        "molecules_per_s",
        "speedup_vs_ar",
        "forwards",
        "forwards_per_molecule",
        "forwards_per_batch",
        "step_compression",
        "validity",
        "strict_validity",
        "uniqueness",
        "novelty",
        "quality",
        "diversity",
        "qed_mean",
        "sa_mean",
        "temperature",
        "identical_across_runs",
        "batch_walls_s",
        "ms_per_forward",
    }
    for label, row in data["results"].items():
        assert fields <= set(row), (label, fields - set(row))
        assert row["num_samples"] == 8 and row["molecules_per_s"] > 0 and 0 <= row["validity"] <= 1
    assert data["results"]["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert data["results"]["ar"]["identical_across_runs"] is None  # one run: nothing to compare
    assert data["results"]["genmol[schedule=cosine, steps=4]"]["forwards_per_batch"] == 4.0
    assert data["results"]["genmol"]["step_compression"] == pytest.approx(1.0)
    assert data["results"]["genmol"]["temperature"] == pytest.approx(0.5)
    assert {t["target"] for t in data["targets"]} == {t[0] for t in mb.TARGETS}
    md = paths["md"].read_text()
    assert md.startswith("# Molecule benchmark\n") and "Machine:" in md and "## Targets" in md
    from PIL import Image

    with Image.open(paths["png"]) as img:
        assert img.format == "PNG" and min(img.size) >= 200
    grid = data["grid"]
    assert grid["smiles"] and len(grid["smiles"]) == len(grid["legends"]) <= 16
    assert data["results"][grid["entry"]]["num_valid"] >= len(grid["smiles"])
    if data["results"]["genmol[schedule=cosine, steps=4]"]["num_valid"]:
        assert grid["entry"] == "genmol[schedule=cosine, steps=4]"


def test_bench_molecule_cli_errors_are_clear():
    res = subprocess.run(
        [sys.executable, "-m", "leapgen", "bench", "molecule", "--quick", "--pipeline", "leapgen/text-code"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 2 and res.stderr.startswith("error:") and "not a molecule pipeline" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "leapgen", "bench", "molecule", "--num-samples", "0"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "--num-samples" in res.stderr


def test_sampling_markdown_follows_the_report():
    """docs/molecules.md's tables are written by sampling_markdown from the report: every entry is a
    row and its figures are the report's."""
    from leapgen.bench.molecule_sampling import sampling_markdown

    rep = {"pipeline": "p", "seed": 0, "batch_size": 4,
           "de_novo": {"ar": {"temperature": 1.0, "validity": 0.5, "strict_validity": 0.25, "uniqueness": 1.0, "novelty": 1.0,
                              "quality": 0.125, "diversity": 0.8, "forwards": 10, "baseline_steps": 20, "wall_s": 1.0,
                              "num_samples": 4}},
           "fragments": {"motif/genmol": {"fragments": ["[*]C"], "decoded": 3, "num_filtered": 1, "validity": 0.75,
                                           "uniqueness": 1.0, "quality": 0.5, "forwards": 7, "wall_s": 2.0}},
           "lead_opt": {"ar": {"start": ["CCO"], "qed_start": [0.4], "qed_best": [0.6], "best": ["CCN"]}}}
    md = sampling_markdown(rep)
    assert "De novo, 4 molecules each" in md
    row = next(line for line in md.splitlines() if line.startswith("| `ar`") and "0.250" in line)
    assert "0.125" in row and "2.00" in row  # quality and compression = baseline steps / forwards
    assert any(line.startswith("| motif") and "0.750" in line for line in md.splitlines())
    assert any("`CCN`" in line and "0.600" in line for line in md.splitlines())
