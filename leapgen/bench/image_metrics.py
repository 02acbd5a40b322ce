"""Image quality metrics for the emoji image pipeline: a small feature classifier, the Fréchet
distance on its features ("FID (emoji features)"), class accuracy and the target model's NLL.

Why a classifier of our own. The FID that image papers report (Heusel et al. 2017) is the Fréchet
distance between Gaussians fitted to **Inception-v3** pool features of 50k samples and of the
reference set. No Inception weights can be downloaded here, and 64x64 emoji are far from ImageNet
anyway, so we train a small CNN on the emoji classes (:func:`train_feature_classifier`, shipped in
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

* :class:`EmojiFeatureClassifier`: 4 stages of conv3x3-BatchNorm-ReLU-maxpool (16-32-64-128
  channels), global average pooling, a 64-d ReLU feature layer (the "penultimate features") and a linear head over
  the classes. Input: uint8 ``[N, 64, 64, 3]`` images (or float ``[N, 3, H, W]`` in [0, 1]); any
  other size is resized to 64x64.
* :func:`train_feature_classifier`: stratified held-out split (15 %), augmentation (random
  translation/scale, horizontal flip, blur by down- and up-sampling -- VQ reconstructions are
  blurry -, brightness/contrast jitter, pixel noise), AdamW with cosine decay, bf16 autocast on CPU;
  saves ``config.json`` (architecture, class names, metrics) and ``model.safetensors`` (fp16).
* :func:`fid` / :func:`frechet_distance`: float64, matrix square root through symmetric
  eigen-decompositions: ``Tr sqrt(S1 S2) = Tr sqrt(S1^1/2 S2 S1^1/2)`` with the inner matrix
  symmetric PSD, so its square root is real and exact up to rounding (no ``sqrtm`` of a
  non-symmetric product, no imaginary residue to discard).
* :func:`class_accuracy`: fraction of class-conditional samples the classifier assigns to their class.
* :func:`token_nll`: mean negative log-likelihood (nats per token) of generated token ids under the
  target model, teacher-forced in one forward per batch, from the **conditional** logits only
  (no classifier-free guidance mix, temperature 1, no top-k/top-p): it measures how likely the
  model itself finds the tokens, a check that a relaxed sampler does not drift into regions the
  model considers unlikely. (Guided sampling draws from a sharpened mix, so even ``ar`` samples do
  not minimise it; compare samplers with each other, at equal settings.)
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import AssetNotFoundError, ConfigError, InputError

logger = logging.getLogger(__name__)

IMAGE_SIZE = 64
FEATURE_NAME = "FID (emoji features)"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CLASSIFIER_FOLDER = "feature_classifier"


# ============================================================================== images -> tensors


def images_to_tensor(images: Any, size: int = IMAGE_SIZE) -> Tensor:
    """Float ``[N, 3, size, size]`` in [0, 1] from PIL images, uint8 arrays/tensors ``[N, H, W, 3]``
    (or one ``[H, W, 3]``), or float tensors ``[N, 3, H, W]`` already in [0, 1]."""
    if isinstance(images, Tensor) and images.dtype.is_floating_point:
        x = images.float()
        if x.dim() != 4 or x.shape[1] != 3:
            raise InputError(f"float image tensors must be [N, 3, H, W] in [0, 1], got shape {tuple(x.shape)}.")
    else:
        if isinstance(images, (list, tuple)):
            if not images:
                raise InputError("no images given; pass at least one image.")
            arrs = []
            for i, im in enumerate(images):
                a = np.asarray(im.convert("RGB") if hasattr(im, "convert") else im)
                if a.ndim != 3 or a.shape[-1] != 3:
                    raise InputError(f"image {i} has shape {a.shape}; expected an RGB image [H, W, 3].")
                arrs.append(a)
            shapes = {a.shape for a in arrs}
            if len(shapes) > 1:  # mixed sizes: resize one by one
                return torch.cat([images_to_tensor(a[None], size) for a in arrs])
            a = np.stack(arrs)
        else:
            a = images.numpy() if isinstance(images, Tensor) else np.asarray(images)
            if a.ndim == 3:
                a = a[None]
        if a.ndim != 4 or a.shape[-1] != 3:
            raise InputError(f"images must be uint8 [N, H, W, 3], got shape {a.shape}.")
        x = torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).float() / 255.0
    if x.shape[0] == 0:
        raise InputError("no images given; pass at least one image.")
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.clamp(0, 1)


# ============================================================================== the classifier


class EmojiFeatureClassifier(nn.Module):
    """Small CNN over 64x64 RGB emoji: 4 stages of conv3x3-BatchNorm-ReLU-maxpool, global average
    pooling, a ReLU feature layer (the penultimate features) and a linear head over the classes."""

    def __init__(
        self,
        num_classes: int,
        channels: Sequence[int] = (16, 32, 64, 128),
        feature_dim: int = 64,
        class_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ConfigError(f"a classifier needs at least 2 classes, got {num_classes}.")
        self.config = {
            "num_classes": int(num_classes),
            "channels": [int(c) for c in channels],
            "feature_dim": int(feature_dim),
            "image_size": IMAGE_SIZE,
        }
        self.class_names = tuple(class_names) if class_names is not None else tuple(map(str, range(num_classes)))
        layers: list[nn.Module] = []
        c_in = 3
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        self.body = nn.Sequential(*layers)
        self.feature = nn.Sequential(nn.Linear(c_in, feature_dim), nn.ReLU())
        self.head = nn.Linear(feature_dim, num_classes)

    def _prep(self, x: Any) -> Tensor:
        if not (isinstance(x, Tensor) and x.dtype.is_floating_point):
            x = images_to_tensor(x)
        p = next(self.parameters())
        return (x.to(p.device, p.dtype) - 0.5) / 0.5

    def penultimate(self, x: Tensor) -> Tensor:
        h = self.body(self._prep(x))
        return self.feature(h.mean(dim=(2, 3)))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.penultimate(x))

    @torch.no_grad()
    def features(self, images: Any, batch_size: int = 128) -> Tensor:
        """Penultimate features ``[N, feature_dim]`` (float64) of any image input :func:`images_to_tensor` takes."""
        x = images_to_tensor(images)
        was = self.training
        self.eval()
        out = torch.cat([self.penultimate(x[i : i + batch_size]).double() for i in range(0, len(x), batch_size)])
        self.train(was)
        return out

    @torch.no_grad()
    def predict(self, images: Any, batch_size: int = 128) -> Tensor:
        """Predicted class indices ``[N]``."""
        x = images_to_tensor(images)
        was = self.training
        self.eval()
        out = torch.cat([self(x[i : i + batch_size]).argmax(-1) for i in range(0, len(x), batch_size)])
        self.train(was)
        return out

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, folder: str | os.PathLike, metrics: dict[str, Any] | None = None) -> Path:
        """``config.json`` + ``model.safetensors`` (fp16) in ``folder``."""
        from safetensors.torch import save_file

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().to(torch.float16).contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(out / WEIGHTS_NAME))
        cfg = {
            "_class_name": type(self).__name__,
            **self.config,
            "class_names": list(self.class_names),
            "metrics": metrics or {},
            "weights_dtype": "float16",
        }
        (out / CONFIG_NAME).write_text(json.dumps(cfg, indent=1) + "\n")
        return out

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> EmojiFeatureClassifier:
        from safetensors.torch import load_file

        folder = Path(folder)
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        model = cls(
            num_classes=cfg["num_classes"],
            channels=cfg["channels"],
            feature_dim=cfg["feature_dim"],
            class_names=cfg.get("class_names"),
        )
        state = {k: v.float() for k, v in load_file(str(folder / WEIGHTS_NAME)).items()}
        model.load_state_dict(state)
        model.metrics = cfg.get("metrics", {})
        return model.eval()


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
        "leapgen.bench.image_metrics.train_feature_classifier(dataset, out_dir)."
    )


# ============================================================================== training


def _dataset_arrays(dataset: Any) -> tuple[Tensor, Tensor, tuple[str, ...]]:
    images = getattr(dataset, "images", None)
    labels = getattr(dataset, "labels", None)
    if images is None or labels is None:
        raise InputError(
            "the dataset must have .images (uint8 [N, 64, 64, 3]) and .labels (long [N]); "
            f"got a {type(dataset).__name__}."
        )
    x = images_to_tensor(images)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if y.shape != (x.shape[0],):
        raise InputError(f"{x.shape[0]} images but labels of shape {tuple(y.shape)}.")
    names = getattr(dataset, "class_names", None)
    n_cls = int(y.max()) + 1
    names = tuple(names) if names is not None else tuple(str(i) for i in range(n_cls))
    if len(names) < n_cls:
        raise InputError(f"labels go up to {n_cls - 1} but only {len(names)} class names are given.")
    return x, y, names


def stratified_split(labels: Tensor, val_fraction: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Indices (train, held-out): ``round(val_fraction * n_c)`` items of each class c held out
    (at least one when the class has >= 2 items, none when it has one)."""
    tr, va = [], []
    for c in torch.unique(labels).tolist():
        idx = (labels == c).nonzero().squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=generator)]
        k = 0 if len(idx) < 2 else max(1, round(val_fraction * len(idx)))
        va.append(idx[:k])
        tr.append(idx[k:])
    return torch.cat(tr).sort().values, torch.cat(va).sort().values


