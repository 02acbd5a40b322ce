"""Acceptance rules: the other half of the proposer / acceptance split.

A rule is built by a loop once per ``generate`` call (``Rule(sampler, lm)``; it may fetch what it
needs from the model, e.g. LANTERN's latent neighbours, and raise ``ConfigError`` before anything
runs) and then called once per verification step, batched over rows, on the logits' device. The
maths lives in :mod:`.verify`; rules only choose which primitive runs with which inputs.

* :class:`ExactChain` - greedy match at temperature 0, rejection sampling above it (one-hot q for
  deterministic drafts, the drafts' q otherwise: speculative, prompt lookup, Jacobi, SJD).
  Relaxed chain rules (LANTERN's latent neighbourhoods in ``lantern.py``, GSD's groups in
  ``gsd.py``) subclass it and override :meth:`ExactChain.sampled`.
* :class:`TreeWalk` - walk a tree from the root: the target's argmax at temperature 0, else
  multi-candidate rejection (``deterministic`` children, RSD's ``without_replacement``) or
  SpecTr's K-SEQ transport (``kseq``), see :func:`.verify.verify_tree`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .. import kernels
from ..kernels import backend as kernel_backend
from .logits import LogitsProcessor
from .verify import greedy_match, kseq_plan, rejection_sample, verify_tree


class ExactChain:
    """Greedy prefix match (T = 0) or speculative sampling (T > 0) of a chain of drafts."""

    def __init__(self, sampler: Any, lm: Any) -> None:
        self.sampler = sampler

    def __call__(
        self,
        proc: LogitsProcessor,
        chain: Tensor,
        p_log: Tensor,
        seen: Tensor | None,
        q: Tensor | None,
        dlen: Tensor,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(n_accepted [B], next_token [B], y)`` for drafts ``chain [B, g]`` (row b drafted
        ``dlen[b]``) from the target's raw logits ``p_log [B, g+1, V]``; ``y`` is the target's
        argmax ``[B, g+1]`` at temperature 0 and its processed distributions ``[B, g+1, V]``
        above (Jacobi-style proposers build their next guess from it)."""
        if proc.greedy:
            return self.greedy(proc, chain, p_log, seen, dlen)
        y = proc.probs(p_log, seen)
        n, nxt = self.sampled(chain, y, q, dlen, generator)
        return n, nxt, y

    def greedy(self, proc: LogitsProcessor, chain: Tensor, p_log: Tensor, seen: Tensor | None, dlen: Tensor):
        y = proc.argmax(p_log, seen)
        n, nxt = greedy_match(chain, y, dlen)
        return n, nxt, y

    def sampled(self, chain: Tensor, p: Tensor, q: Tensor | None, dlen: Tensor, generator):
        return rejection_sample(chain, p, q, generator, dlen)


class TreeWalk:
    """Verification of draft trees; ``kind`` is the :func:`verify.verify_tree` rule the trees
    were drafted for (``deterministic``, ``without_replacement`` or ``kseq``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(
        self,
        proc: LogitsProcessor,
        tokens: list[list[int]],
        parent: list[list[int]],
        p: Tensor,
        q: Tensor | None,
        draws: Sequence[Sequence[Sequence[int]]] | None,
        generator: torch.Generator | None,
        trees: tuple[Tensor, Tensor] | None = None,
    ) -> list[tuple[list[int], int]]:
        """Per row ``(accepted nodes without the root, next token)``. ``p [B, N, V]``: processed
        target logits (T = 0) or distributions at every node; ``q [B, N, V]`` the draft
        distributions (None: deterministic children). ``trees``: the same trees as padded
        ``(tokens, parent) [B, N]`` tensors on ``p``'s device; at T = 0 on the Triton path
        (CUDA) the whole batch is walked by the ``tree_verify`` kernel in one launch, while on
        CPU the host walk over one argmax transfer is cheaper (the reference kernel loops over N).
        Sampling (V3 kinds) runs ``kernels.tree_accept`` over the whole batch on every device
        (the Triton kernel on CUDA, its PyTorch reference elsewhere: the same draws), so there
        is one sampled tree rule; K-SEQ trees walk :func:`verify.verify_tree` per row."""
        if proc.greedy:
            if trees is not None and kernel_backend.use_triton("tree_verify", p.device):
                return device_greedy_walk(*trees, p)
            best = p.argmax(-1).tolist()  # one transfer for the whole batch
            return [greedy_walk(t, par, b) for t, par, b in zip(tokens, parent, best)]
        if (
            trees is not None
            and self.kind != "kseq"
            and (q is None if self.kind == "deterministic" else q is not None and q.shape == p.shape)
        ):
            return device_sampled_walk(*trees, p, q, self.kind, generator)
        plans = None
        if self.kind == "kseq" and draws is not None:
            # K-SEQ's acceptance and residual at every node, k = the draws made there, in one batch
            k_draws = [[max(1, len(x)) for x in row] + [1] * (p.shape[1] - len(row)) for row in draws]
            acc, res, _ = kseq_plan(p, q, torch.tensor(k_draws, dtype=torch.long, device=p.device))
            plans = (acc, res)
        out = []
        for k, (tok, par) in enumerate(zip(tokens, parent)):
            nk = len(tok)
            out.append(
                verify_tree(
                    tok,
                    par,
                    p[k, :nk],
                    None if q is None else q[k, :nk],
                    self.kind,
                    False,
                    generator,
                    None if draws is None else draws[k],
                    None if plans is None else (plans[0][k], plans[1][k]),
                )
            )
        return out


def device_greedy_walk(tokens: Tensor, parent: Tensor, p: Tensor) -> list[tuple[list[int], int]]:
    """:func:`greedy_walk` for a batch of padded trees on the device (``kernels.tree_verify``), with
    one transfer of the accepted paths, their lengths and the next tokens."""
    out = kernels.tree_verify(tokens, parent, p)
    packed = torch.cat([out.path, out.n_accepted[:, None], out.next_token[:, None]], dim=1).tolist()
    n = tokens.shape[1]
    return [(row[: row[n]], row[n + 1]) for row in packed]


def device_sampled_walk(
    tokens: Tensor, parent: Tensor, p: Tensor, q: Tensor | None, kind: str, generator: torch.Generator | None
) -> list[tuple[list[int], int]]:
    """The sampled (V3) walk of a batch of padded trees on the device (``kernels.tree_accept``),
    with one transfer of the accepted paths, their lengths and the next tokens."""
    path, count, nxt = kernels.tree_accept(tokens, parent, p, q, kind, generator)
    packed = torch.cat([path, count[:, None], nxt[:, None]], dim=1).tolist()
    n = tokens.shape[1]
    return [(row[: row[n]], row[n + 1]) for row in packed]


def greedy_walk(tokens: Sequence[int], parent: Sequence[int], best: Sequence[int]) -> tuple[list[int], int]:
    """Follow from the root the child equal to the target's argmax ``best[node]`` (host lists):
    ``(accepted nodes without the root, next token)``; the V1 walk of :func:`verify.verify_tree`."""
    children: dict[tuple[int, int], int] = {}
    for i in range(1, len(tokens)):
        if parent[i] >= 0:
            children.setdefault((int(parent[i]), int(tokens[i])), i)
    node, path = 0, []
    while (node, int(best[node])) in children:
        node = children[(node, int(best[node]))]
        path.append(node)
    return path, int(best[node])
