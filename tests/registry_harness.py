"""The registry-driven test harness: what every registered sampler is tested with, on every model
contract it declares, with no hand-written list of samplers.

* :data:`BENCHES`: one tiny random test bench per model contract (``causal``: the tiny Llama target
  and draft of ``conftest.py``; ``encoder-decoder``: the tiny Bart / T5 / Whisper of
  ``test_encoder_decoder.py``; ``masked``: a tiny random bidirectional LM of ``test_masked_state.py``
  behind :class:`~leapgen.models.TorchMaskedLM`), each built per device and offering the model
  roles a sampler may need (``Bench.roles``).
* :data:`CHECKS`: ``(guarantee, contract) -> checks`` (the test of a declared guarantee):
  ``greedy-exact``: token identity with greedy decoding at batch 1 and a larger batch;
  ``distribution-exact``: that, plus enumeration exactness on a tiny model (``exact_joint`` and
  ``tv_bound`` of ``test_distribution.py``, its sample sizes); ``bounded``: the sampler states its
  per-step bound (:meth:`~leapgen.samplers.base.Sampler.step_bound`), acceptance rules report what
  they test drafts against (:func:`~leapgen.samplers.guarantees.report_verification`), and the
  measured bound holds at every verification; ``lossy``: the sampler runs and returns valid
  outputs (every position filled, ids in range) with consistent statistics.
* :func:`coverage_problems`: why a registered sampler would go untested (a contract without a
  bench, a guarantee without a check on it, a model role no bench provides, a bounded sampler
  without a stated bound, a ``reduces_to`` naming no registered sampler). The meta-test fails on
  any, so registering a sampler without its test is impossible.

``tests/test_registry_guarantees.py`` parametrises all of it over the registry and over devices:
the CUDA variants carry the ``gpu`` marker (``pytest -m gpu``) and skip with a visible reason when
no CUDA device is present. Everything is float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from conftest import VOCAB, make_llama, perturbed_copy
from test_distribution import BATCH, N_SAMPLES, Setup, exact_joint, tv, tv_bound
from test_encoder_decoder import BUILD as ENCDEC_BUILD
from test_encoder_decoder import SRC, SRC_MASK, _TeacherForced, tiny_pair
from test_greedy_identity import NEW, PROMPTS_1, PROMPTS_4
from test_masked_state import MASK, TinyBidirLM
from test_masked_state import V as MASKED_VOCAB

from leapgen.models import HFCausalLM, TorchMaskedLM
from leapgen.models.condition import EncoderInputs
from leapgen.models.hf_seq2seq import HFSeq2SeqLM
from leapgen.samplers import DecodeConfig, SamplerInfo, get_sampler, list_samplers, sampler_info
from leapgen.samplers.base import CONTRACTS, GUARANTEES
from leapgen.samplers.guarantees import observe_verification

CUDA_REASON = "no CUDA device: torch.cuda.is_available() is False, so the gpu variant of this test cannot run here"
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=CUDA_REASON)]),
]


def generator(device: str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def on(device: str, module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in float32 on ``device``: the CPU module itself, elsewhere a copy (a transformers
    model is rebuilt from its config and weights, so adapter hooks installed on the CPU module, which
    close over it, are not copied along)."""
    import copy

    if device == "cpu":
        return module
    config = getattr(module, "config", None)
    if config is not None and hasattr(type(module), "_from_config"):
        clone = type(module)(config).eval()
        clone.load_state_dict(module.state_dict())
    else:
        clone = copy.deepcopy(module)
    return clone.to(device=device, dtype=torch.float32)


# ------------------------------------------------------------------------------------------ benches


