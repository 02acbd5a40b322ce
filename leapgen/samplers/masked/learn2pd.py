"""Learn2PD: a learned commit filter over the block's confidences, plus End-of-Text Prediction.

Paper: Bao et al., "Learning to Parallel: Accelerating Diffusion LLMs via Learnable Parallel
Decoding", ICLR 2026; ims-kdks/Learning-to-Parallel-Decoding ``llada/generate.py``,
``generate_training_data.py``, ``train.ipynb`` (reference notes masked.md §8). Guarantee:
**lossy** (the filter predicts which positions already hold their final token; quality is
measured by the benches).

* **Filter** (:class:`CommitFilter`): a 2-layer MLP ``block_length -> block_length -> block_length``
  (32: 2,112 parameters) mapping the confidence vector of the current block's positions
  (committed positions bring the confidence they were committed with) to one logit per position.
  Policy ``learned_filter``: commit the masked positions with ``sigmoid(logit) > accept_thres``
  (0.96) **and** the LLaDA schedule's top-k, so progress is never slower than LLaDA's.
  Without a trained filter (``commit_filter=None``) the identity rule ``confidence >
  accept_thres`` is used (logged).
* **Training data** (:func:`egp_records`): the *extremely greedy parallel* oracle on the model's
  own outputs: decode with LLaDA at temperature 0 to get ``y``; decode again committing at every
  step every masked block position whose argmax equals ``y`` (at least the most confident one,
  which is given ``y``'s token: the anti-stall guard); record (block confidences, correct?) per
  step. :func:`train_filter` fits the MLP with BCE-with-logits and AdamW (lr 3e-3, full batch).
* **EoTP** (hook ``eot_predict``): once a row has committed an End-of-Text token with no
  committed non-EoT token after it, every masked position after it is filled with EoT and later
  forwards run on the sequence up to the batch's last such cut only
  (``MaskedDecodeState.truncate_len``), so padding is never decoded again; a row cut earlier has
  its positions after its own cut masked out of attention (``truncate_rows``), so it decodes as
  it would alone. A committed token is
  never dropped: the cut is the first committed EoT *after the last committed non-EoT token*.

Cache: ``cache="dual"`` (or ``"prefix"``) runs it on Fast-dLLM's block cache, the reference eval
script's ``L2P+EoT+dual_cache``; EoTP's truncated forwards and the cache windows compose (with
``cache_refresh=1`` the tokens equal the cache-free run's; tested). Off by default, as in the paper.

Defaults: LLaDA's (``block_length=32``, one step per token as the fallback schedule,
``scorer="prob"``, temperature 0), ``accept_thres=0.96``, ``eot_id=None`` (the decode config's
``eos_token_id``; without one EoTP is off), hooks ``("eot_predict",)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from torch import Tensor, nn

from ...errors import ConfigError
from ..base import DecodeConfig, check_token_ids, register_sampler
from .llada import DLLM_DEFAULTS, DLLMSampler
from .parts import HOOKS, POLICIES, Hook, UnmaskPolicy, finite
from .state import MaskedDecodeState
from .step import lowest

logger = logging.getLogger(__name__)


class CommitFilter(nn.Module):
    """Learn2PD's filter: ``Linear(n, n) -> ReLU -> Linear(n, n)`` over a block's confidences."""

    def __init__(self, block_length: int = 32, hidden: int | None = None) -> None:
        super().__init__()
        self.block_length = block_length
        h = hidden or block_length
        self.net = nn.Sequential(nn.Linear(block_length, h), nn.ReLU(), nn.Linear(h, block_length))

    def forward(self, conf: Tensor) -> Tensor:
        return self.net(conf)

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        state["block_length"] = torch.tensor(self.block_length)
        save_file(state, str(path))

    @classmethod
    def load(cls, path: str | Path) -> CommitFilter:
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
            n = int(state.pop("block_length"))
            out = cls(n, hidden=state["net.0.weight"].shape[0])
            out.load_state_dict(state)
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:  # damaged / another file
            raise ConfigError(f"{path} cannot be read as a Learn2PD commit filter ({type(err).__name__}: {str(err)[:300]}); "
                              "restore it (a shipped pipeline: reinstall leapgen; a saved one: save it again) or pass "
                              "commit_filter=None for the identity rule.") from err
        return out.eval()


def block_confidences(score: Tensor, eligible: Tensor, block_length: int) -> tuple[Tensor, Tensor]:
    """(conf ``[A, block_length]``, slot index ``[A, block_length]`` into the flattened positions).

    ``score`` ``[A, P]``: the positions' confidences (committed ones keep theirs, known prompt
    positions are +inf); ``eligible`` ``[A, P]``: the block's positions. Slots past a short block
    read as confidence 1 and index -1."""
    a, p = score.shape
    idx = torch.arange(p, device=score.device).expand(a, p)
    key = torch.where(eligible, idx, p + idx)  # block positions first, in order
    order = key.sort(1).indices[:, :block_length]
    valid = torch.arange(block_length, device=score.device)[None] < eligible.sum(1, keepdim=True)
    if order.shape[1] < block_length:  # a sequence shorter than the block
        order = torch.cat([order, order.new_zeros(a, block_length - order.shape[1])], 1)
    conf = score.gather(1, order).clamp(max=1.0).nan_to_num(1.0).float()
    return conf.masked_fill(~valid, 1.0), order.masked_fill(~valid, -1)


@POLICIES.register("learned_filter")
class LearnedFilter(UnmaskPolicy):
    """Commit where the filter is sure (``sigmoid > accept_thres``) plus the schedule's top-k."""

    def __init__(self, commit_filter: Any = None, accept_thres: float = 0.96, block_length: int = 32) -> None:
        self.accept_thres = finite(accept_thres, "accept_thres", low=0.0, high=1.0)
        if isinstance(commit_filter, (str, Path)):
            if not Path(commit_filter).is_file():
                raise ConfigError(f"commit_filter={str(commit_filter)!r} is not a file; pass the safetensors a "
                                  "pipeline folder ships (commit_filter.safetensors) or None for the identity rule.")
            commit_filter = CommitFilter.load(commit_filter)
        if commit_filter is not None and not isinstance(commit_filter, CommitFilter):
            raise ConfigError(f"commit_filter must be a CommitFilter, a path to its safetensors or None, got {type(commit_filter).__name__}.")
        if commit_filter is not None and commit_filter.block_length != block_length:
            raise ConfigError(
                f"the commit filter was trained for blocks of {commit_filter.block_length} positions, not block_length={block_length}; "
                "use that block length or train a filter for this one (learn2pd.train_filter)."
            )
        self.filter = commit_filter
        self.block_length = block_length
        if commit_filter is None:
            logger.info("learn2pd: no trained filter; committing where confidence > accept_thres (identity filter)")

    def select(self, score: Tensor, pool: Tensor, target: Tensor, state: MaskedDecodeState) -> Tensor:
        keep = lowest(score, pool, target)  # the LLaDA schedule's top-k is committed anyway
        if self.filter is None:
            sure = score > self.accept_thres
        else:
            elig = state.active(state.stage.eligible.to(score.device)).reshape(score.shape[0], -1)
            conf, slot = block_confidences(score, elig, self.block_length)
            f = self.filter.to(conf.device)
            prob = torch.sigmoid(f(conf.to(next(f.parameters()).dtype))).double()
            ok = (prob > self.accept_thres) & (slot >= 0)
            sure = torch.zeros_like(pool).scatter(1, slot.clamp(min=0), ok) & elig
        return keep & ~(sure & pool)


