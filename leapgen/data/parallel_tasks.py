"""ParallelBench-style synthetic tasks (written here; ParallelBench's data has no licence).

Short list operations where parallel (masked-diffusion) decoding is known to break because the
answer tokens depend on each other (Kang et al. 2025, reference notes masked.md §10):

| task | answer | valid answers |
|---|---|---|
| ``copy`` | the items | one |
| ``reverse`` | the items reversed | one |
| ``sort`` | the items sorted (vocabulary order) | one |
| ``insert`` | the items with the extra item inserted at **any** position | len + 1 |
| ``permute`` | **any** order of the items (constrained word order: each item exactly once) | len! |
| ``code_copy`` / ``code_reverse`` | copy / reverse a list of identifiers taken from the code corpus | one |

Items are 3-6 distinct words of the task's vocabulary (names; for the code tasks identifiers).
A row is ``[task] items [sep] answer [eos]``; the model generates ``gen_length`` positions after
``[sep]`` (the answer, then ``[eos]`` repeated to the end). :func:`score` checks an answer
exactly: equality for the one-answer tasks, membership in the valid set for ``insert`` /
``permute`` (so even a perfect model errs under parallel decoding when it mixes several valid
answers' marginals).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = ("ana", "ben", "cleo", "dan", "eva", "finn", "gus", "hana", "ivan", "jon", "kim", "liam",
         "mia", "nora", "omar", "pia", "quinn", "rosa", "sam", "tara", "uma", "vic", "wes", "zoe")
#: identifiers among the most frequent in the Python standard library (the text-code corpus)
IDENTS = ("self", "name", "path", "value", "data", "args", "result", "key", "line", "index", "file",
          "text", "size", "node", "items", "count", "start", "end", "buf", "obj", "mode", "pos", "kind", "info")
TASKS = ("copy", "reverse", "sort", "insert", "permute", "code_copy", "code_reverse")
SPECIAL = ("[pad]", "[sep]", "[eos]", "[mask]")
GEN_LENGTH = 8  # longest answer (6 items + 1 inserted) + [eos]


@dataclass
class TaskVocab:
    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls) -> TaskVocab:
        return cls(tuple([*SPECIAL, *TASKS, *NAMES, *IDENTS]))

    @property
    def pad(self) -> int:
        return self.ids["[pad]"]

    @property
    def sep(self) -> int:
        return self.ids["[sep]"]

    @property
    def eos(self) -> int:
        return self.ids["[eos]"]

    @property
    def mask(self) -> int:
        return self.ids["[mask]"]

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class Example:
    task: str
    items: list[str]
    extra: str | None
    answer: list[str]  # one reference answer (any valid one for insert / permute)

    def prompt_words(self) -> list[str]:
        words = [self.task, *self.items]
        if self.extra is not None:
            words.append(self.extra)
        return [*words, "[sep]"]


def make_example(task: str, rng: random.Random) -> Example:
    pool = IDENTS if task.startswith("code_") else NAMES
    n = rng.randint(3, 6)
    words = rng.sample(pool, n + 1)
    items, extra = words[:n], words[n]
    if task in ("copy", "code_copy"):
        return Example(task, items, None, list(items))
    if task in ("reverse", "code_reverse"):
        return Example(task, items, None, items[::-1])
    if task == "sort":
        return Example(task, items, None, sorted(items, key=pool.index))
    if task == "insert":
        at = rng.randint(0, n)
        return Example(task, items, extra, [*items[:at], extra, *items[at:]])
    if task == "permute":
        out = list(items)
        rng.shuffle(out)
        return Example(task, items, None, out)
    raise ValueError(f"unknown task {task!r}; tasks: {TASKS}")


def make_split(n_per_task: int, seed: int, tasks: tuple[str, ...] = TASKS) -> list[Example]:
    rng = random.Random(seed)
    return [make_example(t, rng) for t in tasks for _ in range(n_per_task)]


def encode(ex: Example, vocab: TaskVocab, with_answer: bool = True, gen_length: int = GEN_LENGTH) -> list[int]:
    """``[task] items ([extra]) [sep]`` (+ answer, ``[eos]`` padding to ``gen_length``)."""
    ids = [vocab.ids[w] for w in ex.prompt_words()]
    if with_answer:
        ans = [vocab.ids[w] for w in ex.answer]
        ids += ans + [vocab.eos] * (gen_length - len(ans))
    return ids


def decode_answer(ids: list[int], vocab: TaskVocab) -> list[str]:
    """Words up to the first ``[eos]`` (special tokens other than ``[eos]`` are kept, as errors)."""
    out = []
    for t in ids:
        if t == vocab.eos:
            break
        out.append(vocab.tokens[t] if 0 <= t < len(vocab) else "?")
    return out


def score(ex: Example, answer: list[str]) -> bool:
    """Exact check of one generated answer (any valid answer counts for insert / permute)."""
    if ex.task == "insert":
        return len(answer) == len(ex.items) + 1 and ex.extra in answer and [w for w in answer if w != ex.extra] == ex.items
    if ex.task == "permute":
        return sorted(answer) == sorted(ex.items) and len(answer) == len(ex.items)
    return answer == ex.answer


__all__ = ["GEN_LENGTH", "IDENTS", "NAMES", "TASKS", "Example", "TaskVocab", "decode_answer", "encode", "make_example",
           "make_split", "score"]
