"""The ar-parallel family: ``jacobi``, ``lookahead`` and ``aded``.

* greedy identity with ``ar`` (fp32, tiny peaky random Llama): batch 1 and batch 4 with different
  prompt lengths, an EOS that stops rows early, repetition penalty, and repetitive prompts on
  which drafts are accepted (step compression > 1);
* ``lookahead`` and ``aded`` sampling against the exact distribution of a tiny model computed by
  enumeration (vocabulary 6, 3 new tokens, K = 6^3 outcomes). Bound: E[TV] <= 1/2 sqrt(K/N)
  (Jensen + Cauchy-Schwarz) plus the McDiarmid deviation sqrt(ln(1/delta) / (2N)), delta = 1e-6;
* ``jacobi`` refuses temperature > 0; parameter validation;
* ADED's tri-gram table and MCTS tree; the lookahead window mask; the trie helper;
* statistics consistency (forwards from the adapter counter, per-row accepted counts).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from conftest import hf_lm, make_llama

from leapgen.errors import ConfigError
from leapgen.samplers import DecodeConfig, get_sampler, sampler_info
from leapgen.samplers.aded import TrigramTable, mcts_tree
from leapgen.samplers.logits import LogitsProcessor
from leapgen.samplers.lookahead import NGramPool, window_layout
from leapgen.samplers.trees import tree_layout, trie_from_sequences

FAMILY = ("jacobi", "lookahead", "aded")
DELTA = 1e-6

# prompts of different lengths; the first and third repeat a pattern
PROMPTS = [
    [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2],
    [7, 8, 9],
    [10, 11, 12, 13, 10, 11, 12, 13, 10, 11],
    [5],
]


@pytest.fixture(scope="module")
def lm(target_model):
    return hf_lm(target_model)


def run(name, lm, prompts, **cfg):
    params = cfg.pop("params", {})
    return get_sampler(name, **params).generate({"model": lm}, prompts, DecodeConfig(**cfg))


# ------------------------------------------------------------------------------------------
# registry and parameters


@pytest.mark.parametrize("name", FAMILY)
def test_registered(name):
    info = sampler_info(name)
    assert info.family == "ar-parallel"
    assert info.needs == ("model",)
    assert info.paper
    assert info.guarantee == ("greedy-exact" if name == "jacobi" else "distribution-exact")


@pytest.mark.parametrize(
    "name,bad",
    [
        ("jacobi", {"window": 0}),
        ("jacobi", {"init": "zeros"}),
        ("lookahead", {"level": 1}),
        ("lookahead", {"window": 0}),
        ("lookahead", {"guess_set_size": -1}),
        ("lookahead", {"pool_from_prompt": "yes"}),
        ("aded", {"max_nodes": 0}),
        ("aded", {"max_depth": 0}),
        ("aded", {"c_puct": -1.0}),
        ("aded", {"nodes": 4}),
    ],
)
def test_bad_parameters(name, bad):
    with pytest.raises(ConfigError):
        get_sampler(name, **bad)


def test_jacobi_refuses_sampling(lm):
    with pytest.raises(ConfigError, match="lookahead"):
        run("jacobi", lm, [[1, 2, 3]], max_new_tokens=4, temperature=0.7)


# ------------------------------------------------------------------------------------------
# greedy identity


@pytest.mark.parametrize("name", FAMILY)
def test_greedy_identity_batch1(name, lm):
    for prompt in PROMPTS:
        ref = run("ar", lm, [prompt], max_new_tokens=24)
        out = run(name, lm, [prompt], max_new_tokens=24)
        assert out.sequences == ref.sequences


@pytest.mark.parametrize("name", FAMILY)
def test_greedy_identity_batch_eos(name, lm):
    free = run("ar", lm, PROMPTS, max_new_tokens=32)
    eos = free.sequences[0][5]  # stops row 0 within 6 tokens; the others wherever it appears
    ref = run("ar", lm, PROMPTS, max_new_tokens=32, eos_token_id=eos)
    lens = [len(s) for s in ref.sequences]
    assert min(lens) < 32 and len(set(lens)) > 1
    out = run(name, lm, PROMPTS, max_new_tokens=32, eos_token_id=eos)
    assert out.sequences == ref.sequences


@pytest.mark.parametrize("name", FAMILY)
def test_greedy_identity_repetition_penalty(name, lm):
    ref = run("ar", lm, PROMPTS, max_new_tokens=20, repetition_penalty=1.3)
    out = run(name, lm, PROMPTS, max_new_tokens=20, repetition_penalty=1.3)
    assert out.sequences == ref.sequences


@pytest.mark.parametrize(
    "name,params",
    [("jacobi", {"init": "repeat", "window": 5}), ("lookahead", {"level": 3, "window": 2, "guess_set_size": 1}),
     ("aded", {"max_nodes": 3, "max_depth": 2, "num_simulations": 2})],
)
def test_greedy_identity_other_parameters(name, params, lm, target_mha):
    for model in (lm, hf_lm(target_mha)):
        ref = run("ar", model, PROMPTS, max_new_tokens=16)
        out = run(name, model, PROMPTS, max_new_tokens=16, params=params)
        assert out.sequences == ref.sequences


@pytest.mark.parametrize("name", FAMILY)
def test_drafts_accepted_on_repetitive_text(name, lm):
    """Once greedy decoding falls into a loop, every method commits several tokens per forward."""
    prompt = PROMPTS[0]
    ref = run("ar", lm, [prompt], max_new_tokens=48)
    out = run(name, lm, [prompt], max_new_tokens=48)
    assert out.sequences == ref.sequences
    assert out.stats.accepted_draft_tokens > 0
    assert out.stats.step_compression > 1.0


# ------------------------------------------------------------------------------------------
# statistics


@pytest.mark.parametrize("name", FAMILY)
def test_stats_consistency(name, lm):
    before = lm.forwards
    out = run(name, lm, PROMPTS, max_new_tokens=20)
    st = out.stats
    assert st.sampler == name and st.batch_size == len(PROMPTS)
    assert st.target_forwards == lm.forwards - before == len(st.accepted_per_step)
    assert st.draft_forwards == 0
    active = [len(step) for step in st.accepted_per_step]
    assert active[0] == len(PROMPTS) and active == sorted(active, reverse=True)
    assert all(n >= 1 for step in st.accepted_per_step for n in step)
    assert st.new_tokens == sum(map(len, out.sequences)) == sum(map(sum, st.accepted_per_step))
    # without EOS every (row, step) commits its accepted drafts plus one token of its own
    assert st.new_tokens == st.accepted_draft_tokens + sum(active)
    assert 0 <= st.accepted_draft_tokens <= st.drafted_tokens
    assert st.baseline_steps == max(map(len, out.sequences))
    assert st.step_compression == pytest.approx(st.baseline_steps / st.target_forwards)
    assert st.mean_accepted >= 1.0


# ------------------------------------------------------------------------------------------
# exact distribution (sampling)


def tv_bound(k: int, n: int) -> float:
    return 0.5 * math.sqrt(k / n) + math.sqrt(math.log(1 / DELTA) / (2 * n))


@pytest.mark.parametrize(
    "name,params",
    [
        # two prompt n-grams start with the last prompt token: V3 over distinct candidates from step 1
        ("lookahead", {"level": 3, "window": 3, "guess_set_size": 2}),
        ("aded", {"max_nodes": 6, "max_depth": 2, "top_k": 3, "num_simulations": 8}),
    ],
)
def test_sampling_matches_exact_distribution(name, params):
    vocab, new, n_samples = 6, 3, 20_000
    model = make_llama(vocab, seed=5, logit_scale=2.0)
    prompt = [0, 1, 2, 0, 2, 1, 0]
    cfg = DecodeConfig(max_new_tokens=new, temperature=0.9, top_k=5, seed=123)

    seqs = torch.tensor([prompt + list(x) for x in itertools.product(range(vocab), repeat=new)])
    with torch.no_grad():
        probs = LogitsProcessor(cfg).probs(model(seqs).logits.float())
    k = len(seqs)
    exact = torch.ones(k, dtype=torch.float64)
    for j in range(new):
        exact *= probs[torch.arange(k), len(prompt) - 1 + j, seqs[:, len(prompt) + j]].double()
    assert exact.sum().item() == pytest.approx(1.0, abs=1e-5)

    res = get_sampler(name, **params).generate(
        {"model": hf_lm(model)}, [prompt] * n_samples, cfg, torch.Generator().manual_seed(7)
    )
    assert all(len(s) == new for s in res.sequences)
    assert res.stats.accepted_draft_tokens > 0.1 * n_samples  # the drafts were really exercised
    idx = torch.tensor([(s[0] * vocab + s[1]) * vocab + s[2] for s in res.sequences])
    emp = torch.bincount(idx, minlength=k).double() / n_samples
    tv = 0.5 * (emp - exact).abs().sum().item()
    assert tv < tv_bound(k, n_samples), (tv, tv_bound(k, n_samples))


# ------------------------------------------------------------------------------------------
# mechanisms


def test_trigram_table_counts_and_backoff():
    t = TrigramTable()
    t.add([1, 2, 3, 1, 2, 4, 1, 2, 3])
    assert t.prob(1, 2, 3) == pytest.approx(2 / 3) and t.prob(1, 2, 4) == pytest.approx(1 / 3)
    assert t.top(1, 2, 1) == [(3, pytest.approx(2 / 3))]
    # unseen tri-gram context -> bi-gram of the last token
    assert t.prob(9, 2, 3) == pytest.approx(2 / 3)
    assert t.top(9, 3, 5) == [(1, 1.0)]
    # unseen last token -> unigram
    assert t.prob(None, 8, 1) == pytest.approx(3 / 9)
    assert TrigramTable().top(1, 2, 3) == []


def test_trigram_table_online_update():
    t = TrigramTable()
    text = [5, 6, 7]
    t.add(text)
    assert t.top(5, 6, 2) == [(7, 1.0)]
    text += [5, 6, 8, 8]
    t.add(text, start=3)  # only the new tokens, counted after their real predecessors
    assert t.prob(5, 6, 7) == pytest.approx(0.5) and t.prob(5, 6, 8) == pytest.approx(0.5)
    assert t.prob(6, 8, 8) == 1.0 and t.prob(7, 5, 6) == 1.0
    assert sum(t.uni.values()) == len(text)


def test_mcts_tree_shape_and_budget():
    t = TrigramTable()
    t.add([1, 2, 3, 4, 5] * 3 + [1, 2, 9, 4, 5, 1, 2, 3])
    tokens, parent = mcts_tree(t, 4, 5, max_nodes=10, max_depth=4, top_k=2, num_simulations=40, c_puct=1.0)
    assert tokens[0] == 5 and parent[0] == -1
    assert 1 < len(tokens) <= 11
    assert all(0 <= parent[i] < i for i in range(1, len(parent)))
    _, depth = tree_layout(tuple(parent))
    assert max(depth) <= 4
    for p in set(parent[1:]):  # siblings are distinct tokens (V3 with one-hot q needs it)
        kids = [tokens[i] for i in range(1, len(tokens)) if parent[i] == p]
        assert len(kids) == len(set(kids))
    # the most likely continuation 1 2 3 4 is a path of the tree
    node = 0
    for tok in (1, 2, 3, 4):
        node = next(i for i in range(1, len(tokens)) if parent[i] == node and tokens[i] == tok)
    # nothing to draft from an empty table
    assert mcts_tree(TrigramTable(), None, 3, max_nodes=8, max_depth=3, top_k=2, num_simulations=8,
                     c_puct=1.0) == ([3], [-1])


def test_trie_from_sequences():
    tokens, parent, nodes = trie_from_sequences([[4, 5, 6], [4, 5, 7], [8], [4, 5, 6]], root_token=3)
    assert tokens == [3, 4, 5, 6, 7, 8] and parent == [-1, 0, 1, 2, 2, 0]
    assert nodes == [[1, 2, 3], [1, 2, 4], [5], [1, 2, 3]]


def test_ngram_pool_lru():
    pool = NGramPool(n=3, size=2)
    pool.add_text([1, 2, 3, 1, 4, 5, 1, 6, 7])
    assert pool.get(1) == [(6, 7), (4, 5)]  # (2, 3) evicted; most recent first
    pool.add(1, (4, 5))
    assert pool.get(1) == [(4, 5), (6, 7)]


@pytest.mark.parametrize("w0,levels", [(5, 1), (4, 2), (3, 4), (0, 1)])
def test_window_layout_sees_contiguous_context(w0, levels):
    """Every window token's context (root at offset 0 plus the window slots it sees) is exactly
    one token per position 0..offset: a consistent Jacobi trajectory."""
    mask, offs, out = window_layout(w0, levels)
    assert mask.shape == (len(offs), len(offs)) and len(offs) == w0 + (levels - 1) * (w0 + 1)
    for s, o in enumerate(offs):
        seen = sorted(offs[j] for j in np.flatnonzero(mask[s]))
        assert [0] + seen == list(range(o + 1))
    assert len(out) == w0 + 1
    assert [offs[s] if s >= 0 else 0 for s in out] == [i + levels - 1 for i in range(w0 + 1)]
