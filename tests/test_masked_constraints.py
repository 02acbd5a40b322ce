"""The ``balanced`` constraint under multi-token steps (``constraints.py`` ``filter_commits``).

A hand-built step whose two best proposals are each allowed alone but break the rule together
(only the more confident is committed), a property test on random tiny vocabularies and rows
(the invariant unmet pairs / brackets <= masks left after every step, balanced and mask-free
results), and one commit per step giving the same tokens as without the joint check.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from leapgen.models.masked import TorchMaskedLM
from leapgen.samplers.base import DecodeConfig, get_sampler
from leapgen.samplers.masked import MaskedInputs
from leapgen.samplers.masked.constraints import Balanced
from leapgen.samplers.masked.parts import Hook

V, MASK = 33, 32


class Table(nn.Module):
    """Fixed logits per position (``table [L, V]``), whatever the input."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, tokens):
        return self.table[: tokens.shape[-1]].expand(*tokens.shape, -1).clone()


class Mixer(nn.Module):
    """Random logits that depend on the position and on the tokens (they change between steps)."""

    def __init__(self, vocab: int, length: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.pos = 2.0 * torch.randn(length, vocab, generator=g)
        self.emb = torch.randn(vocab, vocab, generator=g)

    def forward(self, tokens):
        ctx = self.emb[tokens].mean(-2, keepdim=True)  # [B, 1, V]
        return self.pos[: tokens.shape[-1]] + ctx


def counts_need(tokens: torch.Tensor, known: torch.Tensor, pair_ids, bracket_pairs) -> torch.Tensor:
    """Unmet pairs / brackets per row of ``tokens [B, L]`` over the ``known`` positions."""
    need = torch.zeros(tokens.shape[0], dtype=torch.long)
    for p in pair_ids:
        need += ((tokens == p) & known).sum(1) % 2
    for op, cl in bracket_pairs:
        need += (((tokens == op) & known).sum(1) - ((tokens == cl) & known).sum(1)).abs()
    return need


class Invariant(Hook):
    """Records ``(need, masks left)`` of every row after every step."""

    def __init__(self, pair_ids, bracket_pairs) -> None:
        self.pair_ids, self.bracket_pairs, self.seen = pair_ids, bracket_pairs, []

    def after_step(self, state) -> None:
        tok, masked = state.tokens[:, 0], state.masked[:, 0]
        known = ~masked
        if state.attention_mask is not None:
            known = known & state.attention_mask
        self.seen.append((counts_need(tok, known, self.pair_ids, self.bracket_pairs), masked.sum(1)))


# ------------------------------------------------------------------------------- hand-built step
@pytest.mark.parametrize(
    "known, pair_ids, bracket_pairs, first, second",
    [
        # two opens with 3 masks: each alone leaves 1 unmet <= 2 masks, together 2 > 1
        ([1], [7], [[10, 11]], 10, 10),
        # 7 is odd; 8 alone or 9 alone leaves 2 unmet <= 2 masks, 8 and 9 together 3 > 1
        ([1, 7], [7, 8, 9], [], 8, 9),
    ],
)
def test_two_proposals_fine_alone_but_not_together(known, pair_ids, bracket_pairs, first, second):
    n = len(known)
    table = torch.zeros(n + 3, V)
    table[n, first] = 6.0  # the most confident proposal
    table[n + 1, second] = 5.0  # the second, committed in the same step by the schedule
    table[n + 2, 20] = 3.0  # a neutral token, the least confident
    model = TorchMaskedLM(Table(table), mask_id=MASK, vocab_size=V)
    inputs = MaskedInputs(torch.tensor([known + [MASK] * 3]))
    params = dict(schedule="linear", steps=2, choice_temperature=0.0, hooks=["trajectory"])
    # linear over 2 steps with 3 masks: step 0 commits the two most confident positions

    def decode(constraint: str):
        extra = {} if constraint == "none" else dict(pair_ids=pair_ids, bracket_pairs=bracket_pairs)
        smp = get_sampler("genmol", constraint=constraint, **extra, **params)
        return smp.generate({"model": model}, inputs, DecodeConfig(temperature=0.0))

    free = decode("none")
    assert free.trajectory[1][0, n:].tolist() == [first, second, MASK]
    res = decode("balanced")
    # only the more confident of the two is committed; the other is decoded later
    assert res.trajectory[1][0, n:].tolist() == [first, MASK, MASK]
    # ... within the step budget: the last step re-draws what the rule rejects (no extra forward)
    assert res.stats.extra["steps"] == 2 and res.stats.target_forwards == 2
    final = res.tokens[0]
    assert not bool((final == MASK).any())
    assert int(counts_need(final[None], torch.ones_like(final[None], dtype=torch.bool), pair_ids, bracket_pairs)[0]) == 0


def test_filter_commits_keeps_the_best_even_when_it_breaks_the_rule():
    """The first (most confident) unit is always kept: >= 1 commit per step."""

    class S:  # the parts of the state ``filter_commits`` reads, for one active row
        rows = torch.tensor([0])
        tokens = torch.tensor([[[1, MASK, MASK, MASK]]])
        masked = tokens == MASK
        attention_mask = None

        def active(self, x):
            return x[self.rows]

    con = Balanced(bracket_pairs=[[10, 11]])
    proposal = torch.tensor([[[0, 10, 10, 10]]])
    commit = torch.tensor([[False, True, True, True]])
    units = torch.arange(4)[None]
    score = torch.tensor([[0.0, 0.2, 0.9, 0.5]], dtype=torch.float64)
    # all three opens: 0.9 kept (1 unmet, 2 masks), 0.5 dropped (2 > 1), 0.2 dropped (2 > 1)
    kept, prop = con.filter_commits(S(), proposal, commit, units, score)
    assert kept.tolist() == [[False, False, True, False]] and prop.tolist() == proposal.tolist()
    # the best is kept even where it breaks the rule (the proposer never lets that happen)
    S.tokens = torch.tensor([[[10, 10, MASK, MASK]]])
    S.masked = S.tokens == MASK
    kept, _ = con.filter_commits(S(), torch.tensor([[[0, 0, 10, 10]]]), commit & S.masked[0].reshape(1, -1), units, score)
    assert kept.tolist() == [[False, False, True, False]]


def test_a_final_step_redraws_what_the_rule_rejects():
    """On a row's last scheduled step every chosen commit is written; rejected ones are re-drawn
    among the allowed ids (greedy: the most probable), in confidence order."""

    class S:
        rows = torch.tensor([0])
        tokens = torch.tensor([[[1, MASK, MASK, MASK]]])
        masked = tokens == MASK
        attention_mask = None
        config = DecodeConfig(temperature=0.0)
        generator = None

        def active(self, x):
            return x[self.rows]

    con = Balanced(bracket_pairs=[[10, 11]])
    lp = torch.full((1, 1, 4, V), -10.0)
    lp[..., 10], lp[..., 11], lp[..., 20] = -0.1, -3.0, -2.0  # open > neutral > close everywhere
    proposal = torch.tensor([[[0, 10, 10, 10]]])
    commit = torch.tensor([[False, True, True, True]])
    score = torch.tensor([[0.0, 0.2, 0.9, 0.5]], dtype=torch.float64)
    kept, prop = con.filter_commits(S(), proposal, commit, torch.arange(4)[None], score,
                                    final=torch.tensor([True]), log_probs=lambda: lp)
    # 0.9: open (1 unmet, 2 masks left); 0.5: an open would leave 2 unmet > 1 mask -> the most
    # probable allowed id, neutral 20 (1 unmet, 1 left); 0.2: only a close is allowed (0, 0)
    assert kept.tolist() == [[False, True, True, True]]
    assert prop.tolist() == [[[0, 11, 10, 20]]]


# ------------------------------------------------------------------------------- property test
@st.composite
def problems(draw):
    vocab = draw(st.integers(10, 14))
    mask = vocab - 1
    ids = draw(st.permutations(list(range(2, mask))))  # 0 / 1 stay neutral
    n_pair = draw(st.integers(0, 2))
    n_br = draw(st.integers(0 if n_pair else 1, 2))
    pair_ids = ids[:n_pair]
    bracket_pairs = [[ids[n_pair + 2 * i], ids[n_pair + 2 * i + 1]] for i in range(n_br)]
    n_rows = draw(st.integers(1, 3))
    prompts = [[draw(st.integers(0, 1)) for _ in range(draw(st.integers(1, 3)))] for _ in range(n_rows)]
    n_mask = draw(st.integers(2, 14))
    sched = draw(st.sampled_from([("cosine", 2), ("cosine", 3), ("linear", 2), ("linear", 4), ("threshold", None),
                                  ("remask", 3)]))
    temperature = draw(st.sampled_from([0.0, 1.0, 2.0]))
    seed = draw(st.integers(0, 2**16))
    return vocab, mask, pair_ids, bracket_pairs, prompts, n_mask, sched, temperature, seed


@settings(max_examples=60)
@given(problems())
def test_multi_token_steps_keep_the_invariant_and_end_balanced(problem):
    vocab, mask, pair_ids, bracket_pairs, prompts, n_mask, (sched, steps), temperature, seed = problem
    model = TorchMaskedLM(Mixer(vocab, 3 + n_mask, seed), mask_id=mask, vocab_size=vocab)
    hook = Invariant(pair_ids, bracket_pairs)
    params = dict(constraint="balanced", pair_ids=pair_ids, bracket_pairs=bracket_pairs, hooks=[hook],
                  choice_temperature=1.0)
    if sched == "threshold":
        params.update(policy="threshold", threshold=0.0)  # every mask proposed for commit in one step
    elif sched == "remask":
        params.update(policy="remask_lowest", schedule="linear", steps=steps)
    else:
        params.update(schedule=sched, steps=steps)
    inputs = MaskedInputs.from_prompts(prompts, n_mask, mask)
    gen = torch.Generator().manual_seed(seed)
    res = get_sampler("genmol", **params).generate({"model": model}, inputs, DecodeConfig(temperature=temperature), gen)
    assert hook.seen
    for need, left in hook.seen:
        assert bool((need <= left).all()), (need.tolist(), left.tolist())
    for seq in res.sequences:
        t = torch.tensor(seq)[None]
        assert mask not in seq
        assert int(counts_need(t, torch.ones_like(t, dtype=torch.bool), pair_ids, bracket_pairs)[0]) == 0
    if sched in ("cosine", "linear"):  # the step budget holds: no extra forward
        assert res.stats.extra["steps"] == min(steps, n_mask)
    elif sched == "threshold":  # commit-only: every step commits >= 1 token
        assert res.stats.extra["steps"] <= n_mask


# ------------------------------------------------------------------------------- one per step
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_commit_per_step_is_unchanged(temperature, monkeypatch):
    vocab = 12
    model = TorchMaskedLM(Mixer(vocab, 16, 3), mask_id=vocab - 1, vocab_size=vocab)
    inputs = MaskedInputs.from_prompts([[0], [1, 0, 1], [0, 0]], 10, vocab - 1)
    cfg = DecodeConfig(temperature=temperature)

    def decode():
        smp = get_sampler("genmol", constraint="balanced", pair_ids=[2, 3], bracket_pairs=[[4, 5]], hooks=["trajectory"])
        return smp.generate({"model": model}, inputs, cfg, torch.Generator().manual_seed(7))

    res = decode()
    calls = []

    def identity(self, state, proposal, commit, *args, **kwargs):
        calls.append(int(commit.sum(1).max()))
        return commit, proposal

    monkeypatch.setattr(Balanced, "filter_commits", identity)  # the step as it was before the joint check
    ref = decode()
    assert calls and max(calls) == 1
    assert res.tokens.tolist() == ref.tokens.tolist()
    assert [t.tolist() for t in res.trajectory] == [t.tolist() for t in ref.trajectory]
