"""PyTorch references of the kernels: the CPU path and the definition of correct.

Every function here is the maths the samplers ran before the kernels existed, op for op, so that
routing a sampler through :mod:`leapgen.kernels` changes none of its outputs:

* :func:`process_logits` - ``LogitsProcessor.process``: repetition penalty, frequency and presence
  penalties (vLLM's order), temperature, top-k, top-p, min-p (transformers' order, with min-p last
  as vLLM applies it after top-k / top-p), with scalar or per-row parameters.
* :func:`sample_logits` - ``sample(LogitsProcessor.probs(...))``. Sampling takes exponential draws
  ``E [N, V]`` and returns ``argmax(softmax(l) / E)``: that is exactly what ``torch.multinomial``
  does for one sample (it draws ``empty_like(probs).exponential_(generator)`` and takes the argmax
  of ``probs / E``), so the same generator gives the same token as before.
* :func:`chain_accept` - ``verify.rejection_sample`` with its uniforms ``u [B, g]`` and the
  exponentials of the final draw passed in.
* :func:`tree_verify` - the ancestor mask of a batch of trees (``trees.ancestor_mask``), the depth
  of every node, the target's probability of every node's token given its parent's path, and the
  greedy walk (``acceptance.greedy_walk``) from the root.

Nothing here draws random numbers: callers (the dispatchers in :mod:`leapgen.kernels.ops`) draw
them from the caller's generator, so the Triton kernels and these references see the same draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError

Param = float | int | Tensor


def _is_scalar(x: Param) -> bool:
    return not isinstance(x, Tensor)


def penalize(
    logits: Tensor,
    seen: Tensor | None,
    repetition_penalty: float,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
) -> Tensor:
    """CTRL repetition penalty (divide positive / multiply negative logits of seen tokens), then
    vLLM's ``logits -= frequency_penalty * count + presence_penalty * (count > 0)``.

    ``seen`` is the bool mask of the context's tokens, or the *coded context* (an integer tensor
    ``2 * count + in_prompt``: ``count`` the times the token was generated, ``in_prompt`` 1 when the
    prompt holds it; :mod:`leapgen.samplers.penalties` builds it): then the repetition penalty's mask
    is ``seen != 0`` and the generated counts are ``seen >> 1``. A bool mask carries no counts (the
    presence and frequency penalties need the coded context)."""
    if seen is None:
        return logits
    coded = seen.dtype != torch.bool
    if not coded and (presence_penalty != 0.0 or frequency_penalty != 0.0):
        raise InputError("presence_penalty / frequency_penalty need the generated counts: pass the coded context "
                         "(leapgen.samplers.penalties), not a bool mask")
    if repetition_penalty != 1.0:
        pen = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)
        logits = torch.where(seen != 0 if coded else seen, pen, logits)
    if coded and (presence_penalty != 0.0 or frequency_penalty != 0.0):
        count = seen >> 1
        sub = count.to(logits.dtype) * frequency_penalty + (count > 0).to(logits.dtype) * presence_penalty
        logits = logits - sub
    return logits


def _top_p_drop(logits: Tensor, top_p: Param) -> Tensor:
    """Drop a token when the mass strictly before it (sorted, descending) already reaches top_p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    thr = top_p if _is_scalar(top_p) else top_p[..., None]
    drop_sorted = (probs.cumsum(-1) - probs) >= thr
    return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _min_p_drop(logits: Tensor, min_p: Param) -> Tensor:
    """Drop a token whose probability is below ``min_p`` times the top token's (vLLM's min-p).

    ``p(x) < min_p * p_max`` is ``exp(l(x) - l_max) < min_p`` (the softmax normaliser cancels), which
    is how it is computed here and in the fused kernel (float32, float64 for float64 logits)."""
    cdt = _compute_dtype(logits)
    rel = (logits - logits.amax(-1, keepdim=True)).to(cdt).exp()
    thr = min_p if _is_scalar(min_p) else min_p.to(cdt)[..., None]
    return rel < thr


