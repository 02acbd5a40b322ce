"""Property tests of the acceptance primitives in ``leapgen.samplers.verify``.

Distributions are arbitrary (random vectors with exact zeros, V in 2..8). Analytic identities are
checked in float64; the batched sampler is checked statistically with bounds derived from the
sample size (never tuned); multi-candidate verification is checked exactly by enumerating every
candidate draw.

Statistical bound used throughout (``tv_bound``): for N i.i.d. samples from p over K outcomes with
empirical distribution p_hat,
    E[TV(p_hat, p)] = 1/2 sum_k E|p_hat_k - p_k| <= 1/2 sum_k sqrt(p_k (1 - p_k) / N)
(Jensen: E|X| <= sqrt(Var X)), which is <= 1/2 sqrt(K / N) by Cauchy-Schwarz. TV is a function of
the N samples that changes by at most 1/N when one sample changes, so by McDiarmid
    P(TV >= E[TV] + t) <= exp(-2 N t^2),   t = sqrt(log(1/delta) / (2 N)).
With delta = 1e-6 a correct sampler fails a check with probability <= 1e-6.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from leapgen.kernels import reference
from leapgen.samplers.verify import (
    KINDS,
    acceptance_probability,
    greedy_match,
    rejection_sample,
    residual,
    verify_tree,
)

DELTA = 1e-6


def tv_bound(p: np.ndarray, n: int, delta: float = DELTA) -> float:
    """Upper bound on TV(empirical of n samples, p) that holds with probability >= 1 - delta."""
    p = np.asarray(p, dtype=np.float64)
    expected = 0.5 * float(np.sqrt(p * (1 - p) / n).sum())
    return expected + math.sqrt(math.log(1 / delta) / (2 * n))


def empirical(samples: torch.Tensor, v: int) -> np.ndarray:
    return np.bincount(samples.reshape(-1).numpy(), minlength=v) / samples.numel()


def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


@st.composite
def dist(draw, v: int | None = None, min_support: int = 1):
    """A probability vector of size v (2..8) with some exact zeros: either a Dirichlet(1) draw
    with random entries zeroed (generic values), or hypothesis-chosen weights (edge cases:
    equal entries, one-hot, exact ties between p and q)."""
    if v is None:
        v = draw(st.integers(2, 8))
    if draw(st.booleans()):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        w = rng.dirichlet(np.ones(v)) * (rng.random(v) > 0.3)
    else:
        w = draw(
            st.lists(
                st.one_of(st.just(0.0), st.floats(0.01, 1.0)),
                min_size=v,
                max_size=v,
            )
        )
        w = np.array(w, dtype=np.float64)
    assume((w > 0).sum() >= min_support)
    return w / w.sum()


@st.composite
def dist_pair(draw, v_max: int = 8, min_support: int = 1):
    v = draw(st.integers(2, v_max))
    return draw(dist(v, min_support)), draw(dist(v, min_support))


def t64(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


# ------------------------------------------------------------------------------------------
# residual and the V2 identity


@given(dist_pair())
def test_residual_is_the_exact_normalized_residual(pq):
    p, q = pq
    r = residual(t64(p), t64(q)).numpy()
    assert np.all(r >= 0)
    assert abs(r.sum() - 1) < 1e-12
    diff = np.maximum(p - q, 0)
    if diff.sum() > 0:
        np.testing.assert_allclose(r, diff / diff.sum(), atol=1e-12)
        # the residual lives where p exceeds q
        assert np.all(r[p <= q] == 0)
    else:  # p == q: never used (rejection has probability 0); must still be a distribution
        np.testing.assert_allclose(r, p, atol=1e-12)


@given(dist_pair())
def test_v2_output_distribution_is_p(pq):
    """q(x) min(1, p/q) + (1 - sum min(p, q)) residual(x) == p(x) for every x."""
    p, q = pq
    pt, qt = t64(p), t64(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, q * np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)
    beta = float(acceptance_probability(pt, qt))
    assert abs(beta - np.minimum(p, q).sum()) < 1e-12
    out = accept + (1 - beta) * residual(pt, qt).numpy()
    np.testing.assert_allclose(out, p, atol=1e-12)


@given(dist(), st.data())
def test_v2_with_one_hot_q_is_p(p, data):
    """Deterministic drafts: accept x with prob p(x), else sample p without x."""
    x = data.draw(st.integers(0, len(p) - 1))
    q = np.eye(len(p))[x]
    out = q * p[x] + (1 - p[x]) * residual(t64(p), t64(q)).numpy()
    np.testing.assert_allclose(out, p, atol=1e-12)


# ------------------------------------------------------------------------------------------
# greedy prefix match


def greedy_match_ref(draft, target, lens):
    ns, nxt = [], []
    for d, t, L in zip(draft, target, lens):
        n = 0
        while n < L and d[n] == t[n]:
            n += 1
        ns.append(n)
        nxt.append(t[n])
    return ns, nxt


@given(st.data())
def test_greedy_match_matches_python_reference(data):
    b = data.draw(st.integers(1, 6))
    g = data.draw(st.integers(0, 6))
    vocab = data.draw(st.integers(1, 3))  # tiny vocab: long matches are common
    tok = st.integers(0, vocab - 1)
    draft = [data.draw(st.lists(tok, min_size=g, max_size=g)) for _ in range(b)]
    target = [data.draw(st.lists(tok, min_size=g + 1, max_size=g + 1)) for _ in range(b)]
    use_len = data.draw(st.booleans())
    lens = [data.draw(st.integers(0, g)) for _ in range(b)] if use_len else [g] * b
    n, nxt = greedy_match(
        torch.tensor(draft, dtype=torch.long).reshape(b, g),
        torch.tensor(target, dtype=torch.long).reshape(b, g + 1),
        torch.tensor(lens) if use_len else None,
    )
    ref_n, ref_nxt = greedy_match_ref(draft, target, lens)
    assert n.tolist() == ref_n
    assert nxt.tolist() == ref_nxt


# ------------------------------------------------------------------------------------------
# rejection_sample (batched V2)


def _batch(dists, n_rows):
    """[n_rows, len(dists), V] float32 copies of per-position distributions."""
    return torch.tensor(np.stack(dists), dtype=torch.float32)[None].expand(n_rows, -1, -1).contiguous()


@settings(max_examples=30)
@given(st.data())
def test_rejection_sample_accepts_everything_when_q_equals_p(data):
    v = data.draw(st.integers(2, 8))
    g = data.draw(st.integers(1, 4))
    ps = [data.draw(dist(v)) for _ in range(g + 1)]
    b = 64
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    p = _batch(ps, b)
    q = p[:, :g]
    draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, g)
    lens = torch.randint(0, g + 1, (b,), generator=gen)
    n, nxt = rejection_sample(draft, p, q, gen, lens)
    assert torch.equal(n, lens)
    # the bonus token comes from p at position n: never a zero-probability token
    assert bool((p[torch.arange(b), n].gather(1, nxt[:, None]) > 0).all())


@settings(max_examples=15)
@given(dist(), st.integers(0, 2**31))
def test_rejection_sample_one_hot_q_accepts_with_probability_p(p, seed):
    """q=None: draft x is accepted with probability p(x); a rejection never emits x.

    Per token x with N_x rows, Hoeffding gives |rate - p(x)| <= sqrt(log(2V/delta) / (2 N_x))
    for all x at once with probability >= 1 - delta (union bound over the V tokens)."""
    v = len(p)
    n_rows = 20000
    gen = torch.Generator().manual_seed(seed)
    pb = _batch([p, p], n_rows)
    draft = torch.randint(0, v, (n_rows, 1), generator=gen)
    n, nxt = rejection_sample(draft, pb, None, gen)
    acc = n == 1
    x = draft[:, 0]
    assert not bool(((~acc) & (nxt == x)).any()), "a rejected deterministic draft was emitted again"
    for tok in range(v):
        rows = x == tok
        cnt = int(rows.sum())
        rate = float(acc[rows].double().mean())
        assert abs(rate - p[tok]) <= math.sqrt(math.log(2 * v / DELTA) / (2 * cnt)), (tok, rate, p[tok])
        if p[tok] == 0:
            assert rate == 0.0


@settings(max_examples=15)
@given(st.data())
def test_rejection_sample_output_follows_p(data):
    """Two draft positions with their own p_i, q_i. The first emitted token must follow p_0 and,
    among rows that accepted the first draft, the second emitted token must follow p_1 (the
    acceptance of position 0 depends only on (x_0, u_0), which are independent of position 1)."""
    v = data.draw(st.integers(2, 8))
    p0, p1, p2 = (data.draw(dist(v)) for _ in range(3))
    one_hot = data.draw(st.booleans())
    n_rows = 20000
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    p = _batch([p0, p1, p2], n_rows)
    if one_hot:
        q = None
        draft = torch.randint(0, v, (n_rows, 2), generator=gen)
    else:
        q0, q1 = data.draw(dist(v)), data.draw(dist(v))
        q = _batch([q0, q1], n_rows)
        draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(n_rows, 2)
    n, nxt = rejection_sample(draft, p, q, gen)
    first = torch.where(n >= 1, draft[:, 0], nxt)
    assert tv(empirical(first, v), p0) <= tv_bound(p0, n_rows)
    acc1 = n >= 1
    second = torch.where(n >= 2, draft[:, 1], nxt)[acc1]
    assume(second.numel() >= 1000)
    assert tv(empirical(second, v), p1) <= tv_bound(p1, second.numel())
    if q is not None:
        # acceptance rate of the first draft is sum_x min(p0, q0) (Hoeffding, delta)
        beta = np.minimum(p0, q0).sum()
        assert abs(float(acc1.double().mean()) - beta) <= math.sqrt(math.log(2 / DELTA) / (2 * n_rows))


def test_rejection_sample_without_drafts_samples_p():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[[0.0, 0.5, 0.5, 0.0]]]).expand(2000, 1, 4)
    n, nxt = rejection_sample(torch.zeros(2000, 0, dtype=torch.long), p, None, gen)
    assert bool((n == 0).all())
    assert set(nxt.tolist()) == {1, 2}


# ------------------------------------------------------------------------------------------
# multi-candidate (V3) step: exact output distribution by enumeration


def _residual_ref(p, q):
    d = np.maximum(p - q, 0.0)
    return d / d.sum() if d.sum() > 1e-15 else p


def candidate_qs(kind, q, cands, v):
    """The distribution q_j each candidate j was drawn from, as the rule assumes."""
    out = []
    cur = None if q is None else q.copy()
    for x in cands:
        if kind == "deterministic":
            out.append(np.eye(v)[x])
        elif kind == "iid":
            out.append(q)
        else:
            out.append(cur.copy())
            cur[x] = 0.0
            if cur.sum() > 0:
                cur = cur / cur.sum()
    return out


def v3_exact_output(p, cands, qs):
    """Exact output distribution of V3 for a fixed candidate list: candidate j is accepted with
    probability min(1, p_res(c_j) / q_j(c_j)), else p_res <- norm(max(0, p_res - q_j));
    after all rejections a token is drawn from p_res."""
    out = np.zeros_like(p)
    reach, pres = 1.0, p.copy()
    for x, qj in zip(cands, qs):
        a = min(1.0, pres[x] / qj[x]) if qj[x] > 0 else 0.0
        out[x] += reach * a
        reach *= 1 - a
        pres = _residual_ref(pres, qj)
    return out + reach * pres


def candidate_draws(kind, q, k, v):
    """All candidate lists with their probabilities under the drafting scheme of ``kind``."""
    if kind == "iid":
        for c in itertools.product(range(v), repeat=k):
            pr = float(np.prod([q[x] for x in c]))
            if pr > 0:
                yield list(c), pr
    else:  # sequential draws without replacement from q
        for c in itertools.permutations(range(v), k):
            pr, mass = 1.0, 1.0
            for x in c:
                pr *= q[x] / mass
                mass -= q[x]
            if pr > 0:
                yield list(c), pr


@settings(max_examples=60)
@given(st.sampled_from(KINDS), st.integers(2, 3), st.data())
def test_multi_candidate_rule_is_exact(kind, k, data):
    """Enumerate every candidate draw: the V3 rule's output distribution equals p exactly."""
    v = data.draw(st.integers(2, 4))
    p = data.draw(dist(v))
    if kind == "deterministic":
        k = min(k, v)
        cands = data.draw(st.permutations(list(range(v))))[:k]
        draws = [(cands, 1.0)]
        q = None
    else:
        q = data.draw(dist(v, min_support=k if kind == "without_replacement" else 1))
        draws = list(candidate_draws(kind, q, k, v))
    assert abs(sum(w for _, w in draws) - 1) < 1e-12
    total = np.zeros(v)
    for cands, w in draws:
        total += w * v3_exact_output(p, cands, candidate_qs(kind, q, cands, v))
    np.testing.assert_allclose(total, p, atol=1e-12)


