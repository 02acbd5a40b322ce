"""CTC decoding with **precise mass control** (PMC) for de novo peptide sequencing.

Paper: Zhang et al., "π-PrimeNovo: an accurate and efficient non-autoregressive deep learning model
for de novo peptide sequencing", Nature Communications 2025 (BEAM-Labs/denovo, the CuPy PMC kernel);
this is a CPU (numpy) port of the idea: dynamic programming over (CTC slot, last label, residue
mass bin) finds the **most probable single CTC alignment** whose collapsed peptide has a total
residue mass within ``tolerance`` Da of the precursor's (``M - H2O``).

* state ``(label, mass)``: ``label`` = the last slot's label (blank or a residue), ``mass`` = the
  collapsed prefix's residue mass in bins of ``resolution`` Da (residue masses rounded to bins);
* transitions per slot: blank keeps the mass; repeating the last label keeps it (CTC collapse);
  a new residue ``a`` (after blank or another residue) adds ``mass(a)``;
* the answer is the best end state whose bin lies within ``tolerance`` plus the rounding slack,
  re-checked with exact masses (best exact-valid path kept). When no alignment reaches the
  precursor mass (e.g. too few slots) the row falls back to greedy CTC and
  ``stats.extra["pmc_fallback"]`` counts it.

Contract ``"peptide-ctc"``: a :class:`~leapgen.models.peptide_lm.PeptideCTCLM`. Guarantee:
``lossy`` (its own decoder). Defaults: ``tolerance`` 0.1 Da, ``resolution`` 0.02 Da.

The DP's tables grow as ``slots x labels x mass bins`` (:func:`pmc_table_bytes`); a resolution too
fine for the input (e.g. 1e-6 Da: tens of GiB) is refused before anything is allocated, with the
finest resolution that keeps them under :data:`MAX_TABLE_BYTES` (:func:`min_resolution`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...errors import ConfigError
from ...models.asr_lm import ctc_collapse
from ...models.peptide_lm import PeptideCTCLM
from ..base import DecodeConfig, register_contract, register_sampler
from .common import NARSampler

register_contract("peptide-ctc", lambda m: isinstance(m, PeptideCTCLM))


#: the most memory the mass DP of one spectrum may take (:func:`pmc_table_bytes`)
MAX_TABLE_BYTES = 512 * 2**20
#: the widest settings that still constrain a peptide: a tolerance near a residue's mass (57-186 Da)
#: accepts other compositions, and bins coarser than 1 Da round different residues' masses alike
MAX_TOLERANCE, MAX_RESOLUTION = 50.0, 1.0


def _bins(target: float, tolerance: float, resolution: float, t_len: int) -> tuple[int, int]:
    """``(slack, top)``: the rounding slack and the highest mass bin the DP keeps."""
    slack = int(np.ceil((tolerance + 0.5 * resolution * t_len) / resolution))
    return slack, int(round(target / resolution)) + slack


def pmc_table_bytes(t_len: int, v: int, target: float, tolerance: float, resolution: float) -> int:
    """Bytes the DP of one row takes: the one-byte back-pointers ``[T, V, bins]`` and a few float32 ``[V, bins]``."""
    return (max(_bins(target, tolerance, resolution, t_len)[1], 0) + 1) * v * (t_len + 16)


def min_resolution(t_len: int, v: int, target: float, tolerance: float, budget: int | None = None) -> float:
    """The finest resolution (two significant digits, rounded up) whose tables fit ``budget`` bytes
    (default :data:`MAX_TABLE_BYTES`)."""
    budget = MAX_TABLE_BYTES if budget is None else budget
    room = budget / (v * (t_len + 16)) - 0.5 * t_len - 3  # mass bins that fit, less the slack's
    r = _round_up((target + tolerance) / max(room, 1.0))
    while pmc_table_bytes(t_len, v, target, tolerance, r) > budget:
        r = _round_up(r * 1.01)
    return r


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits."""
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(x / step - 1e-9) * step:.2g}")