def process_logits(
    logits: Tensor,
    temperature: Param,
    top_k: Param = 0,
    top_p: Param = 1.0,
    seen: Tensor | None = None,
    repetition_penalty: float = 1.0,
    min_p: Param = 0.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
) -> Tensor:
    """Processed logits ``[..., V]``: temperature-scaled and filtered with -inf.

    Scalar parameters run ``LogitsProcessor.process`` exactly (greedy, ``temperature == 0``:
    penalty only). Tensor parameters are per row (shape ``logits.shape[:-1]``; ``top_k`` 0 means
    off, ``min_p`` 0 means off, greedy rows keep the penalised logits); each row gets the same
    values as the scalar path with that row's parameters. ``min_p`` runs last, on what top-k and
    top-p kept.
    """
    logits = penalize(logits, seen, repetition_penalty, presence_penalty, frequency_penalty)
    if _is_scalar(temperature) and _is_scalar(top_k) and _is_scalar(top_p) and _is_scalar(min_p):
        if temperature == 0.0:
            return logits
        logits = logits / temperature
        if top_k and top_k < logits.shape[-1]:
            kth = torch.topk(logits, int(top_k), dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p < 1.0:
            logits = logits.masked_fill(_top_p_drop(logits, top_p), float("-inf"))
        if min_p > 0.0:
            logits = logits.masked_fill(_min_p_drop(logits, min_p), float("-inf"))
        return logits
    lead, v = logits.shape[:-1], logits.shape[-1]
    t = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device).expand(lead)
    k = torch.as_tensor(top_k, dtype=torch.long, device=logits.device).expand(lead)
    p = torch.as_tensor(top_p, dtype=logits.dtype, device=logits.device).expand(lead)
    greedy = t == 0
    out = logits / torch.where(greedy, torch.ones_like(t), t)[..., None]
    k_on = (k > 0) & (k < v)
    kth = torch.sort(out, dim=-1, descending=True).values.gather(-1, (k.clamp(1, v) - 1)[..., None])
    out = out.masked_fill(k_on[..., None] & (out < kth), float("-inf"))
    out = out.masked_fill((p < 1.0)[..., None] & _top_p_drop(out, p), float("-inf"))
    m = torch.as_tensor(min_p, dtype=_compute_dtype(logits), device=logits.device).expand(lead)
    out = out.masked_fill((m > 0)[..., None] & _min_p_drop(out, m), float("-inf"))
    return torch.where(greedy[..., None], logits, out)


def sample_logits(
    logits: Tensor,
    temperature: Param,
    top_k: Param,
    top_p: Param,
    exponentials: Tensor | None,
    seen: Tensor | None = None,
    repetition_penalty: float = 1.0,
    min_p: Param = 0.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
) -> Tensor:
    """Tokens ``[...]`` from raw logits ``[..., V]``: the argmax of the penalised logits on greedy
    rows, ``argmax(softmax(processed) / exponentials)`` (``torch.multinomial``'s draw) elsewhere.
    ``exponentials`` may be None only when every row is greedy (scalar ``temperature == 0``)."""
    processed = process_logits(
        logits, temperature, top_k, top_p, seen, repetition_penalty, min_p, presence_penalty, frequency_penalty
    )
    if _is_scalar(temperature) and temperature == 0.0:
        return processed.argmax(-1)
    if exponentials is None:
        raise ValueError("sampling rows need exponential draws")
    drawn = (processed.softmax(-1) / exponentials).argmax(-1)
    if _is_scalar(temperature):
        return drawn
    return torch.where(temperature == 0, processed.argmax(-1), drawn)


def residual(p: Tensor, q: Tensor) -> Tensor:
    """norm(max(0, p - q)) along the last axis; p where p <= q everywhere (``verify.residual``)."""
    r = (p - q).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(torch.finfo(r.dtype).tiny), p)


