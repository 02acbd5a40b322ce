"""Reading reference checkpoints (LlamaGen's ``.pt`` / ``.safetensors``) into leapgen's modules.

Shared by the VQ image tokenizer (:meth:`leapgen.tokenizers.vq_image.VQModel.from_llamagen`) and the
LlamaGen models (:mod:`leapgen.models.llamagen`): :func:`unwrap_checkpoint` turns a checkpoint file
or dict into a plain state dict, :func:`load_reference_state` loads it with the reference key names
and an error listing every key or shape that does not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import AssetNotFoundError, ConfigError, InputError


def unwrap_checkpoint(state_dict_or_path: Any) -> dict[str, Tensor]:
    """A plain state dict from a LlamaGen checkpoint (``.pt`` with a ``model`` / ``module`` /
    ``state_dict`` entry, as LlamaGen's sample scripts read them; ``.safetensors``; or a dict)."""
    obj = state_dict_or_path
    if isinstance(obj, (str, Path)):
        path = Path(obj)
        if not path.is_file():
            raise AssetNotFoundError(f"no checkpoint file at {path}")
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path))
        else:
            import argparse

            # LlamaGen's training checkpoints also hold the argparse Namespace of the run
            with torch.serialization.safe_globals([argparse.Namespace]):
                obj = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(obj, dict):
        raise InputError(f"expected a state dict or a checkpoint path, got {type(obj).__name__}")
    for key in ("model", "module", "state_dict"):  # the order of LlamaGen's sample scripts
        if key in obj and isinstance(obj[key], dict):
            return obj[key]
    return obj


def load_reference_state(module: nn.Module, state: dict[str, Tensor], ignore: tuple[str, ...] = ()) -> None:
    """Load a state dict with the reference key names, with an error listing what does not fit."""
    own = module.state_dict()
    state = {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if not any(k == i or k.endswith("." + i) or k.startswith(i) for i in ignore)}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or shapes:
        raise ConfigError(
            f"the checkpoint does not fit this {type(module).__name__} config: missing {missing[:8]}"
            f"{'...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}, "
            f"shape mismatches {shapes[:4]}; pass the matching preset/config keyword arguments."
        )
    module.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
