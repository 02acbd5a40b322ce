"""Benchmark suites: every sampler against its baseline and its peers, same models and prompts, one
process, interleaved runs, medians (``leapgen bench <suite>``).

* :mod:`leapgen.bench.common`: machine info, interleaved timing, forward counting, tables, JSON.
* :mod:`leapgen.bench.text`: :func:`run_text_bench` (held-out and code-editing prompt sets,
  transformers ``generate()`` peers).
* :mod:`leapgen.bench.image` / :mod:`leapgen.bench.image_metrics`: image samplers vs ``ar`` with
  FID (emoji features), class accuracy and token NLL beside the speed.
"""

from __future__ import annotations

from typing import Any


def run_text_bench(
    pipe: Any, runs: int = 5, max_new_tokens: int = 128, n_prompts: int = 8, **kwargs: Any
) -> dict:
    """See :func:`leapgen.bench.text.run_text_bench` (imported lazily)."""
    from .text import run_text_bench as _run

    return _run(pipe, runs=runs, max_new_tokens=max_new_tokens, n_prompts=n_prompts, **kwargs)


SUITES = {
    "text": "leapgen.bench.text:run_text_bench",
    "molecule": "leapgen.bench.molecule:run_molecule_bench",
    "image": "leapgen.bench.image:run_image_bench",
}

__all__ = ["SUITES", "run_text_bench"]
