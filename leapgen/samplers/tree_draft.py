"""What the draft-model tree samplers (``spec_tree``, ``rsd``, ``spectr``) share.

* :class:`TreeDraft` - drafting a token tree level by level on the *draft* model's cache. Each
  level is one draft forward over the new frontier nodes only; a node sees the committed context
  and its ancestors among the nodes fed before (the wide ``attn_mask`` of the CausalLM contract),
  at position ``root + depth``. After the step the draft cache is cropped back to the committed
  prefix (:meth:`TreeDraft.end`); the accepted tokens are re-fed at the start of the next step
  together with the new token (they are that step's pending tokens, one chunked forward that the
  step needs anyway). This is simpler than keeping the accepted path with ``select`` and just as
  correct: only the unfed accepted tokens are recomputed. The crop is the tree loop's: the
  proposal lists the drafted region in ``rollback``.
* :func:`expand_best_first` - the tree proposal of SpecInfer / EAGLE-2 / RSD: every frontier node
  proposes its best children under a score (cumulative draft log-probability, or RSD's
  hierarchical Gumbel perturbation), a level can be cut to a beam, and the tree keeps the
  ``num_nodes`` best nodes over all depths (scores never increase along a path, so the kept set is
  a subtree; ties keep the earlier-created node, i.e. the parent).
* :class:`DraftModelTree` - the proposer of ``spec_tree`` / ``rsd`` / ``spectr`` on the tree loop
  (:mod:`leapgen.samplers.loops.tree`): per step it drafts trees with the sampler's ``_build`` and
  adapts the depth with the controller; :class:`TreeSampler` is their base.

Trees are not shortened near ``max_new_tokens`` (tokens past the budget are simply not
committed, which keeps each step's sample exact); they are only shortened so that no node's
position leaves the context window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .controllers import DraftLengthController
from .logits import LogitsProcessor, context, tree_seen
from .loops.tree import TreeLoopSampler
from .proposers.base import Proposer, Rollback, TreeProposal, Verdict
from .runtime import Runner
from .trees import ancestor_mask

TREE_SCHEDULES = ("constant", "heuristic")


def depth_controller(schedule: str, depth: int) -> DraftLengthController:
    """Tree depth controller: ``constant`` or ``heuristic`` (+2 after a step in which every row
    accepted a full-depth path, -1 otherwise). DISCO-style confidence stopping is chain-only."""
    if schedule not in TREE_SCHEDULES:
        raise ConfigError(f"tree samplers take schedule in {TREE_SCHEDULES}, got {schedule!r}.")
    return DraftLengthController(schedule, depth, 0.0)


def check_widths(name: str, widths) -> tuple[int, ...]:
    try:
        w = tuple(widths)
    except TypeError:
        w = ()
    if not w or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in w):
        raise ConfigError(
            f"{name} must be a non-empty sequence of integers >= 1 (one per depth), got {widths!r}."
        )
    return w


def draft_probs(proc: LogitsProcessor, logits: Tensor, seen: Tensor | None) -> Tensor:
    """The distribution a tree is drafted from: the processed draft distribution, or at
    temperature 0 the draft's softmax after the repetition penalty (greedy verification only needs
    good guesses; ranking the draft's candidates by it gives a real tree)."""
    if proc.greedy:
        return proc.process(logits, seen).softmax(-1)
    return proc.probs(logits, seen)


# --------------------------------------------------------------------------------------------
# drafting on the draft model's cache


