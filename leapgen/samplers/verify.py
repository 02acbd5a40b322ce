"""Acceptance rules shared by every speculative sampler, written once.

* :func:`greedy_match` - V1, longest prefix of drafts equal to the target's argmax; the output is
  token-for-token greedy decoding of the target.
* :func:`rejection_sample` - V2 (Leviathan et al. 2023, Chen et al. 2023): accept x_i with
  probability min(1, p_i(x_i)/q_i(x_i)); at the first rejection sample the residual
  norm(max(0, p - q)); after full acceptance sample a bonus token from p. With ``q=None`` the
  drafts are deterministic (n-gram / prompt lookup): q is one-hot, the acceptance probability is
  p(x) and the residual is p with x removed. Output tokens follow p exactly.
* :func:`verify_tree` - V3 (SpecInfer's multi-step speculative
  sampling, EAGLE, RSD): several candidate children at a node are tried in turn against a
  residual that shrinks after every rejection. ``kind`` selects q_j: ``"iid"`` (each candidate
  an i.i.d. draw from q), ``"deterministic"`` (one-hot, distinct children), or
  ``"without_replacement"`` (q renormalised without the earlier siblings, i.e. Gumbel-top-k
  drafts as in Recursive Speculative Decoding). The sampled walk is
  :func:`leapgen.kernels.tree_accept` (batched; a Triton kernel and its PyTorch reference), so
  the rule is written once; :func:`candidate_plan` gives the same recursion's acceptance
  probabilities and residuals without coin flips, for exact enumeration checks.
* :func:`kseq_step` - V4, SpecTr's K-SEQ (Sun et al. 2023): one of k i.i.d. candidates from q is
  accepted with probability min(1, p(x)/(rho q(x))), else a token is drawn from the K-SEQ
  residual (:func:`kseq_plan`, :func:`kseq_beta`, :func:`kseq_rho`). ``verify_tree`` walks a
  prefix-shared tree of i.i.d. draft sequences with it (``kind="kseq"``).

All probabilities are the *processed* distributions (see :mod:`leapgen.samplers.logits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from .. import kernels
from .logits import sample

CandidateKind = Literal["iid", "deterministic", "without_replacement"]
KINDS = ("iid", "deterministic", "without_replacement")


def residual(p: Tensor, q: Tensor) -> Tensor:
    """norm(max(0, p - q)) along the last axis; falls back to p where p <= q everywhere.

    The fallback is only reachable when a rejection has probability zero, so it never changes
    the output distribution; it keeps the result a valid distribution under rounding.
    """
    r = (p - q).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(torch.finfo(r.dtype).tiny), p)


def acceptance_probability(p: Tensor, q: Tensor) -> Tensor:
    """Probability that V2 accepts a draft x ~ q: sum_x min(p(x), q(x))."""
    return torch.minimum(p, q).sum(-1)


def _lengths(draft: Tensor, draft_len: Tensor | None) -> Tensor:
    b, g = draft.shape
    if draft_len is None:
        return torch.full((b,), g, dtype=torch.long, device=draft.device)
    return draft_len.to(draft.device).long()


def _first_false(accept: Tensor) -> Tensor:
    """Number of leading True values per row."""
    return accept.long().cumprod(-1).sum(-1)


def greedy_match(draft: Tensor, target: Tensor, draft_len: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """V1. ``draft [B, g]``, ``target [B, g+1]`` (target argmax at each draft position and one
    more). Returns ``(n_accepted [B], next_token [B])``: rows emit ``draft[:n]`` then ``next``.
    Drafts beyond ``draft_len[b]`` are padding and never accepted."""
    b, g = draft.shape
    lens = _lengths(draft, draft_len)
    ok = (draft == target[:, :g]) & (torch.arange(g, device=draft.device)[None] < lens[:, None])
    n = _first_false(ok)
    nxt = target.gather(1, n[:, None]).squeeze(1)
    return n, nxt


def rejection_sample(
    draft: Tensor,
    p: Tensor,
    q: Tensor | None,
    generator: torch.Generator | None = None,
    draft_len: Tensor | None = None,
    *,
    ratio: tuple[Tensor, Tensor] | None = None,
    residual_base: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """V2, batched. ``draft [B, g]`` tokens drawn from ``q [B, g, V]`` (or deterministic when
    ``q`` is None), ``p [B, g+1, V]`` target probabilities at each draft position plus the bonus
    position. Returns ``(n_accepted [B], next_token [B])``.

    Relaxed rules (lossy / bounded samplers) plug in here without a second copy of the loop:
    ``ratio = (num, den)`` (``[B, g]`` each) replaces ``(p(x), q(x))`` in the test
    ``u * den < num`` (GSD's group masses ``p(G), q(G)``, LANTERN's ``p~(x), q(x)``), and
    ``residual_base [B, g, V]`` replaces ``p`` in the residual ``norm(max(0, base - q))`` drawn
    at a rejection (LANTERN: p with the merged neighbours zeroed). Both default to exact V2."""
    # the maths (and its Triton kernel) is leapgen.kernels.chain_accept: the same draws in the same
    # order (uniforms [B, g], then the final draw's exponentials, i.e. torch.multinomial's)
    lens = _lengths(draft, draft_len)
    return kernels.chain_accept(draft, p, q, generator, lens, ratio=ratio, residual_base=residual_base)


def candidate_plan(
    p: Tensor, candidates: Sequence[int], q: Tensor | None, kind: CandidateKind
) -> tuple[list[float], Tensor]:
    """V3 at one node without randomness: ``(accept, p_res)`` where ``accept[j]`` is the
    probability that candidate j is accepted given that candidates ``< j`` were rejected, and
    ``p_res`` the distribution sampled from when every candidate is rejected. Exact enumeration
    tests build the output distribution from it; the sampled rule itself is
    :func:`leapgen.kernels.tree_accept` (one Triton kernel and its PyTorch reference)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind != "deterministic" and q is None:
        raise ValueError(f"kind={kind!r} needs the draft distribution q")
    accept: list[float] = []
    p_res, q_cur = p, q
    for x in candidates:
        if kind == "deterministic":
            q_j = torch.zeros_like(p_res)
            q_j[x] = 1.0
        else:
            q_j = q_cur
        qx = float(q_j[x])
        accept.append(min(1.0, float(p_res[x]) / qx) if qx > 0 else 0.0)
        p_res = residual(p_res, q_j)
        if kind == "without_replacement":
            q_cur = q_cur.clone()
            q_cur[x] = 0.0
            s = q_cur.sum()
            if s <= 0:
                break
            q_cur = q_cur / s
    return accept, p_res


