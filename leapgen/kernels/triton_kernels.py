"""Triton kernels of :mod:`leapgen.kernels` (imported only when the Triton path is taken).

The kernel bodies are plain functions here and are compiled by :func:`compiled` on first use:
``triton.jit`` decides at decoration time whether a kernel runs compiled (CUDA) or in Triton's
interpreter (``TRITON_INTERPRET=1``, CPU tensors), so the decoration is cached per mode and a
test process may switch the variable at any time.

Every kernel handles one row per program with the whole vocabulary in one block
(``BLOCK_V = next_power_of_2(V)``), takes its random draws as inputs (the dispatchers draw them
from the caller's generator) and computes in float32 (float64 for float64 inputs). Each one is
checked against its reference in :mod:`leapgen.kernels.reference` by ``tests/test_kernels.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..errors import ConfigError
from .backend import interpreting
from .reference import TreeVerify


def sample_kernel(
    x_ptr, seen_ptr, e_ptr, t_ptr, k_ptr, p_ptr, m_ptr, out_ptr,
    V, stride_x, stride_seen, stride_e, penalty, presence, frequency,
    HAS_SEEN: tl.constexpr, CODED: tl.constexpr, FP64: tl.constexpr, NBITS: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Penalties, temperature, top-k, top-p, min-p and one draw (argmax(softmax / E)) for one row.
    ``CODED``: ``seen`` is the int32 coded context ``2 * generated_count + in_prompt`` (repetition
    mask ``!= 0``, counts ``>> 1``) and the frequency / presence penalties are subtracted."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_V)
    valid = offs < V
    neg_inf = float("-inf")
    x = tl.load(x_ptr + row * stride_x + offs, mask=valid, other=neg_inf)
    x = x.to(tl.float64) if FP64 else x.to(tl.float32)
    if HAS_SEEN:
        code = tl.load(seen_ptr + row * stride_seen + offs, mask=valid, other=0)
        x = tl.where(code != 0, tl.where(x > 0, x / penalty, x * penalty), x)
        if CODED:
            count = (code >> 1).to(x.dtype)
            x = x - (count * frequency + (count > 0).to(x.dtype) * presence)
    t = tl.load(t_ptr + row)
    if t == 0:
        tl.store(out_ptr + row, tl.argmax(x, 0).to(tl.int64))
    else:
        x = tl.where(valid, x / t, neg_inf)
        k = tl.load(k_ptr + row)
        top_p = tl.load(p_ptr + row)
        if k > 0 and k < V:
            # the k-th largest value, by binary search over the order-preserving integer keys of
            # the floats: the largest key K with count(key >= K) >= k is that value's key
            if FP64:  # integer keys ordered as the floats: flip the magnitude bits of negatives
                bits = x.to(tl.int64, bitcast=True)
                key = bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)
            else:
                bits32 = x.to(tl.int32, bitcast=True)
                key = (bits32 ^ ((bits32 >> 31) & 0x7FFFFFFF)).to(tl.int64)
            lo = tl.min(key, 0)
            hi = tl.max(key, 0)
            for _ in range(0, NBITS + 1):
                mid = (lo >> 1) + (hi >> 1) + ((lo | hi) & 1)
                ok = tl.sum((key >= mid).to(tl.int32), 0) >= k
                lo = tl.where(ok, mid, lo)
                hi = tl.where(ok, hi, mid - 1)
            kth = tl.min(tl.where(key >= lo, x, float("inf")), 0)
            x = tl.where(x < kth, neg_inf, x)
        if top_p < 1.0:
            # sorted descending, a token is dropped when the mass before it reaches top_p, i.e.
            # kept iff mass(values above it) < top_p: find the largest key K whose mass above
            # still reaches top_p; the kept tokens are those above K
            e = tl.exp(x - tl.max(x, 0))
            probs = e / tl.sum(e, 0)
            if FP64:  # integer keys ordered as the floats: flip the magnitude bits of negatives
                bits = x.to(tl.int64, bitcast=True)
                key = bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)
            else:
                bits32 = x.to(tl.int32, bitcast=True)
                key = (bits32 ^ ((bits32 >> 31) & 0x7FFFFFFF)).to(tl.int64)
            lo = tl.min(key, 0) - 1
            hi = tl.max(key, 0)
            for _ in range(0, NBITS + 1):
                mid = (lo >> 1) + (hi >> 1) + ((lo | hi) & 1)
                ok = tl.sum(tl.where(key > mid, probs, 0.0), 0) >= top_p
                lo = tl.where(ok, mid, lo)
                hi = tl.where(ok, hi, mid - 1)
            thr = tl.min(tl.where(key > lo, x, float("inf")), 0)
            x = tl.where(x < thr, neg_inf, x)
        min_p = tl.load(m_ptr + row)
        if min_p > 0.0:
            # p(x) < min_p * p_max  <=>  exp(x - x_max) < min_p (the normaliser cancels)
            x = tl.where(tl.exp(x - tl.max(x, 0)) < min_p, neg_inf, x)
        e = tl.exp(x - tl.max(x, 0))
        probs = e / tl.sum(e, 0)
        ex = tl.load(e_ptr + row * stride_e + offs, mask=valid, other=1.0)
        score = tl.where(valid, probs / ex, -1.0)
        tl.store(out_ptr + row, tl.argmax(score, 0).to(tl.int64))


def chain_kernel(
    draft_ptr, p_ptr, q_ptr, base_ptr, px_ptr, qx_ptr, u_ptr, e_ptr, len_ptr, n_ptr, next_ptr,
    G, V, s_draft, s_pb, s_pg, s_qb, s_qg, s_bb, s_bg, s_r, s_u, s_e,
    HAS_Q: tl.constexpr, HAS_RATIO: tl.constexpr, HAS_BASE: tl.constexpr,
    FP64: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Accept the leading drafts of one row (u * q(x) < p(x)), then draw the next token from p at
    the first rejected position's residual norm(max(0, p - q)) or, after full acceptance, the
    bonus position's p."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_V)
    valid = offs < V
    length = tl.load(len_ptr + row).to(tl.int32)
    n = 0
    alive = 1
    for j in range(0, G):
        tok = tl.load(draft_ptr + row * s_draft + j)
        if HAS_RATIO:
            px = tl.load(px_ptr + row * s_r + j)
            qx = tl.load(qx_ptr + row * s_r + j)
        else:
            px = tl.load(p_ptr + row * s_pb + j * s_pg + tok)
            if HAS_Q:
                qx = tl.load(q_ptr + row * s_qb + j * s_qg + tok)
            else:
                qx = px * 0 + 1
        px = px.to(tl.float64) if FP64 else px.to(tl.float32)
        qx = qx.to(tl.float64) if FP64 else qx.to(tl.float32)
        u = tl.load(u_ptr + row * s_u + j)
        u = u.to(tl.float64) if FP64 else u.to(tl.float32)
        ok = (qx > 0) & ((px >= qx) | (u * qx < px)) & (j < length)
        alive = alive * ok.to(tl.int32)
        n += alive
    dist = tl.load(p_ptr + row * s_pb + n * s_pg + offs, mask=valid, other=0.0)
    dist = dist.to(tl.float64) if FP64 else dist.to(tl.float32)
    if n < length:
        if HAS_BASE:
            base = tl.load(base_ptr + row * s_bb + n * s_bg + offs, mask=valid, other=0.0)
            base = base.to(tl.float64) if FP64 else base.to(tl.float32)
        else:
            base = dist
        if HAS_Q:
            qn = tl.load(q_ptr + row * s_qb + n * s_qg + offs, mask=valid, other=0.0)
            qn = qn.to(tl.float64) if FP64 else qn.to(tl.float32)
        else:
            tok = tl.load(draft_ptr + row * s_draft + n)
            qn = tl.where(offs == tok, 1.0, 0.0)
        r = tl.maximum(base - qn, 0.0)
        s = tl.sum(r, 0)
        if s > 0:
            dist = r / s
        else:
            dist = base
    ex = tl.load(e_ptr + row * s_e + offs, mask=valid, other=1.0)
    score = tl.where(valid, dist / ex, -1.0)
    tl.store(n_ptr + row, n.to(tl.int64))
    tl.store(next_ptr + row, tl.argmax(score, 0).to(tl.int64))


def tree_node_kernel(
    tok_ptr, par_ptr, p_ptr, anc_ptr, depth_ptr, nodep_ptr, best_ptr,
    N, V, s_tb, s_pb, s_pn,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """One node of one tree: its ancestor row and depth, the argmax of p after its path and the
    probability of its own token at its parent."""
    b = tl.program_id(0)
    i = tl.program_id(1)
    offs_n = tl.arange(0, BLOCK_N)
    offs_v = tl.arange(0, BLOCK_V)
    row = tl.where(offs_n == i, 1, 0)
    j = i.to(tl.int64)  # loop-carried: the parent pointers it takes are int64
    par_i = tl.load(par_ptr + b * s_tb + i)
    alive = (i > 0) & (par_i >= 0)
    for _ in range(0, N):
        # a node's ancestors: walk parent pointers up to the root (node 0)
        nxt = tl.load(par_ptr + b * s_tb + j, mask=alive, other=-1)
        alive = alive & (nxt >= 0) & (j > 0)
        j = tl.where(alive, nxt, j)
        row = tl.where(alive & (offs_n == j), 1, row)
    tl.store(anc_ptr + (b * N + i) * N + offs_n, row.to(tl.int8), mask=offs_n < N)
    tl.store(depth_ptr + b * N + i, (tl.sum(row, 0) - 1).to(tl.int64))
    pv = tl.load(p_ptr + b * s_pb + i * s_pn + offs_v, mask=offs_v < V, other=float("-inf"))
    tl.store(best_ptr + b * N + i, tl.argmax(pv, 0).to(tl.int64))
    has_par = (i > 0) & (par_i >= 0)
    tok = tl.load(tok_ptr + b * s_tb + i)
    val = tl.load(p_ptr + b * s_pb + tl.maximum(par_i, 0) * s_pn + tok, mask=has_par, other=0.0)
    tl.store(nodep_ptr + b * N + i, val)


def tree_walk_kernel(
    tok_ptr, par_ptr, best_ptr, path_ptr, count_ptr, next_ptr, N, s_tb,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Greedy walk of one tree: from the root, follow the lowest-index child whose token is the
    argmax at the current node."""
    b = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    inside = offs < N
    toks = tl.load(tok_ptr + b * s_tb + offs, mask=inside, other=-1)
    pars = tl.load(par_ptr + b * s_tb + offs, mask=inside, other=-3)
    is_child = inside & (offs > 0) & (pars >= 0)
    node = 0
    count = 0
    alive = 1
    for step in range(0, N - 1):
        want = tl.load(best_ptr + b * N + node)
        match = is_child & (pars == node) & (toks == want) & (alive > 0)
        child = tl.min(tl.where(match, offs, BLOCK_N), 0)
        found = child < BLOCK_N
        tl.store(path_ptr + b * N + step, child.to(tl.int64), mask=found)
        alive = alive * found.to(tl.int32)
        count += found.to(tl.int32)
        node = tl.where(found, child, node)
    tl.store(count_ptr + b, count.to(tl.int64))
    tl.store(next_ptr + b, tl.load(best_ptr + b * N + node))


