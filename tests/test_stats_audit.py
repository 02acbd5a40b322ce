"""The statistics every sampler reports, checked against what really ran.

A wrapper counts the real network calls of each model (``_forward`` / ``_step``, independent of the
``forwards`` counter the statistics are filled from) and the tokens each row really got; the
reported ``DecodeStats`` must agree with them and with its own documented definitions
(``step_compression = baseline_steps / target_forwards``; ``mean_accepted`` = tokens committed
per row per target forward, so equal to ``step_compression`` at batch 1 for the autoregressive
samplers).

Tiny random Llamas from conftest on the lean runtime and the tiny ASR net of asr_tiny (fast)."""

from __future__ import annotations

import math

import pytest
import torch
from asr_tiny import tiny_inputs, tiny_net
from conftest import VOCAB, make_llama
from harness_text_heads import random_heads

from leapgen.models.asr_lm import NARDraftLM, asr_views
from leapgen.models.lean import LeanCausalLM
from leapgen.models.text_heads import HeadedLM
from leapgen.samplers import DecodeConfig, get_sampler

PROMPTS = [[5, 17, 3, 17, 5, 9], [1, 2, 3], [40, 41, 40, 41, 7, 8, 9, 10]]


class Counted:
    """Counts the real network calls of a lean model (its compiled or plain step function)."""

    def __init__(self, lm: LeanCausalLM) -> None:
        self.lm, self.calls = lm, 0
        step = lm._step

        def counted(*args, **kwargs):
            self.calls += 1
            return step(*args, **kwargs)

        lm._step = counted


@pytest.fixture(scope="module")
def lean():
    return Counted(LeanCausalLM.from_hf(make_llama(VOCAB, seed=1, layers=3, max_pos=256)))


def _run(name, models, temperature=0.0, new=24, prompts=PROMPTS, seed=0, **params):
    cfg = DecodeConfig(max_new_tokens=new, temperature=temperature)
    with torch.inference_mode():
        return get_sampler(name, **params).generate(models, prompts, cfg, torch.Generator().manual_seed(seed))


def _check_consistent(res, target_calls: int) -> None:
    s = res.stats
    assert s.target_forwards == target_calls
    assert s.new_tokens == sum(len(q) for q in res.sequences)
    assert s.baseline_steps == max(len(q) for q in res.sequences)
    assert sum(n for step in s.accepted_per_step for n in step) == s.new_tokens
    assert math.isclose(s.step_compression, s.baseline_steps / target_calls)
    # token_steps: the index of the target forward that produced each token
    assert all(0 <= i < target_calls for row in res.token_steps for i in row)


@pytest.mark.parametrize("batch", [1, 3])
def test_cntp_counts_every_trial_forward_as_a_step(lean, batch):
    """cntp's trial forwards are target forwards: each is a step of ``accepted_per_step`` (0
    committed), so ``mean_accepted`` is tokens per row per target forward, not the trial's length
    (it reported about 6-7.5 while ``step_compression`` was below 1)."""
    lean.calls = 0
    res = _run("cntp", {"model": lean.lm}, 1.0, new=24, prompts=PROMPTS[:batch], entropy_low=0.0,
               entropy_high=0.01, max_trials=4, trial_tokens=4)
    s = res.stats
    assert s.extra["cntp_triggers"] > 0
    _check_consistent(res, lean.calls)
    assert len(s.accepted_per_step) == s.target_forwards
    assert s.mean_accepted <= 1.0 + 1e-9  # trials never commit more than one token per row and forward
    if batch == 1:
        assert math.isclose(s.mean_accepted, s.step_compression)


@pytest.mark.parametrize("name", ["bild", "spec_tree", "spectr", "speculative"])
def test_a_nar_draft_reports_its_network_passes_not_its_table_reads(name):
    """A NAR hypothesis drafting for an AR verifier (ASR, OCR) runs its network once per decode,
    when the draft cache is made; drafters that read it token by token (bild, the tree samplers)
    reported every read as a draft forward (14-64 per utterance for one pass)."""
    views = asr_views(tiny_net(2))
    state = views["ar"].encode(tiny_inputs(3, seed=4))
    passes = []
    nar = views["paraformer"]
    nar_logits = nar.net.nar_logits

    def counted(*args, **kwargs):
        passes.append(1)
        return nar_logits(*args, **kwargs)

    nar.net.nar_logits = counted
    cfg = DecodeConfig(max_new_tokens=14, eos_token_id=1)
    for batch in (1, 3):
        passes.clear()
        cond = state if batch == 3 else state.select_rows(torch.tensor([0]))
        with torch.inference_mode():
            res = get_sampler(name).generate({"model": views["ar"], "draft": NARDraftLM(nar)}, [[1]] * batch, cfg,
                                             cond=cond)
        assert res.stats.draft_forwards == len(passes) == 1
        assert sum(n for step in res.stats.accepted_per_step for n in step) == res.stats.new_tokens