def _star(p, cands, q, kind):
    """A draft tree whose root has the candidates as children, in order (batch 1): tokens,
    parent, p and q for ``kernels.reference.tree_accept`` (the leaves' rows are never read)."""
    k, v = len(cands), len(p)
    tokens = torch.tensor([[0] + list(cands)])
    parent = torch.tensor([[-1] + [0] * k])
    pn = t64(np.tile(p, (k + 1, 1)))[None]
    qn = None if kind == "deterministic" else t64(np.tile(q, (k + 1, 1)))[None]
    return tokens, parent, pn, qn, v


@settings(max_examples=300)
@given(st.sampled_from(KINDS), st.integers(1, 3), st.data())
def test_tree_accept_implements_the_rule(kind, k, data):
    """For prescribed uniforms u_j, the sampled V3 walk (``kernels.reference.tree_accept``, which
    the Triton kernel matches) accepts exactly the candidate the rule accepts (u_j < p_res(c_j) /
    q_j(c_j), which has probability min(1, p_res/q_j) for u ~ U[0, 1)) and, when all are
    rejected, draws the next token from the rule's residual (argmax of p_res / E for the given
    exponentials E). With the previous test this makes its output distribution exactly p. The
    uniforms are chosen on either side of each threshold (and exactly 0) so that every branch is
    exercised."""
    v = data.draw(st.integers(2, 4))
    p = data.draw(dist(v))
    if kind == "deterministic":
        k = min(k, v)
        cands = data.draw(st.permutations(list(range(v))))[:k]
        q = None
    elif kind == "iid":
        q = data.draw(dist(v))
        cands = [data.draw(st.sampled_from(np.flatnonzero(q).tolist())) for _ in range(k)]
    else:
        q = data.draw(dist(v, min_support=k))
        order = list(np.flatnonzero(q))
        cands = data.draw(st.permutations(order))[:k]

    # the rule, written out, with uniforms placed around each threshold
    qs = candidate_qs(kind, q, cands, v)
    pres, expect, us = p.copy(), None, [0.5] * (len(cands) + 1)
    for j, (x, qj) in enumerate(zip(cands, qs)):
        t = pres[x] / qj[x]
        mode = data.draw(st.sampled_from(["below", "above", "zero"]))
        if mode == "zero":
            u = 0.0
        elif mode == "above" and t < 1:
            u = (t + 1) / 2
        else:
            u = t / 2 if t < 1 else data.draw(st.floats(0.0, 0.999999))
        us[j + 1] = u
        if u < t:
            expect = j
            break
        pres = _residual_ref(pres, qj)

    tokens, parent, pn, qn, v = _star(p, cands, q, kind)
    exps = torch.empty(1, v, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(len(us)))
    path, count, nxt = reference.tree_accept(tokens, parent, pn, qn, kind, t64([us]), exps)
    if expect is None:
        assert int(count) == 0
        assert int(nxt) == int(np.argmax(pres / exps[0].numpy()))
    else:
        assert int(count) == 1 and int(path[0, 0]) == expect + 1


