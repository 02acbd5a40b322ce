"""Offline text corpus: the Python standard library's own sources.

Every Python installation carries a few megabytes of well-formatted Python code, which makes it a
corpus that is available on any machine without network. The split into ``train`` and ``heldout`` is
decided per file by a hash of its path relative to the stdlib root, so it is deterministic and stable
across machines with the same Python version (and mostly stable across versions: a file keeps its
split as long as its path does).
"""

from __future__ import annotations

import functools
import hashlib
import random
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Directories (any path component) that are never part of the corpus.
EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
)
#: Files larger than this (bytes) are skipped (generated tables, huge test data).
MAX_FILE_BYTES = 200_000
#: Share of files held out, in thousandths.
HELDOUT_PER_MILLE = 50

SPLITS = ("train", "heldout")


def stdlib_root() -> Path:
    """Directory of the running interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(relpath: str) -> str:
    """Split (``"train"`` or ``"heldout"``) of a file, from a hash of its stdlib-relative posix path."""
    digest = hashlib.sha256(relpath.encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % 1000
    return "heldout" if bucket < HELDOUT_PER_MILLE else "train"


@functools.lru_cache(maxsize=4)
def _corpus_files(root: str) -> tuple[tuple[str, str], ...]:
    """(relative posix path, split) of every usable ``.py`` file under ``root``, sorted by path."""
    base = Path(root)
    out: list[tuple[str, str]] = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base)
        if any(part in EXCLUDED_DIRS for part in rel.parts[:-1]):
            continue
        try:
            if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        relpath = rel.as_posix()
        out.append((relpath, split_of(relpath)))
    return tuple(out)


def stdlib_files(split: str) -> list[Path]:
    """Sorted list of stdlib source files in ``split`` (``"train"`` or ``"heldout"``).

    Skips ``site-packages``, ``test``/``tests``/``idlelib``/``lib2to3`` directories, files over
    200 kB and files that are not valid UTF-8. About 5% of the files are held out.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    root = stdlib_root()
    files = [root / rel for rel, s in _corpus_files(str(root)) if s == split]
    if not files:
        raise RuntimeError(
            f"no Python sources found under {root} for split {split!r}; the text-code corpus needs "
            "the standard library's .py files (some minimal Python builds ship only .pyc files)"
        )
    return files


def read_text(path: Path) -> str:
    """File contents as text, exactly as stored (no newline translation)."""
    return path.read_bytes().decode("utf-8")


def _num_tokens(tokenizer: Any, text: str) -> int:
    """Token count for a ``transformers`` tokenizer or a raw ``tokenizers.Tokenizer``."""
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # tokenizers.Tokenizer.encode has no add_special_tokens keyword name
        ids = tokenizer.encode(text)
    if hasattr(ids, "ids"):  # tokenizers.Encoding
        ids = ids.ids
    return len(ids)


def heldout_snippets(n: int, tokenizer: Any, prompt_tokens: int = 64, seed: int = 0) -> list[str]:
    """``n`` deterministic prompts cut from held-out stdlib files at line boundaries.

    Each snippet starts at the beginning of a non-blank line and takes whole lines (newlines kept)
    until it reaches about ``prompt_tokens`` tokens under ``tokenizer``: lines are added while the
    total stays <= ``prompt_tokens``; a snippet whose first line alone is longer is skipped. The
    result depends only on ``(n, tokenizer, prompt_tokens, seed)`` and the Python version.
    Snippets are distinct; they come from files chosen round-robin in a seeded order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    rng = random.Random(seed)
    files = stdlib_files("heldout")
    texts = [read_text(p).splitlines(keepends=True) for p in files]
    order = list(range(len(files)))
    rng.shuffle(order)
    snippets: list[str] = []
    seen: set[str] = set()
    attempts = 0
    max_attempts = 50 * max(n, 1) + 1000
    i = 0
    while len(snippets) < n and attempts < max_attempts:
        attempts += 1
        lines = texts[order[i % len(order)]]
        i += 1
        starts = [k for k, line in enumerate(lines) if line.strip()]
        if not starts:
            continue
        start = rng.choice(starts)
        text = ""
        for line in lines[start:]:
            candidate = text + line
            if _num_tokens(tokenizer, candidate) > prompt_tokens:
                break
            text = candidate
        # Need something sizeable: at least half of the requested length.
        if not text or _num_tokens(tokenizer, text) < max(1, prompt_tokens // 2) or text in seen:
            continue
        seen.add(text)
        snippets.append(text)
    if len(snippets) < n:
        raise RuntimeError(
            f"could only cut {len(snippets)} of {n} held-out snippets of ~{prompt_tokens} tokens; "
            "ask for fewer or shorter prompts"
        )
    return snippets


def iter_texts(files: Sequence[Path]):
    """Yield the text of each file in order."""
    for p in files:
        yield read_text(p)


__all__ = [
    "EXCLUDED_DIRS",
    "MAX_FILE_BYTES",
    "heldout_snippets",
    "iter_texts",
    "read_text",
    "split_of",
    "stdlib_files",
    "stdlib_root",
]