class Bench:
    """Tiny random models of one contract on one device, and how a sampler is run on them."""

    contract: str
    #: the model roles (``needs``) this bench provides
    roles: tuple[str, ...] = ("model",)
    #: the two batch sizes every check uses (batch 1 and a batch of rows of different lengths)
    batches: tuple[int, int] = (1, 4)
    max_new_tokens: int = NEW
    vocab: int

    def __init__(self, device: str) -> None:
        self.device = device

    def models(self) -> dict[str, Any]:
        """Fresh adapters (forward counters at 0) for every role."""
        raise NotImplementedError

    def inputs(self, batch: int) -> tuple[Any, Any]:
        """``(inputs, cond)`` of a batch."""
        raise NotImplementedError

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=self.max_new_tokens, temperature=temperature, pad_token_id=0)

    def run(self, name: str, batch: int, *, temperature: float = 0.0, seed: int = 0,
            params: dict[str, Any] | None = None, models: dict[str, Any] | None = None):
        smp = get_sampler(name, **(params or {}))
        inputs, cond = self.inputs(batch)
        models = self.models() if models is None else models
        return smp.generate(models, inputs, self.config(temperature), generator(self.device, seed), cond=cond)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        """Every position filled with an id in range, and statistics that account for every token."""
        assert len(res.sequences) == batch
        for s in res.sequences:
            assert len(s) == self.max_new_tokens, "every row must generate max_new_tokens (no eos is set)"
            assert all(0 <= t < self.vocab for t in s), f"token ids out of [0, {self.vocab}): {s}"
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == sum(len(s) for s in res.sequences)
        assert st.target_forwards == models["model"].forwards > 0
        assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens
        assert 0 <= st.accepted_draft_tokens <= st.drafted_tokens


class CausalBench(Bench):
    """The tiny random Llama of conftest (vocabulary 48) with a close and an unrelated draft."""

    contract = "causal"
    roles = ("model", "draft")
    vocab = VOCAB

    def __init__(self, device: str) -> None:
        super().__init__(device)
        target = make_llama(VOCAB, seed=1)  # conftest's target_model
        self.target = on(device, target)
        self.draft = on(device, perturbed_copy(target, noise=0.1, seed=2))  # draft_close
        self.far = on(device, make_llama(VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, seed=3))

    def models(self, far: bool = False) -> dict[str, Any]:
        return {"model": HFCausalLM(self.target), "draft": HFCausalLM(self.far if far else self.draft)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [list(p) for p in (PROMPTS_1 if batch == 1 else PROMPTS_4[:batch])], None


class EncDecBench(Bench):
    """transformers' Bart (learned positions) as the encoder-decoder target and draft; the
    greedy check also runs T5 (relative bias) and Whisper (input features)."""

    contract = "encoder-decoder"
    roles = ("model", "draft")
    batches = (1, 3)
    max_new_tokens = 10
    vocab = 64
    archs = tuple(sorted(ENCDEC_BUILD))

    @functools.cache  # noqa: B019 - benches are cached per device for the session
    def pair(self, arch: str = "bart") -> tuple[HFSeq2SeqLM, HFSeq2SeqLM]:
        return (HFSeq2SeqLM(on(self.device, ENCDEC_BUILD[arch](0))), HFSeq2SeqLM(on(self.device, ENCDEC_BUILD[arch](1))))

    def models(self, arch: str = "bart") -> dict[str, Any]:
        target, draft = self.pair(arch)
        return {"model": HFSeq2SeqLM(target.model), "draft": HFSeq2SeqLM(draft.model)}

    def source(self, arch: str, rows: list[int]) -> EncoderInputs:
        if arch == "whisper":
            feats = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(0))
            return EncoderInputs(input_features=feats[rows].to(self.device))
        return EncoderInputs(input_ids=SRC[rows].to(self.device), attention_mask=SRC_MASK[rows].to(self.device))

    def inputs(self, batch: int, arch: str = "bart") -> tuple[Any, Any]:
        return [self.pair(arch)[0].start_ids() for _ in range(batch)], self.source(arch, list(range(batch)))

    def run_arch(self, name: str, arch: str, batch: int, temperature: float = 0.0):
        smp = get_sampler(name)
        inputs, cond = self.inputs(batch, arch)
        return smp.generate(self.models(arch), inputs, self.config(temperature), generator(self.device, 0), cond=cond)

    @functools.cache  # noqa: B019
    def reference(self, arch: str, row: int) -> list[int]:
        """transformers' greedy continuation of one source (no cache: the full decoder every step)."""
        model = self.pair(arch)[0].model
        src = self.source(arch, [row])
        seq = list(self.pair(arch)[0].start_ids())
        n0 = len(seq)
        if src.input_features is not None:
            enc = {"input_features": src.input_features}
        else:
            n = int(src.attention_mask.sum())
            enc = {"input_ids": src.input_ids[:, :n], "attention_mask": src.attention_mask[:, :n]}
        with torch.no_grad():
            for _ in range(self.max_new_tokens):
                logits = model(**enc, decoder_input_ids=torch.tensor([seq], device=self.device)).logits
                seq.append(int(logits[0, -1].argmax()))
        return seq[n0:]