def chain_accept(
    draft: Tensor,
    p: Tensor,
    q: Tensor | None,
    lens: Tensor,
    uniforms: Tensor,
    exponentials: Tensor,
    ratio: tuple[Tensor, Tensor] | None = None,
    residual_base: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Chain rejection sampling (V2) of ``draft [B, g]`` (``g >= 1``) against ``p [B, g+1, V]``
    with draft distributions ``q [B, g, V]`` (None: deterministic drafts, one-hot q). ``lens [B]``
    drafts per row, ``uniforms [B, g]`` the acceptance coins, ``exponentials [B, V]`` the final
    draw. ``ratio`` / ``residual_base``: the relaxed rules of ``verify.rejection_sample``.
    Returns ``(n_accepted [B], next_token [B])``."""
    b, g = draft.shape
    v = p.shape[-1]
    if ratio is None:
        px = p[:, :g].gather(-1, draft[..., None]).squeeze(-1)
        qx = torch.ones_like(px) if q is None else q.gather(-1, draft[..., None]).squeeze(-1)
    else:
        px, qx = ratio
    u = uniforms
    # accept iff u < p/q (strict: u ~ U[0, 1) may be exactly 0, and a token with p = 0 must never
    # be accepted); p >= q accepts outright, so rounding in u * q cannot reject it
    ok = (qx > 0) & ((px >= qx) | (u * qx < px)) & (torch.arange(g, device=p.device)[None] < lens[:, None])
    n = ok.long().cumprod(-1).sum(-1)
    p_n = p.gather(1, n[:, None, None].expand(b, 1, v)).squeeze(1)
    # the residual is formed for every row and used where a draft was rejected: no host sync
    rejected = n < lens
    idx = n.clamp_max(g - 1)
    if q is None:
        q_n = torch.nn.functional.one_hot(draft.gather(1, idx[:, None]).squeeze(1), v).to(p.dtype)
    else:
        q_n = q.gather(1, idx[:, None, None].expand(b, 1, v)).squeeze(1)
    base = p_n
    if residual_base is not None:
        base = residual_base.gather(1, idx[:, None, None].expand(b, 1, v)).squeeze(1)
    p_n = torch.where(rejected[:, None], residual(base, q_n), p_n)
    return n, (p_n / exponentials).argmax(-1)


@dataclass
class TreeVerify:
    """What :func:`tree_verify` returns for a batch of ``B`` trees of ``N`` (padded) nodes."""

    anc: Tensor  # [B, N, N] bool: anc[b, i, j] iff j is i or an ancestor of i
    depth: Tensor  # [B, N] long: root 0 (padding nodes 0)
    node_p: Tensor  # [B, N]: p[b, parent[i], tokens[i]] (0 for the root and padding nodes)
    best: Tensor  # [B, N] long: argmax of p at every node
    path: Tensor  # [B, N] long: accepted nodes of the greedy walk (root excluded), padded with -1
    n_accepted: Tensor  # [B] long
    next_token: Tensor  # [B] long: best at the last accepted node


def ancestor_mask(parent: Tensor) -> Tensor:
    """``[B, N, N]`` bool: ``anc[b, i, j]`` iff j is i or an ancestor of i; padding nodes (and nodes with a
    negative parent) see only themselves. The one implementation (``samplers.trees.ancestor_mask`` calls it).

    Pointer doubling, with no host sync and no loop over nodes: after round r every row holds the
    node's ancestors up to 2^r levels up, and ``up`` points 2^r levels up (a root points at itself),
    so ``ceil(log2(N))`` rounds cover any depth; the order of the nodes does not matter."""
    b, n = parent.shape
    idx = torch.arange(n, device=parent.device)
    up = torch.where(parent >= 0, parent.clamp(max=n - 1), idx)  # [B, N]: the parent, or the node itself
    anc = torch.eye(n, dtype=torch.bool, device=parent.device)[None] | (up[:, :, None] == idx)  # itself and its parent
    for _ in range(max(n - 1, 1).bit_length()):
        anc = anc | anc.gather(1, up[:, :, None].expand(b, n, n))
        up = up.gather(1, up)
    return anc


def tree_verify(tokens: Tensor, parent: Tensor, p: Tensor) -> TreeVerify:
    """Gather and greedy walk for ``tokens, parent [B, N]`` (topological, root node 0 with parent
    -1, padding -2) and ``p [B, N, V]`` (the target's logits or probabilities after each node's
    path). The walk follows from the root the first child (lowest index) whose token is the
    argmax at its parent, as ``acceptance.greedy_walk``."""
    b, n = tokens.shape
    anc = ancestor_mask(parent)
    depth = anc.sum(-1) - 1
    best = p.argmax(-1)
    has_par = (parent >= 0) & (torch.arange(n, device=p.device)[None] > 0)
    par = parent.clamp_min(0)
    rows = p.gather(1, par[..., None].expand(b, n, p.shape[-1]))
    node_p = rows.gather(-1, tokens[..., None]).squeeze(-1)
    node_p = torch.where(has_par, node_p, torch.zeros_like(node_p))
    node = torch.zeros(b, dtype=torch.long, device=p.device)
    alive = torch.ones(b, dtype=torch.bool, device=p.device)
    path = torch.full((b, n), -1, dtype=torch.long, device=p.device)
    count = torch.zeros(b, dtype=torch.long, device=p.device)
    for step in range(max(n - 1, 0)):
        want = best.gather(1, node[:, None])
        match = has_par & (parent == node[:, None]) & (tokens == want) & alive[:, None]
        found = match.any(-1)
        child = match.long().argmax(-1)
        path[:, step] = torch.where(found, child, path[:, step])
        count += found.long()
        node = torch.where(found, child, node)
        alive &= found
    nxt = best.gather(1, node[:, None]).squeeze(1)
    return TreeVerify(anc, depth, node_p, best, path, count, nxt)


TREE_KINDS = ("iid", "deterministic", "without_replacement")


def tree_accept(
    tokens: Tensor, parent: Tensor, p: Tensor, q: Tensor | None, kind: str, uniforms: Tensor, exponentials: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Sampled walk of a batch of draft trees (SpecInfer's multi-candidate rejection sampling, V3 of
    ``verify.verify_tree``): from the root, the children of the current node are tried in node order;
    child c (token x) is accepted iff ``u[c] q_j(x) < p_res(x)`` (outright when ``p_res(x) >= q_j(x)``)
    and the walk moves to it with ``p_res = p[c]``; a rejection shrinks ``p_res`` to
    ``norm(max(0, p_res - q_j))``. When no child is accepted (or the node is a leaf) the next token
    is ``argmax(p_res / E)``. ``q_j``: one-hot x (``deterministic``), ``q[node]`` (``iid``) or
    ``q[node]`` renormalised without the earlier siblings (``without_replacement``; a node whose q
    runs out stops there). ``uniforms [B, N]`` (one coin per node; node 0's unused) and
    ``exponentials [B, V]`` are the draws. Nodes are topological, so one pass over them suffices.
    Returns ``(path [B, N] padded with -1, n_accepted [B], next_token [B])``."""
    b, n = tokens.shape
    v = p.shape[-1]
    dev = p.device
    rows = torch.arange(b, device=dev)
    node = torch.zeros(b, dtype=torch.long, device=dev)
    count = torch.zeros(b, dtype=torch.long, device=dev)
    path = torch.full((b, n + 1), -1, dtype=torch.long, device=dev)
    live = torch.ones(b, dtype=torch.bool, device=dev)
    p_res = p[:, 0]
    q_cur = None if q is None else q[:, 0]
    for c in range(1, n):
        test = live & (parent[:, c] == node)
        x = tokens[:, c].clamp(0, v - 1)[:, None]
        px = p_res.gather(1, x).squeeze(1)
        if kind == "deterministic" or q_cur is None:
            q_j = torch.zeros_like(p_res).scatter_(1, x, 1.0)
        else:
            q_j = q_cur
        qx = q_j.gather(1, x).squeeze(1)
        ok = test & (qx > 0) & ((px >= qx) | (uniforms[:, c] * qx < px))
        rej = test & ~ok
        path[rows, torch.where(ok, count, n)] = c  # column n collects the rows that did not move
        count += ok.long()
        node = torch.where(ok, c, node)
        p_res = torch.where(ok[:, None], p[:, c], torch.where(rej[:, None], residual(p_res, q_j), p_res))
        if q is not None and q_cur is not None:
            if kind == "without_replacement":
                dropped = q_cur.scatter(1, x, 0.0)
                s = dropped.sum(-1, keepdim=True)
                live &= ~(rej & (s.squeeze(1) <= 0))
                shrunk = torch.where(s > 0, dropped / s.clamp_min(torch.finfo(s.dtype).tiny), q_cur)
                q_cur = torch.where(rej[:, None], shrunk, q_cur)
            q_cur = torch.where(ok[:, None], q[:, c], q_cur)
    return path[:, :n], count, (p_res / exponentials).argmax(-1)
