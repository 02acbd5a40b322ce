"""What the DAG samplers share: the ``"dag"`` contract, the path searches and the read-out.

Paper: Huang et al., "Directed Acyclic Transformer for Non-Autoregressive Machine Translation",
ICML 2022 (thu-coai/DA-Transformer ``GlatDecomposedLink.inference_*``); joint Viterbi from Shao et
al., "Viterbi Decoding of Directed Acyclic Transformer for Non-Autoregressive Machine
Translation", Findings of EMNLP 2022. The model's :meth:`~leapgen.models.s2st_lm.DAGLM.graph`
gives ``emit [B, L, V]`` (log P(y | v_j)) and ``links [B, L, L]`` (log P(next = k | j)) in one
decoder pass; a path starts at vertex 0 (``<s>``) and ends at vertex ``L_b - 1`` (``</s>``).

Read-out (DA-T): the token of every vertex on the path (argmax, or a draw at ``temperature > 0``),
``<s>`` / ``</s>`` / padding dropped, consecutive duplicates collapsed. The alignment of a token
is its vertex (the S2ST pipeline hands those vertices' states to the acoustic decoder).
Statistics: one target forward (the DAG decoder) for the whole output, as every NAR sampler.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ...models.dag import NEG
from ...models.s2st import EOS, PAD
from ...models.s2st_lm import DAGLM
from ..base import DecodeConfig, register_contract
from ..logits import LogitsProcessor, sample
from ..nar.common import NARSampler

register_contract("dag", lambda m: isinstance(m, DAGLM))


def greedy_path(links: Tensor, lengths: Tensor) -> list[list[int]]:
    """DA-T greedy: from vertex 0, ``j <- argmax_k links[j, k]`` until ``L_b - 1``."""
    return lookahead_path(None, links, lengths, beta=0.0)


def lookahead_path(emit: Tensor | None, links: Tensor, lengths: Tensor, beta: float = 1.0) -> list[list[int]]:
    """DA-T lookahead: ``j <- argmax_k (links[j, k] + beta * max_y emit[k, y])`` until ``L_b - 1``
    (``emit`` None or ``beta == 0``: greedy). Vectorised over the batch."""
    b, n, _ = links.shape
    score = links.float()
    if emit is not None and beta != 0.0:
        score = score + beta * emit.float().max(-1).values[:, None, :]
    nxt = score.argmax(-1).tolist()  # [B, L]: the best successor of every vertex
    paths = []
    for r in range(b):
        last, j, p = int(lengths[r]) - 1, 0, [0]
        while j < last:
            j = max(nxt[r][j], j + 1)
            p.append(j)
        paths.append(p)
    return paths


def length_normalised(score: float, length: int, beta: float) -> float:
    """``score / length ** beta``; where the power exceeds the float range (a large ``beta``) the
    quotient is the signed zero IEEE division gives, where Python's power raises OverflowError."""
    try:
        return score / length**beta
    except OverflowError:
        return math.copysign(0.0, score)


def joint_viterbi_path(emit: Tensor, links: Tensor, lengths: Tensor, beta: float = 1.0, joint: bool = True
                       ) -> list[list[int]]:
    """Joint Viterbi (Shao et al. 2022): the path ``A`` maximising ``(sum_t links[a_t, a_{t+1}] +
    sum_t s_{a_t}) / (|A| - 1)^beta`` with ``s_j = max_y emit[j, y]`` (``joint=False``: without the
    ``s`` terms, plain Viterbi of ``P(A|X)``), over every path length, by dynamic programming
    over the number of vertices; exact (checked against brute force in the tests)."""
    b, n, _ = links.shape
    s = emit.float().max(-1).values if joint else torch.zeros(b, n, device=links.device)
    alpha = torch.full((b, n), NEG, device=links.device)
    alpha[:, 0] = s[:, 0]
    backs = []
    finals = []  # score of ending at L_b - 1 with m vertices, m = 2 .. n
    rows = torch.arange(b, device=links.device)
    last = (lengths - 1).clamp_min(0)
    for _ in range(2, n + 1):
        val, arg = (alpha[:, :, None] + links.float()).max(1)
        alpha = val + s
        backs.append(arg)
        finals.append(alpha[rows, last])
    paths = []
    for r in range(b):
        nb = int(lengths[r])
        if nb < 2:
            paths.append([0])
            continue
        scores = [length_normalised(float(finals[m - 2][r]), m - 1, beta) for m in range(2, nb + 1)]
        m = 2 + max(range(len(scores)), key=lambda i: scores[i])
        j, p = nb - 1, [nb - 1]
        for k in range(m - 2, -1, -1):
            j = int(backs[k][r, j])
            p.append(j)
        paths.append(p[::-1])
    return paths


def read_out(emit: Tensor, paths: list[list[int]], config: DecodeConfig, generator: torch.Generator | None
             ) -> tuple[list[list[int]], list[list[int]]]:
    """Tokens along each path (argmax or a draw), specials dropped, consecutive duplicates collapsed;
    returns ``(tokens, vertices)`` per row."""
    if config.greedy:
        ids = emit.argmax(-1)
    else:
        b, n, v = emit.shape
        ids = sample(LogitsProcessor(config).probs(emit.reshape(b * n, v)), generator).view(b, n)
    ids = ids.tolist()
    seqs, align = [], []
    for r, path in enumerate(paths):
        toks, verts, prev = [], [], None
        for j in path[1:-1]:
            t = ids[r][j]
            if t not in (PAD, EOS) and t != prev:
                toks.append(t)
                verts.append(j)
            prev = t
        seqs.append(toks)
        align.append(verts)
    return seqs, align


class DAGSampler(NARSampler):
    """Base of the DAG samplers: one decoder pass (:meth:`DAGLM.graph`), a path search, the read-out.
    The graph is kept on ``last_graph`` (vertex states for a second-stage acoustic decoder)."""

    contracts = ("dag",)

    def path(self, graph: dict[str, Tensor]) -> list[list[int]]:
        raise NotImplementedError

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        graph = model.graph(state)
        self.last_graph = graph
        paths = self.path(graph)
        return read_out(graph["emit"], paths, config, generator)