def check_table(t_len: int, v: int, target: float, tolerance: float, resolution: float) -> None:
    """ConfigError, before anything is allocated, when the DP's tables would pass :data:`MAX_TABLE_BYTES`."""
    need = pmc_table_bytes(t_len, v, target, tolerance, resolution)
    if need <= MAX_TABLE_BYTES:
        return
    finest = min_resolution(t_len, v, target, tolerance)
    also = f" and tolerance >= {finest:g} (resolution may not exceed it)" if finest > tolerance else ""
    raise ConfigError(
        f"ctc_pmc: resolution={resolution:g} Da needs {need / 2**30:.1f} GiB of mass tables for this input ({t_len} "
        f"CTC slots x {v} labels x {need // (v * (t_len + 16))} mass bins up to {target:.1f} Da plus the tolerance and "
        f"rounding slack); they are capped at "
        f"{MAX_TABLE_BYTES / 2**20:.0f} MiB: use resolution >= {finest:g} Da{also} (default 0.02)."
    )


def pmc_decode(logp: np.ndarray, masses: list[float], target: float, tolerance: float = 0.1,
               resolution: float = 0.01) -> tuple[list[int] | None, float]:
    """Most probable CTC alignment of ``logp [T, V]`` (blank = 0) whose collapsed labels' mass
    (``masses[label]``) is within ``tolerance`` of ``target``: ``(labels, path log-prob)``, or
    ``(None, -inf)`` when none exists. Labels with mass <= 0 other than blank are never emitted.
    ConfigError when ``resolution`` is too fine for the tables (:func:`check_table`)."""
    t_len, v = logp.shape
    check_table(t_len, v, target, tolerance, resolution)
    unit = np.array([int(round(m / resolution)) if m > 0 else -1 for m in masses])
    unit[0] = 0
    slack, top = _bins(target, tolerance, resolution, t_len)
    if top < 0:
        return None, -np.inf
    width = top + 1
    ninf = np.float32(-np.inf)
    cols = np.arange(width)
    dp = np.full((v, width), ninf, dtype=np.float32)
    dp[0, 0] = 0.0
    # back-pointers: per slot the best and second-best previous label of every mass bin, and per
    # (slot, label, bin) whether the label was newly emitted there (else it repeated / stayed)
    arg_hist = np.zeros((t_len, width), dtype=np.int8)
    arg2_hist = np.zeros((t_len, width), dtype=np.int8)
    moved = np.zeros((t_len, v, width), dtype=bool)
    live = [a for a in range(1, v) if unit[a] > 0]
    dead = [a for a in range(1, v) if unit[a] <= 0]  # never emitted: their rows stay -inf
    for t in range(t_len):
        lp = logp[t].astype(np.float32)
        arg = dp.argmax(0)
        best = dp[arg, cols]
        # second best over labels (for "new residue a" from a different last label)
        dp[arg, cols] = ninf
        arg2 = dp.argmax(0)
        second = dp[arg2, cols]
        dp[arg, cols] = best
        arg_hist[t], arg2_hist[t] = arg, arg2
        new = np.empty_like(dp)  # every row is written below
        new[dead] = ninf
        np.add(best, lp[0], out=new[0])
        for a in live:
            u = int(unit[a])
            np.add(dp[a], lp[a], out=new[a])  # repeat: collapses, mass unchanged
            if u >= width:
                continue
            n = width - u  # a new residue a at bin m comes from bin m - u, best label other than a
            move = np.where(arg[:n] == a, second[:n], best[:n])
            move += lp[a]
            np.greater(move, new[a, u:], out=moved[t, a, u:])  # ties keep the repeat
            np.maximum(move, new[a, u:], out=new[a, u:])
        dp = new
    lo = max(0, int(round(target / resolution)) - slack)
    cands = [(float(dp[s, m]), s, m) for s in range(v) for m in range(lo, width) if np.isfinite(dp[s, m])]
    cands.sort(reverse=True)
    for score, s, m in cands:
        labels = _backtrack(arg_hist, arg2_hist, moved, unit, s, m)
        if abs(sum(masses[a] for a in labels) - target) <= tolerance:
            return labels, score
    return None, -np.inf