class TreeDraft:
    """Level-by-level tree drafting on a draft :class:`Runner` (see the module docstring)."""

    def __init__(self, runner: Runner, pad_id: int = 0) -> None:
        self.runner = runner
        self.pad_id = pad_id
        self.max_depth = 1 << 30  # set by the loop: no node may sit past the context window

    def begin(self) -> Tensor:
        """Feed each row's pending tokens (the root is the last); return the root logits [B, V]."""
        logits = self.runner.feed_pending()
        cache = self.runner.cache
        self.base = len(cache)
        self.root_pos = cache.lengths.clone() - 1
        self.slot_node = torch.full((len(self.runner.active), 0), -1, dtype=torch.long, device=cache.device)
        return logits

    def feed(self, nodes: Tensor, tokens: Tensor, parent: Tensor, depth: Tensor) -> Tensor:
        """One draft forward over the nodes ``nodes [B, F]`` (indices into ``tokens/parent/depth
        [B, M]``; -1 = padding). Returns their logits ``[B, F, V]``."""
        b, f = nodes.shape
        m = tokens.shape[1]
        valid = nodes >= 0
        ni = nodes.clamp_min(0)
        anc = ancestor_mask(parent).gather(1, ni[:, :, None].expand(b, f, m))  # [B, F, M]
        sn = self.slot_node
        seen_before = anc.gather(2, sn.clamp_min(0)[:, None, :].expand(b, f, sn.shape[1]))
        seen_before &= (sn >= 0)[:, None, :] & valid[:, :, None]
        eye = torch.eye(f, dtype=torch.bool, device=nodes.device)
        block = torch.cat([seen_before, eye[None].expand(b, f, f)], dim=-1)
        pos = self.root_pos[:, None] + depth.gather(1, ni).to(self.root_pos.device)
        toks = torch.where(valid, tokens.gather(1, ni), torch.full_like(ni, self.pad_id))
        lm = self.runner.lm
        logits = lm(toks.to(lm.device), self.runner.cache, position_ids=pos, attn_mask=block)
        self.slot_node = torch.cat([sn, torch.where(valid, nodes, torch.full_like(nodes, -1))], 1)
        return logits


@dataclass
class Drafted:
    """One step's draft trees. ``tokens/parent [B, N]`` (root first, padding parent -2);
    ``q [B, N, V]``: the draft distribution the children of each node were drawn from (None when
    verification does not need it); ``draws``: per row and node, the child node of each i.i.d.
    draw in draw order (K-SEQ only); ``n_nodes [B]``: drafted nodes without the root."""

    tokens: Tensor
    parent: Tensor
    q: Tensor | None = None
    draws: list[list[list[int]]] | None = None

    @property
    def n_nodes(self) -> Tensor:
        return (self.parent >= 0).sum(-1)

    @classmethod
    def root_only(cls, roots: Tensor) -> Drafted:
        return cls(roots[:, None].clone(), torch.full((roots.shape[0], 1), -1, dtype=torch.long, device=roots.device))


Scorer = Callable[[Tensor, Tensor], Tensor]


