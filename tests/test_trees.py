"""Draft trees: masks, depths and paths on hand-made trees, and one tree forward == per-path runs."""

from __future__ import annotations

import torch

from leapgen.models import HFCausalLM
from leapgen.samplers.trees import DraftTree, accepted_slots, ancestor_mask, depth, leaf_paths, path_to

#        0
#      /   \
#     1     2
#    / \     \
#   3   4     5
#             |
#             6
PARENT = [-1, 0, 0, 1, 1, 2, 5]


def test_ancestor_mask_depth_and_paths_of_a_hand_made_tree():
    anc = ancestor_mask(torch.tensor(PARENT))
    assert anc.shape == (1, 7, 7)
    expected = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 2, 5}, 6: {0, 2, 5, 6}}
    for i, anc_i in expected.items():
        assert set(torch.nonzero(anc[0, i]).flatten().tolist()) == anc_i
    assert depth(anc)[0].tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert leaf_paths(PARENT) == [[0, 1, 3], [0, 1, 4], [0, 2, 5, 6]]
    assert path_to(PARENT, 6) == [0, 2, 5, 6]
    assert path_to(PARENT, 0) == [0]


def test_chain_and_single_node_trees():
    anc = ancestor_mask(torch.tensor([-1, 0, 1, 2]))
    assert torch.equal(anc[0], torch.ones(4, 4, dtype=torch.bool).tril())
    assert depth(anc)[0].tolist() == [0, 1, 2, 3]
    assert leaf_paths([-1, 0, 1, 2]) == [[0, 1, 2, 3]]
    assert leaf_paths([-1]) == [[0]]
    chain = DraftTree.chain(torch.tensor([7, 8]), torch.tensor([[1, 2], [3, 4]]))
    assert chain.tokens.tolist() == [[7, 1, 2], [8, 3, 4]]
    assert chain.parent.tolist() == [[-1, 0, 1], [-1, 0, 1]]
    assert chain.n_nodes.tolist() == [3, 3]


def test_ancestor_mask_matches_walking_the_parents_on_random_padded_forests():
    # the mask is built by pointer doubling (log2 N rounds); deep chains need every round
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        b, n = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 70, (1,), generator=g))
        parent = torch.full((b, n), -2, dtype=torch.long)
        for r in range(b):
            m = int(torch.randint(1, n + 1, (1,), generator=g))  # real nodes, then padding
            parent[r, 0] = -1
            for i in range(1, m):
                parent[r, i] = i - 1 if trial % 3 == 0 else int(torch.randint(0, i, (1,), generator=g))
        anc = ancestor_mask(parent)
        for r in range(b):
            for i in range(n):
                want, j = {i}, i
                while parent[r, j] >= 0:
                    j = int(parent[r, j])
                    want.add(j)
                assert set(torch.nonzero(anc[r, i]).flatten().tolist()) == want


def test_padded_batch_of_trees():
    tree = DraftTree.from_lists([[5, 6, 7], [9, 1, 2, 3, 4]], [[-1, 0, 0], [-1, 0, 1, 0, 3]], pad=0)
    assert tree.n_nodes.tolist() == [3, 5]
    assert tree.parent[0].tolist() == [-1, 0, 0, -2, -2]
    anc = ancestor_mask(tree.parent)
    # padding nodes see only themselves, and nobody sees them
    assert torch.equal(anc[0, 3], torch.eye(5, dtype=torch.bool)[3])
    assert not bool(anc[0, :3, 3:].any())
    assert depth(anc)[1].tolist() == [0, 1, 2, 1, 2]
    assert leaf_paths(tree.parent[0].tolist()) == [[0, 1], [0, 2]]
    idx, counts = accepted_slots([[0, 2], [0, 3, 4]], 3)
    assert idx.tolist() == [[0, 2, 0], [0, 3, 4]] and counts.tolist() == [2, 3]


def test_tree_forward_equals_each_path_alone(target_model, target_mha):
    """Batch of 2 different trees after prompts of different lengths (the shorter row has holes
    in the cache): every node's logits equal a cache-free run over prompt + that node's path."""
    parents = [
        [-1, 0, 0, 1, 1, 2, 5, 0],
        [-1, 0, 1, 2, 0, 4, 4],  # two branches, padded to 8 nodes
    ]
    prompts = [[3, 14, 15, 9, 26, 5], [35, 8, 9]]
    for model in (target_model, target_mha):
        v = model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        toks = [torch.randint(0, v, (len(p),), generator=g).tolist() for p in parents]
        tree = DraftTree.from_lists(toks, parents)
        lm = HFCausalLM(model)
        cache = lm.new_cache(2)
        width = max(len(p) for p in prompts)
        batch = torch.zeros(2, width, dtype=torch.long)
        for b, p in enumerate(prompts):
            batch[b, : len(p)] = torch.tensor(p)
        lm(batch, cache)
        cache.keep_new(0, torch.tensor([len(p) for p in prompts]))
        assert cache.lengths.tolist() == [6, 3]

        anc = ancestor_mask(tree.parent)
        pos = cache.lengths[:, None] + depth(anc)
        logits = lm(tree.tokens, cache, position_ids=pos, attn_mask=anc)
        for b in range(2):
            for node in range(len(parents[b])):
                seq = prompts[b] + [toks[b][i] for i in path_to(parents[b], node)]
                with torch.no_grad():
                    ref = model(torch.tensor([seq])).logits[0, -1]
                torch.testing.assert_close(logits[b, node], ref, atol=1e-5, rtol=0)
