"""Continuous Integrate-and-Fire (CIF), exactly as FunASR's ``cif`` (Paraformer's length model).

Paper: Dong & Xu, "CIF: Continuous Integrate-and-Fire for End-to-End Speech Recognition", ICASSP
2020; Gao et al., "Paraformer", Interspeech 2022. Reference code: FunASR
``funasr/models/paraformer/cif_predictor.py`` (``cif`` = the time loop, ``cif_v1`` = the cumsum form).

Semantics (per row, threshold beta, default 1.0)::

    acc = 0; frame = 0
    for t: completion = 1 - acc; acc += alpha[t]
           if acc >= beta:  frame += completion * h[t]; emit frame (fire at t)
                            acc -= 1; frame = (alpha[t] - completion) * h[t]
           else:            frame += alpha[t] * h[t]

Fired embeddings are padded with zeros to ``N = round(alpha.sum(-1)).max()`` tokens (FunASR's
``max_label_len``); the unfinished remainder at the end is dropped. Padded frames must carry
``alpha = 0``; they then never change a row's result. The inference-time tail (0.45 appended at
the first padded frame) is applied by the predictor (:func:`add_tail`), not here.

:func:`cif` uses the cumsum form (float64, PR #1811's fix for float32 drift) when every alpha is
< 1 and beta == 1 (the two forms are then identical: a frame can fire at most once); otherwise it
runs the loop form (:func:`cif_loop`), so results always follow the loop's semantics.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError


def _check(hidden: Tensor, alphas: Tensor) -> None:
    if hidden.dim() != 3 or alphas.dim() != 2 or hidden.shape[:2] != alphas.shape:
        raise InputError(f"cif expects hidden [B, T, D] and alphas [B, T], got {tuple(hidden.shape)} and {tuple(alphas.shape)}")
    if alphas.numel() and bool((alphas < 0).any()):
        raise InputError("cif weights (alphas) must be >= 0")


def _out_len(alphas: Tensor) -> int:
    return int(torch.round(alphas.double().sum(-1)).max()) if alphas.numel() else 0


def _pack(frames_at: list[list[int]], n: int, device: torch.device) -> Tensor:
    out = torch.full((len(frames_at), n), -1, dtype=torch.long, device=device)
    for b, fr in enumerate(frames_at):
        fr = fr[:n]
        if fr:
            out[b, : len(fr)] = torch.tensor(fr, device=device)
    return out


def cif_loop(hidden: Tensor, alphas: Tensor, threshold: float = 1.0) -> tuple[Tensor, Tensor]:
    """The time-loop form (FunASR ``cif``): ``(fired [B, N, D], fire_frames [B, N])``."""
    _check(hidden, alphas)
    b, t_len, d = hidden.shape
    integrate = torch.zeros(b, dtype=alphas.dtype, device=hidden.device)
    frame = torch.zeros(b, d, dtype=hidden.dtype, device=hidden.device)
    emitted: list[list[Tensor]] = [[] for _ in range(b)]
    frames_at: list[list[int]] = [[] for _ in range(b)]
    for t in range(t_len):
        alpha = alphas[:, t]
        completion = 1.0 - integrate
        integrate = integrate + alpha
        fire = integrate >= threshold
        integrate = torch.where(fire, integrate - 1.0, integrate)
        cur = torch.where(fire, completion, alpha)
        frame = frame + cur[:, None].to(hidden.dtype) * hidden[:, t]
        for r in fire.nonzero().flatten().tolist():
            emitted[r].append(frame[r])
            frames_at[r].append(t)
        frame = torch.where(fire[:, None], (alpha - cur)[:, None].to(hidden.dtype) * hidden[:, t], frame)
    n = _out_len(alphas)
    out = hidden.new_zeros(b, n, d)
    for r in range(b):
        k = min(len(emitted[r]), n)
        if k:
            out[r, :k] = torch.stack(emitted[r][:k])
    return out, _pack(frames_at, n, hidden.device)


def cif_weights(alphas: Tensor, n: int | None = None) -> tuple[Tensor, Tensor]:
    """Cumsum form (threshold 1, every alpha < 1): ``(W [B, N, T], fires [B, T] bool)`` where
    token k's embedding is ``W[:, k] @ hidden`` and ``fires`` marks the frames where a token fires.
    Columns of tokens that never fired are zero."""
    a = alphas.double()
    c = a.cumsum(-1)
    prev = c - a
    j = torch.floor(prev)  # the token receiving the frame's weight before a fire (0-based)
    fires = torch.floor(c) > j
    n = _out_len(alphas) if n is None else n
    b, t_len = a.shape
    first = torch.minimum(c, j + 1) - prev
    second = c - torch.minimum(c, j + 1)
    w = torch.zeros(b, n + 2, t_len, dtype=torch.float64, device=alphas.device)
    jj = j.long().clamp(max=n)
    w.scatter_add_(1, jj[:, None], first[:, None])
    w.scatter_add_(1, (jj + 1).clamp(max=n + 1)[:, None], second[:, None])
    n_fired = fires.sum(-1)
    keep = torch.arange(n + 2, device=alphas.device)[None] < n_fired[:, None]
    return (w * keep[..., None])[:, :n], fires


def cif(hidden: Tensor, alphas: Tensor, threshold: float = 1.0, weights: dict[str, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """Integrate ``hidden [B, T, D]`` with weights ``alphas [B, T]`` and fire one embedding per
    unit of accumulated weight: ``(fired [B, N, D], fire_frames [B, N])``, ``N = round(sum alpha)``
    over the batch's maximum, ``fire_frames`` the frame index at which each token fired (-1 on
    padding). Exactly FunASR's ``cif`` (see the module docstring). A ``weights`` dict receives
    :func:`cif_weights`' ``"weights"`` and ``"fires"`` when the cumsum form ran (word timestamps
    reuse them)."""
    _check(hidden, alphas)
    if threshold != 1.0 or (alphas.numel() and bool((alphas >= 1).any())):
        return cif_loop(hidden, alphas, threshold)
    return cif_cumsum(hidden, alphas, weights)


def cif_cumsum(hidden: Tensor, alphas: Tensor, weights: dict[str, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """The cumsum form (FunASR ``cif_v1``) for any alphas: equal to :func:`cif` when every alpha
    is < 1; a frame with alpha >= 1 fires once here (the loop would fire again on the next frame).
    Training uses it on rescaled alphas (no Python loop over time). ``weights``: as in :func:`cif`."""
    w, fires = cif_weights(alphas)
    if weights is not None:
        weights.update(weights=w, fires=fires)
    fired = torch.bmm(w.to(hidden.dtype), hidden)
    n = w.shape[1]
    pos = fires.long().cumsum(-1) - 1  # token index of every firing frame
    frames = torch.full((hidden.shape[0], n + 1), -1, dtype=torch.long, device=hidden.device)
    t_idx = torch.arange(alphas.shape[1], device=hidden.device).expand_as(pos)
    target = torch.where(fires & (pos < n), pos, torch.full_like(pos, n))
    frames.scatter_(1, target, torch.where(fires, t_idx, torch.full_like(t_idx, -1)))
    return fired, frames[:, :n]


def add_tail(hidden: Tensor, alphas: Tensor, mask: Tensor, tail: float = 0.45) -> tuple[Tensor, Tensor, Tensor]:
    """Paraformer's inference tail: append one zero frame and put ``tail`` at each row's first
    padded frame (its end). Returns ``(hidden, alphas, token_num)`` with ``token_num =
    floor(sum alphas)`` per row."""
    b = hidden.shape[0]
    hidden = torch.cat([hidden, hidden.new_zeros(b, 1, hidden.shape[2])], 1)
    alphas = torch.cat([alphas * mask, alphas.new_zeros(b, 1)], 1)
    lengths = mask.long().sum(-1)
    alphas = alphas.scatter_add(1, lengths[:, None], alphas.new_full((b, 1), tail))
    token_num = torch.floor(alphas.double().sum(-1)).long()
    return hidden, alphas, token_num


__all__ = ["add_tail", "cif", "cif_cumsum", "cif_loop", "cif_weights"]