# --------------------------------------------------------------------------------------------
# V4: SpecTr K-SEQ


def _kseq_c(beta: Tensor, k: Tensor | int) -> Tensor:
    """(1 - (1-beta)^k) / beta elementwise (k where beta = 0, its limit)."""
    k = torch.as_tensor(k, dtype=beta.dtype, device=beta.device)
    small = beta <= 1e-12
    c = (1.0 - (1.0 - beta) ** k) / torch.where(small, torch.ones_like(beta), beta)
    return torch.where(small, k.expand_as(beta), c)


def kseq_beta(p: Tensor, q: Tensor, rho: float | Tensor) -> Tensor:
    """beta(rho) = sum_x min(q(x), p(x)/rho) over the last axis: the probability that one
    candidate X ~ q passes K-SEQ's test u <= min(1, p(X)/(rho q(X))). Batched: ``p, q [..., V]``,
    ``rho`` a number or ``[...]``."""
    rho = torch.as_tensor(rho, dtype=p.dtype, device=p.device)
    return torch.minimum(q, p / rho[..., None]).sum(-1)


def kseq_rho(p: Tensor, q: Tensor, k: Tensor | int, grid: int = 8, iters: int = 30) -> Tensor:
    """The smallest rho in [1, k] (up to a coarse grid and ``iters`` bisection steps) for which
    K-SEQ's residual is a distribution: (1 - (1-beta(rho))^k) / beta(rho) <= rho. rho = k always
    qualifies and a smaller rho accepts more often. Batched over the leading axes of ``p, q
    [..., V]`` (``k`` a number or ``[...]``); the result ``[...]`` always satisfies the condition."""
    pd, qd = p.double(), q.double()
    k = torch.as_tensor(k, dtype=torch.float64, device=p.device).expand(p.shape[:-1])

    def ok(rho: Tensor) -> Tensor:
        return _kseq_c(kseq_beta(pd, qd, rho), k) <= rho * (1 + 1e-12)

    # coarse grid from 1 to k: the first grid point that qualifies brackets the smallest rho
    ts = torch.linspace(0.0, 1.0, grid + 1, dtype=torch.float64)
    found = torch.zeros(k.shape, dtype=torch.bool, device=p.device)
    lo, hi = torch.ones_like(k), k.clone()
    prev = torch.ones_like(k)
    for t in ts.tolist():
        rho = 1.0 + (k - 1.0) * t
        good = ok(rho) | (t == 1.0)
        new = good & ~found
        lo = torch.where(new, prev, lo)
        hi = torch.where(new, rho, hi)
        found |= good
        prev = rho
    exact_one = ok(torch.ones_like(k))
    for _ in range(iters):
        mid = (lo + hi) / 2
        good = ok(mid)
        hi = torch.where(good, mid, hi)
        lo = torch.where(good, lo, mid)
    return torch.where(exact_one, torch.ones_like(k), hi)