class MaskedBench(Bench):
    """A tiny random 2-layer bidirectional LM (vocabulary 24, mask id 24) behind TorchMaskedLM;
    rows of 12 positions with a known prefix and masks after it."""

    contract = "masked"
    roles = ("model",)
    batches = (1, 3)
    vocab = MASKED_VOCAB
    length = 12

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.module = on(device, TinyBidirLM(seed=0))

    def models(self) -> dict[str, Any]:
        return {"model": TorchMaskedLM(self.module, mask_id=MASK, vocab_size=MASKED_VOCAB)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        rows = torch.full((batch, self.length), MASK, dtype=torch.long)
        for b in range(batch):
            rows[b, : 2 + b] = torch.arange(2 + b) * 5 % MASKED_VOCAB  # known prefixes of different lengths
        return rows.to(self.device), None

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        tokens, _ = self.inputs(batch)
        known = tokens != MASK
        out = res.tokens
        assert out.shape == tokens.shape
        assert torch.equal(out[known], tokens[known]), "a known position changed"
        assert bool(((out >= 0) & (out < self.vocab)).all()), "a masked position was left or is out of range"
        assert torch.equal(res.generated.to(known.device), ~known)
        st = res.stats
        assert st.new_tokens == int((~known).sum()) and st.target_forwards == models["model"].forwards > 0
        assert [len(s) for s in res.sequences] == [self.length] * batch


BENCHES: dict[str, type[Bench]] = {"causal": CausalBench, "encoder-decoder": EncDecBench, "masked": MaskedBench}


@functools.cache
def bench(contract: str, device: str) -> Bench:
    return BENCHES[contract](device)


def temperature_for(info: SamplerInfo) -> float:
    """Sampling temperature for the seeded checks: 1, or 0 for greedy-only samplers and for those that
    refuse a temperature (deterministic decoders: ``Sampler.ignores``)."""
    return 0.0 if info.guarantee == "greedy-exact" or "temperature" in info.cls.ignores else 1.0


# ------------------------------------------------------------------------------------------ checks


def causal_greedy_identity(info: SamplerInfo, b: CausalBench) -> None:
    """Greedy output == greedy ``ar`` token for token, at batch 1 and 4 (prompts of different
    lengths: rows accept different numbers of drafts)."""
    for batch in b.batches:
        ref = b.run("ar", batch)
        got = b.run(info.name, batch)
        for i, (x, y) in enumerate(zip(got.sequences, ref.sequences)):
            assert x == y, f"{info.name}: row {i} of batch {batch} differs from greedy ar:\n  got {x}\n  ar  {y}"
        assert len(got.sequences) == batch and all(len(s) == NEW for s in got.sequences)


@functools.cache
def dist_setup(device: str) -> tuple[Setup, torch.nn.Module, torch.nn.Module, np.ndarray]:
    """test_distribution's vocabulary-6 model (3 new tokens, 216 outcomes) and its exact joint at T=1."""
    setup = Setup(vocab=6, new=3, seed=21, noise=0.7)
    exact = setup.exact(DecodeConfig(max_new_tokens=setup.new, temperature=1.0))
    return setup, on(device, setup.target), on(device, setup.draft), exact


def causal_enumeration(info: SamplerInfo, b: CausalBench, **processing: Any) -> tuple[np.ndarray, np.ndarray]:
    """N = 20,000 samples (temperature 1, the sampler's defaults) within the TV bound of the exact
    joint; a sampler that drafts must have exercised both branches of verification. ``processing``:
    more :class:`DecodeConfig` fields (min_p, min_new_tokens with eos_token_id ...; the exact joint
    is enumerated under the same config). Returns ``(empirical, exact)``."""
    setup, target, draft, exact = dist_setup(b.device)
    config = DecodeConfig(max_new_tokens=setup.new, temperature=1.0, **processing)
    if processing:
        exact = setup.exact(config)
    smp = get_sampler(info.name)
    gen = generator(b.device, 1000 + sum(map(ord, info.name)))
    counts = np.zeros(setup.vocab**setup.new, dtype=np.int64)
    weights = setup.vocab ** np.arange(setup.new - 1, -1, -1)
    drafted = accepted = 0
    for _ in range(N_SAMPLES // BATCH):
        res = smp.generate({"model": HFCausalLM(target), "draft": HFCausalLM(draft)}, [list(setup.prompt)] * BATCH,
                           config, gen)
        seqs = np.array(res.sequences)
        assert seqs.shape == (BATCH, setup.new), "every row must generate exactly max_new_tokens"
        counts += np.bincount(seqs @ weights, minlength=len(counts))
        drafted, accepted = drafted + res.stats.drafted_tokens, accepted + res.stats.accepted_draft_tokens
    dist, bound = tv(counts / N_SAMPLES, exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"{info.name} {processing}: TV {dist:.4f} >= bound {bound:.4f}"
    if drafted:
        assert 0 < accepted < drafted, f"{info.name}: both branches of verification must run ({accepted}/{drafted})"
    return counts / N_SAMPLES, exact


def measure_step_bound(info: SamplerInfo, run: Callable[[], Any]) -> list[float]:
    """Run ``run()`` observing every verification report; assert the sampler's stated bound at each
    and return the measured values (TV, or p~(x)/p(x))."""
    bound = get_sampler(info.name).step_bound()
    measured: list[float] = []

    def observe(p: torch.Tensor, tested: torch.Tensor, x: torch.Tensor) -> None:
        if bound.tv is not None:
            measured.append(float((0.5 * (tested - p).abs().sum(-1)).max()))
        else:
            px, tx = p.gather(-1, x[..., None]).squeeze(-1), tested.gather(-1, x[..., None]).squeeze(-1)
            measured.append(float((tx / px.clamp_min(1e-30)).masked_fill(px == 0, 1.0).max()))

    with observe_verification(observe):
        run()
    limit = bound.tv if bound.tv is not None else bound.ratio
    assert measured, f"{info.name} is bounded but its acceptance rule reported no verification"
    assert max(measured) <= limit + 1e-5, f"{info.name}: measured {max(measured):.4g} > stated bound {limit}"
    return measured


def causal_step_bound(info: SamplerInfo, b: CausalBench) -> None:
    """At T=1 and T=0, with an unrelated draft (many rejections), the bound holds at every
    verification and is exercised (some draft was tested against a relaxed distribution)."""
    bound = get_sampler(info.name).step_bound()
    base = 0.0 if bound.tv is not None else 1.0
    for temperature in (1.0, 0.0):
        models = b.models(far=True)
        out: list[Any] = []

        def run(t: float = temperature, m: dict[str, Any] = models, o: list[Any] = out) -> None:
            o.append(b.run(info.name, 4, temperature=t, models=m))

        measured = measure_step_bound(info, run)
        b.assert_valid(out[0], 4, models)
        if temperature:
            assert max(measured) > base, f"{info.name}: no draft was ever relaxed, the bound was not exercised"


def runs_validly(info: SamplerInfo, b: Bench) -> None:
    """Lossy: runs at batch 1 and n (T=1 unless greedy-only, and T=0), every position filled with an
    id in range, statistics consistent."""
    for batch in b.batches:
        for temperature in {temperature_for(info), 0.0}:
            models = b.models()
            res = b.run(info.name, batch, temperature=temperature, models=models)
            b.assert_valid(res, batch, models)


def encdec_greedy_identity(info: SamplerInfo, b: EncDecBench) -> None:
    """Greedy output == transformers' own greedy decoding, on Bart, T5 and Whisper, at batch 1 and 3
    (sources of different lengths)."""
    for arch in b.archs:
        for batch in b.batches:
            res = b.run_arch(info.name, arch, batch)
            assert res.sequences == [b.reference(arch, r) for r in range(batch)], (arch, info.name, batch)


@functools.cache
def encdec_dist_pair(device: str) -> tuple[HFSeq2SeqLM, HFSeq2SeqLM, np.ndarray]:
    """test_encoder_decoder's vocabulary-6 Bart target and draft (max joint p ~0.26, target/draft TV
    ~0.3) and the exact joint of 3 new tokens after source [3, 4, 5, 3] at T=1 (on the CPU)."""
    target, draft = tiny_pair()
    config = DecodeConfig(max_new_tokens=3, temperature=1.0)
    exact = exact_joint(_TeacherForced(target.model, torch.tensor([[3, 4, 5, 3]])), target.start_ids(), 3, 6, config)
    return HFSeq2SeqLM(on(device, target.model)), HFSeq2SeqLM(on(device, draft.model)), exact


def encdec_enumeration(info: SamplerInfo, b: EncDecBench) -> None:
    target, draft, exact = encdec_dist_pair(b.device)
    src = torch.tensor([[3, 4, 5, 3]], device=b.device)
    config = DecodeConfig(max_new_tokens=3, temperature=1.0)
    start = target.start_ids()
    counts = np.zeros(6**3)
    drafted = accepted = 0
    gen = generator(b.device, 100 + len(info.name))
    smp = get_sampler(info.name)
    for _ in range(N_SAMPLES // BATCH):
        res = smp.generate({"model": target, "draft": draft}, [list(start)] * BATCH, config, gen,
                           cond=EncoderInputs(input_ids=src.expand(BATCH, -1)))
        drafted, accepted = drafted + res.stats.drafted_tokens, accepted + res.stats.accepted_draft_tokens
        for s in res.sequences:
            counts[(s[0] * 6 + s[1]) * 6 + s[2]] += 1
    dist, bound = tv(counts / counts.sum(), exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"{info.name}: TV {dist:.4f} >= bound {bound:.4f}"
    if drafted:
        assert 0 < accepted < drafted, f"{info.name}: both branches of verification must run ({accepted}/{drafted})"


def encdec_step_bound(info: SamplerInfo, b: EncDecBench) -> None:
    models: dict[str, Any] = {}
    out: list[Any] = []

    def run() -> None:
        models.update(b.models())
        out.append(b.run(info.name, 3, temperature=1.0, models=models))

    measure_step_bound(info, run)
    b.assert_valid(out[0], 3, models)


Check = Callable[[SamplerInfo, Any], None]

#: (guarantee, contract) -> the checks that test it; a distribution-exact sampler is greedy-exact too
CHECKS: dict[tuple[str, str], tuple[Check, ...]] = {
    ("greedy-exact", "causal"): (causal_greedy_identity,),
    ("distribution-exact", "causal"): (causal_greedy_identity, causal_enumeration),
    ("bounded", "causal"): (causal_step_bound,),
    ("lossy", "causal"): (runs_validly,),
    ("greedy-exact", "encoder-decoder"): (encdec_greedy_identity,),
    ("distribution-exact", "encoder-decoder"): (encdec_greedy_identity, encdec_enumeration),
    ("bounded", "encoder-decoder"): (encdec_step_bound,),
    ("lossy", "encoder-decoder"): (runs_validly,),
    ("lossy", "masked"): (runs_validly,),
}


# ------------------------------------------------------------------------------------------ coverage


def coverage_problems(info: SamplerInfo) -> list[str]:
    """Why ``info`` would go untested by this harness (empty: it is fully covered)."""
    problems = []
    for contract in info.contracts:
        if contract not in BENCHES:
            problems.append(f"contract {contract!r} has no test bench (add one to BENCHES in tests/registry_harness.py)")
            continue
        if (info.guarantee, contract) not in CHECKS:
            problems.append(
                f"guarantee {info.guarantee!r} has no test on {contract!r} models (add it to CHECKS in "
                "tests/registry_harness.py)"
            )
        missing = [r for r in info.needs if r not in BENCHES[contract].roles]
        if missing:
            problems.append(f"needs model role(s) {missing}, which the {contract!r} bench does not provide")
    if info.guarantee == "bounded" and info.cls().step_bound() is None:
        problems.append("is 'bounded' but states no bound: implement Sampler.step_bound() (e.g. StepBound(tv=delta))")
    if info.cls.reduces_to is not None:
        other, params = info.cls.reduces_to
        try:
            target = sampler_info(other)
            info.cls(**params)
        except Exception as err:  # unknown sampler or invalid parameters
            problems.append(f"reduces_to={info.cls.reduces_to!r} is not usable: {err}")
        else:
            if not set(info.contracts) <= set(target.contracts):
                problems.append(f"reduces_to names {other!r}, which does not run on every contract of {info.name!r}")
    return problems


def guarantee_cases() -> list[Any]:
    """``(sampler, contract, check)`` for every registered sampler, declared contract and check."""
    cases = []
    for info in list_samplers():
        for contract in info.contracts:
            for check in CHECKS.get((info.guarantee, contract), ()):
                cases.append(pytest.param(info.name, contract, check, id=f"{info.name}-{contract}-{check.__name__}"))
    return cases


def contract_cases(only: Callable[[SamplerInfo], bool] = lambda info: True) -> list[Any]:
    return [
        pytest.param(info.name, contract, id=f"{info.name}-{contract}")
        for info in list_samplers()
        if only(info)
        for contract in info.contracts
    ]


def wrong_contract_cases() -> list[Any]:
    return [
        pytest.param(info.name, contract, id=f"{info.name}-on-{contract}")
        for info in list_samplers()
        for contract in BENCHES
        if contract not in info.contracts
    ]


def bad_values(default: Any) -> list[Any]:
    """Values a parameter with this default must refuse: -1 and a string for numbers (counts,
    probabilities, thresholds and scales are all >= 0), an unknown name for a choice."""
    if isinstance(default, bool):
        return []
    if isinstance(default, (int, float)):
        return [-1, "not-a-number"]
    if isinstance(default, str):
        return ["no-such-choice"]
    return []


__all__ = [
    "BENCHES", "CHECKS", "CONTRACTS", "DEVICES", "GUARANTEES", "bad_values", "bench", "contract_cases",
    "coverage_problems", "guarantee_cases", "temperature_for", "wrong_contract_cases",
]


# Family test benches: a family that declares its own model contract (``register_contract``) adds a
# module ``tests/harness_<family>.py`` defining ``BENCHES`` (contract -> Bench subclass) and ``CHECKS``
# ((guarantee, contract) -> checks); they are merged here, so the coverage meta-test still sees one
# harness and a new contract without a bench fails it.
def _load_family_harnesses() -> None:
    import importlib
    from pathlib import Path

    for path in sorted(Path(__file__).parent.glob("harness_*.py")):
        module = importlib.import_module(path.stem)
        if not hasattr(module, "BENCHES"):
            raise ImportError(f"{path.name} defines no BENCHES, or it was still being imported when the registry "
                              "harness loaded it (import registry_harness before any family harness)")
        BENCHES.update(module.BENCHES)
        CHECKS.update(getattr(module, "CHECKS", {}))


_load_family_harnesses()
