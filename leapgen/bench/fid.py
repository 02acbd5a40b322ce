"""Fréchet distance between Gaussians fitted to feature sets (the maths of FID, Heusel et al. 2017).

float64 throughout; the matrix square root goes through symmetric eigen-decompositions:
``Tr sqrt(S1 S2) = Tr sqrt(S1^1/2 S2 S1^1/2)`` with the inner matrix symmetric PSD, so its square
root is real and exact up to rounding (no ``sqrtm`` of a non-symmetric product, no imaginary residue
to discard). Independent of any network: :mod:`leapgen.bench.image_metrics` feeds it the emoji
classifier's features.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor

from ..errors import InputError


def gaussian_stats(features: Any) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (unbiased, ddof=1) covariance of ``[N, d]`` features, float64."""
    f = np.asarray(features.detach().cpu() if isinstance(features, Tensor) else features, dtype=np.float64)
    if f.ndim != 2:
        raise InputError(f"features must be [N, d], got shape {f.shape}.")
    if f.shape[0] < 2:
        raise InputError(f"need at least 2 feature vectors to estimate a covariance, got {f.shape[0]}.")
    if not np.isfinite(f).all():
        raise InputError("features contain NaN or infinite values.")
    return f.mean(0), np.cov(f, rowvar=False, ddof=1).reshape(f.shape[1], f.shape[1])


def _sqrt_psd(m: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (eigenvalues below 0 from rounding -> 0)."""
    m = 0.5 * (m + m.T)
    w, v = np.linalg.eigh(m)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def trace_sqrt_product(sigma1: np.ndarray, sigma2: np.ndarray) -> float:
    """``Tr sqrt(sigma1 @ sigma2)`` for symmetric PSD matrices, via ``sqrt(S1) S2 sqrt(S1)`` (symmetric PSD,
    same eigenvalues as ``S1 S2``)."""
    s1 = _sqrt_psd(np.asarray(sigma1, dtype=np.float64))
    inner = s1 @ np.asarray(sigma2, dtype=np.float64) @ s1
    inner = 0.5 * (inner + inner.T)
    w = np.linalg.eigvalsh(inner)
    return float(np.sqrt(np.clip(w, 0.0, None)).sum())


def frechet_distance(mu1: Any, sigma1: Any, mu2: Any, sigma2: Any) -> float:
    """Fréchet (2-Wasserstein squared) distance between N(mu1, sigma1) and N(mu2, sigma2):
    ``|mu1 - mu2|^2 + Tr(S1 + S2 - 2 (S1 S2)^1/2)``, float64, clipped at 0 against rounding."""
    mu1, mu2 = np.asarray(mu1, dtype=np.float64), np.asarray(mu2, dtype=np.float64)
    s1, s2 = np.atleast_2d(np.asarray(sigma1, dtype=np.float64)), np.atleast_2d(np.asarray(sigma2, dtype=np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise InputError(
            f"shapes do not match: mu1 {mu1.shape}, mu2 {mu2.shape}, sigma1 {s1.shape}, sigma2 {s2.shape}."
        )
    diff = mu1 - mu2
    d = float(diff @ diff) + float(np.trace(s1) + np.trace(s2)) - 2.0 * trace_sqrt_product(s1, s2)
    return max(d, 0.0)


def fid(features_a: Any, features_b: Any) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets ``[N_a, d]`` and ``[N_b, d]``."""
    mu1, s1 = gaussian_stats(features_a)
    mu2, s2 = gaussian_stats(features_b)
    if mu1.shape != mu2.shape:
        raise InputError(f"feature dimensions differ: {mu1.shape[0]} vs {mu2.shape[0]}.")
    return frechet_distance(mu1, s1, mu2, s2)


__all__ = ["fid", "frechet_distance", "gaussian_stats", "trace_sqrt_product"]