def kseq_plan(
    p: Tensor, q: Tensor, k: Tensor | int, rho: Tensor | float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """K-SEQ without randomness, batched over leading axes: ``(accept, p_res, rho)``.

    ``accept(x) = min(1, p(x)/(rho q(x)))`` is the probability that a candidate x is accepted
    when tested, and ``p_res`` the distribution drawn from when all k candidates are rejected:

        p_res(x) = [p(x) - min(q(x), p(x)/rho) * (1 - (1-beta)^k)/beta] / (1-beta)^k

    Derivation: with X_1..X_k i.i.d. q tested in turn, P(X_i = x is the first accepted) =
    (1-beta)^(i-1) q(x) accept(x); summed over i, P(some candidate accepted and equal to x) =
    min(q(x), p(x)/rho) (1-(1-beta)^k)/beta, and P(all rejected) = (1-beta)^k. Requiring the total
    to be p(x) gives p_res above: the reference notes' reconstruction is right. It is
    non-negative iff (1-(1-beta)^k)/beta <= rho, which :func:`kseq_rho` guarantees, and sums to 1.
    """
    pd, qd = p.double(), q.double()
    k = torch.as_tensor(k, dtype=torch.float64, device=p.device).expand(p.shape[:-1])
    if rho is None:
        rho = kseq_rho(p, q, k)
    rho = torch.as_tensor(rho, dtype=torch.float64, device=p.device).expand(k.shape)
    m = torch.minimum(qd, pd / rho[..., None])
    beta = m.sum(-1)
    ratio = pd / (rho[..., None] * qd.clamp_min(1e-300))
    accept = torch.where(qd > 0, ratio.clamp(max=1.0), torch.zeros_like(pd))
    none = (1.0 - beta) ** k
    r = ((pd - m * _kseq_c(beta, k)[..., None]) / none.clamp_min(1e-300)[..., None]).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    # where rejection is (almost) impossible any distribution will do; keep p
    use_p = (none <= 1e-12)[..., None] | (s <= 0)
    p_res = torch.where(use_p, pd, r / s.clamp_min(1e-300))
    return accept.to(p.dtype), p_res.to(p.dtype), rho


def kseq_step(
    p: Tensor,
    candidates: Sequence[int],
    q: Tensor,
    generator: torch.Generator | None = None,
    rho: float | None = None,
    plan: tuple[Tensor, Tensor] | None = None,
) -> tuple[int | None, Tensor]:
    """V4 at one node: ``candidates`` are k i.i.d. draws from ``q [V]`` (duplicates allowed, in
    draw order). Returns ``(i, p_res)``: the index of the first accepted candidate (None when all
    are rejected) and the K-SEQ residual to sample from in that case. The output token follows
    ``p`` exactly; k = 1 (rho = 1) is V2. ``plan``: ``(accept, p_res)`` from :func:`kseq_plan`
    for this node and k, when computed in a batch beforehand."""
    k = len(candidates)
    if k == 0:
        return None, p
    if plan is None:
        accept, p_res, _ = kseq_plan(p, q, k, rho)
    else:
        accept, p_res = plan
    for i, x in enumerate(candidates):
        u = float(torch.rand((), generator=generator, device=p.device))
        a = float(accept[x])
        if a > 0 and u <= a:
            return i, p_res
    return None, p_res


def verify_tree(
    tokens: Sequence[int],
    parent: Sequence[int],
    p: Tensor,
    q: Tensor | None,
    kind: CandidateKind | Literal["kseq"],
    greedy: bool,
    generator: torch.Generator | None = None,
    draws: Sequence[Sequence[int]] | None = None,
    kseq: tuple[Tensor, Tensor] | None = None,
) -> tuple[list[int], int]:
    """Walk one row's draft tree from the root (node 0).

    ``tokens[i]``/``parent[i]`` describe node i (topological: ``parent[i] < i``, root parent -1);
    ``p [N, V]``: target distribution of the token *after* node i's path; ``q [N, V]``: the draft
    distribution the children of node i were drawn from. Greedy: follow the child equal to the
    argmax. Sampling: V3 at each node (children tried in node order; :func:`kernels.tree_accept`,
    whose draws are one uniform per node, then the final token's exponentials), or with ``kind="kseq"``
    K-SEQ (V4) over ``draws[i]``: the child node of each i.i.d. draft draw made at node i, in
    draw order (a child appears once per draw that produced its token); ``kseq``: optionally
    ``(accept [N, V], p_res [N, V])`` from a batched :func:`kseq_plan` with k = ``len(draws[i])``.
    Returns
    ``(accepted_nodes, next_token)`` where ``accepted_nodes`` excludes the root.
    """
    if not greedy and kind != "kseq":  # V3: the one sampled tree rule, kernels.tree_accept, on this row
        dev = p.device
        tok = torch.as_tensor(list(tokens), dtype=torch.long, device=dev)[None]
        par = torch.as_tensor(list(parent), dtype=torch.long, device=dev)[None]
        path_t, count, nxt = kernels.tree_accept(tok, par, p[None], None if q is None else q[None], kind, generator)
        packed, n = torch.cat([path_t[0], count, nxt]).tolist(), tok.shape[1]  # one transfer
        return packed[: packed[n]], packed[n + 1]
    children: list[list[int]] = [[] for _ in tokens]
    for i, par in enumerate(parent):
        if i and par >= 0:
            children[par].append(i)
    node, path = 0, []
    while True:
        kids = children[node]
        if greedy:
            best = int(p[node].argmax())
            nxt = next((c for c in kids if int(tokens[c]) == best), None)
            if nxt is None:
                return path, best
            node = nxt
            path.append(node)
            continue
        if not kids:
            return path, int(sample(p[node], generator))
        if draws is None or q is None:
            raise ValueError("kind='kseq' needs q and the draws made at every node")
        cands = list(draws[node])
        plan = None if kseq is None else (kseq[0][node], kseq[1][node])
        i, p_res = kseq_step(p[node], [int(tokens[c]) for c in cands], q[node], generator, plan=plan)
        j = None if i is None else kids.index(cands[i])
        if j is None:
            return path, int(sample(p_res, generator))
        node = kids[j]
        path.append(node)