@pytest.mark.parametrize("batch", [1, 3])
def test_ar_beam_lists_every_target_forward(batch):
    """ar_beam keeps running a batch until every beam is done, often many forwards past the kept
    hypothesis; its ``accepted_per_step`` was made from the output lengths (mean_accepted 1.0 with
    step_compression 0.4). One step per target forward now: 0 where a row's kept beam had ended."""
    views = asr_views(tiny_net(1))
    lm = views["ar"]
    state = lm.encode(tiny_inputs(3, seed=4))
    calls = []
    forward = lm._forward

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    lm._forward = counted
    cond = state if batch == 3 else state.select_rows(torch.tensor([0]))
    with torch.inference_mode():
        res = get_sampler("ar_beam").generate({"model": lm}, [[1]] * batch, DecodeConfig(max_new_tokens=20, eos_token_id=2),
                                              cond=cond)
    s = res.stats
    assert s.target_forwards == len(calls) > s.baseline_steps  # beams ran past the kept hypotheses
    assert len(s.accepted_per_step) == s.target_forwards
    assert sum(n for step in s.accepted_per_step for n in step) == s.new_tokens
    assert all(0 <= i < s.target_forwards for row in res.token_steps for i in row)
    if batch == 1:
        assert math.isclose(s.mean_accepted, s.step_compression)


@pytest.mark.parametrize("batch", [1, 3])
def test_chimera_counts_its_head_calls_as_other_forwards(lean, batch):
    """Chimera's draft is its heads (a network besides the target, run once per step): they
    belong in ``other_forwards`` like every other sampler's extra networks; they were only in
    ``extra["head_calls"]``, so the stats showed drafting as free."""
    headed = HeadedLM(lean.lm, random_heads(lean.lm))
    calls, target_calls = [], []
    hook = headed.heads.chimera.register_forward_hook(lambda *_: calls.append(1))
    forward = headed._forward  # the layered forward with hidden states (not the lean step)

    def counted(*args, **kwargs):
        target_calls.append(1)
        return forward(*args, **kwargs)

    headed._forward = counted
    try:
        res = _run("chimera", {"model": headed}, prompts=PROMPTS[:batch])
    finally:
        hook.remove()
    _check_consistent(res, len(target_calls))
    assert res.stats.other_forwards == res.stats.extra["head_calls"] == len(calls) > 0
    assert res.stats.draft_forwards == 0


def _causal_samplers():
    from leapgen.samplers import list_samplers

    return [s.name for s in list_samplers() if "causal" in s.contracts and s.family != "masked"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", _causal_samplers())
def test_every_causal_sampler_reports_what_ran(lean, name, temperature, monkeypatch):
    """Every sampler on a causal LM, batch 1 and 3: target and draft forwards equal the real network
    calls, ``accepted_per_step`` has one step per target forward and accounts for every token, and at
    batch 1 ``mean_accepted == step_compression`` (both are tokens per target forward then).
    ``prompt_lookup`` gets a given verify-cost curve: the measured one times forwards once per model
    and batch size, outside every decode's statistics (documented in ``cost_model``)."""
    from leapgen.errors import ConfigError
    from leapgen.models import text_variants
    from leapgen.samplers import sampler_info

    layered = text_variants.layered_forward

    def counted_layered(net, *args, **kwargs):  # gear's VariantLM runs the layers itself, not the lean step
        lean.calls += net is lean.lm.net
        return layered(net, *args, **kwargs)

    monkeypatch.setattr(text_variants, "layered_forward", counted_layered)
    draft = Counted(LeanCausalLM.from_hf(make_llama(VOCAB, seed=1, layers=1, max_pos=256)))
    models = {"model": lean.lm, "draft": draft.lm}
    params = {"verify_cost": "flat"} if name == "prompt_lookup" else {}
    for batch in (1, 3):
        lean.calls = draft.calls = 0
        try:
            res = _run(name, models, temperature, new=16, prompts=PROMPTS[:batch], **params)
        except ConfigError:
            assert temperature > 0 and sampler_info(name).guarantee == "greedy-exact"  # jacobi: greedy only
            return
        s = res.stats
        _check_consistent(res, lean.calls)
        assert s.draft_forwards == (draft.calls if "draft" in sampler_info(name).needs else 0)
        assert len(s.accepted_per_step) == s.target_forwards
        assert s.batch_size == batch
        if batch == 1:
            assert math.isclose(s.mean_accepted, s.step_compression)
