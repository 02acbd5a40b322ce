"""Every tensor a sampler creates lives on the device of the tensors it works with.

Walks the sources of the autoregressive samplers (``leapgen/samplers`` without the masked
package, which has its own owner and test) and fails on a tensor factory call that does not say
where its tensor goes: ``torch.zeros/ones/full/empty/arange/tensor/rand*/randint/eye/tri*/
linspace/...`` without ``device=``. ``*_like`` factories and ``as_tensor(x, ...)`` conversions of
tensors inherit their device and are not factories here. A call may be exempted only through
:data:`ALLOWED`, each with the reason it is safe.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import leapgen.samplers as samplers_pkg

ROOT = Path(samplers_pkg.__file__).parent
SKIP_DIRS = {"masked"}
FACTORIES = {
    "zeros", "ones", "full", "empty", "arange", "range", "tensor", "rand", "randn", "randint",
    "randperm", "eye", "tril", "triu", "tril_indices", "triu_indices", "linspace", "logspace",
}

#: (module relative to leapgen/samplers, function name, factory) -> why it needs no device=
ALLOWED: dict[tuple[str, str, str], str] = {
    ("runtime.py", "forward", "tensor"): "row lengths kept on the host for Python bookkeeping (keep counts)",
    ("trees.py", "from_lists", "full"): "host-side tree layout built from Python lists; moved by the loop",
    ("trees.py", "accepted_slots", "zeros"): "slot indices for KVCache.select, which moves them to the cache's device",
    ("runtime.py", "forward_block", "tensor"): "per-row pending counts, returned for host bookkeeping",
    ("verify.py", "kseq_rho", "linspace"): "a grid of Python floats (read back at once with .tolist())",
}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS:
            continue
        yield rel.as_posix(), path.read_text()


def _violations(rel: str, text: str) -> list[str]:
    tree = ast.parse(text)
    out = []
    func_of: dict[ast.AST, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                func_of.setdefault(child, node.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if not (isinstance(f.value, ast.Name) and f.value.id == "torch" and f.attr in FACTORIES):
            continue
        if any(k.arg == "device" for k in node.keywords):
            continue
        key = (rel, func_of.get(node, "<module>"), f.attr)
        if key in ALLOWED:
            continue
        out.append(f"{rel}:{node.lineno} torch.{f.attr}(...) in {key[1]}() has no device=")
    return out


@pytest.mark.parametrize("rel,text", list(_sources()), ids=[r for r, _ in _sources()])
def test_tensor_factories_name_their_device(rel, text):
    bad = _violations(rel, text)
    assert not bad, "tensor factories without device= (put them on the logits' device):\n" + "\n".join(bad)


def test_the_walker_catches_a_factory_without_device():
    assert _violations("x.py", "import torch\ndef f(x):\n    return torch.zeros(3)\n")
    assert not _violations("x.py", "import torch\ndef f(x):\n    return torch.zeros(3, device=x.device)\n")
    assert not _violations("x.py", "import torch\ndef f(x):\n    return torch.zeros_like(x)\n")


def test_every_allowance_is_still_needed():
    """An allow-list entry whose call went away must be removed with it."""
    seen = set()
    for rel, text in _sources():
        tree = ast.parse(text)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "torch"
                    ):
                        seen.add((rel, fn.name, node.func.attr))
    stale = [k for k in ALLOWED if k not in seen]
    assert not stale, f"stale allow-list entries: {stale}"
