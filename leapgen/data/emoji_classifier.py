"""The emoji feature classifier: the network whose penultimate features give "FID (emoji features)".

Why it lives in :mod:`leapgen.data`. It is the measuring instrument of the emoji corpus
(:mod:`leapgen.data.emoji`), the way Inception-v3 is for ImageNet: the image recipe trains and ships it
(:func:`leapgen.train.feature_classifier.train_feature_classifier`), the image benchmark loads it
(:func:`leapgen.bench.image_metrics.load_feature_classifier`) to compute FID and class accuracy.
Keeping it here lets both depend on it without the training recipes and the benchmarks importing
each other. It needs only torch, numpy and safetensors.

* :func:`images_to_tensor`: PIL images, uint8 ``[N, H, W, 3]`` arrays/tensors or float ``[N, 3, H, W]``
  tensors -> float ``[N, 3, 64, 64]`` in [0, 1].
* :class:`EmojiFeatureClassifier`: 4 stages of conv3x3-BatchNorm-ReLU-maxpool (16-32-64-128
  channels), global average pooling, a 64-d ReLU feature layer (the "penultimate features") and a
  linear head over the classes; ``save_pretrained`` / ``from_pretrained`` write and read
  ``config.json`` (architecture, class names, metrics) and ``model.safetensors`` (fp16).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, InputError

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


__all__ = [
    "CLASSIFIER_FOLDER",
    "CONFIG_NAME",
    "IMAGE_SIZE",
    "WEIGHTS_NAME",
    "EmojiFeatureClassifier",
    "images_to_tensor",
]