@HOOKS.register("eot_predict")
class EoTPredict(Hook):
    """End-of-Text Prediction: fill after a row's final committed EoT and truncate later forwards."""

    def __init__(self, eot_id: int | Sequence[int] | None = None) -> None:
        if eot_id is not None:
            ids = check_token_ids("eot_id", eot_id if isinstance(eot_id, (list, tuple)) else (eot_id,))
            if not ids:
                raise ConfigError(f"eot_id must be a token id >= 0 or a list of them, got {eot_id!r}.")
            eot_id = ids
        self.eot_id = eot_id

    def start(self, state: MaskedDecodeState) -> None:
        if state.continuous or state.generated.shape[1] != 1:
            raise ConfigError("hook 'eot_predict' works on single-stream token models only.")
        eot = self.eot_id if self.eot_id is not None else tuple(state.config.eos_ids)
        vocab = state.vocab_size
        if self.eot_id is not None and vocab is not None and max(eot) >= vocab:
            raise ConfigError(f"eot_id={self.eot_id!r} is outside this model's {vocab} tokens; pass its End-of-Text id.")
        if not eot:
            logger.info("learn2pd: no End-of-Text id (eot_id / DecodeConfig.eos_token_id); EoTP is off")
        state.policy_state["eot"] = eot
        length = state.generated.shape[-1]
        state.policy_state["cut"] = torch.full((state.batch_size,), length, dtype=torch.long, device=state.generated.device)
        state.extra["eot_truncated_rows"] = 0

    def after_step(self, state: MaskedDecodeState) -> None:
        if not state.policy_state["eot"]:
            return
        rows = state.rows
        tok = state.active(state.tokens)[:, 0]
        gen = state.active(state.generated)[:, 0]
        known = ~state.active(state.masked)[:, 0]
        is_eot = torch.zeros_like(gen)
        for t in state.policy_state["eot"]:
            is_eot |= tok == t
        seq = tok.shape[1]
        idx = torch.arange(seq, device=tok.device)
        committed = gen & known
        last_text = torch.where(committed & ~is_eot, idx, -1).amax(1)  # never cut before a committed token
        cand = committed & is_eot & (idx[None] > last_text[:, None])
        first = torch.where(cand, idx, seq).amin(1)
        has = first < seq
        after = (idx[None] > first[:, None]) & has[:, None]
        fill_tok = tok.gather(1, first.clamp(max=seq - 1)[:, None]).expand(-1, seq)
        state.fill(rows, after[:, None], fill_tok[:, None])
        cut = state.policy_state["cut"]
        before = cut.clone()
        cut[rows] = torch.where(has, first + 1, cut[rows])
        moved = cut != before
        # forwards keep every position up to the last row's cut (rows without an EoT keep all);
        # each row's positions after its own cut are masked out (truncate_rows); a cached forward
        # recomputes every position of a row whose cut moved (cut_moved: alone, it would refresh)
        longest, shortest, n_cut, n_moved = torch.stack(
            [cut.max(), cut.min(), (cut < seq).sum(), moved.sum()]
        ).tolist()  # one sync
        state.truncate_len = longest
        state.truncate_rows = cut if shortest < longest else None  # the forwards read it without a sync
        state.cut_moved = moved if n_moved else None
        state.cut_moved_all = n_moved == rows.numel()  # every row moved: shorten and refresh (cheaper)
        state.extra["eot_truncated_rows"] = n_cut


