"""The tree loop: every sampler that verifies one token tree per row and step.

Per step: the proposer proposes a tree per active row (root = the row's last committed token),
optionally with *side* slots it wants in the same forward (lookahead's Jacobi window); ONE target
forward runs over each row's pending tokens, its tree's nodes (ancestor mask, positions root +
depth) and its side slots (:meth:`Runner.forward_block`); the acceptance rule
(:class:`~leapgen.samplers.acceptance.TreeWalk`) walks each tree; rows commit; the target cache
keeps each row's pending tokens and accepted path (``Runner.keep_path``) and proposer model caches
forget their speculative slots; the proposer learns the verdict (and gets the side logits back).

``spec_tree``, ``rsd``, ``spectr`` (draft-model trees), ``lookahead`` (n-gram pool + Jacobi
window) and ``aded`` (tri-gram MCTS trees) all run here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from ..acceptance import TreeWalk
from ..logits import context, tree_seen
from ..proposers.base import Proposer, TreeProposal, Verdict, prune_invalid
from ..runtime import DecodeRun
from ..trees import DraftTree, ancestor_mask, tree_layout
from .common import TREE_NEEDS, LoopSampler


class TreeLoopSampler(LoopSampler):
    """A sampler run by the tree loop: a ``proposer`` class and the tree rule ``kind``."""

    kind: ClassVar[str] = "deterministic"
    loop_needs = TREE_NEEDS

    def make_rule(self, lm: Any) -> TreeWalk:
        return TreeWalk(self.kind)

    @staticmethod
    def step(run: DecodeRun, proposer: Proposer, rule: TreeWalk, gen: torch.Generator) -> None:
        tree_step(run, proposer, rule, gen)


def _host_trees(prop: TreeProposal, vocab: int) -> tuple[list[list[int]], list[list[int]], bool]:
    """Per-row ``(tokens, parent)`` host lists (padding dropped) and whether they came as
    tensors (model-drawn: valid by construction; host lists pass the valid-id rule)."""
    if isinstance(prop.tokens, torch.Tensor):
        tok, par = prop.tokens.tolist(), prop.parent.tolist()
        n = [sum(1 for x in p if x >= -1) for p in par]
        return [t[:k] for t, k in zip(tok, n)], [p[:k] for p, k in zip(par, n)], True
    pairs = [prune_invalid(t, p, vocab) for t, p in zip(prop.tokens, prop.parent)]
    return [t for t, _ in pairs], [p for _, p in pairs], False


def tree_step(run: DecodeRun, proposer: Proposer, rule: TreeWalk, gen: torch.Generator) -> None:
    rows, proc, target, stats = run.rows, run.proc, run.target, run.stats
    act = list(target.active)
    lm = target.lm
    prop: TreeProposal = proposer.propose()
    tokens, parent, drawn = _host_trees(prop, lm.vocab_size)
    side = prop.side or [([], np.zeros((0, 0), dtype=bool), []) for _ in act]
    extras, blocks, offsets = [], [], []
    for tok, par, (s_tok, s_mask, s_off) in zip(tokens, parent, side):
        anc, dep = tree_layout(tuple(par))
        t, m = len(tok) - 1, len(s_tok)
        block = np.zeros((t + m, t + m), dtype=bool)
        block[:t, :t] = anc[1:, 1:]
        block[t:, t:] = s_mask
        extras.append(tok[1:] + list(s_tok))
        blocks.append(block)
        offsets.append(list(dep[1:]) + list(s_off))
        stats.drafted_tokens += t
    # only side slots (a lookahead window) may take clamped positions: the tree's nodes are verified exactly
    logits, start, n_pend = target.forward_block(extras, blocks, offsets, clamp_positions=prop.clamp,
                                                 clamp_from=[len(tok) - 1 for tok in tokens])
    n_pend = n_pend.tolist()

    # every node's logits (the root's are those after the row's last pending token), batched
    if drawn:
        tree_tok, tree_par = prop.tokens.to(logits.device), prop.parent.to(logits.device)
    else:
        tree = DraftTree.from_lists(tokens, parent)
        tree_tok, tree_par = tree.tokens.to(logits.device), tree.parent.to(logits.device)
    width = tree_tok.shape[1]
    col = torch.tensor(n_pend, device=logits.device)[:, None] - 1 + torch.arange(width, device=logits.device)[None]
    col = col.clamp_max(logits.shape[1] - 1)
    node_logits = logits.gather(1, col[..., None].expand(*col.shape, logits.shape[-1]))
    ban = run.eos_ban_active()
    anc = ancestor_mask(tree_par) if proc.uses_context or ban else None
    if ban:  # min_new_tokens: node i's logits predict the token depth(i) places after the root
        node_logits = run.ban_eos(node_logits, depth=anc.sum(-1) - 1)
    seen = None
    if proc.uses_context:
        base = context(proc, rows, act, lm.vocab_size, logits.device)  # bool mask or coded counts (penalties)
        seen = tree_seen(base, tree_tok, anc)
    p = proc.process(node_logits, seen) if proc.greedy else proc.probs(node_logits, seen)
    results = rule(proc, tokens, parent, p, prop.q, prop.draws, gen, trees=(tree_tok, tree_par))

    committed, keep, paths = [], [], []
    for k, r in enumerate(act):
        path, nxt = results[k]
        committed.append(rows.commit(r, [tokens[k][i] for i in path] + [nxt]))
        keep.append(list(range(n_pend[k])) + [n_pend[k] - 1 + i for i in path])
        paths.append(path)
        stats.accepted_draft_tokens += len(path)
    stats.accepted_per_step.append(committed)
    target.keep_path(start, keep)
    for rb in prop.rollback:
        rb.runner.keep(rb.start, [0] * len(act))
    side_logits = None
    if prop.side is not None:  # per row: the root's logits, then one row per side slot
        side_logits = []
        for k in range(len(act)):
            first = n_pend[k] + len(tokens[k]) - 1
            idx = [n_pend[k] - 1] + list(range(first, first + len(side[k][0])))
            side_logits.append(logits[k, idx])
    proposer.update(
        Verdict(
            n=[len(x) for x in paths],
            next=[x[1] for x in results],
            committed=committed,
            paths=paths,
            side_logits=side_logits,
            extra={"n_pend": n_pend, "tokens": tokens, "parent": parent},
        )
    )
    run.step_done(max(committed))
