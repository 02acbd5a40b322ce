"""Benchmark suites: every sampler against its baseline and its peers, same models and prompts, one
process, interleaved runs, medians (``leapgen bench <suite>``).

* :mod:`leapgen.bench.common`: machine info, interleaved timing, forward counting, tables, JSON.
* text: :mod:`~leapgen.bench.text` (protocol, :func:`run_text_bench`), :mod:`~leapgen.bench.text_prompts`
  (held-out and code-editing prompt sets), :mod:`~leapgen.bench.text_entries` (our samplers and
  transformers ``generate()`` peers), :mod:`~leapgen.bench.text_tables` (markdown).
* image: :mod:`~leapgen.bench.image` (:func:`run_image_bench`), :mod:`~leapgen.bench.image_metrics`
  (FID (emoji features), class accuracy; FID maths in :mod:`~leapgen.bench.fid`, token NLL in
  :mod:`~leapgen.bench.token_nll`), :mod:`~leapgen.bench.image_tables`, :mod:`~leapgen.bench.image_pictures`.
* molecules: :mod:`~leapgen.bench.molecule` (:func:`run_molecule_bench`), :mod:`~leapgen.bench.molecule_entries`
  (entries and targets), :mod:`~leapgen.bench.molecule_metrics` (GenMol's metrics),
  :mod:`~leapgen.bench.molecule_grid` (the picture), :mod:`~leapgen.bench.molecule_tables`,
  :mod:`~leapgen.bench.molecule_sampling` (the sampling report quoted in docs/molecules.md).
* :mod:`leapgen.bench.acceptance`: accepted length vs draft budget.
* speed, shared by text and image: :mod:`~leapgen.bench.efficiency` (speedup / step compression,
  the transformers identity check, ``--device`` / ``--dtype``), :mod:`~leapgen.bench.draft_cost`
  (draft cost per accepted token), :mod:`~leapgen.bench.schedules` (draft-length schedules compared),
  :mod:`~leapgen.bench.batch_sweep` (speedup vs batch size and its plot); the suites' extra passes in
  :mod:`~leapgen.bench.text_runs` and :mod:`~leapgen.bench.image_runs`.

Layering: bench imports pipelines, samplers, data and chem; never train (shared code lives in
:mod:`leapgen.data` / :mod:`leapgen.chem`), and nothing but the cli imports bench.
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
