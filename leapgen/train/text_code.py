"""Recipe for the shipped ``text-code`` assets: a tiny Llama target and a distilled draft on Python code.

Everything comes from data available offline (the Python standard library's sources, see
:mod:`leapgen.data.code`):

1. a byte-level BPE tokenizer (vocab 4096, ``<|endoftext|>`` = id 0 as bos/eos/pad) that round-trips
   code exactly;
2. the corpus, tokenized with ``<|endoftext|>`` before each document, packed into 512-token sequences;
3. the target, ``LlamaForCausalLM`` (~17.3M parameters), trained with AdamW + warmup + cosine decay;
4. the draft (~1.4M parameters), distilled from the target: ``0.5 * CE(data) + 0.5 * KL(target || draft)``;
5. evaluation of held-out perplexity and draft/target greedy agreement, on the saved fp16 weights;
6. a diffusers-style pipeline folder: ``model/``, ``draft/``, ``tokenizer/``, ``model_index.json``,
   ``train_metrics.json``.

Run it with ``python -m leapgen.train.text_code --out-dir assets/text-code`` (about 40 minutes on two
CPU cores with the default budgets) or quickly with ``--target-tokens 20000 --draft-tokens 20000``.

This module holds the recipe itself (:func:`main`: the steps above in order, the saved folder, the
metrics; :func:`cli`) and the two architectures. The tokenizer and the packed corpus are
:mod:`leapgen.train.text_code_tokenizer`'s, model building, training, distillation and evaluation
:mod:`leapgen.train.text_code_training`'s; both are re-exported here.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from leapgen.data.code import iter_texts, stdlib_files
from leapgen.train.common import environment, num_params, pick_device, write_metrics
from leapgen.train.text_code_tokenizer import (
    EOT,
    MODEL_MAX_LENGTH,
    SEQ_LEN,
    VOCAB_SIZE,
    check_roundtrip,
    encode_corpus,
    pack,
    train_tokenizer,
)
from leapgen.train.text_code_training import evaluate, make_config, make_model, train_model

logger = logging.getLogger(__name__)

TARGET_ARCH = dict(
    hidden_size=384, num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=6, intermediate_size=1024
)
DRAFT_ARCH = dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=344
)


# ------------------------------------------------------------------------------------------- saving
def _save_model(model, path: Path) -> None:
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.to("cpu", torch.float16).save_pretrained(path, **kwargs)
    for f in path.iterdir():  # transformers writes weights 0600; shipped files should be world-readable
        if f.is_file():
            f.chmod(0o644)


# ---------------------------------------------------------------------------------------------- main
def main(
    out_dir: str | os.PathLike = "assets/text-code",
    seed: int = 0,
    target_tokens: int = 5_500_000,
    draft_tokens: int = 3_000_000,
    device: str | torch.device | None = None,
    batch_size: int = 16,
    target_lr: float = 1.5e-3,
    draft_lr: float = 2e-3,
    weight_decay: float = 0.1,
    warmup_frac: float = 0.05,
    eval_tokens: int = 200_000,
    num_threads: int | None = None,
    max_size_mb: float = 40.0,
) -> dict[str, Any]:
    """Train the tokenizer, target and draft; evaluate; save the pipeline folder; return the metrics."""
    import diffusers
    import tokenizers
    import transformers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    t_start = time.perf_counter()
    out = Path(out_dir)
    dev = pick_device(device)
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    logger.info(
        "text-code recipe: out_dir=%s seed=%d device=%s threads=%d target_tokens=%d draft_tokens=%d",
        out,
        seed,
        dev,
        torch.get_num_threads(),
        target_tokens,
        draft_tokens,
    )
    walls: dict[str, float] = {}

    # 1. tokenizer
    t = time.perf_counter()
    train_files = stdlib_files("train")
    heldout_files = stdlib_files("heldout")
    train_texts = list(iter_texts(train_files))
    heldout_texts = list(iter_texts(heldout_files))
    tokenizer = train_tokenizer(train_texts)
    check_roundtrip(tokenizer, heldout_texts)
    walls["tokenizer"] = time.perf_counter() - t
    logger.info(
        "tokenizer: vocab %d from %d train files (%.1f MB); round-trips %d held-out files (%.1fs)",
        len(tokenizer),
        len(train_files),
        sum(map(len, train_texts)) / 1e6,
        len(heldout_files),
        walls["tokenizer"],
    )

    # 2. data
    t = time.perf_counter()
    train_stream = encode_corpus(tokenizer, train_texts)
    heldout_stream = encode_corpus(tokenizer, heldout_texts)
    train_data = pack(train_stream)
    eval_data = pack(heldout_stream)[: max(1, eval_tokens // SEQ_LEN)]
    walls["tokenize"] = time.perf_counter() - t
    logger.info(
        "corpus: %d train tokens -> %d x %d sequences; %d held-out tokens (%d used for eval)",
        train_stream.numel(),
        train_data.shape[0],
        SEQ_LEN,
        heldout_stream.numel(),
        eval_data.numel(),
    )

    # 3. target
    target = make_model(TARGET_ARCH, seed)
    logger.info("target: %.2fM parameters", num_params(target) / 1e6)
    target_stats = train_model(
        target,
        train_data,
        tokens=target_tokens,
        batch_size=batch_size,
        lr=target_lr,
        weight_decay=weight_decay,
        warmup_frac=warmup_frac,
        device=dev,
        seed=seed,
        desc="target",
    )
    walls["target_train"] = target_stats["wall_s"]

    # 4. draft, distilled from the target
    draft = make_model(DRAFT_ARCH, seed + 1)
    logger.info("draft: %.2fM parameters", num_params(draft) / 1e6)
    draft_stats = train_model(
        draft,
        train_data,
        tokens=draft_tokens,
        batch_size=batch_size,
        lr=draft_lr,
        weight_decay=weight_decay,
        warmup_frac=warmup_frac,
        device=dev,
        seed=seed + 1,
        desc="draft",
        teacher=target,
        kd_weight=0.5,
        kd_temperature=1.0,
    )
    walls["draft_train"] = draft_stats["wall_s"]
    n_target, n_draft = num_params(target), num_params(draft)

    # 5. save (fp16 weights, tokenizer, model_index.json)
    t = time.perf_counter()
    if out.exists():
        for name in ("model", "draft", "tokenizer"):
            if (out / name).exists():
                shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    _save_model(target, out / "model")
    _save_model(draft, out / "draft")
    tokenizer.save_pretrained(out / "tokenizer")
    from ..pipelines.base import model_index, write_model_index

    write_model_index(out, model_index("TextPipeline", {"model": target, "draft": draft, "tokenizer": tokenizer}))
    walls["save"] = time.perf_counter() - t
    del target, draft

    # 6. reload what was saved (offline, fp32) and evaluate it
    t = time.perf_counter()
    target = LlamaForCausalLM.from_pretrained(out / "model", dtype=torch.float32, local_files_only=True)
    draft = LlamaForCausalLM.from_pretrained(out / "draft", dtype=torch.float32, local_files_only=True)
    tok2 = PreTrainedTokenizerFast.from_pretrained(out / "tokenizer", local_files_only=True)
    check_roundtrip(tok2, heldout_texts[:5])
    if tok2.eos_token_id != 0 or tok2.bos_token_id != 0 or tok2.pad_token_id != 0:
        raise RuntimeError("saved tokenizer lost its bos/eos/pad = <|endoftext|> (id 0)")
    eval_stats = evaluate(target, draft, eval_data, dev)
    walls["eval"] = time.perf_counter() - t
    logger.info(
        "held-out ppl: target %.3f, draft %.3f; draft/target greedy agreement %.3f (%d tokens)",
        eval_stats["target_ppl"],
        eval_stats["draft_ppl"],
        eval_stats["draft_target_greedy_agreement"],
        eval_stats["heldout_tokens"],
    )

    walls["total"] = time.perf_counter() - t_start
    metrics = {
        "recipe": "text-code",
        "seed": seed,
        "target_tokens_budget": target_tokens,
        "draft_tokens_budget": draft_tokens,
        "target_params": n_target,
        "draft_params": n_draft,
        "target_arch": TARGET_ARCH,
        "draft_arch": DRAFT_ARCH,
        "vocab_size": len(tokenizer),
        "corpus": {
            "source": "python stdlib sources",
            "train_files": len(train_files),
            "heldout_files": len(heldout_files),
            "train_tokens": int(train_stream.numel()),
            "heldout_tokens": int(heldout_stream.numel()),
        },
        "target_train": target_stats,
        "draft_train": {**draft_stats, "kd_weight": 0.5, "kd_temperature": 1.0},
        "final_train_loss": {"target": target_stats["final_loss"], "draft": draft_stats["final_loss"]},
        "eval": eval_stats,
        "wall_s": walls,
        **environment(dev, transformers=transformers.__version__, tokenizers=tokenizers.__version__,
                      diffusers=diffusers.__version__),
    }
    write_metrics(out, metrics, max_size_mb)
    logger.info("text-code recipe done in %.0fs", walls["total"])
    return metrics


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m leapgen.train.text_code", description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", default="assets/text-code")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-tokens", type=int, default=5_500_000)
    p.add_argument("--draft-tokens", type=int, default=3_000_000)
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-tokens", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's default)")
    args = p.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return main(
        out_dir=args.out_dir,
        seed=args.seed,
        target_tokens=args.target_tokens,
        draft_tokens=args.draft_tokens,
        device=args.device,
        batch_size=args.batch_size,
        eval_tokens=args.eval_tokens,
        num_threads=args.threads,
    )


__all__ = [
    "DRAFT_ARCH",
    "EOT",
    "MODEL_MAX_LENGTH",
    "SEQ_LEN",
    "TARGET_ARCH",
    "VOCAB_SIZE",
    "check_roundtrip",
    "cli",
    "encode_corpus",
    "evaluate",
    "main",
    "make_config",
    "make_model",
    "pack",
    "train_model",
    "train_tokenizer",
]

if __name__ == "__main__":
    cli()
