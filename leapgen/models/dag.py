"""Directed acyclic graph (DAG) decoding structures of the DA-Transformer, shared by training and the samplers.

Paper: Huang, Zhou, Zhou, Zhang, Huang, "Directed Acyclic Transformer for Non-Autoregressive
Machine Translation", ICML 2022 (thu-coai/DA-Transformer: ``NATDAGLoss``, ``torch_dag_loss``,
``torch_dag_best_alignment``, ``extract_links``); used for speech by DASpeech (Fang et al., NeurIPS 2023).

A graph has ``L`` vertices; vertex 0 emits ``<s>``, vertex ``L - 1`` emits ``</s>``, and a path
goes strictly forward (``a_0 = 0 < a_1 < ... < a_{M-1} = L - 1``). Scores are log-probabilities:

* ``emit [B, L, V]``: ``log P(y | v_j)``;
* ``links [B, L, L]``: ``log P(a_{t+1} = j | a_t = i)``, rows normalised over ``i < j < L_b``;
  masked entries hold :data:`NEG` (finite, so the dynamic programme has no NaN gradients).

:func:`dag_logprob` is ``log P(Y | X) = log sum_paths prod P(a_{t+1}|a_t) prod P(y_t|v_{a_t})`` by the
forward dynamic programme over (target index, vertex); :func:`dag_best_alignment` the max-product
path of the target (Viterbi, for glancing and for the acoustic decoder's argmax strategy).
:class:`LinkHead` computes ``links`` from vertex features as DA-T's ``extract_links`` (per-head
scaled dot products, softmax over the later vertices, heads mixed by a gate).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

NEG = -1e9


def link_mask(vertex_lengths: Tensor, width: int) -> Tensor:
    """``[B, L, L]`` bool: True where ``i < j < L_b`` (an allowed transition)."""
    idx = torch.arange(width, device=vertex_lengths.device)
    return (idx[None, :, None] < idx[None, None, :]) & (idx[None, None, :] < vertex_lengths[:, None, None])


class LinkHead(nn.Module):
    """Transition log-probabilities from vertex features ``[V; pos]`` (DA-T ``extract_links``)."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dh = heads, d_model // heads
        self.q = nn.Linear(2 * d_model, d_model)
        self.k = nn.Linear(2 * d_model, d_model)
        self.gate = nn.Linear(d_model, heads)

    def forward(self, feats: Tensor, pos: Tensor, vertex_lengths: Tensor) -> Tensor:
        """``feats [B, L, d]``, ``pos [B or 1, L, d]`` -> ``links [B, L, L]`` (float32)."""
        b, n, _ = feats.shape
        x = torch.cat([feats, pos.expand(b, -1, -1).to(feats.dtype)], -1)
        q = self.q(x).view(b, n, self.heads, self.dh).transpose(1, 2).float()
        k = self.k(x).view(b, n, self.heads, self.dh).transpose(1, 2).float()
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh)  # [B, H, L, L]
        mask = link_mask(vertex_lengths, n)
        logp = scores.masked_fill(~mask[:, None], NEG).log_softmax(-1)
        gate = self.gate(feats).float().log_softmax(-1).transpose(1, 2)[..., None]  # [B, H, L, 1]
        return (gate + logp).logsumexp(1).masked_fill(~mask, NEG)


def _token_scores(emit: Tensor, targets: Tensor) -> Tensor:
    """``[B, M, L]``: ``log P(y_i | v_j)``."""
    return emit.gather(2, targets[:, None, :].expand(-1, emit.shape[1], -1)).transpose(1, 2)


def dag_logprob(emit: Tensor, links: Tensor, targets: Tensor, target_lengths: Tensor, vertex_lengths: Tensor) -> Tensor:
    """``log P(Y | X)`` per row ``[B]`` summed over every path (``targets [B, M]`` include ``<s>``
    first and ``</s>`` at ``M_b - 1``). A row whose graph is shorter than its target (``L_b < M_b``)
    has no path and gets about ``NEG`` (callers drop it)."""
    tok = _token_scores(emit.float(), targets)
    b, m, n = tok.shape
    f = torch.full((b, n), NEG, device=emit.device, dtype=torch.float32)
    f[:, 0] = tok[:, 0, 0]
    out = f[:, 0].clone()
    last = (vertex_lengths - 1).clamp_min(0)
    rows = torch.arange(b, device=emit.device)
    for i in range(1, m):
        f = (f[:, :, None] + links).logsumexp(1) + tok[:, i]
        out = torch.where(target_lengths - 1 == i, f[rows, last], out)
    return out


@torch.no_grad()
def dag_best_alignment(emit: Tensor, links: Tensor, targets: Tensor, target_lengths: Tensor,
                       vertex_lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The max-product path of the target: ``(vertices [B, M] (0 past M_b), score [B])``."""
    tok = _token_scores(emit.float(), targets)
    b, m, n = tok.shape
    f = torch.full((b, n), NEG, device=emit.device, dtype=torch.float32)
    f[:, 0] = tok[:, 0, 0]
    back = torch.zeros(b, m, n, dtype=torch.long, device=emit.device)
    best = f[:, 0].clone()
    last = (vertex_lengths - 1).clamp_min(0)
    rows = torch.arange(b, device=emit.device)
    for i in range(1, m):
        val, arg = (f[:, :, None] + links).max(1)
        f = val + tok[:, i]
        back[:, i] = arg
        best = torch.where(target_lengths - 1 == i, f[rows, last], best)
    path = torch.zeros(b, m, dtype=torch.long, device=emit.device)
    for r in range(b):
        mb = int(target_lengths[r])
        j = int(last[r])
        for i in range(mb - 1, -1, -1):
            path[r, i] = j
            j = int(back[r, i, j])
    return path, best


def dag_loss(emit: Tensor, links: Tensor, targets: Tensor, target_lengths: Tensor, vertex_lengths: Tensor
             ) -> tuple[Tensor, Tensor]:
    """DA-T's ``NATDAGLoss``: ``-log P(Y|X) / M`` averaged over rows with a path; returns
    ``(loss, valid [B] bool)`` (rows without a path, ``L_b < M_b``, are zeroed as in the reference)."""
    lp = dag_logprob(emit, links, targets, target_lengths, vertex_lengths)
    valid = (lp > NEG / 2) & (vertex_lengths >= target_lengths)
    per = -lp / target_lengths.float()
    loss = (per * valid).sum() / valid.sum().clamp_min(1)
    return loss, valid


def glance_choice(pred: Tensor, targets: Tensor, target_lengths: Tensor, ratio: float,
                  generator: torch.Generator | None = None) -> Tensor:
    """GLAT's ``number-random`` choice: ``floor((M - same) * ratio + 0.5)`` random target positions
    per row (``pred`` / ``targets [B, M]``; ``<s>`` and ``</s>`` are never glanced). Returns ``[B, M]`` bool."""
    b, m = targets.shape
    pos = torch.arange(m, device=targets.device)[None]
    inner = (pos > 0) & (pos < target_lengths[:, None] - 1)
    wrong = ((pred != targets) & inner).sum(-1)
    n_pick = torch.floor(wrong.float() * ratio + 0.5).long()
    noise = torch.rand(targets.shape, generator=generator, device=targets.device).masked_fill(~inner, 2.0)
    rank = noise.argsort(-1).argsort(-1)
    return (rank < n_pick[:, None]) & inner


__all__ = ["LinkHead", "NEG", "dag_best_alignment", "dag_logprob", "dag_loss", "glance_choice", "link_mask"]
