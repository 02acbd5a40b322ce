"""SpecTr: speculative decoding with k i.i.d. draft sequences and K-SEQ draft selection.

Paper: Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS 2023 (arXiv 2310.15141).

Each step the draft model samples ``num_candidates`` (k) sequences of ``depth`` (L) tokens i.i.d.
from q; sequences sharing a prefix share tree nodes (one draft forward per level over the distinct
frontier nodes). The target scores the tree in one forward and the walk uses K-SEQ
(``verify.kseq_step``) at each depth among the draws consistent with the accepted prefix: with
X_1..X_m the next tokens of the m sequences through the current node (i.i.d. from q given the
node), accept X_i with probability min(1, p(X_i) / (rho q(X_i))), tried in draw order; if all
are rejected, draw from the K-SEQ residual and stop. rho is the smallest value in [1, m] for which
the residual is a distribution (``verify.kseq_rho``); m = 1 is ordinary speculative sampling. The
residual formula of the reference notes is correct (derivation in ``verify.kseq_plan``, exact
enumeration in the tests).

At temperature 0 the k i.i.d. sequences coincide (the limit T -> 0 of sampling from q^(1/T) is the
draft's argmax) and K-SEQ reduces to speculative decoding: the draft proposes one greedy chain of
min(k * depth, num_nodes) tokens, the same budget, walked greedily - identical tokens to greedy
``ar``.

Guarantee: ``distribution-exact`` (greedy-exact at temperature 0).

Defaults: ``num_candidates=4``, ``depth=4``, ``num_nodes=16`` (the draft-token budget k*L: when
k * depth exceeds it, depth becomes ``num_nodes // k``; distinct tree nodes are at most k*L), ``schedule="constant"`` (``"heuristic"``:
depth +2/-1). The paper evaluates k in {2, 4, 8} with L in {4, 8}.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .base import check_int, register_sampler
from .logits import tree_seen
from .tree_draft import Drafted, TreeSampler, compact, depth_controller, draft_probs
from .trees import ancestor_mask


@register_sampler(
    "spectr",
    family="ar-tree",
    guarantee="distribution-exact",
    needs=("model", "draft"),
    paper="Sun et al. 2023 (SpecTr, arXiv 2310.15141)",
)
class SpecTr(TreeSampler):
    """SpecTr K-SEQ: k i.i.d. draft sequences in a prefix-shared tree, one K-SEQ selection per depth."""

    kind = "kseq"

    defaults = {"num_candidates": 4, "depth": 4, "num_nodes": 16, "schedule": "constant"}

    def validate(self) -> None:
        check_int("num_candidates", self.num_candidates)
        check_int("depth", self.depth)
        check_int("num_nodes", self.num_nodes)
        if self.num_nodes < self.num_candidates:
            raise ConfigError(
                f"num_nodes={self.num_nodes} cannot hold {self.num_candidates} sequences of at least one token; "
                f"use num_nodes >= num_candidates."
            )
        depth_controller(self.schedule, self.depth)

    def _build(self, drafter, proc, roots, root_logits, depth, seen_base, generator) -> Drafted:
        k = self.num_candidates
        if proc.greedy:  # the k sequences would coincide: one chain with the whole budget
            depth = min(k * depth, self.num_nodes, drafter.max_depth)
            k = 1
        elif k * depth > self.num_nodes:
            depth = max(1, self.num_nodes // k)
        b, v = roots.shape[0], root_logits.shape[-1]
        dev = root_logits.device
        tok = roots[:, None].clone().long()
        par = torch.full((b, 1), -1, dtype=torch.long, device=dev)
        dep = torch.zeros(b, 1, dtype=torch.long, device=dev)
        at = torch.zeros(b, k, dtype=torch.long, device=dev)  # the node each sequence has reached
        frontier = torch.zeros(b, 1, dtype=torch.long, device=dev)
        q_parts, steps = [], []
        seqs = torch.arange(k, device=dev)
        for d in range(1, depth + 1):
            logits = root_logits[:, None] if d == 1 else drafter.feed(frontier, tok, par, dep)
            seen_f = None
            if seen_base is not None:
                seen_all = tree_seen(seen_base, tok, ancestor_mask(par))
                seen_f = seen_all.gather(1, frontier.clamp_min(0)[:, :, None].expand(*frontier.shape, v))
            q = draft_probs(proc, logits, seen_f)  # [B, F, V]
            q_parts.append((frontier, q))
            # every sequence draws its next token from q at its node, independently
            slot = (frontier[:, None, :] == at[:, :, None]).long().argmax(-1)
            q_seq = q.gather(1, slot[:, :, None].expand(b, k, v))
            if proc.greedy:
                x = q_seq.argmax(-1)
            else:
                x = torch.multinomial(q_seq.reshape(b * k, v), 1, generator=generator).reshape(b, k)
            # sequences with the same (node, token) share the child node
            key = at * v + x
            first_of = (key[:, :, None] == key[:, None, :]).long().argmax(-1)
            is_first = first_of == seqs[None]
            m = tok.shape[1]
            child = (m + is_first.long().cumsum(1) - 1).gather(1, first_of)
            width = int(is_first.sum(1).max())
            order = torch.sort((~is_first).long(), dim=1, stable=True).indices[:, :width]
            valid = is_first.gather(1, order)
            tok = torch.cat([tok, torch.where(valid, x.gather(1, order), torch.zeros_like(order))], 1)
            par = torch.cat([par, torch.where(valid, at.gather(1, order), torch.full_like(order, -2))], 1)
            dep = torch.cat([dep, torch.full_like(order, d)], 1)
            steps.append((at, child))
            at = child
            frontier = torch.where(valid, m + torch.arange(width, device=dev)[None], torch.full_like(order, -1))
        keep = par >= -1
        tok, par, q_out, new_index = compact(tok, par, keep, None if proc.greedy else q_parts, v)
        n = tok.shape[1]
        draws: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(b)]
        # the draw record goes to the host in one transfer (the tree walk reads it there)
        moves = torch.stack([torch.stack([new_index.gather(1, a), new_index.gather(1, c)]) for a, c in steps])
        for src, dst in moves.tolist():
            for i in range(b):
                row, s_i, d_i = draws[i], src[i], dst[i]
                for s in range(k):
                    row[s_i[s]].append(d_i[s])
        return Drafted(tok, par, q_out, draws)

