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
``leapgen train molecule-safe --out assets/molecule-safe`` runs it (about 85 minutes on one core of
the two-core CPU with the defaults: 62 for the masked model, 16 for the AR model; ``--ar-from DIR``
reuses an earlier run's AR model, ``--masked-from DIR`` continues its masked model);
``--num-molecules 3000 --masked-steps 30 --ar-steps 30`` is a smoke test.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..data.molecules import length_histogram, load_safe_dataset
from ..tokenizers.safe import SAFETokenizer
from .common import environment, num_params, pick_device, write_metrics
from .molecule_training import (
    AR_ARCH,
    MASKED_ARCH,
    MAX_POSITIONS,
    evaluate_ar,
    evaluate_masked,
    make_ar_model,
    make_masked_model,
    train_model,
)

logger = logging.getLogger(__name__)


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


def _earlier_run(folder: Path, tok: SAFETokenizer, sub: str, option: str) -> dict[str, Any]:
    """The training record of an earlier run in ``folder``; refuses a folder without ``sub/`` or whose
    tokenizer differs from ``tok`` (its token ids would mean other tokens)."""
    if not (folder / sub).is_dir() or not (folder / "train_metrics.json").is_file():
        raise FileNotFoundError(f"{option}={str(folder)!r} is not a molecule-safe folder (no {sub}/ or train_metrics.json); "
                                "pass a folder this recipe wrote, e.g. assets/molecule-safe.")
    if SAFETokenizer.from_pretrained(folder / "tokenizer").id_to_token != tok.id_to_token:
        raise ValueError(f"the tokenizer in {folder} differs from the one trained here; train with the same "
                         f"--num-molecules / --heldout-frac / --seed as that run, or drop --{option.replace('_', '-')}.")
    return json.loads((folder / "train_metrics.json").read_text())


def _reuse_ar(folder: Path, tok: SAFETokenizer):
    """The AR model of an earlier run in ``folder`` (fp32) and its training record."""
    from transformers import LlamaForCausalLM

    previous = _earlier_run(folder, tok, "ar_model", "ar_from")
    ar = LlamaForCausalLM.from_pretrained(folder / "ar_model", dtype=torch.float32, local_files_only=True)
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
    masked_steps: int = 9000,
    ar_steps: int = 4000,
    batch_size: int = 64,
    masked_lr: float = 1e-3,
    ar_lr: float = 1.5e-3,
    weight_decay: float = 0.01,
    warmup_frac: float = 0.03,
    masked_minutes: float | None = 62.0,
    ar_minutes: float | None = 16.0,
    eval_molecules: int = 2000,
    workers: int = 2,
    device: str | None = None,
    num_threads: int | None = None,
    max_size_mb: float = 30.0,
    use_cache: bool = True,
    ar_from: str | os.PathLike | None = None,
    masked_from: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Data -> tokenizer -> masked (MDLM) model -> AR model -> pipeline folder + train_metrics.json.

    ``ar_from`` (a folder this recipe wrote, e.g. ``assets/molecule-safe``) reuses its AR model instead
    of training one, so a longer masked run fits the budget; its tokenizer must equal the one trained
    here (same data and seed), and its training record is carried into ``train_metrics.json``.
    ``masked_from`` (such a folder too) continues training its masked model instead of starting one:
    its earlier runs are listed in ``train_metrics.json`` (``masked_history``); use a lower
    ``masked_lr`` for a continuation.
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

    # 3. masked model (MDLM): new, or an earlier run's continued (masked_from)
    history: list[dict[str, Any]] = []
    if masked_from is not None:
        previous = _earlier_run(Path(masked_from), tok, "model", "masked_from")
        masked = BertForMaskedLM.from_pretrained(Path(masked_from) / "model", dtype=torch.float32, local_files_only=True)
        history = [*previous.get("masked_history", []), previous["masked_train"]]
        logger.info("masked model continued from %s (%d earlier run(s), %d steps)", masked_from, len(history),
                    sum(h["steps"] for h in history))
    else:
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
        "masked_history": history,
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