def augment_batch(x: Tensor, generator: torch.Generator) -> Tensor:
    """Random translation (+-6 px) and scale (0.8-1.15), horizontal flip, blur (down-sample by 2
    or 4 and back, p=0.5), brightness/contrast jitter and pixel noise, on ``[B, 3, 64, 64]`` in [0, 1]."""
    b = x.shape[0]
    g = generator

    def u(lo: float, hi: float, *shape: int) -> Tensor:
        return lo + (hi - lo) * torch.rand(*(shape or (b,)), generator=g)

    scale = u(0.8, 1.15)
    flip = torch.where(torch.rand(b, generator=g) < 0.5, -1.0, 1.0)
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0] = flip / scale
    theta[:, 1, 1] = 1.0 / scale
    theta[:, :, 2] = u(-6 / 32, 6 / 32, b, 2)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    # padding with the border pixel keeps the (mostly uniform) background
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    blur = torch.rand(b, generator=g)
    for lo, hi, f in ((0.0, 0.3, 2), (0.3, 0.5, 4)):
        sel = (blur >= lo) & (blur < hi)
        if sel.any():
            small = F.interpolate(x[sel], scale_factor=1 / f, mode="bilinear", antialias=True, align_corners=False)
            x[sel] = F.interpolate(small, size=x.shape[-2:], mode="bilinear", align_corners=False)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = (x - mean) * u(0.75, 1.25)[:, None, None, None] + mean + u(-0.1, 0.1)[:, None, None, None]
    x = x + 0.03 * torch.rand(b, 1, 1, 1, generator=g) * torch.randn(x.shape, generator=g)
    return x.clamp(0, 1)


