"""Recipe for the shipped ``molecule-safe`` assets: a masked (MDLM) and an autoregressive SAFE model.

Everything comes from data available offline (:mod:`leapgen.data.molecules`):

1. a seeded subset of MOSES training SMILES, SAFE-encoded (BRICS), split train / held-out;
2. a word-level :class:`~leapgen.tokenizers.safe.SAFETokenizer` trained on the train split, and the
   token-length histogram of the train molecules (GenMol samples the de novo length from it);
3. the masked model, a bidirectional ``BertForMaskedLM``, trained with the **masked discrete
   diffusion (MDLM) objective** as in GenMol (Sahoo et al. 2024, log-linear noise): per sequence a
   time ``t ~ U(eps, 1)`` (antithetic / stratified over the batch, ``eps = 1e-3``), every molecule
   token (not BOS/EOS/PAD) is replaced by ``[MASK]`` with probability ``t``, and the loss is the
   continuous-time MDLM bound ``sum_masked CE(x_0) / t`` divided by the number of molecule tokens in
   the batch (the ``1/t`` weight is ``-alpha'_t / (1 - alpha_t)`` for ``alpha_t = 1 - t``);
4. the autoregressive SAFE-GPT-style baseline, ``LlamaForCausalLM`` on ``[BOS] safe [EOS]``
   (next-token cross-entropy, padding ignored);
5. evaluation of the saved fp16 weights (reloaded in fp32) on the held-out molecules: the MDLM
   bound in nats per molecule token (averaged over fixed seeded times and masks) and the
   masked-token cross-entropy at ``t = 0.15 / 0.5 / 0.9``; AR perplexity per token (molecule
   tokens + EOS) and nats per molecule token;
6. a pipeline folder: ``model/`` (masked), ``ar_model/``, ``tokenizer/``, ``model_index.json``,
   ``pipeline_config.json`` (length histogram, training-data description and SMILES hash),
   ``train_metrics.json``.

Both models use AdamW + warmup + cosine decay and bf16 autocast on CPUs with native bf16 (float32 elsewhere) (AMP on CUDA).
``leapgen train molecule-safe --out assets/molecule-safe`` runs it (about 45 minutes on the shared
two-core CPU with the defaults); ``--num-molecules 3000 --masked-steps 30 --ar-steps 30`` is a smoke test.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..data.molecules import length_histogram, load_safe_dataset
from ..tokenizers.safe import BOS_ID, EOS_ID, MASK_ID, PAD_ID, SAFETokenizer
from .common import adamw, autocast, environment, lr_at, num_params, pick_device, write_metrics

logger = logging.getLogger(__name__)

MAX_POSITIONS = 128
MASKED_ARCH = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768)
AR_ARCH = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512)
MDLM_EPS = 1e-3


# -------------------------------------------------------------------------------------------- models
def make_masked_model(vocab_size: int, seed: int, arch: dict | None = None):
    """A small bidirectional ``BertForMaskedLM`` over the SAFE vocabulary."""
    from transformers import BertConfig, BertForMaskedLM

    arch = dict(MASKED_ARCH if arch is None else arch)
    cfg = BertConfig(
        vocab_size=vocab_size,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=1,
        pad_token_id=PAD_ID,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return BertForMaskedLM(cfg)


def make_ar_model(vocab_size: int, seed: int, arch: dict | None = None):
    """A small ``LlamaForCausalLM`` over the SAFE vocabulary (BOS=1, EOS=2, PAD=0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = dict(AR_ARCH if arch is None else arch)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


# ---------------------------------------------------------------------------------------------- data
def pad_rows(rows: list[list[int]]) -> torch.Tensor:
    """``[BOS] ids [EOS]`` rows right-padded with PAD into one long tensor."""
    width = max(len(r) for r in rows) + 2
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r) + 2] = torch.tensor([BOS_ID, *r, EOS_ID])
    return out


def batches(data: list[list[int]], batch_size: int, steps: int, seed: int, bucket: int = 50):
    """``steps`` padded batches; rows of similar length are grouped (within ``bucket`` batches)."""
    rng = random.Random(seed)
    order: list[int] = []
    made = 0
    while made < steps:
        if len(order) < batch_size * bucket:
            perm = list(range(len(data)))
            rng.shuffle(perm)
            order.extend(perm)
        chunk, order = order[: batch_size * bucket], order[batch_size * bucket :]
        chunk.sort(key=lambda i: len(data[i]))
        group = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(group)
        for idx in group:
            if made == steps:
                return
            yield pad_rows([data[i] for i in idx])
            made += 1


