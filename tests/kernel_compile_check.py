"""Compile every Triton kernel of leapgen.kernels for a Hopper GPU (sm_90) on a machine without one.

``triton.compile`` runs the whole front end and the bundled ``ptxas`` with no device present, so
type errors that the interpreter never sees (a loop-carried variable changing from int32 to int64,
say) fail here as they would on the GPU. Run as a script (``python tests/kernel_compile_check.py``;
``tests/test_kernels.py`` does so in a child process, away from any interpreter-mode triton): one
line per variant, exit status = the number that failed to compile.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from leapgen.kernels import triton_kernels as K  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
FLOAT_PTRS = {"x_ptr", "e_ptr", "t_ptr", "p_ptr", "q_ptr", "base_ptr", "px_ptr", "qx_ptr", "u_ptr", "nodep_ptr", "penalty"}
BYTE_PTRS = {"seen_ptr", "anc_ptr"}


def signature(fn, constexprs: dict[str, object], fp: str) -> tuple[dict[str, str], dict[tuple[int], object]]:
    names = list(inspect.signature(fn).parameters)
    sig = {}
    for n in names:
        if n in constexprs:
            sig[n] = "constexpr"
        elif n in ("penalty", "presence", "frequency"):
            sig[n] = "fp32"
        elif n == "seen_ptr" and constexprs.get("CODED"):  # the int32 coded context (presence / frequency)
            sig[n] = "*i32"
        elif n in FLOAT_PTRS:
            sig[n] = "*" + fp
        elif n in BYTE_PTRS:
            sig[n] = "*u8"
        elif n.endswith("_ptr"):
            sig[n] = "*i64"
        else:
            sig[n] = "i32"
    return sig, {(names.index(k),): v for k, v in constexprs.items()}


def variants(block_v: int = 64):
    for fp64, (seen, coded) in itertools.product((False, True), ((False, False), (True, False), (True, True))):
        yield "sample", K.sample_kernel, dict(HAS_SEEN=seen, CODED=coded, FP64=fp64, NBITS=64 if fp64 else 32,
                                              BLOCK_V=block_v), fp64
    for fp64, q, ratio, base in itertools.product((False, True), repeat=4):
        yield "chain", K.chain_kernel, dict(HAS_Q=q, HAS_RATIO=ratio, HAS_BASE=base, FP64=fp64, BLOCK_V=block_v), fp64
    for fp64 in (False, True):
        yield "tree_node", K.tree_node_kernel, dict(BLOCK_N=16, BLOCK_V=block_v), fp64
    yield "tree_walk", K.tree_walk_kernel, dict(BLOCK_N=16), False
    for fp64, kind, q in itertools.product((False, True), (0, 1, 2), (False, True)):
        yield "tree_accept", K.tree_accept_kernel, dict(KIND=kind, HAS_Q=q, FP64=fp64, BLOCK_V=block_v), fp64


def main() -> int:
    failed = 0
    for name, fn, cx, fp64 in variants(int(sys.argv[1]) if len(sys.argv) > 1 else 64):
        sig, consts = signature(fn, cx, "fp64" if fp64 else "fp32")
        t0 = time.perf_counter()
        try:
            triton.compile(ASTSource(fn=triton.jit(fn), signature=sig, constexprs=consts), target=TARGET)
            print(f"ok   {name} {cx} {time.perf_counter() - t0:.1f}s")
        except Exception as err:  # a compile error: report it and go on with the others
            failed += 1
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            print(f"FAIL {name} {cx}: {type(err).__name__}: {' | '.join(lines[-3:])}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