def expand_best_first(
    drafter: TreeDraft,
    proc: LogitsProcessor,
    roots: Tensor,
    root_logits: Tensor,
    *,
    depth: int,
    num_nodes: int,
    per_node: Callable[[int], int],
    beam: int | None,
    scorer: Scorer,
    seen_base: Tensor | None = None,
    keep_q: bool = False,
) -> Drafted:
    """Grow trees of at most ``num_nodes`` nodes (root excluded) and ``depth`` levels.

    At level d every frontier node proposes its ``per_node(d)`` best children under
    ``scorer(q [B, F, V], parent_score [B, F]) -> child scores [B, F, V]`` (-inf = never);
    siblings are listed best first. With ``beam`` a level keeps only its ``beam`` best nodes. A
    node is kept while it is among the ``num_nodes`` best of the tree so far; only kept nodes are
    expanded (a pruned node's descendants score no better, so this changes nothing but cost).
    """
    b = roots.shape[0]
    v = root_logits.shape[-1]
    dev = root_logits.device
    tok = roots[:, None].clone().long()
    par = torch.full((b, 1), -1, dtype=torch.long, device=dev)
    score = torch.zeros(b, 1, device=dev)
    dep = torch.zeros(b, 1, dtype=torch.long, device=dev)
    frontier = torch.zeros(b, 1, dtype=torch.long, device=dev)
    q_parts: list[tuple[Tensor, Tensor]] = []
    neg = float("-inf")
    for d in range(1, depth + 1):
        if d == 1:
            logits = root_logits[:, None]
        else:
            logits = drafter.feed(frontier, tok, par, dep)
        fvalid = frontier >= 0
        fi = frontier.clamp_min(0)
        seen_f = None
        if seen_base is not None:
            seen_all = tree_seen(seen_base, tok, ancestor_mask(par))
            seen_f = seen_all.gather(1, fi[:, :, None].expand(*fi.shape, v))
        q = draft_probs(proc, logits, seen_f)
        if keep_q:
            q_parts.append((frontier, q))
        parent_score = torch.where(fvalid, score.gather(1, fi), torch.full_like(score.gather(1, fi), neg))
        cs = scorer(q, parent_score)
        cs = torch.where(fvalid[:, :, None] & (q > 0), cs, torch.full_like(cs, neg))
        k = min(per_node(d), v)
        top_s, top_t = cs.topk(k, dim=-1)  # sorted: siblings best first
        f = frontier.shape[1]
        cand_s = top_s.reshape(b, f * k)
        cand_t = top_t.reshape(b, f * k)
        cand_p = frontier[:, :, None].expand(b, f, k).reshape(b, f * k)
        order = cand_s.sort(dim=-1, descending=True, stable=True).indices
        cand_s, cand_t, cand_p = cand_s.gather(1, order), cand_t.gather(1, order), cand_p.gather(1, order)
        if beam is not None and cand_s.shape[1] > beam:
            cand_s, cand_t, cand_p = cand_s[:, :beam], cand_t[:, :beam], cand_p[:, :beam]
        # rank among every node so far (existing nodes first: ties keep the older node)
        n_old = score.shape[1] - 1
        union = torch.cat([score[:, 1:], cand_s], 1)
        ranks = torch.empty_like(union, dtype=torch.long)
        ranks.scatter_(
            1,
            union.sort(dim=-1, descending=True, stable=True).indices,
            torch.arange(union.shape[1], device=dev).expand_as(union).contiguous(),
        )
        keep = (ranks[:, n_old:] < num_nodes) & torch.isfinite(cand_s)
        width = int(keep.sum(1).max()) if keep.numel() else 0  # the level's width decides the next forward
        if width == 0:
            break
        keep, cand_s, cand_t, cand_p = (
            keep[:, :width],
            cand_s[:, :width],
            cand_t[:, :width],
            cand_p[:, :width],
        )
        m = tok.shape[1]
        tok = torch.cat([tok, torch.where(keep, cand_t, torch.zeros_like(cand_t))], 1)
        par = torch.cat([par, torch.where(keep, cand_p, torch.full_like(cand_p, -2))], 1)
        score = torch.cat([score, torch.where(keep, cand_s, torch.full_like(cand_s, neg))], 1)
        dep = torch.cat([dep, torch.full_like(cand_t, d)], 1)
        idx = torch.arange(m, m + width, device=dev).expand(b, width)
        frontier = torch.where(keep, idx, torch.full_like(idx, -1))

    # the num_nodes best over all depths, in creation (= topological) order
    ranks = torch.empty_like(score[:, 1:], dtype=torch.long)
    ranks.scatter_(
        1,
        score[:, 1:].sort(dim=-1, descending=True, stable=True).indices,
        torch.arange(score.shape[1] - 1, device=dev).expand(b, -1).contiguous(),
    )
    keep = torch.cat(
        [torch.ones(b, 1, dtype=torch.bool, device=dev), (ranks < num_nodes) & torch.isfinite(score[:, 1:])], 1
    )
    tok, par, q_out, _ = compact(tok, par, keep, q_parts if keep_q else None, v)
    return Drafted(tok, par, q_out)