def content_mask(ids: torch.Tensor) -> torch.Tensor:
    """True on molecule tokens (not PAD / BOS / EOS)."""
    return (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID)


def mdlm_times(batch: int, generator: torch.Generator, eps: float = MDLM_EPS) -> torch.Tensor:
    """Antithetic (stratified) times in ``[eps, 1]``: ``t_i = eps + (1 - eps) * ((u + i / B) mod 1)``."""
    u = torch.rand((), generator=generator)
    t = (u + torch.arange(batch, dtype=torch.float32) / batch) % 1.0
    return eps + (1 - eps) * t


def mdlm_corrupt(ids: torch.Tensor, t: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each molecule token with probability ``t`` (per row); returns (noisy ids, masked positions)."""
    draw = torch.rand(ids.shape, generator=generator)
    masked = (draw < t[:, None]) & content_mask(ids)
    return ids.masked_fill(masked, MASK_ID), masked


def mdlm_loss(model, ids: torch.Tensor, t: torch.Tensor, generator: torch.Generator, device, amp: bool = True):
    """MDLM bound: ``sum_masked CE / t`` over the batch's molecule tokens. Returns (loss, masked CE mean)."""
    noisy, masked = mdlm_corrupt(ids, t, generator)
    attn = (ids != PAD_ID).to(device)
    with autocast(device) if amp else nullcontext():
        logits = model(input_ids=noisy.to(device), attention_mask=attn).logits
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
    ce = ce.view(ids.shape) * masked.to(device)
    weighted = (ce / t.to(device)[:, None]).sum()
    n_tok = content_mask(ids).sum().clamp(min=1)
    n_mask = masked.sum().clamp(min=1)
    return weighted / n_tok.to(device), ce.sum() / n_mask.to(device)


def ar_loss(model, ids: torch.Tensor, device, amp: bool = True) -> torch.Tensor:
    """Next-token cross-entropy on ``[BOS] safe [EOS]``, padding ignored (right padding needs no mask)."""
    ids = ids.to(device)
    with autocast(device) if amp else nullcontext():
        logits = model(input_ids=ids).logits
    labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD_ID, -100)
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


