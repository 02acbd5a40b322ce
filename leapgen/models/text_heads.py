"""Small trained parts on a text target's own hidden states, stored beside the pipeline.

``leapgen train text-code-heads`` trains them for the shipped ``text-code`` target and writes
``heads/`` (``config.json`` + ``model.safetensors``) into the pipeline folder:

* :class:`ChimeraHeads` (Chimera, Zeng et al. 2024, arXiv 2402.15758): a trigram encoder of the
  last two tokens' embeddings joined to the target's full-context hidden state, and ``k`` residual
  heads that predict the next ``k`` tokens through the target's own final norm and lm head;
* :class:`JudgeHead` (Judge decoding, Bachmann et al. 2025, arXiv 2501.19309): a linear head on
  ``[target hidden before the draft token, target embedding of the draft token]`` that scores
  whether the draft token is good (trained on tokens the draft predicts, labelled by the corpus);
* :class:`Routers` (FiRST, Jain et al. 2024, arXiv 2410.12513): one linear router per layer on the
  mean hidden state entering it over the prompt; ``sigmoid > threshold`` skips the layer;
* :class:`~leapgen.models.hidden_transfer.HiddenTransfer` (Hidden Transfer, Wu et al. 2024, arXiv
  2404.12022): ``k`` linear maps at an intermediate layer that make pseudo hidden states of future
  tokens inside the target's own forward (:meth:`HeadedLM.request_transfer`).

:class:`HeadedLM` is the target seen through :class:`~leapgen.models.text_variants.VariantLM`
(hidden states captured) carrying its :class:`TextHeads`; the samplers that need heads run on
it (model contract ``text-heads``). :func:`load_heads` finds and checks them;
a missing folder or part raises :class:`~leapgen.errors.AssetNotFoundError` naming the recipe.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from torch import Tensor, nn

from ..errors import AssetNotFoundError, ConfigError, ModelMismatchError
from .hidden_transfer import HiddenTransfer, transfer_forward
from .lean.lm import LeanCausalLM
from .per_thread import PerThread
from .text_variants import Gear, VariantLM

RECIPE = "leapgen train text-code-heads"
PARTS = ("chimera", "judge", "routers", "transfer")


def fingerprint(net: Any) -> dict[str, Any]:
    """What identifies a target: sizes and a checksum of its lm head (heads trained for another
    target are refused)."""
    c = net.c
    w = net.lm_head.detach().float()
    return {"vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "n_layers": c.n_layers,
            "head_checksum": round(float(w[:, :64].abs().sum()), 2)}


class ChimeraHeads(nn.Module):
    """``k`` heads over ``[h_t, e(x_t), e(x_{t+1})]`` (full-context state + trigram encoder)."""

    def __init__(self, dim: int, k: int = 4) -> None:
        super().__init__()
        self.k = k
        self.trigram = nn.Linear(2 * dim, dim)
        self.mix = nn.Linear(2 * dim, dim)
        self.heads = nn.ModuleList([nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim)) for _ in range(k)])

    def forward(self, h: Tensor, e_prev: Tensor, e_last: Tensor) -> Tensor:
        """Hidden states ``[..., k, D]`` for the next ``k`` tokens after ``x_{t+1}``; the caller maps
        them through the target's final norm and lm head."""
        tri = F.silu(self.trigram(torch.cat([e_prev, e_last], -1)))
        z = h + self.mix(torch.cat([h, tri], -1))
        outs, cur = [], z
        for head in self.heads:
            cur = cur + head(cur)  # residual decoding heads: head i refines head i-1's state
            outs.append(cur)
        return torch.stack(outs, -2)