def test_zero_probability_drafts_are_never_accepted():
    """u ~ U[0, 1) can be exactly 0: a draft the target gives probability 0 (e.g. filtered by
    top-k) must still be rejected, in both the chain and the tree rule."""
    p = torch.tensor([[[0.0, 0.6, 0.4], [0.2, 0.3, 0.5]]])

    def zeros(*size, generator=None, device=None, dtype=None):
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        return torch.zeros(size, dtype=dtype or torch.float32)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "rand", zeros)
        n, nxt = rejection_sample(torch.tensor([[0]]), p, None)
        assert int(n) == 0 and int(nxt) in (1, 2)
        n, _ = rejection_sample(torch.tensor([[0]]), p, torch.tensor([[[0.5, 0.25, 0.25]]]))
        assert int(n) == 0
    for kind, q in (("deterministic", None), ("iid", torch.tensor([[[0.5, 0.25, 0.25]] * 2]))):
        path, count, nxt = reference.tree_accept(
            torch.tensor([[0, 0]]), torch.tensor([[-1, 0]]), p, q, kind, torch.zeros(1, 2), torch.ones(1, 3)
        )
        assert int(count) == 0 and int(nxt) in (1, 2), kind


def test_verify_tree_v3_statistics():
    """Monte-Carlo of ``verify_tree``'s sampled walk (real draws) on a root with two candidate
    children: deterministic children, iid and without-replacement drafts. The output token
    follows p within the McDiarmid bound of the module docstring."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    q = np.array([0.1, 0.2, 0.3, 0.4])
    gen = torch.Generator().manual_seed(1)
    n = 3000
    for kind in KINDS:
        outs = []
        for _ in range(n):
            if kind == "deterministic":
                cands = [2, 0]
            else:
                cands = torch.multinomial(t64(q), 2, replacement=kind == "iid", generator=gen).tolist()
            tokens, parent, pn, qn, _ = _star(p, cands, q, kind)
            path, nxt = verify_tree(tokens[0].tolist(), parent[0].tolist(), pn[0],
                                    None if qn is None else qn[0], kind, False, gen)
            outs.append(cands[path[0] - 1] if path else nxt)
        emp = np.bincount(outs, minlength=4) / n
        assert tv(emp, p) <= tv_bound(p, n), (kind, emp)


def test_verify_tree_rejects_bad_arguments():
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="kind"):
        verify_tree([0, 1], [-1, 0], p, p, "bogus", False)
    with pytest.raises(ValueError, match="needs the draft distributions q"):
        verify_tree([0, 1], [-1, 0], p, None, "iid", False)


# ------------------------------------------------------------------------------------------
# verify_tree


@settings(max_examples=80)
@given(st.data())
def test_verify_tree_greedy_follows_argmax(data):
    n = data.draw(st.integers(1, 10))
    v = data.draw(st.integers(2, 3))
    parent = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [data.draw(st.integers(0, v - 1)) for _ in range(n)]
    # random p with a unique argmax per node
    argmaxes = [data.draw(st.integers(0, v - 1)) for _ in range(n)]
    p = torch.rand(n, v, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 2**31))))
    p[torch.arange(n), torch.tensor(argmaxes)] = 2.0
    p = p / p.sum(-1, keepdim=True)
    path, nxt = verify_tree(tokens, parent, p, None, "deterministic", greedy=True)
    # reference walk: at each node go to the first child (in index order) holding the argmax
    node, ref = 0, []
    while True:
        kids = [c for c in range(1, n) if parent[c] == node and tokens[c] == argmaxes[node]]
        if not kids:
            break
        node = kids[0]
        ref.append(node)
    assert path == ref
    assert nxt == argmaxes[node]
    for a, b in zip([0] + path, path):
        assert parent[b] == a


def test_verify_tree_sampling_returns_a_valid_path():
    gen = torch.Generator().manual_seed(0)
    tokens = [0, 1, 2, 1, 3]
    parent = [-1, 0, 0, 1, 3]
    p = torch.full((5, 4), 0.25)
    q = torch.full((5, 4), 0.25)
    for kind in KINDS:
        for _ in range(50):
            path, nxt = verify_tree(
                tokens, parent, p, None if kind == "deterministic" else q, kind, False, gen
            )
            for a, b in zip([0] + path, path):
                assert parent[b] == a
            assert 0 <= nxt < 4