# ------------------------------------------------------------------------------------------ training
def train_model(
    model,
    data: list[list[int]],
    kind: str,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup_frac: float,
    device: torch.device,
    seed: int,
    max_minutes: float | None = None,
) -> dict[str, Any]:
    """Train ``model`` (``kind`` = "masked" (MDLM) or "ar") for ``steps`` batches.

    ``max_minutes`` is a time budget for a shared machine: the cosine decay follows the elapsed
    fraction of it when that is ahead of the step fraction, and training stops when it is spent
    (recorded as ``stopped_early`` with the steps actually run).
    """
    from tqdm.auto import tqdm

    model.to(device).train()
    opt = adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    warmup = max(1, int(warmup_frac * steps))
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    masked_ce: list[float] = []
    tokens = 0
    t0 = time.perf_counter()
    stopped_early = False
    bar = tqdm(total=steps, desc=kind, mininterval=5.0, dynamic_ncols=True, file=sys.stderr)
    step = 0
    for step, ids in enumerate(batches(data, batch_size, steps, seed)):
        frac = (time.perf_counter() - t0) / (60 * max_minutes) if max_minutes else 0.0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup, time_frac=frac)
        if kind == "masked":
            t = mdlm_times(ids.shape[0], gen)
            loss, mce = mdlm_loss(model, ids, t, gen, device)
            masked_ce.append(float(mce.detach()))
        else:
            loss = ar_loss(model, ids, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        v = float(loss.detach())
        if not math.isfinite(v):
            raise RuntimeError(f"{kind}: loss became {v} at step {step}; lower the learning rate")
        losses.append(v)
        tokens += int(content_mask(ids).sum())
        bar.set_postfix(loss=f"{v:.3f}", refresh=False)
        bar.update(1)
        if (step + 1) % max(1, steps // 20) == 0 or step + 1 == steps:
            elapsed = time.perf_counter() - t0
            logger.info(
                "%s step %d/%d loss %.4f (mean of last 50: %.4f) gnorm %.2f lr %.2e  %.0f mol-tok/s  %.1f min",
                kind, step + 1, steps, v, sum(losses[-50:]) / len(losses[-50:]), float(gnorm),
                opt.param_groups[0]["lr"], tokens / elapsed, elapsed / 60,
            )
        if max_minutes is not None and time.perf_counter() - t0 > 60 * max_minutes:
            stopped_early = True
            logger.warning("%s: stopped at step %d of %d (max_minutes=%s)", kind, step + 1, steps, max_minutes)
            break
    bar.close()
    model.eval()
    wall = time.perf_counter() - t0
    tail = losses[-max(1, min(100, len(losses) // 10)) :]
    out = {
        "steps_planned": steps,
        "steps": len(losses),
        "stopped_early": stopped_early,
        "batch_size": batch_size,
        "molecule_tokens_seen": tokens,
        "peak_lr": lr,
        "warmup_steps": warmup,
        "weight_decay": weight_decay,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "loss_curve": [round(sum(losses[i : i + 50]) / len(losses[i : i + 50]), 4) for i in range(0, len(losses), max(50, len(losses) // 40))],
        "wall_s": wall,
        "molecule_tokens_per_s": tokens / wall,
    }
    if masked_ce:
        mtail = masked_ce[-len(tail) :]
        out["final_masked_ce"] = sum(mtail) / len(mtail)
    return out


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate_masked(model, data: list[list[int]], device, batch_size: int = 64, repeats: int = 4, seed: int = 1234) -> dict[str, Any]:
    """Held-out MDLM bound (nats / molecule token) and masked-token CE at fixed mask rates, fp32."""
    model.to(device, torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    bound = 0.0
    n_tok = 0
    fixed = {0.15: [0.0, 0], 0.5: [0.0, 0], 0.9: [0.0, 0]}
    for r in range(repeats):
        for i in range(0, len(data), batch_size):
            ids = pad_rows(data[i : i + batch_size])
            t = mdlm_times(ids.shape[0], gen)
            loss, _ = mdlm_loss(model, ids, t, gen, device, amp=False)
            n = int(content_mask(ids).sum())
            bound += float(loss) * n
            n_tok += n
            if r == 0:
                for rate, acc in fixed.items():
                    tt = torch.full((ids.shape[0],), rate)
                    noisy, masked = mdlm_corrupt(ids, tt, gen)
                    logits = model(input_ids=noisy.to(device), attention_mask=(ids != PAD_ID).to(device)).logits.float()
                    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.to(device).reshape(-1), reduction="none")
                    acc[0] += float((ce.view(ids.shape) * masked.to(device)).sum())
                    acc[1] += int(masked.sum())
    return {
        "heldout_molecules": len(data),
        "mdlm_bound_nats_per_token": bound / max(1, n_tok),
        "mdlm_bound_repeats": repeats,
        "masked_ce_at_rate": {str(k): v[0] / max(1, v[1]) for k, v in fixed.items()},
    }


@torch.no_grad()
def evaluate_ar(model, data: list[list[int]], device, batch_size: int = 64) -> dict[str, Any]:
    """Held-out AR perplexity per token (molecule tokens + EOS) and nats per molecule token, fp32."""
    model.to(device, torch.float32).eval()
    nll = 0.0
    count = 0
    n_mol_tok = 0
    for i in range(0, len(data), batch_size):
        ids = pad_rows(data[i : i + batch_size]).to(device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD_ID, -100)
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"))
        count += int((labels != -100).sum())
        n_mol_tok += int(content_mask(ids).sum())
    return {
        "heldout_molecules": len(data),
        "ppl_per_token": math.exp(nll / count),
        "nll_nats_per_token": nll / count,
        "nll_nats_per_molecule_token": nll / max(1, n_mol_tok),
        "nll_nats_per_molecule": nll / len(data),
    }


# ------------------------------------------------------------------------------------------- saving
def _save_model(model, path: Path) -> None:
    model.to("cpu", torch.float16).save_pretrained(path, safe_serialization=True)
    for f in path.iterdir():
        if f.is_file():
            f.chmod(0o644)


def write_pipeline_folder(out: Path, masked, ar, tokenizer: SAFETokenizer, config: dict[str, Any]) -> None:
    """The folder :class:`~leapgen.pipelines.molecule.MoleculePipeline` loads (fp16 weights)."""
    for name in ("model", "ar_model", "tokenizer"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    _save_model(masked, out / "model")
    _save_model(ar, out / "ar_model")
    tokenizer.save_pretrained(out / "tokenizer")
    from ..pipelines.base import model_index, write_model_index

    write_model_index(out, model_index("MoleculePipeline", {"ar_model": ar, "model": masked, "tokenizer": tokenizer}))
    (out / "pipeline_config.json").write_text(json.dumps(config, indent=1) + "\n")


def _reuse_ar(folder: Path, tok: SAFETokenizer):
    """The AR model of an earlier run in ``folder`` (fp32) and its training record; refuses a folder
    whose tokenizer differs from ``tok`` (its token ids would mean other tokens)."""
    from transformers import LlamaForCausalLM

    if not (folder / "ar_model").is_dir() or not (folder / "train_metrics.json").is_file():
        raise FileNotFoundError(f"ar_from={str(folder)!r} is not a molecule-safe folder (no ar_model/ or train_metrics.json); "
                                "pass a folder this recipe wrote, e.g. assets/molecule-safe.")
    if SAFETokenizer.from_pretrained(folder / "tokenizer").id_to_token != tok.id_to_token:
        raise ValueError(f"the tokenizer in {folder} differs from the one trained here; train with the same "
                         "--num-molecules / --heldout-frac / --seed as that run, or drop --ar-from.")
    ar = LlamaForCausalLM.from_pretrained(folder / "ar_model", dtype=torch.float32, local_files_only=True)
    previous = json.loads((folder / "train_metrics.json").read_text())
    stats = dict(previous["ar_train"])
    stats.setdefault("reused_from", str(folder))  # the folder that first trained it, kept across reuses
    logger.info("AR model reused from %s (%.2fM parameters, %d steps)", folder, num_params(ar) / 1e6, stats["steps"])
    return ar, stats


# ---------------------------------------------------------------------------------------------- main
def main(
    out_dir: str | os.PathLike = "assets/molecule-safe",
    seed: int = 0,
    num_molecules: int = 200_000,
    heldout_frac: float = 0.02,
    masked_steps: int = 6000,
    ar_steps: int = 4000,
    batch_size: int = 64,
    masked_lr: float = 1e-3,
    ar_lr: float = 1.5e-3,
    weight_decay: float = 0.01,
    warmup_frac: float = 0.03,
    masked_minutes: float | None = 23.0,
    ar_minutes: float | None = 16.0,
    eval_molecules: int = 2000,
    workers: int = 2,
    device: str | None = None,
    num_threads: int | None = None,
    max_size_mb: float = 30.0,
    use_cache: bool = True,
    ar_from: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Data -> tokenizer -> masked (MDLM) model -> AR model -> pipeline folder + train_metrics.json.

    ``ar_from`` (a folder this recipe wrote, e.g. ``assets/molecule-safe``) reuses its AR model instead
    of training one, so a longer masked run fits the budget; its tokenizer must equal the one trained
    here (same data and seed), and its training record is carried into ``train_metrics.json``.
    """
    import safe
    import transformers
    from transformers import BertForMaskedLM, LlamaForCausalLM

    t_start = time.perf_counter()
    out = Path(out_dir)
    dev = pick_device(device)
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    walls: dict[str, float] = {}
    logger.info("molecule-safe recipe: out=%s seed=%d device=%s threads=%d", out, seed, dev, torch.get_num_threads())

    # 1. data
    t = time.perf_counter()
    ds = load_safe_dataset(num_molecules, heldout_frac=heldout_frac, seed=seed, workers=workers, use_cache=use_cache)
    walls["data"] = time.perf_counter() - t

    # 2. tokenizer + ids + length histogram
    t = time.perf_counter()
    tok = SAFETokenizer.train(ds.train_safe)
    train_ids = [tok.encode(s) for s in ds.train_safe]
    held_ids = [tok.encode(s) for s in ds.heldout_safe]
    too_long = sum(len(r) + 2 > MAX_POSITIONS for r in train_ids)
    train_ids = [r for r in train_ids if len(r) + 2 <= MAX_POSITIONS]
    held_ids = [r for r in held_ids if len(r) + 2 <= MAX_POSITIONS][:eval_molecules]
    hist = length_histogram(train_ids)
    unk_held = sum(tok.unk_token_id in r for r in held_ids)
    walls["tokenizer"] = time.perf_counter() - t
    mean_len = sum(k * v for k, v in hist.items()) / sum(hist.values())
    logger.info(
        "tokenizer: vocab %d; %d train / %d eval molecules, mean %.1f tokens (max %d); %d dropped as too long; "
        "%d held-out with [UNK]",
        len(tok), len(train_ids), len(held_ids), mean_len, max(hist), too_long, unk_held,
    )

    # 3. masked model (MDLM)
    masked = make_masked_model(len(tok), seed)
    logger.info("masked model: %.2fM parameters", num_params(masked) / 1e6)
    m_stats = train_model(
        masked, train_ids, "masked", steps=masked_steps, batch_size=batch_size, lr=masked_lr,
        weight_decay=weight_decay, warmup_frac=warmup_frac, device=dev, seed=seed,
        max_minutes=masked_minutes,
    )
    walls["masked_train"] = m_stats["wall_s"]

    # 4. AR baseline (trained here, or reused from an earlier run of this recipe)
    if ar_from is not None:
        ar, a_stats = _reuse_ar(Path(ar_from), tok)
        walls["ar_train"] = 0.0
    else:
        ar = make_ar_model(len(tok), seed + 1)
        logger.info("AR model: %.2fM parameters", num_params(ar) / 1e6)
        a_stats = train_model(
            ar, train_ids, "ar", steps=ar_steps, batch_size=batch_size, lr=ar_lr,
            weight_decay=weight_decay, warmup_frac=warmup_frac, device=dev, seed=seed + 1,
            max_minutes=ar_minutes,
        )
        walls["ar_train"] = a_stats["wall_s"]
    n_masked, n_ar = num_params(masked), num_params(ar)

    # 5. save
    t = time.perf_counter()
    data_desc = {
        "source": "MOSES train.csv.gz (molsets 0.3.1 wheel)",
        "num_molecules": num_molecules,
        "heldout_frac": heldout_frac,
        "seed": seed,
        "safe_mol_version": safe.__version__,
        "rebuild": (
            f"leapgen.data.molecules.load_safe_dataset({num_molecules}, heldout_frac={heldout_frac}, "
            f"seed={seed}).train_smiles"
        ),
    }
    config = {
        "length_histogram": {str(k): v for k, v in hist.items()},
        "training_smiles_hash": ds.training_smiles_hash(),
        "num_training_smiles": len(ds.train_smiles),
        "training_data": data_desc,
        "max_positions": MAX_POSITIONS,
    }
    write_pipeline_folder(out, masked, ar, tok, config)
    walls["save"] = time.perf_counter() - t
    del masked, ar

    # 6. reload what was saved (fp32) and evaluate on held-out molecules
    t = time.perf_counter()
    masked = BertForMaskedLM.from_pretrained(out / "model", dtype=torch.float32, local_files_only=True)
    ar = LlamaForCausalLM.from_pretrained(out / "ar_model", dtype=torch.float32, local_files_only=True)
    tok2 = SAFETokenizer.from_pretrained(out / "tokenizer")
    if tok2.id_to_token != tok.id_to_token:
        raise RuntimeError("the saved SAFE tokenizer does not match the trained one")
    m_eval = evaluate_masked(masked, held_ids, dev)
    a_eval = evaluate_ar(ar, held_ids, dev)
    walls["eval"] = time.perf_counter() - t
    logger.info(
        "held-out: MDLM bound %.4f nats/token, masked CE@0.15/0.5/0.9 %s; AR ppl %.3f/token, %.4f nats/molecule token",
        m_eval["mdlm_bound_nats_per_token"], m_eval["masked_ce_at_rate"], a_eval["ppl_per_token"],
        a_eval["nll_nats_per_molecule_token"],
    )

    walls["total"] = time.perf_counter() - t_start
    metrics = {
        "recipe": "molecule-safe",
        "seed": seed,
        "data": {**ds.counts, "train_used": len(train_ids), "eval_used": len(held_ids), "dropped_too_long": too_long,
                 "heldout_with_unk": unk_held, "mean_tokens": mean_len, "max_tokens": max(hist)},
        "vocab_size": len(tok),
        "masked_params": n_masked,
        "ar_params": n_ar,
        "masked_arch": {"class": "BertForMaskedLM", **MASKED_ARCH, "max_position_embeddings": MAX_POSITIONS},
        "ar_arch": {"class": "LlamaForCausalLM", **AR_ARCH, "max_position_embeddings": MAX_POSITIONS},
        "objective": {
            "masked": "MDLM continuous-time bound, log-linear noise alpha_t = 1 - t, t ~ antithetic U(1e-3, 1) per "
            "sequence, molecule tokens masked w.p. t (BOS/EOS/PAD never), loss = sum_masked CE / t / #molecule tokens",
            "ar": "next-token CE on [BOS] safe [EOS]",
        },
        "masked_train": m_stats,
        "ar_train": a_stats,
        "eval": {"masked": m_eval, "ar": a_eval},
        "wall_s": walls,
        **environment(dev, transformers=transformers.__version__, safe_mol=safe.__version__),
    }
    write_metrics(out, metrics, max_size_mb)
    logger.info("molecule-safe recipe done in %.0fs", walls["total"])
    return metrics


if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main()