def _backtrack(arg_hist: np.ndarray, arg2_hist: np.ndarray, moved: np.ndarray, unit: np.ndarray, s: int, m: int
               ) -> list[int]:
    """The labels of the best path ending in label ``s`` at mass bin ``m`` after the last slot."""
    out = []
    for t in range(moved.shape[0] - 1, -1, -1):
        if s == 0:  # a blank follows the best label of the same bin
            s = int(arg_hist[t, m])
        elif moved[t, s, m]:  # s was emitted here, after the best other label of bin m - mass(s)
            out.append(s)
            m -= int(unit[s])
            s = int(arg2_hist[t, m]) if int(arg_hist[t, m]) == s else int(arg_hist[t, m])
    return out[::-1]


@register_sampler("ctc_pmc", family="nar", guarantee="lossy", needs=("model",), paper="Zhang et al. 2025 (PrimeNovo)",
                  contracts=("peptide-ctc",))
class CTCPrecisionMassControl(NARSampler):
    """CTC decoding constrained to the precursor mass (see the module docstring)."""

    contracts = ("peptide-ctc",)
    defaults = {"tolerance": 0.1, "resolution": 0.02}
    ignores = dict.fromkeys(("temperature", "top_k", "top_p", "min_p"), "precise mass control finds the most "
                            "probable alignment of the precursor's mass (deterministic, never samples); use ar or "
                            "ar_bidirectional with temperature (and the filter) for sampling")

    def validate(self) -> None:
        for key in ("tolerance", "resolution"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"ctc_pmc: {key} must be a number > 0 (Da), got {v!r}")
        if not (self.tolerance > 0 and self.resolution > 0 and self.resolution <= self.tolerance):
            raise ConfigError(f"ctc_pmc needs 0 < resolution <= tolerance, got {self.resolution}, {self.tolerance}")
        if self.tolerance > MAX_TOLERANCE or self.resolution > MAX_RESOLUTION:
            raise ConfigError(f"ctc_pmc: tolerance must be <= {MAX_TOLERANCE:g} Da and resolution <= {MAX_RESOLUTION:g} Da "
                              f"(got {self.tolerance:g} and {self.resolution:g}); wider settings no longer constrain the "
                              "peptide's mass (defaults 0.1 and 0.02; another sampler, e.g. 'ar_bidirectional', decodes without the constraint).")

    def decode(self, model: Any, state: Any, config: DecodeConfig, generator: torch.Generator | None):
        logp, lengths = model.frame_logprobs(state)
        target = model.precursor_mass(state).double().cpu() - 18.010565
        masses = model.net.residue_masses()
        lp = logp.float().cpu().numpy()
        if lp.shape[0]:  # the whole batch, before any row's tables are allocated
            check_table(int(lengths.max()), lp.shape[2], float(target.max()), self.tolerance, self.resolution)
        seqs, self.last_scores, self.fallbacks = [], [], 0
        for r in range(lp.shape[0]):
            labels, score = pmc_decode(lp[r, : int(lengths[r])], masses, float(target[r]), self.tolerance, self.resolution)
            if labels is None:
                self.fallbacks += 1
                labels = ctc_collapse(lp[r].argmax(-1).tolist())
                score = float(lp[r].max(-1).sum())
            seqs.append(labels + [config.eos_ids[0]] if config.eos_ids else labels)
            self.last_scores.append(score)
        return seqs, [[] for _ in seqs]

    def generate(self, models, prompts, config, generator=None, cond=None):
        res = super().generate(models, prompts, config, generator, cond)
        res.stats.extra["pmc_fallback"] = self.fallbacks
        res.stats.extra["scores"] = list(self.last_scores)
        return res
