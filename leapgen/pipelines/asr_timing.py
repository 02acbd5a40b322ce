"""Word-timestamp error and the calibration of the ASR pipeline's two timestamp settings.

:func:`boundary_errors` aligns hypothesis and reference words (Levenshtein, via jiwer) and returns
the absolute start and end errors (seconds) of every correctly recognised word.
:func:`calibrate_timestamps` picks ``ts_start_threshold`` (CIF weight a frame needs to open a
word) and ``ts_end_offset`` (frames after the fire frame that close it) on a calibration set with
known word boundaries (the first half of speech-en's timing split; the bench reports the other
half), by a small grid search on the mean boundary error. It changes no weights.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np


def boundary_errors(hyp: list[tuple[str, float, float]], ref: list[tuple[str, float, float]]) -> list[float]:
    """``|start_h - start_r|`` and ``|end_h - end_r|`` for every hit of the word alignment."""
    import jiwer

    if not hyp or not ref:
        return []
    out = jiwer.process_words(" ".join(w for w, _, _ in ref), " ".join(w for w, _, _ in hyp))
    errs: list[float] = []
    for chunk in out.alignments[0]:
        if chunk.type != "equal":
            continue
        for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
            r, h = ref[chunk.ref_start_idx + k], hyp[chunk.hyp_start_idx + k]
            errs += [abs(h[1] - r[1]), abs(h[2] - r[2])]
    return errs


def calibrate_timestamps(pipe: Any, rows: list[dict[str, Any]], starts: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.3),
                         ends: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5)) -> dict[str, float]:
    """Set the pipeline's timestamp settings to the grid point with the lowest mean boundary error
    on ``rows`` (manifest rows with ``audio`` and ``words``); returns the chosen values and error."""
    best: tuple[float, float, float] | None = None
    for s, e in itertools.product(starts, ends):
        pipe.ts_start_threshold, pipe.ts_end_offset = s, e
        out = pipe([r["audio"] for r in rows], sampler="paraformer")
        errs = [x for r, ts in zip(rows, out.timestamps) if ts for x in boundary_errors(ts, [tuple(w) for w in r["words"]])]
        score = float(np.mean(errs)) if errs else float("inf")
        if best is None or score < best[0]:
            best = (score, s, e)
    assert best is not None
    pipe.ts_start_threshold, pipe.ts_end_offset = best[1], best[2]
    return {"ts_start_threshold": best[1], "ts_end_offset": best[2], "mean_boundary_error_s": best[0]}


__all__ = ["boundary_errors", "calibrate_timestamps"]
