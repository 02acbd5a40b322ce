"""leapgen.kernels: each Triton kernel against its PyTorch reference, the references against the
samplers' maths, input validation before launch, and the logged fallback.

On CPU the Triton kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set per test:
the kernels are decorated when first used in a mode, so the variable may change in-process). The
interpreter is slow, so vocabularies are 64-512 and batches small. Integer outputs (tokens, counts,
paths, masks) must match exactly, probabilities within float tolerance. The ``gpu`` variants run
the same comparisons natively on CUDA when a device is present.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from leapgen import kernels
from leapgen.errors import ConfigError, InputError
from leapgen.kernels import backend, reference
from leapgen.samplers.acceptance import greedy_walk
from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.logits import LogitsProcessor, sample
from leapgen.samplers.trees import ancestor_mask

CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _clean_backend():
    backend.reset()
    kernels.set_backend(None)
    yield
    kernels.set_backend(None)
    backend.reset()


def _both(fn, *args, **kw):
    """``fn`` under the reference and under Triton, with the same generator seed."""
    outs = []
    for name in ("reference", "triton"):
        with kernels.use_backend(name):
            if "seed" in kw:
                kw = dict(kw, generator=torch.Generator(kw.get("device", "cpu")).manual_seed(kw["seed"]))
            outs.append(fn(*args, **{k: v for k, v in kw.items() if k not in ("seed", "device")}))
    return outs


# ------------------------------------------------------------------------------------------------
# random inputs

SAMPLE_CASES = [  # (temperature, top_k, top_p, penalty, min_p)
    (0.0, 0, 1.0, 1.0, 0.0),
    (0.0, 0, 1.0, 1.3, 0.0),
    (0.0, 0, 1.0, 1.0, 0.2),
    (1.0, 0, 1.0, 1.0, 0.0),
    (0.7, 8, 1.0, 1.0, 0.0),
    (1.2, 0, 0.8, 1.0, 0.0),
    (0.9, 20, 0.9, 1.2, 0.0),
    (1.0, 0, 1.0, 1.0, 0.1),
    (1.5, 0, 1.0, 1.0, 0.3),
    (0.9, 20, 0.9, 1.2, 0.05),
    ("rows", "rows", "rows", 1.0, "rows"),
]


def _row_params(n: int, gen: torch.Generator, device):
    t = torch.rand(n, generator=gen) * 1.5
    t[::3] = 0.0  # greedy rows
    k = torch.randint(0, 40, (n,), generator=gen)
    p = torch.rand(n, generator=gen) * 0.6 + 0.4
    p[1::4] = 1.0
    return t.to(device), k.to(device), p.to(device)


def _row_min_p(n: int, gen: torch.Generator, device):
    m = torch.rand(n, generator=gen) * 0.4
    m[::2] = 0.0  # min-p off on half the rows
    return m.to(device)


def _check_sampling(device, dtype=torch.float32, v=200, n=6, seeds=range(2)):
    for seed in seeds:
        gen = torch.Generator().manual_seed(100 + seed)
        for t, k, p, pen, m in SAMPLE_CASES:
            logits = (torch.randn(n, v, generator=gen) * 3).to(device, dtype)
            seen = (torch.rand(n, v, generator=gen) < 0.2).to(device)
            if t == "rows":
                t, k, p = _row_params(n, gen, device)
                m = _row_min_p(n, gen, device)
            ref, tri = _both(
                kernels.sample_logits, logits, t, k, p, seen=seen, repetition_penalty=pen, min_p=m, seed=seed,
                device=device,
            )
            assert ref.dtype == tri.dtype == torch.long
            assert torch.equal(ref, tri), (t, k, p, pen, m, ref.tolist(), tri.tolist())
        for t, k, p, pen, m, pres, freq in PENALTY_CASES:  # the coded context: counts in the fused kernel
            logits = (torch.randn(n, v, generator=gen) * 3).to(device, dtype)
            coded = _coded(n, v, gen).to(device)
            ref, tri = _both(
                kernels.sample_logits, logits, t, k, p, seen=coded, repetition_penalty=pen, min_p=m,
                presence_penalty=pres, frequency_penalty=freq, seed=seed, device=device,
            )
            assert torch.equal(ref, tri), (t, k, p, pen, m, pres, freq, ref.tolist(), tri.tolist())


PENALTY_CASES = [  # (temperature, top_k, top_p, repetition penalty, min_p, presence, frequency)
    (0.0, 0, 1.0, 1.0, 0.0, 1.0, 0.5),
    (0.0, 0, 1.0, 1.3, 0.0, 0.0, 2.0),
    (1.0, 0, 1.0, 1.0, 0.0, -1.5, 0.0),
    (0.8, 10, 0.9, 1.2, 0.05, 0.7, -0.4),
]


def _coded(n: int, v: int, gen: torch.Generator) -> torch.Tensor:
    """A random coded context ``2 * count + in_prompt`` (counts 0-3, a fifth of the tokens in the prompt)."""
    count = torch.randint(0, 4, (n, v), generator=gen) * (torch.rand(n, v, generator=gen) < 0.3)
    return (2 * count + (torch.rand(n, v, generator=gen) < 0.2)).to(torch.int32)


def _chain_inputs(b, g, v, gen, device, dtype=torch.float32):
    q = (torch.randn(b, g, v, generator=gen) * 2).softmax(-1)
    # p close to q at most positions so that drafts are accepted as well as rejected
    p = (q.log() + 0.7 * torch.randn(b, g, v, generator=gen)).softmax(-1)
    p = torch.cat([p, (torch.randn(b, 1, v, generator=gen)).softmax(-1)], 1)
    draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, g)
    lens = torch.randint(0, g + 1, (b,), generator=gen)
    cast = lambda x: x.to(device, dtype)  # noqa: E731
    return draft.to(device), cast(p), cast(q), lens.to(device)


def _check_chain(device, dtype=torch.float32, v=128, seeds=range(3)):
    for seed in seeds:
        gen = torch.Generator().manual_seed(7 + seed)
        b, g = 6, 4
        draft, p, q, lens = _chain_inputs(b, g, v, gen, device, dtype)
        base = (p[:, :g] * (torch.rand(b, g, v, generator=gen).to(device, dtype) > 0.3)).contiguous()
        px = p[:, :g].gather(-1, draft[..., None]).squeeze(-1) * 1.3
        qx = q.gather(-1, draft[..., None]).squeeze(-1)
        cases = [
            dict(q=q),
            dict(q=None),
            dict(q=q, draft_len=lens),
            dict(q=q, draft_len=lens, ratio=(px, qx), residual_base=base),
        ]
        for case in cases:
            qq = case.pop("q")
            (n_r, x_r), (n_t, x_t) = _both(kernels.chain_accept, draft, p, qq, seed=seed, device=device, **case)
            assert torch.equal(n_r, n_t), (seed, case.keys(), n_r.tolist(), n_t.tolist())
            assert torch.equal(x_r, x_t), (seed, case.keys(), x_r.tolist(), x_t.tolist())
        assert 0 < int(n_r.sum()) < b * g  # both paths exercised


def _random_trees(b, n, v, gen):
    tokens = torch.randint(0, v, (b, n), generator=gen)
    parent = torch.full((b, n), -2, dtype=torch.long)
    for row in range(b):
        size = int(torch.randint(1, n + 1, (), generator=gen))
        parent[row, 0] = -1
        for i in range(1, size):
            parent[row, i] = int(torch.randint(0, i, (), generator=gen))
    p = torch.randn(b, n, v, generator=gen).softmax(-1)
    # make the greedy walk go deep: most children carry their parent's argmax
    best = p.argmax(-1)
    for row in range(b):
        for i in range(1, n):
            if parent[row, i] >= 0 and torch.rand((), generator=gen) < 0.6:
                tokens[row, i] = best[row, parent[row, i]]
    return tokens, parent, p


def _check_tree(device, dtype=torch.float32, seeds=range(2)):
    for seed in seeds:
        gen = torch.Generator().manual_seed(11 + seed)
        tokens, parent, p = _random_trees(4, 10, 64, gen)
        tokens, parent, p = tokens.to(device), parent.to(device), p.to(device, dtype)
        ref, tri = _both(kernels.tree_verify, tokens, parent, p)
        for field in ("anc", "depth", "best", "path", "n_accepted", "next_token"):
            assert torch.equal(getattr(ref, field), getattr(tri, field)), (seed, field)
        torch.testing.assert_close(ref.node_p, tri.node_p, rtol=0, atol=0)


def _check_tree_accept(device, dtype=torch.float32, seeds=range(2)):
    for seed in seeds:
        gen = torch.Generator().manual_seed(21 + seed)
        tokens, parent, p = _random_trees(5, 10, 48, gen)
        q = (p.log() + 0.8 * torch.randn(p.shape, generator=gen)).softmax(-1)
        tokens, parent, p, q = tokens.to(device), parent.to(device), p.to(device, dtype), q.to(device, dtype)
        moved = 0
        for kind, qq in (("deterministic", None), ("iid", q), ("without_replacement", q)):
            ref, tri = _both(kernels.tree_accept, tokens, parent, p, qq, kind, seed=seed, device=device)
            for name, a, b in zip(("path", "n_accepted", "next_token"), ref, tri):
                assert torch.equal(a, b), (seed, kind, name, a.tolist(), b.tolist())
            moved += int(ref[1].sum())
        assert moved > 0  # some children were accepted


# ------------------------------------------------------------------------------------------------
# kernel vs reference under the interpreter (CPU)


def _interpreter_ready() -> bool:
    """TRITON_INTERPRET=1 in force and triton imported under it (triton decorates its own library
    at import, so the variable must be set before triton's first import in the process)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if "triton" not in sys.modules:
        return True
    from leapgen.kernels.triton_kernels import interpreter_ready

    return interpreter_ready()


def test_kernels_match_reference_under_interpreter(request):
    """Every kernel against its reference on random inputs, on CPU through Triton's interpreter.
    Runs in this process when triton was imported with TRITON_INTERPRET=1, otherwise re-runs
    itself in a child process with the variable set from the start."""
    pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]')")
    if not _interpreter_ready():
        env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
        env.pop(kernels.ENV, None)
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", request.node.nodeid]
        run = subprocess.run(cmd, cwd=request.config.rootpath, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "1 passed" in run.stdout, run.stdout[-2000:]
        return
    cpu = torch.device("cpu")
    _check_sampling(cpu)
    _check_sampling(cpu, torch.float64, v=67, n=2, seeds=range(1))
    _check_chain(cpu)
    _check_tree(cpu)
    _check_tree_accept(cpu)
    _check_tree_accept(cpu, torch.float64, seeds=range(1))


# ------------------------------------------------------------------------------------------------
# the references are the samplers' maths


@pytest.mark.parametrize("t,k,p,pen,m", [c for c in SAMPLE_CASES if c[0] != "rows"])
def test_reference_is_logits_processor_and_multinomial(t, k, p, pen, m):
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(5, 300, generator=gen) * 3
    seen = torch.rand(5, 300, generator=gen) < 0.2
    proc = LogitsProcessor(DecodeConfig(temperature=t, top_k=k, top_p=p, repetition_penalty=pen, min_p=m))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for _ in range(3):
        old = proc.argmax(logits, seen) if proc.greedy else sample(proc.probs(logits, seen), g1)
        with kernels.use_backend("reference"):
            new = kernels.sample_logits(logits, t, k, p, generator=g2, seen=seen, repetition_penalty=pen, min_p=m)
        assert torch.equal(old, new)
    assert torch.equal(g1.get_state(), g2.get_state())  # the same draws were consumed
    assert torch.equal(proc.process(logits, seen), reference.process_logits(logits, t, k, p, seen, pen, m))


def test_min_p_keeps_exactly_the_tokens_at_least_min_p_times_the_top_probability():
    """vLLM's min-p, computed independently: softmax after temperature (and top-k / top-p), keep p >=
    min_p * p_max, renormalise; greedy is untouched; min_p=0 changes nothing."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 120, generator=gen) * 3
    for t, k, p, m in ((1.0, 0, 1.0, 0.1), (0.7, 0, 1.0, 0.3), (1.3, 30, 0.9, 0.05), (1.0, 0, 1.0, 1.0)):
        base = reference.process_logits(logits, t, k, p)
        probs = base.softmax(-1)
        keep = probs >= m * probs.amax(-1, keepdim=True)
        want = torch.where(keep, probs, torch.zeros_like(probs))
        want = want / want.sum(-1, keepdim=True)
        got = LogitsProcessor(DecodeConfig(temperature=t, top_k=k, top_p=p, min_p=m)).probs(logits)
        torch.testing.assert_close(got, want)
        assert int((got > 0).sum()) < int((base.softmax(-1) > 0).sum())  # min-p removed tokens
    greedy = LogitsProcessor(DecodeConfig(min_p=0.5))
    assert torch.equal(greedy.process(logits), logits)
    off = LogitsProcessor(DecodeConfig(temperature=0.8, min_p=0.0))
    assert torch.equal(off.process(logits), logits / 0.8)


@pytest.mark.parametrize("t,k,p,pen,m,pres,freq", PENALTY_CASES)
def test_presence_and_frequency_penalties_are_vllms_formula(t, k, p, pen, m, pres, freq):
    """vLLM, written out: the repetition penalty on every token of the context (prompt or generated),
    then ``logits -= frequency * count + presence * (count > 0)`` with the generated counts, then the
    rest of the processing; the fused entry point (reference backend) draws the same tokens as
    ``sample(LogitsProcessor.probs(...))``."""
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(5, 300, generator=gen) * 3
    coded = _coded(5, 300, gen)
    count = (coded >> 1).float()
    rep = torch.where(logits > 0, logits / pen, logits * pen)
    by_hand = torch.where(coded != 0, rep, logits) - freq * count - pres * (count > 0).float()
    cfg = DecodeConfig(temperature=t, top_k=k, top_p=p, repetition_penalty=pen, min_p=m, presence_penalty=pres,
                       frequency_penalty=freq)
    proc = LogitsProcessor(cfg)
    torch.testing.assert_close(proc.process(logits, coded), reference.process_logits(by_hand, t, k, p, min_p=m))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    old = proc.argmax(logits, coded) if proc.greedy else sample(proc.probs(logits, coded), g1)
    with kernels.use_backend("reference"):
        new = kernels.sample_logits(logits, t, k, p, generator=g2, seen=coded, repetition_penalty=pen, min_p=m,
                                    presence_penalty=pres, frequency_penalty=freq)
    assert torch.equal(old, new)
    off = LogitsProcessor(DecodeConfig(temperature=t, top_k=k, top_p=p, repetition_penalty=pen, min_p=m))
    assert torch.equal(off.process(logits, coded != 0), off.process(logits, coded))  # counts ignored at 0


def test_presence_and_frequency_penalties_refuse_a_bool_mask_and_bad_values():
    logits, mask = torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.bool)
    with pytest.raises(InputError, match="coded context"):
        kernels.sample_logits(logits, 1.0, seen=mask, presence_penalty=0.5)
    with pytest.raises(InputError, match="coded context"):
        reference.process_logits(logits, 1.0, seen=mask, frequency_penalty=0.5)
    for bad in (2.5, -3.0, True, float("nan")):
        with pytest.raises(ConfigError, match="frequency_penalty"):
            kernels.sample_logits(logits, 1.0, frequency_penalty=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_min_p_out_of_range_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="min_p"):
        DecodeConfig(temperature=1.0, min_p=bad)
    with pytest.raises(ConfigError, match="min_p"):
        kernels.sample_logits(torch.zeros(2, 5), 1.0, min_p=bad if not isinstance(bad, str) else 2.0)


def test_per_row_parameters_equal_the_scalar_path_row_by_row():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(8, 150, generator=gen) * 2
    t, k, p = _row_params(8, gen, "cpu")
    m = _row_min_p(8, gen, "cpu")
    rows = reference.process_logits(logits, t, k, p, min_p=m)
    for i in range(8):
        one = reference.process_logits(logits[i : i + 1], float(t[i]), int(k[i]), float(p[i]), min_p=float(m[i]))
        assert torch.equal(rows[i : i + 1], one)


def test_tree_reference_is_the_samplers_tree_maths():
    gen = torch.Generator().manual_seed(2)
    tokens, parent, p = _random_trees(5, 9, 32, gen)
    out = kernels.tree_verify(tokens, parent, p)
    assert torch.equal(out.anc, ancestor_mask(parent))
    for row in range(5):
        size = int((parent[row] >= -1).sum())
        path, nxt = greedy_walk(tokens[row, :size].tolist(), parent[row, :size].tolist(), out.best[row].tolist())
        assert out.path[row, : len(path)].tolist() == path and int(out.n_accepted[row]) == len(path)
        assert int(out.next_token[row]) == nxt


def test_device_tree_walk_equals_host_walk():
    """The batched walk the tree loop uses on the Triton path (one transfer) gives the host walk's
    paths and next tokens on every row, padding included."""
    from leapgen.samplers.acceptance import device_greedy_walk

    gen = torch.Generator().manual_seed(11)
    tokens, parent, p = _random_trees(6, 10, 24, gen)
    got = device_greedy_walk(tokens, parent, p)
    best = p.argmax(-1)
    for row in range(6):
        size = int((parent[row] >= -1).sum())
        want = greedy_walk(tokens[row, :size].tolist(), parent[row, :size].tolist(), best[row].tolist())
        assert got[row] == want


@pytest.mark.parametrize("kind", ["deterministic", "iid", "without_replacement"])
def test_tree_accept_reference_is_distribution_exact(kind):
    """The sampled tree walk emits tokens that follow the target exactly: over 200k rows, each with
    its own drafted two-level tree (children drawn from q as ``kind`` says), the joint of the first
    two emitted tokens is p0(t1) p1[t1](t2) within Monte-Carlo error (TV < 0.01; a walk that skips
    the residual, or accepts with p instead of p/q, is off by 0.05-0.2)."""
    gen = torch.Generator().manual_seed(0)
    b, v, k1, k2 = 200_000, 5, 3, 2
    p0 = torch.tensor([0.35, 0.25, 0.2, 0.15, 0.05], dtype=torch.float64)
    q0 = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15], dtype=torch.float64)
    p1 = torch.rand(v, v, generator=gen, dtype=torch.float64)
    p1 = p1 / p1.sum(-1, keepdim=True)  # target after each first token
    q1 = torch.rand(v, v, generator=gen, dtype=torch.float64)
    q1 = q1 / q1.sum(-1, keepdim=True)
    n = 1 + k1 + k1 * k2
    parent = torch.tensor([-1] + [0] * k1 + [1 + i // k2 for i in range(k1 * k2)]).expand(b, n).contiguous()

    def draw(q: torch.Tensor, k: int, fixed: list[int]) -> torch.Tensor:
        if kind == "deterministic":
            return torch.tensor(fixed).expand(q.shape[0], k)
        return torch.multinomial(q, k, replacement=kind == "iid", generator=gen)

    first = draw(q0.expand(b, v), k1, [3, 0, 1])
    second = torch.cat([draw(q1[first[:, i]], k2, [2, 4]) for i in range(k1)], 1)
    tokens = torch.cat([torch.zeros(b, 1, dtype=torch.long), first, second], 1)
    p = torch.cat([p0.expand(b, 1, v), p1[first], p1[first].new_full((b, k1 * k2, v), 1.0 / v)], 1)
    q = torch.cat([q0.expand(b, 1, v), q1[first], p1[first].new_full((b, k1 * k2, v), 1.0 / v)], 1)
    # the depth-2 nodes are leaves: the token after them is drawn from their p (uniform here)
    path, count, nxt = kernels.tree_accept(tokens, parent, p, None if kind == "deterministic" else q, kind,
                                           torch.Generator().manual_seed(1))  # fmt: skip
    emitted = torch.cat([tokens.gather(1, path.clamp_min(0)), torch.zeros(b, 1, dtype=torch.long)], 1)
    emitted.scatter_(1, count[:, None], nxt[:, None])
    joint = torch.zeros(v, v, dtype=torch.float64)
    has2 = count >= 1  # the second token comes from the tree only after an accepted first one
    t1, t2 = emitted[:, 0], emitted[:, 1]
    joint.index_put_((t1[has2], t2[has2]), torch.ones(int(has2.sum()), dtype=torch.float64), accumulate=True)
    marg = torch.bincount(t1, minlength=v).double() / b
    assert 0.5 * (marg - p0).abs().sum() < 0.01, (marg, p0)
    # given an accepted first token t1, the second follows p1[t1]
    rows = joint.sum(1)
    seen = rows > 2000
    cond = joint[seen] / rows[seen, None]
    assert 0.5 * (cond - p1[seen]).abs().sum(-1).max() < 0.02, (cond, p1[seen])
    assert 0 < int(has2.sum()) < b and int((count == 2).sum()) > 0  # both levels were exercised


def test_tree_walk_routes_sampling_to_the_tree_accept_kernel():
    """On every device the tree loop's sampled walk is one ``tree_accept`` call for the batch (the
    Triton kernel on CUDA, its reference here): its paths follow parent links from the root, it
    equals the kernel's output for the same draws, and ``verify_tree`` on one row is the same rule
    with the same draws (the sampled tree rule exists once)."""
    from leapgen.samplers.acceptance import TreeWalk, device_sampled_walk
    from leapgen.samplers.verify import verify_tree

    gen = torch.Generator().manual_seed(5)
    tokens, parent, p = _random_trees(6, 10, 24, gen)
    q = (p.log() + 0.5 * torch.randn(p.shape, generator=gen)).softmax(-1)
    sizes = [int((parent[r] >= -1).sum()) for r in range(6)]
    tok_l = [tokens[r, :n].tolist() for r, n in enumerate(sizes)]
    par_l = [parent[r, :n].tolist() for r, n in enumerate(sizes)]
    proc = LogitsProcessor(DecodeConfig(temperature=1.0))
    got = TreeWalk("iid")(proc, tok_l, par_l, p, q, None, torch.Generator().manual_seed(3), trees=(tokens, parent))
    want = device_sampled_walk(tokens, parent, p, q, "iid", torch.Generator().manual_seed(3))
    assert got == want
    for r in range(6):
        n = sizes[r]
        one = device_sampled_walk(tokens[r : r + 1, :n], parent[r : r + 1, :n], p[r : r + 1, :n], q[r : r + 1, :n],
                                  "iid", torch.Generator().manual_seed(r))  # fmt: skip
        assert verify_tree(tok_l[r], par_l[r], p[r, :n], q[r, :n], "iid", False,
                           torch.Generator().manual_seed(r)) == one[0]  # fmt: skip
    for r, (path, nxt) in enumerate(got):
        assert 0 <= nxt < 24
        prev = 0
        for node in path:
            assert parent[r, node] == prev
            prev = node
    assert any(path for path, _ in got)


def test_chain_reference_accepts_what_verify_accepts():
    from leapgen.samplers.verify import rejection_sample

    gen = torch.Generator().manual_seed(4)
    draft, p, q, lens = _chain_inputs(5, 3, 50, gen, "cpu")
    a = rejection_sample(draft, p, q, torch.Generator().manual_seed(1), lens)
    with kernels.use_backend("reference"):
        b = kernels.chain_accept(draft, p, q, torch.Generator().manual_seed(1), lens)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ------------------------------------------------------------------------------------------------
# bad input is refused before launch; backend selection; logged fallback


def test_bad_inputs_are_refused_before_launch():
    logits = torch.randn(3, 20)
    with pytest.raises(InputError, match="dtype"):
        kernels.sample_logits(logits.long())
    with pytest.raises(InputError, match="contiguous"):
        kernels.sample_logits(torch.randn(20, 3).t())
    with pytest.raises(InputError, match="on meta"):
        kernels.sample_logits(logits, 1.0, seen=torch.zeros(3, 20, dtype=torch.bool, device="meta"))
    with pytest.raises(InputError, match="shape"):
        kernels.sample_logits(logits, torch.ones(4))
    with pytest.raises(ConfigError, match="top_p"):
        kernels.sample_logits(logits, 1.0, 0, 1.5)
    with pytest.raises(ConfigError, match="temperature"):
        kernels.sample_logits(logits, -1.0)
    p = torch.rand(2, 4, 20).softmax(-1)
    with pytest.raises(InputError, match="shape"):
        kernels.chain_accept(torch.zeros(2, 3, dtype=torch.long), p[:, :3], None)
    with pytest.raises(InputError, match="dtype"):
        kernels.chain_accept(torch.zeros(2, 3), p, None)
    with pytest.raises(InputError, match="q must have shape"):
        kernels.chain_accept(torch.zeros(2, 3, dtype=torch.long), p, p)
    with pytest.raises(InputError, match="bad tree"):
        kernels.tree_verify(torch.zeros(1, 3, dtype=torch.long), torch.tensor([[-1, 2, 0]]), torch.rand(1, 3, 20))
    with pytest.raises(InputError, match="bad tree"):
        kernels.tree_verify(torch.tensor([[0, 25]]), torch.tensor([[-1, 0]]), torch.rand(1, 2, 20))


def test_backend_switch(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "bogus")
    with pytest.raises(ConfigError, match="LEAPGEN_KERNELS"):
        kernels.backend_name()
    monkeypatch.setenv(kernels.ENV, "reference")
    assert kernels.backend_name() == "reference"
    with kernels.use_backend("triton"):
        assert kernels.backend_name() == "triton"
    assert kernels.backend_name() == "reference"
    monkeypatch.setenv(kernels.ENV, "auto")
    assert not backend.use_triton("sample_logits", torch.device("cpu"))  # the CPU path is the reference
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with kernels.use_backend("triton"), pytest.raises(ConfigError, match="TRITON_INTERPRET"):
        kernels.sample_logits(torch.randn(2, 8))


def test_missing_triton_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(backend, "triton_error", lambda: "ImportError: No module named 'triton'")
    with caplog.at_level(logging.WARNING, logger="leapgen.kernels"):
        assert not backend.use_triton("chain_accept", torch.device("cuda"))
        assert not backend.use_triton("chain_accept", torch.device("cuda"))
    warnings = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1 and "triton is not available" in warnings[0].getMessage()
    with kernels.use_backend("triton"), pytest.raises(ConfigError, match="pip install triton"):
        backend.use_triton("chain_accept", torch.device("cuda"))


def test_launch_failure_falls_back_with_one_warning(monkeypatch, caplog):
    pytest.importorskip("triton", reason="triton is not installed")
    from leapgen.kernels import triton_kernels

    def boom(*args, **kw):
        raise RuntimeError("out of resources")

    monkeypatch.setattr(backend, "use_triton", lambda kernel, device, vocab=None: True)
    monkeypatch.setattr(triton_kernels, "sample_logits", boom)
    logits = torch.randn(4, 32)
    with kernels.use_backend("reference"):
        want = kernels.sample_logits(logits, 0.8, generator=torch.Generator().manual_seed(0))
    with caplog.at_level(logging.WARNING, logger="leapgen.kernels"):
        for _ in range(2):
            got = kernels.sample_logits(logits, 0.8, generator=torch.Generator().manual_seed(0))
            assert torch.equal(got, want)
    warnings = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1 and "out of resources" in warnings[0].getMessage()
    with kernels.use_backend("triton"), pytest.raises(RuntimeError, match="out of resources"):
        kernels.sample_logits(logits, 0.8)


# ------------------------------------------------------------------------------------------------
# natively on CUDA

gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device: the native Triton kernels need one")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_kernels_match_reference(dtype, monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    dev = torch.device("cuda")
    _check_sampling(dev, dtype, v=4096, n=16, seeds=range(4))
    _check_chain(dev, dtype, v=4096, seeds=range(4))
    _check_tree(dev, dtype, seeds=range(4))
    _check_tree_accept(dev, dtype, seeds=range(4))
    assert backend.use_triton("sample_logits", dev)
    assert not [k for k in ("sample_logits", "chain_accept", "tree_verify", "tree_accept") if k in backend._broken]


def test_kernels_import_nothing_from_leapgen_but_errors():
    """kernels sit below tokenizers: the only leapgen module they may import is leapgen.errors."""
    import ast
    from pathlib import Path

    pkg = Path(kernels.__file__).parent
    for path in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                assert node.module == "errors", f"{path.name} imports ..{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("leapgen"):
                assert node.module == "leapgen.errors", f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("leapgen") for a in node.names), path.name


# ------------------------------------------------------------------------------------------------
# leapgen bench kernels


def test_kernel_bench_reference_only_on_cpu_says_why():
    from leapgen.bench.kernels import QUICK_SHAPES, format_markdown, run_kernel_bench

    if _interpreter_ready() and "triton" in sys.modules:
        pytest.skip("this process interprets Triton; the reference-only table is checked without it")
    result = run_kernel_bench("cpu", runs=2, shapes=QUICK_SHAPES)
    assert [r["kernel"] for r in result["rows"]] == [s[0] for s in QUICK_SHAPES]
    assert all(r["reference_ms"] > 0 and r["triton_ms"] is None and r["agree"] is None for r in result["rows"])
    md = format_markdown(result)
    assert "Triton column empty: no CUDA device" in md and "| tree_accept" in md
    with pytest.raises(ConfigError, match="runs must be >= 1"):
        run_kernel_bench("cpu", runs=0, shapes=QUICK_SHAPES)
    with pytest.raises(ConfigError, match="unknown kernel"):
        run_kernel_bench("cpu", runs=1, shapes=[("softmax", 1, 0, 8)])


def test_kernel_bench_agreement_check_catches_a_difference():
    from leapgen.bench.kernels import agree

    a = (torch.tensor([1, 2]), torch.tensor([0.5, 0.25]))
    assert agree(a, (torch.tensor([1, 2]), torch.tensor([0.5, 0.25 + 1e-9])))
    assert not agree(a, (torch.tensor([1, 3]), torch.tensor([0.5, 0.25])))
    assert not agree(a, (torch.tensor([1, 2]), torch.tensor([0.5, 0.3])))
    assert not agree(a, (torch.tensor([1, 2]),))
    gen = torch.Generator().manual_seed(0)
    tokens, parent = torch.randint(0, 8, (2, 4), generator=gen), torch.tensor([[-1, 0, 0, 1]] * 2)
    ref = reference.tree_verify(tokens, parent, torch.rand(2, 4, 8, generator=gen).softmax(-1))
    assert agree(ref, ref)  # a TreeVerify's fields are compared one by one


def test_kernel_bench_cli_quick(tmp_path):
    run = subprocess.run([sys.executable, "-m", "leapgen", "bench", "kernels", "--quick", "--json", str(tmp_path / "k.json")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "TRITON_INTERPRET=1, so the triton column times the interpreter" in run.stdout
    import json

    rows = json.loads((tmp_path / "k.json").read_text())["rows"]
    assert len(rows) == 4 and all(r["agree"] is True for r in rows)


def test_every_kernel_compiles_for_sm90_without_a_gpu(request):
    """The Triton front end and the bundled ptxas compile every kernel variant for Hopper on this
    CPU: type errors the interpreter cannot see (an int32 loop variable re-assigned int64 broke
    tree_verify on the first H100 run) fail here, not first on a GPU."""
    triton = pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]')")
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
    except ImportError:
        pytest.fail(f"triton {triton.__version__} has no triton.backends.compiler.GPUTarget")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = request.config.rootpath / "tests" / "kernel_compile_check.py"
    run = subprocess.run([sys.executable, str(script)], cwd=request.config.rootpath, env=env,
                         capture_output=True, text=True, timeout=600)
    fails = [ln for ln in run.stdout.splitlines() if ln.startswith("FAIL")]
    assert run.returncode == 0 and not fails, "\n".join(fails) or run.stderr[-3000:]
    assert sum(ln.startswith("ok") for ln in run.stdout.splitlines()) == 37  # sample: 2 dtypes x (none, bool, coded)


def test_vocabulary_wider_than_one_block_runs_the_reference(monkeypatch, caplog):
    """Rows wider than MAX_VOCAB: forcing triton is refused with the reason; on auto (CUDA) the
    reference runs with one warning, never silently."""
    logits = torch.randn(2, backend.MAX_VOCAB + 1)
    with kernels.use_backend("triton"), pytest.raises(ConfigError, match=f"exceeds {backend.MAX_VOCAB}"):
        kernels.sample_logits(logits, 1.0)
    backend.reset()
    with caplog.at_level(logging.WARNING, logger="leapgen.kernels"):
        assert not backend.use_triton("sample_logits", torch.device("cuda"), backend.MAX_VOCAB + 1)
        assert not backend.use_triton("sample_logits", torch.device("cuda"), backend.MAX_VOCAB + 1)
    warned = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warned) == 1 and f"exceeds {backend.MAX_VOCAB}" in warned[0]
    backend.reset()
    # between the measured speed limit of auto and the compile limit: the reference, said at INFO once
    with caplog.at_level(logging.INFO, logger="leapgen.kernels"):
        caplog.clear()
        for _ in range(2):
            assert not backend.use_triton("chain_accept", torch.device("cuda"), backend.AUTO_MAX_VOCAB + 1)
    said = [r.getMessage() for r in caplog.records if "reference is faster" in r.getMessage()]
    assert len(said) == 1
    backend.reset()


def test_kernel_bench_cli_refuses_bad_options():
    for args, msg in ((["--device", "cuda"], "CUDA is not available"), (["--runs", "0"], "--runs must be >= 1")):
        if args[0] == "--device" and CUDA:
            continue
        run = subprocess.run([sys.executable, "-m", "leapgen", "bench", "kernels", "--quick", *args],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and msg in run.stderr and "Traceback" not in run.stderr, run.stderr