@register_sampler(
    "learn2pd",
    family="masked",
    guarantee="lossy",
    needs=("model",),
    paper="Bao et al. 2026 (Learn2PD: Learning to Parallel, ICLR)",
)
class Learn2PD(DLLMSampler):
    """LLaDA + a learned commit filter + End-of-Text Prediction (module docstring)."""

    defaults: ClassVar[dict[str, Any]] = {
        **DLLM_DEFAULTS,
        "policy": "learned_filter",
        "commit_filter": None,
        "accept_thres": 0.96,
        "hooks": ("eot_predict",),
        "eot_id": None,
    }


# --------------------------------------------------------------------------------------------- training


@torch.no_grad()
def egp_records(model: Any, prompts: Sequence[Sequence[int]], gen_length: int, block_length: int = 32,
                eot_id: int | None = None) -> tuple[Tensor, Tensor]:
    """Extremely-greedy-parallel oracle records on the model's own outputs: (conf ``[R, block]``,
    correct ``[R, block]``) over every step of every block of every prompt (batch 1 each)."""
    from ..base import get_sampler
    from .state import MaskedInputs

    mask_id = model.mask_id
    confs, labels = [], []
    llada = get_sampler("llada", block_length=block_length)
    for prompt in prompts:
        inputs = MaskedInputs.from_prompts([list(prompt)], gen_length, mask_id)
        ref = llada.generate({"model": model}, inputs, DecodeConfig(temperature=0.0, eos_token_id=eot_id)).tokens[0]
        x = inputs.tokens[0].clone().to(ref.device)
        p0 = len(prompt)
        for lo in range(p0, p0 + gen_length, block_length):
            hi = min(lo + block_length, p0 + gen_length)
            score = torch.ones(x.shape[0], dtype=torch.float64, device=x.device)
            while bool((x[lo:hi] == mask_id).any()):
                logits = model(x[None])[0].double()
                logits[:, mask_id] = float("-inf")
                p = logits.softmax(-1)
                conf, x0 = p.max(-1)
                masked = x == mask_id
                score = torch.where(masked, conf, score)
                vec = torch.ones(block_length, dtype=torch.float64)
                vec[: hi - lo] = score[lo:hi].cpu()
                lab = torch.zeros(block_length)
                lab[: hi - lo] = (x0[lo:hi] == ref[lo:hi]).float().cpu()
                confs.append(vec.float())
                labels.append(lab)
                hit = masked & (x0 == ref)
                hit[:lo] = False
                hit[hi:] = False
                if not bool(hit.any()):  # anti-stall: the most confident masked block position gets y's token
                    c = torch.where(masked, conf, -1.0)
                    c[:lo] = -1.0
                    c[hi:] = -1.0
                    hit[int(c.argmax())] = True
                x = torch.where(hit, ref, x)
    return torch.stack(confs), torch.stack(labels)


def train_filter(conf: Tensor, correct: Tensor, epochs: int = 2000, lr: float = 3e-3, seed: int = 0,
                 weight_decay: float = 0.01) -> tuple[CommitFilter, dict[str, float]]:
    """Fit a :class:`CommitFilter` to oracle records (full batch, BCE-with-logits, AdamW; 80/20 split)."""
    g = torch.Generator().manual_seed(seed)
    n = conf.shape[0]
    perm = torch.randperm(n, generator=g)
    cut = max(1, int(0.8 * n))
    tr, va = perm[:cut], perm[cut:]
    torch.manual_seed(seed)
    filt = CommitFilter(conf.shape[1])
    opt = torch.optim.AdamW(filt.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.BCEWithLogitsLoss()
    for _ in range(epochs):
        opt.zero_grad()
        loss = loss_fn(filt(conf[tr]), correct[tr])
        loss.backward()
        opt.step()
    with torch.no_grad():
        va = va if va.numel() else tr
        logits = filt(conf[va])
        pred = torch.sigmoid(logits) > 0.96
        prec = float((pred & (correct[va] > 0.5)).sum() / pred.sum().clamp(min=1))
        metrics = {"records": n, "train_loss": float(loss), "val_loss": float(loss_fn(logits, correct[va])),
                   "val_precision_at_0.96": prec, "val_recall_at_0.96": float((pred & (correct[va] > 0.5)).sum() / (correct[va] > 0.5).sum().clamp(min=1))}
    return filt.eval(), metrics
