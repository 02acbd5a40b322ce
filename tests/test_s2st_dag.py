"""DAG mechanics of the S2ST translator: the DAG loss equals brute-force enumeration over all paths,
the target's Viterbi alignment and the joint-Viterbi decoder equal brute-force best paths."""

from __future__ import annotations

import itertools
import math

import torch

from leapgen.models.dag import LinkHead, dag_best_alignment, dag_logprob, dag_loss, glance_choice
from leapgen.samplers.dag.common import greedy_path, joint_viterbi_path, lookahead_path


def _graph(seed: int, b: int = 2, n: int = 6, v: int = 5):
    g = torch.Generator().manual_seed(seed)
    emit = torch.randn(b, n, v, generator=g).log_softmax(-1)
    lengths = torch.tensor([n, n - 1][:b])
    head = LinkHead(8, 2)
    torch.manual_seed(seed)
    links = head(torch.randn(b, n, 8, generator=g), torch.randn(1, n, 8, generator=g), lengths).detach()
    return emit, links, lengths


def _paths(n_vertices: int, m: int):
    for mid in itertools.combinations(range(1, n_vertices - 1), m - 2):
        yield (0, *mid, n_vertices - 1)


def _path_score(emit, links, row, path, tokens):
    s = sum(float(emit[row, j, t]) for j, t in zip(path, tokens))
    return s + sum(float(links[row, a, c]) for a, c in zip(path, path[1:]))


def test_links_are_normalised_and_forward():
    emit, links, lengths = _graph(0)
    for r in range(2):
        n = int(lengths[r])
        for i in range(n - 1):
            assert math.isclose(float(links[r, i, :n].exp().sum()), 1.0, rel_tol=1e-4)
            assert float(links[r, i, : i + 1].exp().sum()) < 1e-6


def test_dag_loss_equals_brute_force_enumeration():
    emit, links, lengths = _graph(1)
    targets = torch.tensor([[1, 3, 4, 2, 1], [1, 2, 1, 0, 0]])
    tl = torch.tensor([5, 3])
    lp = dag_logprob(emit, links, targets, tl, lengths)
    for r in range(2):
        toks = targets[r, : int(tl[r])].tolist()
        brute = torch.logsumexp(torch.tensor([_path_score(emit, links, r, p, toks)
                                              for p in _paths(int(lengths[r]), len(toks))]), 0)
        assert math.isclose(float(lp[r]), float(brute), rel_tol=1e-5, abs_tol=1e-5)
    loss, valid = dag_loss(emit, links, targets, tl, lengths)
    assert valid.all() and math.isclose(float(loss), float((-lp / tl).mean()), rel_tol=1e-5)


def test_dag_loss_drops_rows_without_a_path():
    emit, links, lengths = _graph(2)
    targets = torch.tensor([[1, 2, 3, 4, 2, 3, 1], [1, 2, 1, 0, 0, 0, 0]])
    loss, valid = dag_loss(emit, links, targets, torch.tensor([7, 3]), lengths)
    assert valid.tolist() == [False, True] and math.isfinite(float(loss))


def test_target_viterbi_alignment_equals_brute_force():
    emit, links, lengths = _graph(3)
    targets = torch.tensor([[1, 3, 4, 2, 1], [1, 2, 4, 1, 0]])
    tl = torch.tensor([5, 4])
    path, score = dag_best_alignment(emit, links, targets, tl, lengths)
    for r in range(2):
        toks = targets[r, : int(tl[r])].tolist()
        best = max(_paths(int(lengths[r]), len(toks)), key=lambda p: _path_score(emit, links, r, p, toks))
        assert tuple(path[r, : len(toks)].tolist()) == best
        assert math.isclose(float(score[r]), _path_score(emit, links, r, best, toks), rel_tol=1e-5)


def test_joint_viterbi_equals_brute_force_best_path():
    emit, links, lengths = _graph(4, n=7)
    for beta in (0.0, 1.0):
        paths = joint_viterbi_path(emit, links, lengths, beta=beta)
        for r in range(2):
            n = int(lengths[r])
            tok = emit[r].max(-1).values
            best, best_s = None, -1e30
            for m in range(2, n + 1):
                for p in _paths(n, m):
                    s = (sum(float(tok[j]) for j in p) + sum(float(links[r, a, c]) for a, c in zip(p, p[1:]))) / (m - 1) ** beta
                    if s > best_s:
                        best, best_s = p, s
            assert tuple(paths[r]) == best, (beta, r)


def test_greedy_and_lookahead_paths_go_forward_to_the_end():
    emit, links, lengths = _graph(5, n=8)
    for paths in (greedy_path(links, lengths), lookahead_path(emit, links, lengths, beta=1.0)):
        for r, p in enumerate(paths):
            assert p[0] == 0 and p[-1] == int(lengths[r]) - 1
            assert all(a < c for a, c in zip(p, p[1:]))
    g = greedy_path(links, lengths)
    for r, p in enumerate(g):
        for a, c in zip(p, p[1:]):
            assert c == int(links[r, a].argmax())


def test_glance_choice_counts():
    pred = torch.tensor([[1, 5, 5, 5, 1]])
    tgt = torch.tensor([[1, 5, 6, 7, 1]])
    pick = glance_choice(pred, tgt, torch.tensor([5]), 0.5)
    assert int(pick.sum()) == 1 and not pick[0, 0] and not pick[0, 4]