def compact(
    tokens: Tensor,
    parent: Tensor,
    keep: Tensor,
    q_parts: list[tuple[Tensor, Tensor]] | None = None,
    v: int = 0,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """Keep the nodes where ``keep [B, M]`` (the root and every kept node's parent must be kept),
    moved to the front in their order, padding after. ``q_parts``: ``(nodes [B, F], q [B, F, V])``
    pairs giving the draft distribution at expanded nodes (others get zeros). Returns
    ``(tokens, parent, q or None, new_index [B, M])``."""
    b = tokens.shape[0]
    n = int(keep.sum(1).max())
    new_index = keep.long().cumsum(1) - 1  # old node -> new node (valid where kept)
    order = torch.sort((~keep).long(), dim=1, stable=True).indices[:, :n]  # kept nodes first, in order
    kept = keep.gather(1, order)
    out_tok = torch.where(kept, tokens.gather(1, order), torch.zeros_like(order))
    old_par = parent.gather(1, order)
    out_par = torch.where(old_par >= 0, new_index.gather(1, old_par.clamp_min(0)), old_par)
    out_par = torch.where(kept, out_par, torch.full_like(out_par, -2))
    q_out = None
    if q_parts is not None:
        q_full = torch.zeros(b, tokens.shape[1], v, device=tokens.device)
        for nodes, q in q_parts:
            rows_i, cols = (nodes >= 0).nonzero(as_tuple=True)
            q_full[rows_i, nodes[rows_i, cols]] = q[rows_i, cols]
        q_out = q_full.gather(1, order[:, :, None].expand(b, n, v))
    return out_tok, out_par, q_out, new_index


def gumbel(shape: Sequence[int], generator: torch.Generator | None, device: torch.device | str = "cpu") -> Tensor:
    """Standard Gumbel noise of ``shape`` drawn from ``generator`` on ``device``."""
    u = torch.rand(*shape, generator=generator, device=device).clamp(min=torch.finfo(torch.float32).tiny, max=1 - 1e-7)
    return -torch.log(-torch.log(u))


def cumulative_logprob(q: Tensor, parent_score: Tensor) -> Tensor:
    """SpecInfer / EAGLE-2 score: parent's cumulative draft log-probability + log q(child)."""
    return parent_score[..., None] + q.log()


# --------------------------------------------------------------------------------------------
# the proposer of the draft-model tree samplers


class DraftModelTree(Proposer):
    """One step's draft trees from the draft model: feed its pending tokens (the root is the
    last), grow the trees with the sampler's ``_build`` (depth from the controller, never past the
    context window), list the drafted region for the loop to forget."""

    prefill = True
    uses_draft = True

    def __init__(self, sampler, run, generator) -> None:
        super().__init__(sampler, run, generator)
        self.controller = depth_controller(sampler.schedule, sampler.depth)
        self.window = min(run.target.lm.max_length, run.draft.lm.max_length)
        self.tree_sizes: list[int] = []

    def propose(self) -> TreeProposal:
        run = self.run
        rows, proc, act = run.rows, run.proc, run.target.active
        dev = run.draft.lm.device
        roots = torch.tensor([rows.tokens[r][-1] for r in act], dtype=torch.long, device=dev)
        base_seen = context(proc, rows, act, self.vocab_size, dev)
        drafter = TreeDraft(run.draft, run.config.pad_token_id)
        root_logits = drafter.begin()
        drafter.max_depth = self.window - 1 - int(drafter.root_pos.max())  # deepest node inside the window
        depth = min(self.controller.budget(), drafter.max_depth)
        if depth >= 1:
            tree = self.sampler._build(drafter, proc, roots, root_logits, depth, base_seen, self.generator)
        else:
            tree = Drafted.root_only(roots)
        self.depths = (ancestor_mask(tree.parent).sum(-1).max(-1).values - 1).tolist()
        return TreeProposal(
            tokens=tree.tokens, parent=tree.parent, q=tree.q, draws=tree.draws,
            rollback=[Rollback(run.draft, drafter.base)],
        )

    def update(self, verdict: Verdict) -> None:
        self.tree_sizes += [len(t) - 1 for t in verdict.extra["tokens"]]
        self.controller.observe(all(n >= d for n, d in zip(verdict.n, self.depths)))

    def finish(self) -> None:
        sizes = self.tree_sizes
        self.run.stats.extra["mean_tree_nodes"] = sum(sizes) / len(sizes) if sizes else 0.0


class TreeSampler(TreeLoopSampler):
    """Base of the draft-model tree samplers: subclasses set ``kind`` (the
    :func:`verify.verify_tree` rule their trees need) and implement ``_build`` (one step's trees
    from the draft model); the proposer is :class:`DraftModelTree`, the loop the tree loop."""

    proposer = DraftModelTree