def tree_accept_kernel(
    tok_ptr, par_ptr, p_ptr, q_ptr, u_ptr, e_ptr, path_ptr, count_ptr, next_ptr,
    N, V, s_tb, s_pb, s_pn, s_qb, s_qn, s_u, s_e,
    KIND: tl.constexpr, HAS_Q: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Sampled walk of one row's draft tree (``reference.tree_accept``): one pass over the nodes in
    order, testing the children of the current node against the shrinking residual. KIND: 0 iid,
    1 deterministic, 2 without replacement."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_V)
    valid = offs < V
    p_res = tl.load(p_ptr + row * s_pb + offs, mask=valid, other=0.0)
    p_res = p_res.to(tl.float64) if FP64 else p_res.to(tl.float32)
    q_cur = p_res * 0.0
    if HAS_Q:
        q_cur = tl.load(q_ptr + row * s_qb + offs, mask=valid, other=0.0)
        q_cur = q_cur.to(tl.float64) if FP64 else q_cur.to(tl.float32)
    node = 0
    count = 0
    live = 1
    for c in range(1, N):
        par = tl.load(par_ptr + row * s_tb + c)
        x = tl.load(tok_ptr + row * s_tb + c)
        test = (live > 0) & (par == node)
        hit = offs == x
        px = tl.sum(tl.where(hit, p_res, 0.0), 0)
        if KIND == 1:
            q_j = tl.where(hit, p_res * 0.0 + 1.0, p_res * 0.0)
        else:
            q_j = q_cur
        qx = tl.sum(tl.where(hit, q_j, 0.0), 0)
        u = tl.load(u_ptr + row * s_u + c)
        u = u.to(tl.float64) if FP64 else u.to(tl.float32)
        ok = test & (qx > 0) & ((px >= qx) | (u * qx < px))
        rej = test & (ok == 0)
        tl.store(path_ptr + row * N + count, c + count * 0, mask=ok)
        count += ok.to(tl.int32)
        node = tl.where(ok, c, node)
        r = tl.maximum(p_res - q_j, 0.0)
        s = tl.sum(r, 0)
        res = tl.where(s > 0, r / tl.where(s > 0, s, 1.0), p_res)
        nxt_p = tl.load(p_ptr + row * s_pb + c * s_pn + offs, mask=valid, other=0.0)
        nxt_p = nxt_p.to(tl.float64) if FP64 else nxt_p.to(tl.float32)
        p_res = tl.where(ok, nxt_p, tl.where(rej, res, p_res))
        if HAS_Q:
            nxt_q = tl.load(q_ptr + row * s_qb + c * s_qn + offs, mask=valid, other=0.0)
            nxt_q = nxt_q.to(tl.float64) if FP64 else nxt_q.to(tl.float32)
            if KIND == 2:
                dropped = tl.where(hit, 0.0, q_cur)
                sq = tl.sum(dropped, 0)
                live = live * (1 - (rej & (sq <= 0)).to(tl.int32))
                shrunk = tl.where(sq > 0, dropped / tl.where(sq > 0, sq, 1.0), q_cur)
                q_cur = tl.where(rej, shrunk, q_cur)
            q_cur = tl.where(ok, nxt_q, q_cur)
    ex = tl.load(e_ptr + row * s_e + offs, mask=valid, other=1.0)
    score = tl.where(valid, p_res / ex, -1.0)
    tl.store(count_ptr + row, count.to(tl.int64))
    tl.store(next_ptr + row, tl.argmax(score, 0).to(tl.int64))


_COMPILED: dict[bool, SimpleNamespace] = {}


def interpreter_ready() -> bool:
    """Whether triton itself was imported in interpreter mode. Triton decorates its own library
    (``tl.argmax``, ``tl.cumsum``...) when it is first imported, so ``TRITON_INTERPRET=1`` must be
    in the environment before that import; set later, interpreted kernels cannot call it."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.argmax, InterpretedFunction)


def compiled() -> SimpleNamespace:
    """The jitted kernels for the current mode (compiled or interpreted), decorated once per mode."""
    mode = interpreting()
    if mode and not interpreter_ready():
        raise ConfigError(
            "TRITON_INTERPRET=1 was set after triton had been imported in this process; set it in the "
            "environment before the first import of triton (e.g. TRITON_INTERPRET=1 python ...)"
        )
    if mode not in _COMPILED:
        _COMPILED[mode] = SimpleNamespace(
            sample=triton.jit(sample_kernel),
            chain=triton.jit(chain_kernel),
            tree_node=triton.jit(tree_node_kernel),
            tree_walk=triton.jit(tree_walk_kernel),
            tree_accept=triton.jit(tree_accept_kernel),
        )
    return _COMPILED[mode]


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(int(n)))


def sample_logits(
    logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, exponentials: Tensor,
    seen: Tensor | None, repetition_penalty: float, min_p: Tensor,
    presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
) -> Tensor:  # fmt: skip
    """Launch :func:`sample_kernel`: ``logits [N, V]``, per-row parameters ``[N]``; ``seen`` a bool
    mask or the int32 coded context (then the frequency / presence penalties apply)."""
    n, v = logits.shape
    out = torch.empty(n, dtype=torch.long, device=logits.device)
    coded = seen is not None and seen.dtype != torch.bool
    seen_arg = (seen if coded else seen.view(torch.uint8)) if seen is not None else logits
    compiled().sample[(n,)](
        logits, seen_arg, exponentials, temperature, top_k, top_p, min_p, out,
        v, logits.stride(0), seen_arg.stride(0), exponentials.stride(0), float(repetition_penalty),
        float(presence_penalty), float(frequency_penalty),
        HAS_SEEN=seen is not None, CODED=coded, FP64=logits.dtype == torch.float64,
        NBITS=64 if logits.dtype == torch.float64 else 32, BLOCK_V=_block(v),
    )  # fmt: skip
    return out


def chain_accept(
    draft: Tensor, p: Tensor, q: Tensor | None, lens: Tensor, uniforms: Tensor, exponentials: Tensor,
    ratio: tuple[Tensor, Tensor] | None, residual_base: Tensor | None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Launch :func:`chain_kernel` for ``draft [B, g]``, ``p [B, g+1, V]``."""
    b, g = draft.shape
    v = p.shape[-1]
    n = torch.empty(b, dtype=torch.long, device=p.device)
    nxt = torch.empty(b, dtype=torch.long, device=p.device)
    qa = q if q is not None else p
    base = residual_base if residual_base is not None else p
    px, qx = ratio if ratio is not None else (uniforms, uniforms)
    if ratio is not None and px.stride() != qx.stride():
        qx = qx.reshape(px.shape).contiguous()
        px = px.contiguous()
        qx = qx.contiguous()
    compiled().chain[(b,)](
        draft, p, qa, base, px, qx, uniforms, exponentials, lens, n, nxt,
        g, v, draft.stride(0), p.stride(0), p.stride(1), qa.stride(0), qa.stride(1),
        base.stride(0), base.stride(1), px.stride(0), uniforms.stride(0), exponentials.stride(0),
        HAS_Q=q is not None, HAS_RATIO=ratio is not None, HAS_BASE=residual_base is not None,
        FP64=p.dtype == torch.float64, BLOCK_V=_block(v),
    )  # fmt: skip
    return n, nxt


def tree_verify(tokens: Tensor, parent: Tensor, p: Tensor) -> TreeVerify:
    """Launch :func:`tree_node_kernel` over ``(B, N)`` then :func:`tree_walk_kernel` over ``B``."""
    b, n = tokens.shape
    v = p.shape[-1]
    dev = p.device
    anc = torch.empty(b, n, n, dtype=torch.uint8, device=dev)
    depth = torch.empty(b, n, dtype=torch.long, device=dev)
    node_p = torch.empty(b, n, dtype=p.dtype, device=dev)
    best = torch.empty(b, n, dtype=torch.long, device=dev)
    path = torch.full((b, n), -1, dtype=torch.long, device=dev)
    count = torch.empty(b, dtype=torch.long, device=dev)
    nxt = torch.empty(b, dtype=torch.long, device=dev)
    k = compiled()
    k.tree_node[(b, n)](
        tokens, parent, p, anc, depth, node_p, best, n, v, tokens.stride(0), p.stride(0), p.stride(1),
        BLOCK_N=_block(n), BLOCK_V=_block(v),
    )  # fmt: skip
    k.tree_walk[(b,)](tokens, parent, best, path, count, nxt, n, tokens.stride(0), BLOCK_N=_block(n))
    return TreeVerify(anc.view(torch.bool), depth, node_p, best, path, count, nxt)


def tree_accept(
    tokens: Tensor, parent: Tensor, p: Tensor, q: Tensor | None, kind: int, uniforms: Tensor, exponentials: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Launch :func:`tree_accept_kernel` over ``B`` rows."""
    b, n = tokens.shape
    v = p.shape[-1]
    path = torch.full((b, n), -1, dtype=torch.long, device=p.device)
    count = torch.empty(b, dtype=torch.long, device=p.device)
    nxt = torch.empty(b, dtype=torch.long, device=p.device)
    qa = q if q is not None else p
    compiled().tree_accept[(b,)](
        tokens, parent, p, qa, uniforms, exponentials, path, count, nxt,
        n, v, tokens.stride(0), p.stride(0), p.stride(1), qa.stride(0), qa.stride(1),
        uniforms.stride(0), exponentials.stride(0),
        KIND=kind, HAS_Q=q is not None, FP64=p.dtype == torch.float64, BLOCK_V=_block(v),
    )  # fmt: skip
    return path, count, nxt
