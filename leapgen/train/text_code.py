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
"""

from __future__ import annotations

import argparse
import inspect
import logging
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.code import iter_texts, stdlib_files
from leapgen.train.common import (
    adamw,
    autocast,
    environment,
    lr_at,
    num_params,
    optimizer_step,
    pick_device,
    write_metrics,
)

logger = logging.getLogger(__name__)

EOT = "<|endoftext|>"
VOCAB_SIZE = 4096
SEQ_LEN = 512
MODEL_MAX_LENGTH = 1024

TARGET_ARCH = dict(
    hidden_size=384, num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=6, intermediate_size=1024
)
DRAFT_ARCH = dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=344
)


# ----------------------------------------------------------------------------------------- tokenizer
def train_tokenizer(texts, vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE trained on ``texts``, wrapped as a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.token_to_id(EOT) != 0:
        raise RuntimeError(f"{EOT} must be token id 0, got {tok.token_to_id(EOT)}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOT,
        eos_token=EOT,
        pad_token=EOT,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def check_roundtrip(tokenizer, texts) -> None:
    """Raise if decoding the encoding of any text does not give the text back exactly."""
    for text in texts:
        ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            k = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b), min(len(back), len(text)))
            raise RuntimeError(
                f"tokenizer does not round-trip: first difference at char {k}: "
                f"{text[max(0, k - 20) : k + 20]!r} -> {back[max(0, k - 20) : k + 20]!r}"
            )


def encode_corpus(tokenizer, texts: list[str]) -> torch.Tensor:
    """All documents as one id stream, each document preceded by ``<|endoftext|>``."""
    eot = tokenizer.convert_tokens_to_ids(EOT)
    encs = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    stream: list[int] = []
    for enc in encs:
        stream.append(eot)
        stream.extend(enc.ids)
    return torch.tensor(stream, dtype=torch.long)


def pack(stream: torch.Tensor, seq_len: int = SEQ_LEN) -> torch.Tensor:
    """Cut an id stream into ``(n, seq_len)`` rows, dropping the incomplete tail."""
    n = stream.numel() // seq_len
    if n == 0:
        raise RuntimeError(f"corpus has {stream.numel()} tokens, fewer than one {seq_len}-token sequence")
    return stream[: n * seq_len].view(n, seq_len)


# -------------------------------------------------------------------------------------------- models
def make_config(arch: dict, eot_id: int = 0):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MODEL_MAX_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
        attn_implementation="sdpa",
        **arch,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def make_model(arch: dict, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(make_config(arch))
    return model


# ------------------------------------------------------------------------------------------ training
def _batches(data: torch.Tensor, batch_size: int, steps: int, seed: int):
    """``steps`` batches of rows of ``data``, in a seeded order that reshuffles every epoch."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(data.shape[0], generator=gen)
    pos = 0
    for _ in range(steps):
        idx = []
        while len(idx) < batch_size:
            if pos == perm.numel():
                perm = torch.randperm(data.shape[0], generator=gen)
                pos = 0
            take = min(batch_size - len(idx), perm.numel() - pos)
            idx.extend(perm[pos : pos + take].tolist())
            pos += take
        yield data[idx]


def _ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train_model(
    model,
    data: torch.Tensor,
    *,
    tokens: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup_frac: float,
    device: torch.device,
    seed: int,
    desc: str,
    teacher=None,
    kd_weight: float = 0.5,
    kd_temperature: float = 1.0,
) -> dict[str, Any]:
    """Train ``model`` on ``tokens`` tokens of ``data``; with ``teacher``, distil from it as well."""
    from tqdm.auto import tqdm

    tokens_per_step = batch_size * data.shape[1]
    steps = max(1, math.ceil(tokens / tokens_per_step))
    warmup = max(1, int(warmup_frac * steps))
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    opt = adamw(model, lr, weight_decay)
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, mininterval=2.0, dynamic_ncols=True, file=sys.stderr)
    for step, batch in enumerate(_batches(data, batch_size, steps, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        ids = batch.to(device)
        with autocast(device):
            logits = model(input_ids=ids).logits
        ce = _ce(logits, ids)
        if teacher is not None:
            with torch.no_grad(), autocast(device):
                t_logits = teacher(input_ids=ids).logits
            t = kd_temperature
            s_logp = F.log_softmax(logits[:, :-1].float() / t, dim=-1).reshape(-1, logits.shape[-1])
            t_logp = F.log_softmax(t_logits[:, :-1].float() / t, dim=-1).reshape(-1, logits.shape[-1])
            kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean") * (t * t)
            loss = (1 - kd_weight) * ce + kd_weight * kl
        else:
            kl = None
            loss = ce
        loss_v, gnorm = optimizer_step(opt, model, loss, desc, step)
        losses.append(loss_v)
        elapsed = time.perf_counter() - t0
        post = {"loss": f"{loss_v:.3f}", "tok/s": f"{(step + 1) * tokens_per_step / elapsed:,.0f}"}
        if kl is not None:
            post.update(ce=f"{float(ce.detach()):.3f}", kl=f"{float(kl.detach()):.3f}")
        bar.set_postfix(post, refresh=False)
        bar.update(1)
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            logger.info(
                "%s step %d/%d loss %.4f ce %.4f gnorm %.2f lr %.2e tok/s %.0f",
                desc,
                step + 1,
                steps,
                loss_v,
                float(ce.detach()),
                float(gnorm),
                opt.param_groups[0]["lr"],
                (step + 1) * tokens_per_step / elapsed,
            )
    bar.close()
    model.eval()
    wall = time.perf_counter() - t0
    tail = losses[-max(1, min(20, len(losses) // 10)) :]
    return {
        "steps": steps,
        "tokens": steps * tokens_per_step,
        "batch_size": batch_size,
        "seq_len": int(data.shape[1]),
        "peak_lr": lr,
        "warmup_steps": warmup,
        "weight_decay": weight_decay,
        "final_loss": sum(tail) / len(tail),
        "first_loss": losses[0],
        "wall_s": wall,
        "tokens_per_s": steps * tokens_per_step / wall,
    }


# ---------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(target, draft, data: torch.Tensor, device: torch.device, batch_size: int = 8) -> dict[str, Any]:
    """Token-level held-out perplexity of both models and draft/target greedy agreement, in fp32."""
    target.to(device, torch.float32).eval()
    draft.to(device, torch.float32).eval()
    nll_t = nll_d = 0.0
    agree = 0
    count = 0
    for i in range(0, data.shape[0], batch_size):
        ids = data[i : i + batch_size].to(device)
        lt = target(input_ids=ids).logits[:, :-1].float()
        ld = draft(input_ids=ids).logits[:, :-1].float()
        labels = ids[:, 1:]
        nll_t += float(F.cross_entropy(lt.reshape(-1, lt.shape[-1]), labels.reshape(-1), reduction="sum"))
        nll_d += float(F.cross_entropy(ld.reshape(-1, ld.shape[-1]), labels.reshape(-1), reduction="sum"))
        agree += int((lt.argmax(-1) == ld.argmax(-1)).sum())
        count += labels.numel()
    return {
        "heldout_tokens": count,
        "target_ppl": math.exp(nll_t / count),
        "draft_ppl": math.exp(nll_d / count),
        "draft_target_greedy_agreement": agree / count,
    }


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


if __name__ == "__main__":
    cli()
