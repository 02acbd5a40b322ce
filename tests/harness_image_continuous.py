"""Registry-harness benches and checks for the continuous-token image contracts (issue #14).

* ``"mar"``: tiny random MAR target + draft (:class:`~leapgen.models.mar.MARModel`, 4x4 grid of
  4-d tokens, 4 head steps); the draft is the target with perturbed weights, so some drafted tokens
  are accepted and some go through the residual sampler.
* ``"dd"``: a tiny random :class:`~leapgen.models.dd.DDGenerator` (4x4 grid, 16 codes).

Checks: ``lossy`` -> valid outputs (shapes, finite values, statistics that account for every
token); ``distribution-exact`` on ``mar`` -> (1) with the draft a copy of the target every drafted
token is accepted and the output equals ``mar``'s value for value (same seed: the noises are
shared), at temperature 1 and 0; (2) with one-step Gaussian heads the pooled token distribution
of ``cspd`` matches ``mar``'s (mean and std per dimension within 4 standard errors, two-sample KS
below the 0.1 % critical value).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from registry_harness import Bench, generator, runs_validly

from leapgen.models.condition import ClassCondition, Guidance
from leapgen.models.dd import DDConfig, DDGenerator, DDModel
from leapgen.models.mar import MARConfig, MARModel, MARNet
from leapgen.samplers.base import DecodeConfig, SamplerInfo

TINY_MAR = dict(token_dim=4, grid_size=4, dim=32, n_layer=1, n_head=2, num_classes=3, head_width=32, head_depth=1,
                sampling_steps=4, dropout=0.0)


def tiny_mar(seed: int = 0, perturb: float = 0.0, base: MARNet | None = None, **over: Any) -> MARNet:
    """A random tiny MARNet whose head output is not zero; ``perturb`` adds noise to a copy of ``base``."""
    if base is not None:
        net = copy.deepcopy(base)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in net.parameters():
                p.add_(perturb * torch.randn(p.shape, generator=g).to(p.device))
        return net.eval()
    torch.manual_seed(seed)
    net = MARNet(MARConfig(**{**TINY_MAR, **over})).eval()
    with torch.no_grad():
        for p in net.head.out.parameters():
            p.normal_(0, 0.3)
        for blk in net.head.blocks:
            blk.ada[1].weight.normal_(0, 0.1)
    return net


class MARBench(Bench):
    contract = "mar"
    roles = ("model", "draft")
    batches = (1, 3)
    max_new_tokens = 16

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.target = tiny_mar(0).to(device)
        self.draft = tiny_mar(1, perturb=0.05, base=self.target).to(device)

    def models(self) -> dict[str, Any]:
        return {"model": MARModel(self.target), "draft": MARModel(self.draft)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        cond = ClassCondition(labels=torch.arange(batch) % 3, guidance=Guidance(2.0))
        return [[] for _ in range(batch)], cond

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=self.max_new_tokens, temperature=temperature)

    def run(self, name, batch, *, temperature=0.0, seed=0, params=None, models=None):
        if name in ("mar", "cspd"):  # fewer MAR steps than the default 16 (the tiny grid has 16 tokens)
            params = {"num_iter": 6, **(params or {})}
        return super().run(name, batch, temperature=temperature, seed=seed, params=params, models=models)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        v = res.values
        assert tuple(v.shape) == (batch, 16, 4) and bool(torch.isfinite(v).all())
        assert len(res.sequences) == batch and all(len(s) == 64 for s in res.sequences)
        st = res.stats
        assert st.new_tokens == batch * 16 and st.baseline_steps == 16
        assert st.target_forwards == models["model"].forwards > 0
        assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens
        assert 0 <= st.accepted_draft_tokens <= st.drafted_tokens


class DDBench(Bench):
    contract = "dd"
    roles = ("model",)
    batches = (1, 3)
    max_new_tokens = 16

    def __init__(self, device: str) -> None:
        super().__init__(device)
        torch.manual_seed(0)
        self.net = DDGenerator(DDConfig(vocab_size=16, dim=32, n_layer=1, n_head=2, multiple_of=16, num_classes=3,
                                        grid_size=4, noise_dim=4)).eval().to(device)
        with torch.no_grad():
            self.net.output.weight.normal_(0, 0.5)
        self.vocab = 16

    def models(self) -> dict[str, Any]:
        return {"model": DDModel(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[] for _ in range(batch)], ClassCondition(labels=torch.arange(batch) % 3)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        super().assert_valid(res, batch, models)
        assert res.stats.baseline_steps == 16


# ------------------------------------------------------------------------------------------ checks


def cspd_self_draft_is_mar(info: SamplerInfo, b: MARBench) -> None:
    """Draft = a copy of the target: every drafted token accepted, output == mar's (same seed)."""
    for batch in b.batches:
        for temperature in (1.0, 0.0):
            same = {"model": MARModel(b.target), "draft": MARModel(copy.deepcopy(b.target))}
            got = b.run(info.name, batch, temperature=temperature, seed=7, models=same)
            ref = b.run("mar", batch, temperature=temperature, seed=7)
            assert got.stats.drafted_tokens > 0 and got.stats.accepted_draft_tokens == got.stats.drafted_tokens
            assert torch.allclose(got.values, ref.values, atol=1e-5), f"{info.name}: draft == target differs from mar"


