"""Prompt sets of the text benchmark (deterministic: they depend only on the tokenizer, ``n``,
``seed`` and the Python version).

* ``heldout``: :func:`leapgen.data.code.heldout_snippets` -- whole lines cut from held-out stdlib
  files (never trained on), without the final newline; the continuation is free generation.
* ``code-edit``: "rename a variable" editing tasks built from held-out stdlib functions; the answer
  mostly copies the prompt. See :mod:`leapgen.bench.text` for the exact protocol.
"""

from __future__ import annotations

import ast
import io
import keyword
import random
import textwrap
import tokenize
from typing import Any

PROMPT_SETS = ("heldout", "code-edit")
HELDOUT_PROMPT_TOKENS = 128
CODE_EDIT_MIN_TOKENS = 96
CODE_EDIT_MAX_TOKENS = 320
NEW_NAMES = ("value", "item", "result", "buf", "obj", "tmp", "arg", "node", "entry", "data", "acc", "elem")


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def heldout_prompts(
    n: int, tokenizer: Any, prompt_tokens: int = HELDOUT_PROMPT_TOKENS, seed: int = 0
) -> list[str]:
    """``n`` held-out stdlib snippets of about ``prompt_tokens`` tokens (free continuation)."""
    from ..data.code import heldout_snippets

    # byte-level BPE merges a newline with the next line's indentation ("\n   " is one token), so a
    # prompt ending in a bare "\n" is out of distribution: end the prompt before the last newline
    return [s.rstrip("\r\n") for s in heldout_snippets(n, tokenizer, prompt_tokens=prompt_tokens, seed=seed)]


def _rename(source: str, old: str, new: str) -> str | None:
    """``source`` with every NAME token ``old`` replaced by ``new`` (strings/comments untouched)."""
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    lines = source.splitlines(keepends=True)
    for t in reversed(toks):
        if t.string == old:
            (row, col), (_, end) = t.start, t.end
            line = lines[row - 1]
            lines[row - 1] = line[:col] + new + line[end:]
    return "".join(lines)


def _name_counts(source: str) -> dict[str, int] | None:
    counts: dict[str, int] = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type == tokenize.NAME:
                counts[t.string] = counts.get(t.string, 0) + 1
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return counts


def _function_candidates(path: Any) -> list[tuple[str, list[str]]]:
    """(dedented source, renamable local names) for each function of a file."""
    from ..data.code import read_text

    text = read_text(path)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        src = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
        if not src.endswith("\n"):
            src += "\n"
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        names += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        counts = _name_counts(src)
        if counts is None:
            continue
        local = sorted(
            {
                x
                for x in names
                if x not in ("self", "cls")
                and len(x) >= 2
                and not keyword.iskeyword(x)
                and counts.get(x, 0) >= 2
            }
        )
        if local:
            out.append((src, local))
    return out


def code_edit_tasks(
    n: int,
    tokenizer: Any,
    seed: int = 0,
    min_tokens: int = CODE_EDIT_MIN_TOKENS,
    max_tokens: int = CODE_EDIT_MAX_TOKENS,
) -> list[dict[str, str]]:
    """``n`` deterministic "rename a variable" editing tasks built from held-out stdlib functions.

    Each task is ``{"prompt", "reference", "old", "new", "source"}``; see the module docstring.
    """
    from ..data.code import stdlib_files

    rng = random.Random(seed)
    files = stdlib_files("heldout")
    order = list(range(len(files)))
    rng.shuffle(order)
    pools: list[list[tuple[str, list[str]]]] = []
    for i in order:
        cands = [
            c
            for c in _function_candidates(files[i])
            if min_tokens <= _n_tokens(tokenizer, c[0]) <= max_tokens
        ]
        rng.shuffle(cands)
        pools.append(cands)
    tasks: list[dict[str, str]] = []
    seen: set[str] = set()
    while len(tasks) < n and any(pools):
        for pool in pools:
            if len(tasks) >= n:
                break
            while pool:
                src, local = pool.pop()
                if src in seen:
                    continue
                counts = _name_counts(src) or {}
                old = rng.choice(local)
                fresh = [x for x in NEW_NAMES if x not in counts]
                if not fresh:
                    continue
                new = rng.choice(fresh)
                renamed = _rename(src, old, new)
                if renamed is None:
                    continue
                first, _, rest = renamed.partition("\n")
                prompt = f"# original\n{src}\n# same function, with `{old}` renamed to `{new}`\n{first}"
                seen.add(src)
                tasks.append(
                    {"prompt": prompt, "reference": "\n" + rest, "old": old, "new": new, "source": src}
                )
                break
    if len(tasks) < n:
        raise RuntimeError(
            f"could only build {len(tasks)} of {n} code-edit prompts from held-out functions of "
            f"{min_tokens}-{max_tokens} tokens; ask for fewer prompts"
        )
    return tasks


def code_edit_prompts(n: int, tokenizer: Any, seed: int = 0) -> list[str]:
    return [t["prompt"] for t in code_edit_tasks(n, tokenizer, seed=seed)]


__all__ = [
    "CODE_EDIT_MAX_TOKENS",
    "CODE_EDIT_MIN_TOKENS",
    "HELDOUT_PROMPT_TOKENS",
    "PROMPT_SETS",
    "code_edit_prompts",
    "code_edit_tasks",
    "heldout_prompts",
]
