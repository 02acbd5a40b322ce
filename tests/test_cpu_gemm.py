"""The CPU small-M GEMM (leapgen.kernels.cpu_gemm) against its reference, and in the lean runtime.

* the compiled kernel equals ``x @ w`` within float32 tolerance for every row count it takes, odd
  widths and depths included (zero-padded panels);
* batch invariance, bit for bit: a row's output does not depend on how many rows share the call,
  on its place among them, or on the thread count (what makes a verified token's logits equal to
  a one-token step's);
* the lean Llama with packed weights gives the unpacked network's logits, and on the shipped text
  model ``speculative`` and ``ar`` give the same greedy tokens with the kernel on;
* switches and failures: ``LEAPGEN_CPU_GEMM=off`` and ``LEAPGEN_KERNELS=reference`` keep torch's
  GEMM; a build that fails is logged and the reference runs; wrong inputs are refused.

CI builds the kernel (g++ and ninja come with ``make install-test``): a machine where it cannot
build fails ``test_the_kernel_builds_here`` with the reason instead of skipping.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from conftest import make_llama

from leapgen.errors import ConfigError
from leapgen.kernels import backend, cpu_gemm
from leapgen.models.lean import LeanCausalLM, LeanLlama

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "assets" / "text-code"


@pytest.fixture(scope="module")
def kernel():
    assert cpu_gemm.available(), f"the CPU GEMM did not build: {cpu_gemm.unavailable_reason()}"
    return cpu_gemm._module


def test_the_kernel_builds_here():
    assert cpu_gemm.cpu_supported() is None, cpu_gemm.cpu_supported()
    assert cpu_gemm.available(), f"the CPU GEMM did not build: {cpu_gemm.unavailable_reason()}"


@pytest.mark.parametrize("k,n", [(384, 1152), (37, 21), (1024, 384), (5, 8), (64, 4097)])
def test_kernel_matches_reference(kernel, k, n):
    g = torch.Generator().manual_seed(k * 31 + n)
    w = torch.randn(k, n, generator=g) / k**0.5
    packed = cpu_gemm.pack(w)
    assert packed.shape == (-(-n // 8), k, 8)
    for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, cpu_gemm.MAX_ROWS):
        x = torch.randn(m, k, generator=g)
        b = torch.randn(n, generator=g)
        got = cpu_gemm.linear(x, w, b, packed)
        assert got.shape == (m, n)
        torch.testing.assert_close(got, cpu_gemm.reference_linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_batch_invariance_bit_for_bit(kernel):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 520, generator=g)
    packed = cpu_gemm.pack(w)
    x = torch.randn(cpu_gemm.MAX_ROWS, 300, generator=g)
    alone = torch.cat([cpu_gemm.linear(x[i : i + 1], w, None, packed) for i in range(len(x))])
    for m in (2, 3, 4, 5, 6, 7, 8, 11, 17, cpu_gemm.MAX_ROWS):
        together = cpu_gemm.linear(x[:m], w, None, packed)
        assert torch.equal(together, alone[:m]), f"{m} rows differ from the rows alone"
    shuffled = torch.randperm(9, generator=g)
    assert torch.equal(cpu_gemm.linear(x[shuffled], w, None, packed), alone[shuffled])
    # the reference GEMM itself is not batch-invariant in general; the kernel is what guarantees it
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for m in (4, 5):  # both row schemes (panel groups outer; row blocks outer) split across threads
            assert torch.equal(cpu_gemm.linear(x[:m], w, None, packed), alone[:m])
    finally:
        torch.set_num_threads(threads)


def test_large_calls_and_other_dtypes_use_the_reference(kernel):
    w = torch.randn(16, 24)
    packed = cpu_gemm.pack(w)
    big = torch.randn(cpu_gemm.MAX_ROWS + 1, 16)
    assert not cpu_gemm.usable(big, packed)
    assert torch.equal(cpu_gemm.linear(big, w, None, packed), big @ w)
    half = torch.randn(3, 16, dtype=torch.bfloat16)
    assert not cpu_gemm.usable(half, packed)
    assert cpu_gemm.linear(half, w.bfloat16(), None, packed).dtype == torch.bfloat16


def test_wrong_inputs_are_refused(kernel):
    with pytest.raises(ConfigError, match="float32"):
        cpu_gemm.pack(torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(ConfigError, match=r"\[K, N\]"):
        cpu_gemm.pack(torch.randn(2, 4, 8))
    w = torch.randn(16, 24)
    with pytest.raises(ConfigError, match="repack"):
        cpu_gemm.linear(torch.randn(2, 16), w, None, cpu_gemm.pack(torch.randn(12, 24)))
    with pytest.raises(RuntimeError, match="contiguous"):
        kernel.small_m_gemm(torch.randn(16, 2).t(), cpu_gemm.pack(torch.randn(16, 8)))


def test_switches(monkeypatch, kernel):
    monkeypatch.setenv(cpu_gemm.ENV, "off")
    assert not cpu_gemm.enabled()
    monkeypatch.setenv(cpu_gemm.ENV, "sometimes")
    with pytest.raises(ConfigError, match="auto, on or off"):
        cpu_gemm.enabled()
    monkeypatch.setenv(cpu_gemm.ENV, "auto")
    with backend.use_backend("reference"):
        assert not cpu_gemm.enabled()
        net = LeanLlama.from_hf(make_llama(64))
        assert not net.pack_cpu_gemm()
    assert cpu_gemm.enabled()


def test_a_failed_build_is_logged_and_the_reference_runs(monkeypatch, caplog):
    def broken():
        raise OSError("no compiler here")

    monkeypatch.setattr(cpu_gemm, "_build", broken)
    monkeypatch.setattr(cpu_gemm, "_module", None)
    monkeypatch.setattr(cpu_gemm, "_tried", False)
    monkeypatch.setattr(cpu_gemm, "_error", None)
    backend.reset()
    with caplog.at_level(logging.WARNING, logger="leapgen.kernels.backend"):
        assert not cpu_gemm.available()
    assert "no compiler here" in (cpu_gemm.unavailable_reason() or "")
    assert any(
        "small_m_gemm" in r.getMessage() and "no compiler here" in r.getMessage() for r in caplog.records
    )
    net = LeanLlama.from_hf(make_llama(64))
    assert not net.pack_cpu_gemm()
    backend.reset()


@pytest.mark.parametrize(
    "kw",
    [
        dict(vocab_size=61, hidden=40, heads=4, kv_heads=2, intermediate=52),
        dict(vocab_size=64, kv_heads=1),
        dict(vocab_size=64, kv_heads=4, intermediate=72),
    ],
)
def test_lean_llama_packed_matches_unpacked(kernel, kw):
    hf = make_llama(**kw)
    lm = LeanCausalLM.from_hf(hf)
    assert lm.cpu_gemm
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, lm.vocab_size, (2, 7), generator=g)
    pos = torch.arange(7).expand(2, 7)

    def logits():
        cache = lm.new_cache(2)
        with torch.inference_mode():
            cache.reserve(6)
            first = lm.net(tokens[:, :6], pos[:, :6], None, cache.backend)  # 12 rows: the kernel
            cache.reserve(1)
            step = lm.net(tokens[:, 6:], pos[:, 6:], None, cache.backend)  # a one-token step
            return torch.cat([first, step], dim=1)

    packed = logits()
    lm.net.unpack_cpu_gemm()
    plain = logits()
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not ASSET.exists(), reason="the shipped text model is not in this checkout")
def test_speculative_equals_ar_on_the_shipped_model_with_the_kernel(kernel):
    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained(str(ASSET))
    assert pipe._lms["model"].cpu_gemm and pipe._lms["draft"].cpu_gemm
    prompts = ["def read_config(path):\n    ", "class Stack:\n    def __init__(self):\n        "]
    ar = pipe(prompts, sampler="ar", max_new_tokens=48, temperature=0)
    for sampler, kw in (
        ("speculative", {}),
        ("speculative", {"schedule": "constant", "num_draft_tokens": 6}),
        ("spec_tree", {}),
        ("lookahead", {}),
    ):
        out = pipe(prompts, sampler=sampler, max_new_tokens=48, temperature=0, **kw)
        assert out.texts == ar.texts, (sampler, kw)
        assert out.stats.target_forwards < ar.stats.target_forwards


def test_a_stale_build_lock_is_cleared_and_a_fresh_one_kept(monkeypatch, tmp_path, caplog):
    """torch's build lock waits forever for the build that left it; a killed build must not hang
    every later process."""
    import os
    import time

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = tmp_path / cpu_gemm.NAME
    build.mkdir()
    lock = build / "lock"
    lock.touch()
    cpu_gemm._clear_stale_lock()
    assert lock.exists()  # a build may be running now
    old = time.time() - cpu_gemm.STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    with caplog.at_level(logging.WARNING, logger="leapgen.kernels.cpu_gemm"):
        cpu_gemm._clear_stale_lock()
    assert not lock.exists()
    assert any("did not finish" in r.getMessage() for r in caplog.records)


def test_linear_rows_is_linear_without_the_checks(kernel):
    """The lean runtime's unchecked call (``linear_rows``) gives ``linear``'s result bit for bit,
    with and without a bias and for a width that is not a multiple of the panel."""
    g = torch.Generator().manual_seed(3)
    for n in (64, 61):
        w = torch.randn(48, n, generator=g)
        b = torch.randn(n, generator=g)
        packed = cpu_gemm.pack(w)
        for rows in ((1, 1), (1, 6), (4, 2), (2, 32)):
            x = torch.randn(*rows, 48, generator=g)
            for bias in (None, b):
                got = cpu_gemm.linear_rows(x, n, bias, packed)
                assert got.shape == (*rows, n)
                assert torch.equal(got, cpu_gemm.linear(x, w, bias, packed))