class JudgeHead(nn.Module):
    """``logit = w . [h_prev, e(draft)] + b``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(2 * dim, 1)

    def forward(self, h_prev: Tensor, e_tok: Tensor) -> Tensor:
        return self.lin(torch.cat([h_prev, e_tok], -1)).squeeze(-1)


class Routers(nn.Module):
    """One linear router per layer: ``skip prob = sigmoid(w_l . mean(h) + b_l)``."""

    def __init__(self, dim: int, n_layers: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n_layers, dim))
        self.b = nn.Parameter(torch.full((n_layers,), -4.0))

    def prob(self, layer: int, h: Tensor, valid: Tensor | None = None) -> Tensor:
        """Skip probability ``[B]`` of ``layer`` from the hidden states ``h [B, n, D]`` entering it;
        ``valid [B, n]`` (bool) marks each row's real positions (the mean leaves its padding out, so a
        row decides as it would alone)."""
        if valid is None:
            m = h.float().mean(1)
        else:
            w = valid.to(h.device, torch.float32)[..., None]
            m = (h.float() * w).sum(1) / w.sum(1).clamp_min(1.0)
        m = m * torch.rsqrt(m.pow(2).mean(-1, keepdim=True) + 1e-6)  # scale-free feature
        return torch.sigmoid(m @ self.w[layer].float() + self.b[layer].float())


class TextHeads(nn.Module):
    """The trained parts of one target (any subset of :data:`PARTS`) and the target's fingerprint."""

    def __init__(self, dim: int, n_layers: int, k: int = 4, parts: tuple[str, ...] = PARTS,
                 target: dict[str, Any] | None = None, transfer_layer: int | None = None) -> None:
        super().__init__()
        self.dim, self.n_layers, self.k, self.parts = dim, n_layers, k, tuple(parts)
        self.target = dict(target or {})
        self.transfer_layer = n_layers // 2 if transfer_layer is None else int(transfer_layer)
        if "transfer" in parts and not 0 < self.transfer_layer < n_layers:
            raise ConfigError(f"transfer_layer must be in [1, {n_layers - 1}] (a layer inside the target), got {self.transfer_layer}")
        self.chimera = ChimeraHeads(dim, k) if "chimera" in parts else None
        self.judge = JudgeHead(dim) if "judge" in parts else None
        self.routers = Routers(dim, n_layers) if "routers" in parts else None
        self.transfer = HiddenTransfer(dim, k, self.transfer_layer) if "transfer" in parts else None
        #: the corpus bigram table (``ngram.safetensors`` beside the heads), for ``superposed``
        self.ngram: NGram | None = None

    def config(self) -> dict[str, Any]:
        return {"dim": self.dim, "n_layers": self.n_layers, "k": self.k, "parts": list(self.parts), "target": self.target,
                "transfer_layer": self.transfer_layer}

    def save(self, folder: str | Path, dtype: torch.dtype = torch.float16) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config(), indent=2) + "\n")
        save_file({k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))

    @classmethod
    def load(cls, folder: str | Path) -> TextHeads:
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
            raise AssetNotFoundError(
                f"no trained heads in {folder} (config.json + model.safetensors); train them with `{RECIPE}` "
                f"(it writes {folder})."
            )
        with _damaged(folder / "config.json"):
            cfg = json.loads((folder / "config.json").read_text())
            heads = cls(cfg["dim"], cfg["n_layers"], cfg["k"], tuple(cfg["parts"]), cfg.get("target"), cfg.get("transfer_layer"))
        with _damaged(folder / "model.safetensors"):
            heads.load_state_dict({k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()})
        if (folder / "ngram.safetensors").is_file():
            heads.ngram = NGram.load(folder / "ngram.safetensors")
        return heads.eval()

    def require(self, part: str, sampler: str) -> Any:
        mod = getattr(self, part, None) if part in PARTS + ("ngram",) else None
        if mod is None:
            raise AssetNotFoundError(
                f"sampler {sampler!r} needs the trained part {part!r}, which these heads do not hold "
                f"(they hold {list(self.parts) + (['ngram'] if self.ngram is not None else [])}); train it with "
                f"`{RECIPE}`."
            )
        return mod

    def check_target(self, net: Any) -> None:
        """Refuse heads trained for another target (sizes or lm-head checksum differ)."""
        mine = fingerprint(net)
        theirs = self.target
        bad = [k for k in ("vocab_size", "hidden_size", "n_layers") if theirs.get(k) != mine[k]]
        if not bad and theirs.get("head_checksum") is not None:
            if abs(float(theirs["head_checksum"]) - mine["head_checksum"]) > 1e-3 * max(1.0, abs(mine["head_checksum"])):
                bad.append("head_checksum")
        if bad:
            raise ModelMismatchError(
                f"these heads were trained for another target ({', '.join(f'{k}={theirs.get(k)}' for k in bad)}; "
                f"this target has {', '.join(f'{k}={mine[k]}' for k in bad)}); retrain them for it with `{RECIPE}`."
            )