def gaussian_head(net: MARNet, seed: int, scale: float = 1.0) -> MARNet:
    """Make ``net``'s head a one-step Gaussian head with a known mean: its eps is the one for which
    the predicted ``x_0`` is ``tanh(z W) * scale`` (``W`` fixed by ``seed``), so with one sampling
    step the token is ``N(tanh(z W) * scale, (1 - abar_999) I)``, a closed-form density."""
    head = net.head
    w = torch.randn(head.cond_dim, head.token_dim, generator=torch.Generator().manual_seed(seed)) / head.cond_dim**0.5
    w = w.to(net.pos.device)

    def eps(x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        ab = head.alpha_bar[t][:, None]
        return (x - ab.sqrt() * torch.tanh(z @ w) * scale) / (1 - ab).sqrt()

    head.eps = eps
    head.sampling_steps = 1
    return net


def cspd_marginal_matches_mar(info: SamplerInfo, b: MARBench, rows: int = 600) -> None:
    """One-step Gaussian heads (closed-form token densities): cspd's token distribution == mar's."""
    target = gaussian_head(tiny_mar(0).to(b.device), 0, 1.0)
    draft = gaussian_head(tiny_mar(0).to(b.device), 1, 0.3)  # same transformer, other mean map
    cond = ClassCondition(labels=torch.zeros(rows, dtype=torch.long), guidance=Guidance(1.0))
    cfg = DecodeConfig(max_new_tokens=16, temperature=1.0)
    from leapgen.samplers import get_sampler

    ours = get_sampler(info.name, num_iter=6, num_draft=3).generate(
        {"model": MARModel(target), "draft": MARModel(draft)}, [[]] * rows, cfg, generator(b.device, 11), cond=cond)
    ref = get_sampler("mar", num_iter=6).generate({"model": MARModel(target)}, [[]] * rows, cfg,
                                                  generator(b.device, 12), cond=cond)
    rate = ours.stats.acceptance_rate
    assert 0.05 < rate < 0.98, f"acceptance {rate:.2f}: the test must exercise both acceptance and the residual"
    a, r = ours.values.reshape(-1, 4).double().cpu(), ref.values.reshape(-1, 4).double().cpu()
    se = np.sqrt(r.var(0).numpy() / len(r) * 2)
    gap = (a.mean(0) - r.mean(0)).abs().numpy()
    assert (gap < 4 * se + 1e-3).all(), f"means differ: {gap} vs 4 s.e. {4 * se}"
    assert ((a.std(0) / r.std(0) - 1).abs() < 0.05).all(), f"stds differ: {a.std(0)} vs {r.std(0)}"
    xa, xr = np.sort(a[:, 0].numpy()), np.sort(r[:, 0].numpy())
    grid = np.concatenate([xa, xr])
    ks = np.abs(np.searchsorted(xa, grid, side="right") / len(xa) - np.searchsorted(xr, grid, side="right") / len(xr)).max()
    # tokens within an image are dependent, so the effective sample size is below len(xa): a 1.95/sqrt(n) bound is lenient
    assert ks < 1.95 * np.sqrt(2 / rows), f"KS distance {ks:.4f}"


BENCHES = {"mar": MARBench, "dd": DDBench}
CHECKS = {
    ("lossy", "mar"): (runs_validly,),
    ("distribution-exact", "mar"): (runs_validly, cspd_self_draft_is_mar, cspd_marginal_matches_mar),
    ("lossy", "dd"): (runs_validly,),
}
