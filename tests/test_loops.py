"""The proposer / acceptance split: compositions, the loops' ownership of the caches, the
valid-id rule, registry discovery and declared contracts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import leapgen.samplers as samplers_pkg
from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers
from leapgen.samplers.lantern import Relaxed
from leapgen.samplers.loops.chain import ChainSampler
from leapgen.samplers.loops.tree import TreeLoopSampler
from leapgen.samplers.proposers.base import ChainProposal, Proposer, prune_invalid, valid_prefix
from leapgen.samplers.sjd import SJD

ROOT = Path(samplers_pkg.__file__).parent
PROMPTS = [[5, 17, 3], [1, 2], [40, 40, 7, 8], [33]]


class SJDLantern(SJD):
    """Test-only composition: SJD's Jacobi proposer with LANTERN's relaxed acceptance."""

    name = "sjd_lantern"
    defaults = {**SJD.defaults, "k": 20, "delta": 0.0, "rule": "lantern", "lam": 5.0}
    acceptance = Relaxed


def _run(smp, model, config, seed, grid=None):
    lm = HFCausalLM(model)
    lm.grid = grid
    return smp.generate({"model": lm}, PROMPTS, config, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cfg", [dict(temperature=1.0), dict(temperature=1.0, top_k=8), dict(temperature=0.0)])
@pytest.mark.parametrize("grid", [None, (4, 6)])
def test_lantern_relaxation_inside_sjd_with_delta_zero_is_sjd(target_model, cfg, grid):
    config = DecodeConfig(max_new_tokens=24, **cfg)
    for init in ("random", "repeat_horizon"):
        ref = _run(get_sampler("sjd", init=init), target_model, config, 7, grid)
        mix = _run(SJDLantern(init=init, delta=0.0), target_model, config, 7, grid)
        assert mix.sequences == ref.sequences
        assert mix.token_steps == ref.token_steps
        assert mix.stats.accepted_per_step == ref.stats.accepted_per_step


def test_lantern_relaxation_inside_sjd_accepts_more(target_model):
    config = DecodeConfig(max_new_tokens=24, temperature=1.0)
    exact = relaxed = 0
    for seed in range(4):
        exact += _run(get_sampler("sjd"), target_model, config, seed).stats.accepted_draft_tokens
        relaxed += _run(SJDLantern(delta=0.3), target_model, config, seed).stats.accepted_draft_tokens
    assert relaxed > exact


class _EchoCondIds(Proposer):
    """Drafts that run into ids outside the vocabulary (as condition ids once did)."""

    def propose(self) -> ChainProposal:
        v = self.vocab_size
        return ChainProposal(tokens=[[1, 2, v + 3, 4] for _ in self.run.target.active])


class _Echo(ChainSampler):
    name = "echo"
    defaults: dict = {}
    proposer = _EchoCondIds


def test_the_loop_cuts_drafts_at_the_first_invalid_id(target_model):
    config = DecodeConfig(max_new_tokens=6)
    res = _Echo().generate({"model": HFCausalLM(target_model)}, PROMPTS, config)
    ar = get_sampler("ar").generate({"model": HFCausalLM(target_model)}, PROMPTS, config)
    assert res.sequences == ar.sequences
    assert res.stats.drafted_tokens == 2 * len(PROMPTS) * res.stats.target_forwards


def test_valid_id_rule():
    assert valid_prefix([3, 4, 99, 5], 10) == [3, 4]
    assert valid_prefix([-1, 4], 10) == []
    tok, par = prune_invalid([7, 1, 99, 2, 3], [-1, 0, 0, 2, 1], 10)
    assert tok == [7, 1, 3] and par == [-1, 0, 1]  # node 2 (99) goes with its child (2)


ROLLBACK_CALLS = {"keep", "keep_path", "keep_new", "crop", "select"}
OWNERS = {"loops/chain.py", "loops/tree.py", "runtime.py"}


def test_only_the_loops_roll_caches_back():
    """Proposers and samplers never commit or roll back a cache: the two loops (through the
    Runner of runtime.py) alone do."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("masked/") or rel in OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ROLLBACK_CALLS:
                bad.append(f"{rel}:{node.lineno} .{node.func.attr}(...)")
    assert not bad, bad


def test_every_speculative_family_sampler_is_a_proposer_plus_a_rule():
    """Every sampler that accelerates an autoregressive (causal or encoder-decoder) model is a
    proposer plus an acceptance rule on the two loops; ``ar`` too. Other baselines (beam search)
    and samplers of other model contracts (masked, non-autoregressive families) have their own loops."""
    for info in list_samplers():
        if not {"causal", "encoder-decoder"} & set(info.contracts):
            continue
        if info.family == "baseline" and info.name != "ar":
            continue
        assert issubclass(info.cls, (ChainSampler, TreeLoopSampler)), info.name
        assert issubclass(info.cls.proposer, Proposer), info.name


def test_registry_discovers_modules_and_declares_contracts():
    import leapgen.samplers.base as base

    assert not hasattr(base, "_BUILTIN_MODULES")
    src = Path(base.__file__).read_text()
    assert "pkgutil.walk_packages" in src
    infos = {i.name: i for i in list_samplers()}
    # every module under leapgen/samplers that registers a sampler is found without a list
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "register_sampler"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                assert node.args[0].value in infos, f"{path.name}: {node.args[0].value} not discovered"
    from leapgen.samplers.base import CONTRACTS

    for info in infos.values():
        assert info.contracts and set(info.contracts) <= set(CONTRACTS), info.name
        # the generic masked contract is the masked family's (a family contract such as an audio
        # codebook model's may also belong to the masked family)
        assert "masked" not in info.contracts or info.family == "masked", info.name
        assert info.cls.contracts == info.contracts


def test_samplers_keep_no_state_between_calls(target_model, draft_far):
    """A second call with other settings gives what a fresh sampler gives."""
    lms = {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}
    for name, params in (("lantern", {"k": 20}), ("gsd", {}), ("lookahead", {}), ("speculative", {"schedule": "heuristic"})):
        smp = get_sampler(name, **params)
        smp.generate(lms, PROMPTS, DecodeConfig(max_new_tokens=10, temperature=1.0), torch.Generator().manual_seed(1))
        cfg = DecodeConfig(max_new_tokens=12, temperature=0.7, top_k=5)
        again = smp.generate(lms, PROMPTS, cfg, torch.Generator().manual_seed(2))
        fresh = get_sampler(name, **params).generate(
            {"model": HFCausalLM(target_model), "draft": HFCausalLM(draft_far)}, PROMPTS, cfg,
            torch.Generator().manual_seed(2),
        )
        assert again.sequences == fresh.sequences, name
        assert again.stats.accepted_per_step == fresh.stats.accepted_per_step, name