class NGram:
    """A bigram table of the training corpus for Superposed decoding's smoothing:
    ``P(b | a) = (c(a, b) + beta * P(b)) / (c(a) + beta)`` (pairs seen once are dropped to keep
    the file small; they fall back to the unigram term)."""

    def __init__(self, keys: Tensor, counts: Tensor, unigram: Tensor, beta: float = 1.0) -> None:
        self.keys, self.counts = keys.long(), counts.float()
        self.unigram = unigram.float()
        self.total = self.unigram.sum().clamp_min(1.0)
        self.vocab = int(unigram.numel())
        self.beta = beta

    @classmethod
    def from_stream(cls, stream: Tensor, vocab: int, min_count: int = 2) -> NGram:
        pairs = stream[:-1].long() * vocab + stream[1:].long()
        keys, counts = torch.unique(pairs, return_counts=True)
        keep = counts >= min_count
        return cls(keys[keep], counts[keep], torch.bincount(stream.long(), minlength=vocab))

    def prob(self, prev: Tensor, nxt: Tensor) -> Tensor:
        """``P(nxt | prev)`` for same-shaped id tensors."""
        dev = prev.device
        q = prev.long().cpu() * self.vocab + nxt.long().cpu()
        i = torch.searchsorted(self.keys, q).clamp_max(max(0, self.keys.numel() - 1))
        c = torch.where(self.keys[i] == q, self.counts[i], torch.zeros_like(self.counts[i])) if self.keys.numel() else torch.zeros(q.shape)
        p_uni = self.unigram[nxt.long().cpu()] / self.total
        c_prev = self.unigram[prev.long().cpu()]
        return ((c + self.beta * p_uni) / (c_prev + self.beta)).to(dev)

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        save_file({"keys": self.keys.contiguous(), "counts": self.counts.int().contiguous(),
                   "unigram": self.unigram.int().contiguous()}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> NGram:
        from safetensors.torch import load_file

        with _damaged(Path(path)):
            t = load_file(str(path))
            return cls(t["keys"], t["counts"], t["unigram"])


@contextlib.contextmanager
def _damaged(path: Path) -> Iterator[None]:
    """A file of a heads folder that cannot be read or does not fit (bad JSON, a missing key, a
    truncated safetensors file, other shapes) is a ConfigError naming it, not a raw parser error."""
    try:
        yield
    except ConfigError:
        raise
    except (ValueError, KeyError, TypeError, OSError, RuntimeError, SafetensorError) as err:
        raise ConfigError(
            f"{path} cannot be read ({type(err).__name__}: {str(err)[:300]}); the trained heads are damaged or "
            f"incomplete: train them again with `{RECIPE}` (it writes {path.parent}) or remove that folder."
        ) from err


def heads_folder(lm: Any) -> Path | None:
    """``<pipeline folder>/heads`` for a target loaded from a pipeline folder's ``model/``."""
    src = getattr(lm, "source", None)
    path = getattr(src, "name_or_path", None) or getattr(getattr(src, "config", None), "_name_or_path", None)
    if not path:
        return None
    return Path(path).parent / "heads"


def load_heads(lm: Any, folder: str | Path | None = None) -> TextHeads:
    """The heads of target ``lm`` (from ``folder``, default the pipeline's ``heads/``), checked."""
    folder = Path(folder) if folder is not None else heads_folder(lm)
    if folder is None:
        raise AssetNotFoundError(
            f"cannot locate trained heads for this target (it was not loaded from a pipeline folder); "
            f"pass HeadedLM(lm, heads=TextHeads.load(folder)) or train them with `{RECIPE}`."
        )
    heads = TextHeads.load(folder)
    net = lm.net if hasattr(lm, "net") else lm
    heads.check_target(net)
    if (folder / "ngram.safetensors").is_file():
        heads.ngram = NGram.load(folder / "ngram.safetensors")
    return heads.to(device=lm.device if hasattr(lm, "device") else None)


class HeadedLM(VariantLM):
    """The target with its trained heads (hidden states captured every forward). ``heads``: a
    :class:`TextHeads`, or None to load them from the pipeline folder (:func:`load_heads`)."""

    #: hidden transfer's request and result, and judge decoding's draft offsets: per thread, like
    #: :class:`VariantLM`'s ``last_hidden``
    transfer_cols = PerThread(None)
    transfer_states = PerThread(None)
    transfer_logits = PerThread(None)
    judge_offsets = PerThread(None)

    def __init__(self, base: LeanCausalLM, heads: TextHeads | None = None, *, gear: Gear | None = None,
                 router: Any = None) -> None:
        super().__init__(base, capture=True, gear=gear, router=router)
        if heads is None:
            heads = load_heads(base)
        else:
            heads.check_target(base.net)
        self.heads = heads.to(device=base.device, dtype=base.dtype).eval()
        #: hidden transfer: pseudo-state positions for the next forward, and that forward's logits
        self.transfer_cols: Tensor | None = None
        self.transfer_states: int | None = None
        self.transfer_logits: Tensor | None = None

    def describe(self) -> str:
        return f"{self.base.describe()} + heads {list(self.heads.parts)}"

    def head_logits(self, z: Tensor) -> Tensor:
        """Map head states ``[..., D]`` through the target's final norm and lm head."""
        return self.net._rms(z, self.net.norm) @ self.net.lm_head

    # ------------------------------------------------------------------------- hidden transfer
    def request_transfer(self, cols: Tensor, n_states: int | None = None) -> None:
        """Make the next forward (only) also produce pseudo-state logits for the positions
        ``cols [B, w]`` of its new tokens, ``n_states`` per column (default: all ``k``)
        (:func:`~leapgen.models.hidden_transfer.transfer_forward`); they land in
        ``transfer_logits [B, w, n_states, V]``."""
        self.transfer_cols, self.transfer_states = cols, n_states

    @torch.inference_mode()
    def _forward(self, tokens: Tensor, cache: Any, position_ids: Tensor, mask: Tensor | None, cond: Any) -> Tensor:
        cols, self.transfer_cols = self.transfer_cols, None
        if cols is None:
            return super()._forward(tokens, cache, position_ids, mask, cond)
        if self.router is not None or self.next_embeds is not None:
            raise ConfigError("hidden transfer does not combine with FiRST routing or input embeddings in one forward")
        transfer = self.heads.require("transfer", "hidden_transfer")
        dev = self.device
        n_states = transfer.k if self.transfer_states is None else self.transfer_states
        cache.reserve(tokens.shape[1] + cols.shape[1] * n_states)  # pseudo slots sit past the new ones
        logits, h, self.transfer_logits = transfer_forward(
            self.net, tokens.to(dev), position_ids.to(dev), mask, cache.backend, cache.n_slots, transfer, cols.to(dev),
            n_states)
        self._after_forward(cache, h, self.net.c.n_layers)
        return logits


__all__ = ["ChimeraHeads", "HeadedLM", "HiddenTransfer", "JudgeHead", "NGram", "PARTS", "RECIPE", "Routers", "TextHeads", "fingerprint",
           "heads_folder", "load_heads"]
