"""Image quality metrics for the emoji image pipeline: a small feature classifier, the Fréchet
distance on its features ("FID (emoji features)"), class accuracy and the target model's NLL.

Why a classifier of our own. The FID that image papers report (Heusel et al. 2017) is the Fréchet
distance between Gaussians fitted to **Inception-v3** pool features of 50k samples and of the
reference set. No Inception weights can be downloaded here, and 64x64 emoji are far from ImageNet
anyway, so we train a small CNN on the emoji classes (:mod:`leapgen.train.feature_classifier`, shipped in
``assets/image-emoji/feature_classifier/``) and compute the same Fréchet distance on its
penultimate-layer features. The number is called **"FID (emoji features)"** everywhere: it is
comparable between samplers measured with the same classifier, the same reference images and the
same sample count, and **not** comparable with any published FID.

Run-to-run noise. With a few dozen samples per set the estimate is biased upwards (the bias shrinks
like 1/N) and noisy; a sampler's FID is only "different" from ``ar``'s when the difference exceeds
the spread of ``ar``'s own FID over independent sample sets of the same size. ``leapgen bench
image`` draws a fresh set of seeds in every run, so it reports, next to each sampler's median FID,
the per-run values, and ``ar``'s range (max - min over runs) as the noise estimate
(``fid_noise_ar`` in ``docs/bench_image.json``). Measured on the shipped ``image-emoji`` pipeline
(cfg 3, temperature 1, 16 samples per set, vs the 1619 training images): ``ar``'s per-run FIDs were
13.45, 15.93 and 10.07 (range 5.86), the FID between two ``ar`` sets 10.65 (median over pairs), and
the FID of all 48 ``ar`` samples 6.51 -- differences of a few units at this sample size are noise.

Pieces:

* :class:`EmojiFeatureClassifier` (:mod:`leapgen.data.emoji_classifier`): 4 stages of conv3x3-BatchNorm-ReLU-maxpool (16-32-64-128
  channels), global average pooling, a 64-d ReLU feature layer (the "penultimate features") and a linear head over
  the classes. Input: uint8 ``[N, 64, 64, 3]`` images (or float ``[N, 3, H, W]`` in [0, 1]); any
  other size is resized to 64x64.
* :func:`~leapgen.train.feature_classifier.train_feature_classifier`: stratified held-out split (15 %), augmentation (random
  translation/scale, horizontal flip, blur by down- and up-sampling -- VQ reconstructions are
  blurry -, brightness/contrast jitter, pixel noise), AdamW with cosine decay, bf16 autocast on CPU;
  saves ``config.json`` (architecture, class names, metrics) and ``model.safetensors`` (fp16).
* :func:`fid` / :func:`frechet_distance` (:mod:`leapgen.bench.fid`): float64, matrix square root through symmetric
  eigen-decompositions: ``Tr sqrt(S1 S2) = Tr sqrt(S1^1/2 S2 S1^1/2)`` with the inner matrix
  symmetric PSD, so its square root is real and exact up to rounding (no ``sqrtm`` of a
  non-symmetric product, no imaginary residue to discard).
* :func:`class_accuracy`: fraction of class-conditional samples the classifier assigns to their class.
* :func:`token_nll` (:mod:`leapgen.bench.token_nll`): mean negative log-likelihood (nats per token) of generated token ids under the
  target model, teacher-forced in one forward per batch, from the **conditional** logits only
  (no classifier-free guidance mix, temperature 1, no top-k/top-p): it measures how likely the
  model itself finds the tokens, a check that a relaxed sampler does not drift into regions the
  model considers unlikely. (Guided sampling draws from a sharpened mix, so even ``ar`` samples do
  not minimise it; compare samplers with each other, at equal settings.)
"""


from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..data.emoji_classifier import (
    CLASSIFIER_FOLDER,
    CONFIG_NAME,
    IMAGE_SIZE,
    WEIGHTS_NAME,
    EmojiFeatureClassifier,
    images_to_tensor,
)
from ..errors import AssetNotFoundError, InputError
from .fid import fid, frechet_distance, gaussian_stats, trace_sqrt_product
from .token_nll import token_nll

FEATURE_NAME = "FID (emoji features)"


def load_feature_classifier(path: str | os.PathLike) -> EmojiFeatureClassifier:
    """Load a classifier saved by :func:`train_feature_classifier`.

    ``path`` is the classifier folder, a pipeline folder holding ``feature_classifier/``, or a
    shipped pipeline name such as ``"leapgen/image-emoji"``.
    """
    s = str(path)
    if s.startswith("leapgen/"):
        from ..pipelines.base import resolve_pretrained

        folder = resolve_pretrained(s)
    else:
        folder = Path(s).expanduser()
    for cand in (folder, folder / CLASSIFIER_FOLDER):
        if (cand / CONFIG_NAME).is_file() and (cand / WEIGHTS_NAME).is_file():
            return EmojiFeatureClassifier.from_pretrained(cand)
    raise AssetNotFoundError(
        f"no feature classifier at {folder} (looked for {CONFIG_NAME} and {WEIGHTS_NAME} there and in "
        f"{CLASSIFIER_FOLDER}/). Train one with `leapgen train image-emoji` (it ships the classifier) or "
        "leapgen.train.feature_classifier.train_feature_classifier(dataset, out_dir)."
    )


def fid_emoji(
    images: Any,
    reference_images: Any,
    classifier: EmojiFeatureClassifier,
    reference_features: Tensor | None = None,
) -> float:
    """**FID (emoji features)**: :func:`fid` on ``classifier``'s penultimate features of ``images``
    vs ``reference_images`` (pass ``reference_features`` instead to reuse them). Not comparable with
    Inception-based FIDs; see the module docstring for its noise."""
    fa = classifier.features(images)
    fb = reference_features if reference_features is not None else classifier.features(reference_images)
    return fid(fa, fb)


def class_accuracy(images: Any, labels: Any, classifier: EmojiFeatureClassifier) -> float:
    """Fraction of ``images`` that ``classifier`` assigns to ``labels`` (class indices)."""
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long).reshape(-1)
    pred = classifier.predict(images)
    if pred.shape != y.shape:
        raise InputError(f"{pred.shape[0]} images but {y.shape[0]} labels.")
    return float((pred == y).float().mean())


__all__ = [
    "CLASSIFIER_FOLDER",
    "CONFIG_NAME",
    "FEATURE_NAME",
    "IMAGE_SIZE",
    "WEIGHTS_NAME",
    "EmojiFeatureClassifier",
    "class_accuracy",
    "fid",
    "fid_emoji",
    "frechet_distance",
    "gaussian_stats",
    "images_to_tensor",
    "load_feature_classifier",
    "token_nll",
    "trace_sqrt_product",
]
