"""Acceptance rules shared by every speculative sampler, written once.

* :func:`greedy_match` - V1, longest prefix of drafts equal to the target's argmax; the output is
  token-for-token greedy decoding of the target.
* :func:`rejection_sample` - V2 (Leviathan et al. 2023, Chen et al. 2023): accept x_i with
  probability min(1, p_i(x_i)/q_i(x_i)); at the first rejection sample the residual
  norm(max(0, p - q)); after full acceptance sample a bonus token from p. With ``q=None`` the
  drafts are deterministic (n-gram / prompt lookup): q is one-hot, the acceptance probability is
  p(x) and the residual is p with x removed. Output tokens follow p exactly.
* :func:`multi_candidate_step` / :func:`verify_tree` - V3 (SpecInfer's multi-step speculative
  sampling, EAGLE, RSD): several candidate children at a node are tried in turn against a
  residual that shrinks after every rejection. ``kind`` selects q_j: ``"iid"`` (each candidate
  an i.i.d. draw from q), ``"deterministic"`` (one-hot, distinct children), or
  ``"without_replacement"`` (q renormalised without the earlier siblings, i.e. Gumbel-top-k
  drafts as in Recursive Speculative Decoding).

All probabilities are the *processed* distributions (see :mod:`leapgen.samplers.logits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

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
) -> tuple[Tensor, Tensor]:
    """V2, batched. ``draft [B, g]`` tokens drawn from ``q [B, g, V]`` (or deterministic when
    ``q`` is None), ``p [B, g+1, V]`` target probabilities at each draft position plus the bonus
    position. Returns ``(n_accepted [B], next_token [B])``."""
    b, g = draft.shape
    lens = _lengths(draft, draft_len)
    if g == 0:
        return torch.zeros(b, dtype=torch.long, device=p.device), sample(p[:, 0], generator)
    px = p[:, :g].gather(-1, draft[..., None]).squeeze(-1)
    qx = torch.ones_like(px) if q is None else q.gather(-1, draft[..., None]).squeeze(-1)
    u = torch.rand(b, g, generator=generator, device=p.device, dtype=p.dtype)
    ok = (qx > 0) & (u * qx <= px) & (torch.arange(g, device=p.device)[None] < lens[:, None])
    n = _first_false(ok)
    p_n = p.gather(1, n[:, None, None].expand(b, 1, p.shape[-1])).squeeze(1)
    rejected = n < lens
    if bool(rejected.any()):
        idx = n.clamp_max(g - 1)
        if q is None:
            q_n = torch.nn.functional.one_hot(draft.gather(1, idx[:, None]).squeeze(1), p.shape[-1]).to(p.dtype)
        else:
            q_n = q.gather(1, idx[:, None, None].expand(b, 1, q.shape[-1])).squeeze(1)
        p_n = torch.where(rejected[:, None], residual(p_n, q_n), p_n)
    return n, sample(p_n, generator)


def multi_candidate_step(
    p: Tensor,
    candidates: Sequence[int],
    q: Tensor | None,
    kind: CandidateKind,
    generator: torch.Generator | None = None,
) -> tuple[int | None, Tensor]:
    """V3 at one node: try ``candidates`` in order against the target distribution ``p [V]``.

    Returns ``(j, p_res)``: the index of the accepted candidate (None when all are rejected) and
    the residual distribution to sample from when none was accepted.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind != "deterministic" and q is None:
        raise ValueError(f"kind={kind!r} needs the draft distribution q")
    p_res = p.clone()
    q_cur = None if q is None else q.clone()
    for j, x in enumerate(candidates):
        if kind == "deterministic":
            q_j = torch.zeros_like(p_res)
            q_j[x] = 1.0
        else:
            q_j = q_cur
        qx = float(q_j[x])
        u = float(torch.rand((), generator=generator, device=p.device))
        if qx > 0 and u * qx <= float(p_res[x]):
            return j, p_res
        p_res = residual(p_res, q_j)
        if kind == "without_replacement":
            q_cur = q_cur.clone()
            q_cur[x] = 0.0
            s = q_cur.sum()
            if s <= 0:
                break
            q_cur = q_cur / s
    return None, p_res


def verify_tree(
    tokens: Sequence[int],
    parent: Sequence[int],
    p: Tensor,
    q: Tensor | None,
    kind: CandidateKind,
    greedy: bool,
    generator: torch.Generator | None = None,
) -> tuple[list[int], int]:
    """Walk one row's draft tree from the root (node 0).

    ``tokens[i]``/``parent[i]`` describe node i (topological: ``parent[i] < i``, root parent -1);
    ``p [N, V]``: target distribution of the token *after* node i's path; ``q [N, V]``: the draft
    distribution the children of node i were drawn from. Greedy: follow the child equal to the
    argmax. Sampling: V3 at each node. Returns ``(accepted_nodes, next_token)`` where
    ``accepted_nodes`` excludes the root.
    """
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
        j, p_res = multi_candidate_step(
            p[node], [int(tokens[c]) for c in kids], None if q is None else q[node], kind, generator
        )
        if j is None:
            return path, int(sample(p_res, generator))
        node = kids[j]
        path.append(node)
