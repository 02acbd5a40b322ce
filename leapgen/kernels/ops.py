"""The kernel entry points: validate, draw the random numbers, run Triton or the reference.

Each function checks dtypes, devices, shapes and the last axis' contiguity *before* anything is
launched (:class:`~leapgen.errors.InputError` for tensors, :class:`~leapgen.errors.ConfigError`
for parameters), draws its random numbers with torch from the caller's generator in the order the
samplers always drew them, then runs the implementation :mod:`.backend` picks. Given the same
draws both implementations compute the same thing, so the backend never changes an output beyond
float rounding (near-ties of a sampled argmax).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError, InputError
from . import backend, reference
from .reference import TreeVerify

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64)


def _tensor(name: str, x: object, dim: int | None = None, dtypes: tuple = FLOATS) -> Tensor:
    if not isinstance(x, Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dim is not None and x.dim() != dim:
        raise InputError(f"{name} must have {dim} dimensions, got shape {tuple(x.shape)}")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise InputError(f"{name} has dtype {x.dtype}; expected one of {names}")
    if x.dim() and x.stride(-1) != 1 and x.shape[-1] > 1:
        raise InputError(f"{name}'s last axis must be contiguous (stride 1); pass {name}.contiguous()")
    return x


def _same(name: str, x: Tensor, ref: Tensor, shape: tuple[int, ...]) -> None:
    if x.device != ref.device:
        raise InputError(f"{name} is on {x.device} but the logits/probabilities are on {ref.device}; move it there")
    if tuple(x.shape) != tuple(shape):
        raise InputError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def _row_param(name: str, x: float | int | Tensor, lead: tuple[int, ...], ref: Tensor, lo: float, hi: float):
    if isinstance(x, Tensor):
        if x.dim() == 0:
            x = x.expand(lead)
        _same(name, x, ref, lead)
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not lo <= x <= hi:
        raise ConfigError(f"{name}={x!r} is out of range; expected a number in [{lo}, {hi}] or a per-row tensor")
    return x


def sample_logits(
    logits: Tensor,
    temperature: float | Tensor = 1.0,
    top_k: int | Tensor = 0,
    top_p: float | Tensor = 1.0,
    *,
    generator: torch.Generator | None = None,
    seen: Tensor | None = None,
    repetition_penalty: float = 1.0,
    min_p: float | Tensor = 0.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
) -> Tensor:
    """One token per row of raw ``logits [..., V]`` (shape ``[...]``): repetition penalty,
    frequency and presence penalties (vLLM's, 0 = off), temperature, top-k (0 = off), top-p, min-p
    (0 = off), then a draw from the processed distribution; rows with temperature 0 take the argmax
    of the penalised logits. Parameters are numbers or per-row tensors of shape
    ``logits.shape[:-1]`` (the three penalties: numbers); ``seen`` is the bool mask of the
    repetition penalty or the int32 coded context ``2 * generated_count + in_prompt`` the frequency
    and presence penalties read (:func:`leapgen.kernels.reference.penalize`). All of it runs in the
    one fused Triton kernel.

    The draw is ``torch.multinomial``'s: exponentials ``E`` of the logits' shape and dtype drawn
    from ``generator`` and ``argmax(p / E)``, so this returns exactly what
    ``sample(LogitsProcessor(cfg).probs(logits, seen), generator)`` returned, with the same
    generator state afterwards. Nothing is drawn when ``temperature`` is the number 0.
    """
    logits = _tensor("logits", logits)
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise InputError(f"logits must be [..., V] with V >= 1, got shape {tuple(logits.shape)}")
    lead, v = tuple(logits.shape[:-1]), logits.shape[-1]
    temperature = _row_param("temperature", temperature, lead, logits, 0.0, float("inf"))
    top_k = _row_param("top_k", top_k, lead, logits, 0, float("inf"))
    top_p = _row_param("top_p", top_p, lead, logits, 0.0, 1.0)
    min_p = _row_param("min_p", min_p, lead, logits, 0.0, 1.0)
    if isinstance(top_k, Tensor) and top_k.dtype not in INTS:
        raise InputError(f"top_k has dtype {top_k.dtype}; expected an integer tensor")
    if isinstance(top_k, float) and not top_k.is_integer():
        raise ConfigError(f"top_k={top_k!r} must be an integer")
    if not isinstance(repetition_penalty, (int, float)) or repetition_penalty <= 0:
        raise ConfigError(f"repetition_penalty={repetition_penalty!r} must be a positive number")
    for name, value in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -2.0 <= value <= 2.0:
            raise ConfigError(f"{name}={value!r} is out of range; expected a number in [-2, 2] (0 = off)")
    counting = presence_penalty != 0.0 or frequency_penalty != 0.0
    if counting and seen is not None and seen.dtype == torch.bool:
        raise InputError("presence_penalty / frequency_penalty need the generated counts: pass seen as the int32 "
                         "coded context (leapgen.samplers.penalties.context), not a bool mask")
    if seen is not None:
        seen = _tensor("seen", seen, dtypes=(torch.bool, torch.int32))
        if seen.device != logits.device:
            raise InputError(f"seen is on {seen.device} but the logits are on {logits.device}; move it there")
        try:
            seen = seen.expand(logits.shape)
        except RuntimeError as err:
            raise InputError(f"seen of shape {tuple(seen.shape)} does not fit logits {tuple(logits.shape)}") from err
    all_greedy = not isinstance(temperature, Tensor) and temperature == 0.0
    exps = None if all_greedy else torch.empty_like(logits).exponential_(generator=generator)
    if not backend.use_triton("sample_logits", logits.device, logits.shape[-1]):
        return reference.sample_logits(
            logits, temperature, top_k, top_p, exps, seen, repetition_penalty, min_p, presence_penalty, frequency_penalty
        )
    flat = logits.reshape(-1, v)
    n = flat.shape[0]
    cdt = torch.float64 if logits.dtype == torch.float64 else torch.float32

    def per_row(x: float | int | Tensor, dtype: torch.dtype) -> Tensor:
        if isinstance(x, Tensor):
            return x.reshape(n).to(dtype).contiguous()
        return torch.full((n,), x, dtype=dtype, device=logits.device)

    args = (
        flat,
        # the reference scales and thresholds in the logits' dtype: round the parameters to it first
        per_row(temperature, logits.dtype).to(cdt),
        per_row(top_k, torch.int32),
        per_row(top_p, logits.dtype).to(cdt),
        exps.reshape(-1, v) if exps is not None else torch.ones(1, v, dtype=logits.dtype, device=logits.device),
        None if seen is None or (repetition_penalty == 1.0 and not counting) else seen.reshape(-1, v).contiguous(),
        float(repetition_penalty),
        per_row(min_p, cdt),  # the reference thresholds min-p in float32 (float64): no rounding to the logits' dtype
        float(presence_penalty),
        float(frequency_penalty),
    )
    try:
        from . import triton_kernels

        return triton_kernels.sample_logits(*args).reshape(lead)
    except Exception as err:
        backend.launch_failed("sample_logits", err)
    return reference.sample_logits(
        logits, temperature, top_k, top_p, exps, seen, repetition_penalty, min_p, presence_penalty, frequency_penalty
    )


def chain_accept(
    draft: Tensor,
    p: Tensor,
    q: Tensor | None,
    generator: torch.Generator | None = None,
    draft_len: Tensor | None = None,
    *,
    ratio: tuple[Tensor, Tensor] | None = None,
    residual_base: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Batched chain rejection sampling, ``verify.rejection_sample``'s contract: ``draft [B, g]``
    drawn from ``q [B, g, V]`` (None: deterministic drafts, one-hot q), ``p [B, g+1, V]`` target
    probabilities; ``draft_len [B]`` drafts per row (default g). Returns ``(n_accepted [B],
    next_token [B])``: the next token is drawn from the residual ``norm(max(0, p - q))`` at the
    first rejection, or from the bonus position's p. Draws: uniforms ``[B, g]`` then the final
    draw's exponentials ``[B, V]``, both in p's dtype from ``generator``."""
    draft = _tensor("draft", draft, 2, INTS)
    b, g = draft.shape
    p = _tensor("p", p, 3)
    v = p.shape[-1]
    _same("p", p, p, (b, g + 1, v))
    if draft.device != p.device:
        raise InputError(f"draft is on {draft.device} but p is on {p.device}; move it there")
    if q is not None:
        q = _tensor("q", q, 3)
        _same("q", q, p, (b, g, v))
    if residual_base is not None:
        residual_base = _tensor("residual_base", residual_base, 3)
        _same("residual_base", residual_base, p, (b, g, v))
    if ratio is not None:
        if not isinstance(ratio, tuple) or len(ratio) != 2:
            raise InputError("ratio must be a pair (num, den) of [B, g] tensors")
        for name, r in zip(("ratio[0]", "ratio[1]"), ratio):
            _same(name, _tensor(name, r, 2), p, (b, g))
    if draft_len is None:
        lens = torch.full((b,), g, dtype=torch.long, device=p.device)
    else:
        lens = _tensor("draft_len", draft_len, 1, INTS)
        _same("draft_len", lens, p, (b,))
        lens = lens.long()
    if g == 0:
        exps = torch.empty(b, v, dtype=p.dtype, device=p.device).exponential_(generator=generator)
        return torch.zeros(b, dtype=torch.long, device=p.device), (p[:, 0] / exps).argmax(-1)
    uniforms = torch.rand(b, g, generator=generator, device=p.device, dtype=p.dtype)
    exps = torch.empty(b, v, dtype=p.dtype, device=p.device).exponential_(generator=generator)
    if backend.use_triton("chain_accept", p.device, p.shape[-1]):
        try:
            from . import triton_kernels

            return triton_kernels.chain_accept(draft, p, q, lens, uniforms, exps, ratio, residual_base)
        except Exception as err:
            backend.launch_failed("chain_accept", err)
    return reference.chain_accept(draft, p, q, lens, uniforms, exps, ratio, residual_base)


def _check_trees(tokens: Tensor, parent: Tensor, p: Tensor) -> None:
    """``tokens, parent [B, N]`` and ``p [B, N, V]`` describe valid padded trees (one host sync)."""
    b, n = tokens.shape
    if n == 0:
        raise InputError("a tree needs at least its root node (N >= 1)")
    _same("tokens", tokens, p, (b, n))
    _same("parent", parent, p, (b, n))
    if p.shape[:2] != (b, n):
        raise InputError(f"p must be [B, N, V] = [{b}, {n}, V], got {tuple(p.shape)}")
    idx = torch.arange(n, device=p.device)
    bad_parent = (parent >= idx) | (parent < -2) | (parent[:, :1] != -1)
    bad_token = (parent >= -1) & ((tokens < 0) | (tokens >= p.shape[-1]))
    if bool((bad_parent.any(-1) | bad_token.any(-1)).any()):
        raise InputError(
            "bad tree: node 0 must be the root (parent -1), every other node needs parent[i] < i "
            "(-1: no parent, -2: padding), and node tokens must lie in [0, V)"
        )


def tree_verify(tokens: Tensor, parent: Tensor, p: Tensor) -> TreeVerify:
    """Tree verification for a batch of draft trees ``tokens, parent [B, N]`` (topological:
    ``parent[i] < i``; node 0 is the root with parent -1; padding nodes have parent -2) and the
    target's logits or probabilities ``p [B, N, V]`` after each node's path: the ancestor mask,
    depths, the target's probability of each node's token, the argmax at every node and the
    greedy walk (see :class:`~leapgen.kernels.reference.TreeVerify`). One host sync checks the
    parent arrays."""
    tokens = _tensor("tokens", tokens, 2, INTS)
    parent = _tensor("parent", parent, 2, INTS)
    p = _tensor("p", p, 3)
    _check_trees(tokens, parent, p)
    tokens, parent = tokens.long(), parent.long()
    if backend.use_triton("tree_verify", p.device, p.shape[-1]):
        try:
            from . import triton_kernels

            return triton_kernels.tree_verify(tokens.contiguous(), parent.contiguous(), p)
        except Exception as err:
            backend.launch_failed("tree_verify", err)
    return reference.tree_verify(tokens, parent, p)


def tree_accept(
    tokens: Tensor, parent: Tensor, p: Tensor, q: Tensor | None, kind: str, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Sampled verification of a batch of draft trees (V3, ``verify.verify_tree``'s sampling walk):
    ``tokens, parent [B, N]`` as in :func:`tree_verify`, ``p [B, N, V]`` the target's distribution
    after each node's path, ``q [B, N, V]`` the draft distribution each node's children were drawn
    from (None only for ``kind="deterministic"``). Returns ``(path [B, N] padded with -1,
    n_accepted [B], next_token [B])``; the output token sequence follows p exactly. Draws: one
    uniform per node ``[B, N]``, then the final draw's exponentials ``[B, V]``, in p's dtype from
    ``generator``. One host sync checks the parent arrays."""
    if kind not in reference.TREE_KINDS:
        raise InputError(f"kind must be one of {reference.TREE_KINDS}, got {kind!r}")
    tokens = _tensor("tokens", tokens, 2, INTS)
    parent = _tensor("parent", parent, 2, INTS)
    p = _tensor("p", p, 3)
    b, n = tokens.shape
    _check_trees(tokens, parent, p)
    if q is None and kind != "deterministic":
        raise InputError(f"kind={kind!r} needs the draft distributions q [B, N, V]; pass q or use kind='deterministic'")
    if q is not None:
        q = _tensor("q", q, 3)
        _same("q", q, p, tuple(p.shape))
    tokens, parent = tokens.long().contiguous(), parent.long().contiguous()
    uniforms = torch.rand(b, n, generator=generator, device=p.device, dtype=p.dtype)
    exps = torch.empty(b, p.shape[-1], dtype=p.dtype, device=p.device).exponential_(generator=generator)
    if backend.use_triton("tree_accept", p.device, p.shape[-1]):
        try:
            from . import triton_kernels

            code = reference.TREE_KINDS.index(kind)
            return triton_kernels.tree_accept(tokens, parent, p, q, code, uniforms, exps)
        except Exception as err:
            backend.launch_failed("tree_accept", err)
    return reference.tree_accept(tokens, parent, p, q, kind, uniforms, exps)