@torch.no_grad()
def _accuracy(model: EmojiFeatureClassifier, x: Tensor, y: Tensor) -> float:
    if len(y) == 0:
        return float("nan")
    return float((model.predict(x) == y).float().mean())


def train_feature_classifier(
    dataset: Any,
    out_dir: str | os.PathLike | None,
    epochs: int = 30,
    seed: int = 0,
    *,
    val_fraction: float = 0.15,
    batch_size: int = 64,
    lr: float = 3e-3,
    weight_decay: float = 0.05,
    channels: Sequence[int] = (16, 32, 64, 128),
    feature_dim: int = 64,
    bf16: bool = True,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Train :class:`EmojiFeatureClassifier` on ``dataset`` (``.images`` uint8 ``[N, 64, 64, 3]``,
    ``.labels`` long ``[N]``, ``.class_names``) and save it to ``out_dir`` (skipped when None).

    A stratified ``val_fraction`` of every class is held out (never trained on); the returned metrics
    hold the held-out and train accuracy (on the saved fp16 weights), chance levels, sizes, time.
    The trained model is returned under ``"model"``. On the 1619 emoji (8 classes) with the
    defaults: held-out accuracy 0.55 (chance 0.125, majority class 0.24), train accuracy 0.68,
    229 s on one thread of a CPU shared with other jobs (load ~5 on 2 cores), about 2 minutes alone.
    """
    import sys

    from tqdm.auto import tqdm

    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}.")
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}.")
    x, y, names = _dataset_arrays(dataset)
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    tr, va = stratified_split(y, val_fraction, g)
    n_cls = len(names)
    model = EmojiFeatureClassifier(n_cls, channels=channels, feature_dim=feature_dim, class_names=names)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps_per_epoch = max(1, math.ceil(len(tr) / batch_size))
    total = epochs * steps_per_epoch
    warm = max(1, min(100, total // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total)))
    )
    # class-balanced loss weights (emoji categories differ a lot in size)
    counts = torch.bincount(y[tr], minlength=n_cls).float()
    weights = torch.where(counts > 0, counts.sum() / (n_cls * counts.clamp(min=1)), torch.zeros(()))
    weights = weights / weights[counts > 0].mean()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()
    disable = (not sys.stderr.isatty()) if progress is None else not progress
    t0 = time.perf_counter()
    model.train()
    losses: list[float] = []
    bar = tqdm(range(epochs), desc="feature classifier", unit="epoch", disable=disable)
    for epoch in bar:
        perm = tr[torch.randperm(len(tr), generator=g)]
        run = 0.0
        for i in range(0, len(perm), batch_size):
            idx = perm[i : i + batch_size]
            xb = augment_batch(x[idx].clone(), g)
            with ctx:
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), y[idx], weight=weights, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run += loss.item() * len(idx)
        losses.append(run / len(perm))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        logger.info("feature classifier epoch %d/%d loss %.4f", epoch + 1, epochs, losses[-1])
    model.eval()
    train_s = time.perf_counter() - t0
    # evaluate the weights as they will be shipped (fp16 round trip)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    majority = float(torch.bincount(y[va], minlength=n_cls).max() / max(1, len(va))) if len(va) else float("nan")
    metrics: dict[str, Any] = {
        "heldout_accuracy": _accuracy(model, x[va], y[va]),
        "train_accuracy": _accuracy(model, x[tr], y[tr]),
        "heldout_accuracy_blurred": _accuracy(
            model,
            F.interpolate(
                F.interpolate(x[va], scale_factor=0.25, mode="bilinear", antialias=True), size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear"
            )
            if len(va)
            else x[va],
            y[va],
        ),
        "chance_uniform": 1.0 / n_cls,
        "chance_majority_heldout": majority,
        "num_classes": n_cls,
        "n_train": int(len(tr)),
        "n_heldout": int(len(va)),
        "epochs": epochs,
        "final_train_loss": losses[-1],
        "train_seconds": train_s,
        "seed": seed,
        "val_fraction": val_fraction,
        "torch_threads": torch.get_num_threads(),
    }
    logger.info(
        "feature classifier: held-out accuracy %.3f (chance %.3f, majority %.3f), train %.3f, %.0f s",
        metrics["heldout_accuracy"],
        metrics["chance_uniform"],
        majority,
        metrics["train_accuracy"],
        train_s,
    )
    if out_dir is not None:
        path = model.save_pretrained(out_dir, metrics=metrics)
        metrics["path"] = str(path)
    metrics["model"] = model
    return metrics


# ============================================================================== metrics


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


@torch.inference_mode()
def token_nll(
    model: Any,
    prompts: Sequence[Sequence[int]],
    token_ids: Any,
    cond: Any = None,
    batch_size: int = 16,
) -> float:
    """Mean NLL (nats/token) of ``token_ids`` (row i generated after ``prompts[i]``) under ``model``.

    Teacher forcing: for each batch of rows, one forward of ``prompt + tokens[:-1]`` on a fresh
    cache; the NLL of token t is ``-log softmax(logits at the position before t)[t]`` in float64,
    averaged over every generated token of every row. The logits are the model's **conditional**
    ones: for a model with classifier-free guidance built in (``LlamaGenLM``), guidance is switched
    off for these forwards (``model.guidance_disabled()`` if it has one, else ``cfg_scale = 1``),
    so no null-condition mix, no temperature, no top-k/top-p. ``cond`` is passed to the model as is
    (rows first). The model's ``forwards`` counter is restored afterwards.
    """
    if isinstance(token_ids, Tensor):
        rows = [r.reshape(-1).tolist() for r in token_ids]
    else:
        rows = [list(np.asarray(r).reshape(-1).tolist()) for r in token_ids]
    prompts = [list(p) for p in prompts]
    if len(prompts) != len(rows):
        raise InputError(f"{len(prompts)} prompts but {len(rows)} token rows.")
    if not rows or not any(rows):
        raise InputError("no generated tokens to score.")
    before = getattr(model, "forwards", None)
    total, count = 0.0, 0
    with _no_guidance(model):
        # rows with the same prompt length and token count go together (no padding needed)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (p, r) in enumerate(zip(prompts, rows)):
            if not p:
                raise InputError(f"prompt {i} is empty; the first generated token needs a context.")
            if r:
                groups.setdefault((len(p), len(r)), []).append(i)
        for (lp, _), idx in groups.items():
            for s in range(0, len(idx), batch_size):
                sel = idx[s : s + batch_size]
                seq = torch.tensor([prompts[i] + rows[i] for i in sel], dtype=torch.long, device=_device(model))
                cache = model.new_cache(len(sel))
                c = _select_cond(cond, sel)
                logits = model(seq[:, :-1], cache, cond=c) if c is not None else model(seq[:, :-1], cache)
                lp_ = torch.log_softmax(logits[:, lp - 1 :].double(), dim=-1)
                tgt = seq[:, lp:]
                total += float(-lp_.gather(-1, tgt[..., None]).sum())
                count += tgt.numel()
    if before is not None:
        model.forwards = before
    return total / count


def _device(model: Any) -> torch.device:
    dev = getattr(model, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def _select_cond(cond: Any, sel: list[int]) -> Any:
    if cond is None:
        return None
    if isinstance(cond, Tensor):
        return cond[sel]
    if isinstance(cond, dict):
        return {k: _select_cond(v, sel) for k, v in cond.items()}
    if isinstance(cond, (list, tuple)):
        return [cond[i] for i in sel]
    return cond


class _no_guidance:
    """Switch classifier-free guidance off on a model for the duration of a block."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._ctx = None
        self._old: Any = None

    def __enter__(self) -> None:
        m = self.model
        if hasattr(m, "guidance_disabled"):
            self._ctx = m.guidance_disabled()
            self._ctx.__enter__()
        elif hasattr(m, "cfg_scale"):
            self._old = m.cfg_scale
            m.cfg_scale = 1.0

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        elif self._old is not None:
            self.model.cfg_scale = self._old


__all__ = [
    "FEATURE_NAME",
    "EmojiFeatureClassifier",
    "augment_batch",
    "class_accuracy",
    "fid",
    "fid_emoji",
    "frechet_distance",
    "gaussian_stats",
    "images_to_tensor",
    "load_feature_classifier",
    "stratified_split",
    "token_nll",
    "train_feature_classifier",
]
