"""Recipe ``text-code-heads``: the small trained parts of the quality-for-speed text samplers.

It reads a text pipeline folder (default: the shipped ``assets/text-code``) and writes
``<folder>/heads/`` (:class:`~leapgen.models.text_heads.TextHeads`, fp16 safetensors,
``train_metrics.json``):

1. **Chimera heads** (``chimera`` sampler): trained on the target's own hidden states over the
   stdlib training corpus, loss ``0.5 * CE(corpus token) + 0.5 * KL(target || head)`` for each of
   the ``k`` future tokens (distillation), the target frozen;
2. **Judge head** (``judge`` sampler): a logistic head on ``[target hidden, target embedding of the
   draft's token]``, labelled 1 where the shipped draft's greedy token equals the corpus token (the
   "correct" drafts, including those the target's argmax would reject), 0 elsewhere;
3. **FiRST routers** (``first`` sampler): per layer, windows of ``prompt + continuation`` are run
   with that layer skipped; the label is 1 when the continuation's greedy tokens agree with the full
   model's on at least ``router_agreement`` of the positions; a logistic router per layer is fit
   on the mean hidden state entering the layer over the prompt;
4. **Hidden Transfer maps** (``hidden_transfer`` sampler): ``k`` linear maps at layer
   ``transfer_layer`` (default: the middle), trained with the target frozen: at ``transfer_positions``
   random positions of ``transfer_batch`` cached windows per step, the pseudo states run through the
   upper layers beside the window (:func:`~leapgen.models.hidden_transfer.transfer_upper`), loss
   ``0.5 * CE(corpus token) + 0.5 * KL(target || pseudo)`` for each of the ``k`` future tokens;
5. the corpus **bigram table** (``ngram.safetensors``, ``superposed`` sampler's smoothing).

The target and the draft run once over ``windows`` corpus windows of 128 tokens (the features are
cached); the Chimera heads then train for ``chimera_steps`` steps of ``positions`` random positions.
Default budget (256 windows, 1500 Chimera steps, 96 router windows, 1000 transfer steps): about
30-50 minutes on one CPU core, under 90. ``--windows 96 --chimera-steps 300 --transfer-steps 200``
is a quick run.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from leapgen.data.code import iter_texts, stdlib_files
from leapgen.train.common import write_metrics

logger = logging.getLogger(__name__)


def _windows(stream: torch.Tensor, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, stream.numel() - length - 1, (n,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def _teacher_forced(lm: Any, tokens: torch.Tensor, router: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, final hidden)`` of ``tokens [B, L]`` under the lean target (fresh cache)."""
    from leapgen.models.text_variants import VariantLM

    v = VariantLM(lm, capture=True, router=router)
    cache = v.new_cache(tokens.shape[0])
    logits = v(tokens, cache)
    return logits.clone(), v.last_hidden.clone()


def _step(opt: torch.optim.Optimizer, loss: torch.Tensor, lr: float, step: int, steps: int) -> None:
    """One optimiser step of the heads' schedule: 30 warm-up steps, then linear decay to 0.1 lr."""
    for g in opt.param_groups:
        g["lr"] = lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * (1 - step / max(1, steps)))
    opt.zero_grad()
    loss.backward()
    opt.step()


def _states_entering(lm: Any, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """Hidden states ``[B, L, D]`` entering decoder layer ``layer`` of the lean target (causal, fresh cache)."""
    from leapgen.models.text_variants import decoder_layer, float_mask, rope

    net = lm.net
    b, n = tokens.shape
    cache = lm.new_cache(b, capacity=n)
    pos = torch.arange(n)[None].expand(b, n)
    h = net.embed.weight[tokens]
    cos, sin = rope(net, pos, h.dtype)
    mask = float_mask(torch.ones(n, n, dtype=torch.bool).tril()[None, None], h.dtype)
    with torch.no_grad():
        for lay, c in zip(net.layers[:layer], cache.backend.layers[:layer]):
            h = decoder_layer(net, lay, c, h, cos, sin, mask)
    return h


def _train_transfer(lm: Any, transfer: Any, X: torch.Tensor, L: torch.Tensor, HM: torch.Tensor, steps: int, batch: int,
                    positions: int, lr: float, gen: torch.Generator, t0: float) -> list[dict[str, Any]]:
    """Fit the Hidden Transfer maps by distillation (the recipe's step 3); returns the log."""
    from leapgen.models.hidden_transfer import full_mask, transfer_upper

    net, k = lm.net, transfer.k
    n_win, seq = X.shape
    opt = torch.optim.AdamW(transfer.parameters(), lr=lr, weight_decay=0.0)
    pos = torch.arange(seq)[None].expand(batch, seq)
    real = full_mask(None, batch, seq, 0, X.device)
    ahead = torch.arange(k)
    log = []
    for step in range(steps):
        wi = torch.randint(0, n_win, (batch,), generator=gen)
        cols = torch.randint(0, seq - k - 1, (batch, positions), generator=gen)
        cache = lm.new_cache(batch, capacity=seq + positions * k)
        _, plog = transfer_upper(net, HM[wi].float(), pos, real, cache.backend, transfer, cols)
        at = cols[..., None] + 1 + ahead  # the target's logits for the token i + 2 after each column
        tgt = L[wi[:, None, None], at].float()
        truth = X[wi[:, None, None], (at + 1).clamp_max(seq - 1)]
        logp = plog.float().log_softmax(-1)
        kl = F.kl_div(logp.flatten(0, 2), tgt.log_softmax(-1).flatten(0, 2), log_target=True, reduction="batchmean")
        loss = 0.5 * F.nll_loss(logp.flatten(0, 2), truth.flatten()) + 0.5 * kl
        _step(opt, loss, lr, step, steps)
        if step % 50 == 0 or step == steps - 1:
            agree = (plog.detach().argmax(-1) == tgt.argmax(-1)).float().mean((0, 1)).tolist()
            log.append({"step": step, "loss": loss.item(), "agree_with_target": agree})
            logger.info("transfer step %d loss %.3f pseudo/target agreement %s (%.0fs)", step, loss.item(),
                        [round(a, 3) for a in agree], time.time() - t0)
    return log


def main(
    out_dir: str | Path | None = None,
    pipeline: str = "leapgen/text-code",
    seed: int = 0,
    chimera_steps: int = 1500,
    windows: int = 256,
    positions: int = 256,
    batch_size: int = 8,
    seq_len: int = 128,
    k: int = 4,
    lr: float = 1e-3,
    router_windows: int = 96,
    router_prompt: int = 64,
    router_continuation: int = 32,
    router_agreement: float = 0.85,
    threads: int = 1,
    max_train_files: int = 400,
    transfer_steps: int = 1000,
    transfer_layer: int | None = None,
    transfer_batch: int = 8,
    transfer_positions: int = 16,
) -> dict[str, Any]:
    """Train the heads of ``pipeline``'s target and save them to ``out_dir`` (default
    ``<pipeline folder>/heads``)."""
    from leapgen.models.text_heads import NGram, TextHeads, fingerprint
    from leapgen.pipelines.base import Pipeline, resolve_pretrained

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    folder = resolve_pretrained(pipeline)
    out = Path(out_dir) if out_dir is not None else folder / "heads"
    pipe = Pipeline.from_pretrained(folder)
    target, draft = pipe._lms["model"], pipe._lms["draft"]
    net = target.net
    for p in net.parameters():
        p.requires_grad_(False)
    tok = pipe.tokenizer
    files = stdlib_files("train")[:max_train_files]
    ids: list[int] = []
    for text in iter_texts(files):
        ids += [0] + tok(text, add_special_tokens=False)["input_ids"]
    stream = torch.tensor(ids, dtype=torch.long)
    logger.info("corpus: %d tokens from %d files (%.0fs)", stream.numel(), len(files), time.time() - t0)

    heads = TextHeads(net.c.hidden_size, net.c.n_layers, k=k, target=fingerprint(net), transfer_layer=transfer_layer)
    emb = net.embed.weight.detach()
    norm_w, lm_head = net.norm.detach(), net.lm_head.detach()

    def head_logits(z: torch.Tensor) -> torch.Tensor:
        return (norm_w * (z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + net.c.eps))) @ lm_head

    # ---- 1. features: the target's hidden states and logits (and the draft's tokens) over the corpus
    t_len = seq_len - k - 2
    feats_h, feats_l, feats_x, feats_m, judge_x, judge_y = [], [], [], [], [], []
    for _ in range(max(1, windows // batch_size)):
        x = _windows(stream, batch_size, seq_len, gen)
        with torch.no_grad():
            logits, h = _teacher_forced(target, x)
            dlog, _ = _teacher_forced(draft, x)
        d = dlog.argmax(-1)[:, :-1]  # the draft's greedy token for position t+1
        judge_x.append(torch.cat([h[:, :-1], emb[d]], -1).reshape(-1, 2 * net.c.hidden_size))
        judge_y.append((d == x[:, 1:]).float().reshape(-1))
        feats_h.append(h.half())
        feats_l.append(logits.half())
        feats_x.append(x)
        feats_m.append(_states_entering(target, x, heads.transfer_layer).half())
    H, L, X, HM = torch.cat(feats_h), torch.cat(feats_l), torch.cat(feats_x), torch.cat(feats_m)
    logger.info("features: %d windows x %d tokens (%.0fs)", X.shape[0], seq_len, time.time() - t0)

    # ---- 2. Chimera heads on the cached features (random positions each step)
    opt = torch.optim.AdamW(heads.chimera.parameters(), lr=lr, weight_decay=0.0)
    log = []
    for step in range(chimera_steps):
        wi = torch.randint(0, X.shape[0], (positions,), generator=gen)
        ti = torch.randint(0, t_len, (positions,), generator=gen)
        x, h = X[wi], H[wi, ti].float()
        z = heads.chimera(h, emb[x.gather(1, ti[:, None]).squeeze(1)], emb[x.gather(1, ti[:, None] + 1).squeeze(1)])
        loss = 0.0
        agree = []
        for i in range(k):
            hl = head_logits(z[:, i]).float()  # predicts x_{t+2+i}, as the target does at t+1+i
            tgt = L[wi, ti + 1 + i].float()
            truth = x.gather(1, ti[:, None] + 2 + i).squeeze(1)
            kl = F.kl_div(hl.log_softmax(-1), tgt.log_softmax(-1), log_target=True, reduction="batchmean")
            loss = loss + 0.5 * F.cross_entropy(hl, truth) + 0.5 * kl
            agree.append(float((hl.argmax(-1) == tgt.argmax(-1)).float().mean()))
        loss = loss / k
        _step(opt, loss, lr, step, chimera_steps)
        if step % 50 == 0 or step == chimera_steps - 1:
            log.append({"step": step, "loss": loss.item(), "agree_with_target": agree})
            logger.info("chimera step %d loss %.3f head/target agreement %s (%.0fs)", step, loss.item(),
                        [round(a, 3) for a in agree], time.time() - t0)

    # ---- 3. Hidden Transfer maps (the upper layers run over each window and its pseudo states)
    transfer_log = _train_transfer(target, heads.transfer, X, L, HM, transfer_steps, transfer_batch,
                                   transfer_positions, lr, gen, t0)

    # ---- 4. judge head (logistic regression on the collected features)
    jx, jy = torch.cat(judge_x), torch.cat(judge_y)
    split = int(0.9 * len(jy))
    jopt = torch.optim.Adam(heads.judge.parameters(), lr=3e-3)
    for _ in range(400):
        perm = torch.randint(0, split, (4096,), generator=gen)
        lj = F.binary_cross_entropy_with_logits(heads.judge.lin(jx[perm]).squeeze(-1), jy[perm])
        jopt.zero_grad()
        lj.backward()
        jopt.step()
    with torch.no_grad():
        pj = torch.sigmoid(heads.judge.lin(jx[split:]).squeeze(-1))
        judge_acc = float(((pj > 0.5).float() == jy[split:]).float().mean())
        prec = float(jy[split:][pj > 0.8].mean()) if bool((pj > 0.8).any()) else float("nan")
    logger.info("judge: %d examples, positive rate %.3f, held-out accuracy %.3f, precision@0.8 %.3f",
                len(jy), float(jy.mean()), judge_acc, prec)

    # ---- 5. FiRST routers
    n_layers = net.c.n_layers
    win = _windows(stream, router_windows, router_prompt + router_continuation, gen)
    feats = {li: [] for li in range(n_layers)}

    def tap(li: int, hh: torch.Tensor) -> torch.Tensor:
        feats[li].append(hh[:, :router_prompt].float().mean(1))
        return torch.zeros(hh.shape[0], dtype=torch.bool)

    labels = torch.zeros(n_layers, router_windows)
    with torch.no_grad():
        full, _ = _teacher_forced(target, win, router=tap)
        ref = full[:, router_prompt - 1 : -1].argmax(-1)
        for li in range(n_layers):
            def skip_one(layer: int, hh: torch.Tensor, li: int = li) -> torch.Tensor:
                return torch.full((hh.shape[0],), layer == li, dtype=torch.bool)

            lg, _ = _teacher_forced(target, win, router=skip_one)
            agree = (lg[:, router_prompt - 1 : -1].argmax(-1) == ref).float().mean(1)
            labels[li] = (agree >= router_agreement).float()
    feat = {li: torch.cat(v) for li, v in feats.items()}
    ropt = torch.optim.Adam(heads.routers.parameters(), lr=1e-2)
    for _ in range(300):
        lr_loss = 0.0
        for li in range(n_layers):
            m = feat[li]
            m = m * torch.rsqrt(m.pow(2).mean(-1, keepdim=True) + 1e-6)
            lr_loss = lr_loss + F.binary_cross_entropy_with_logits(m @ heads.routers.w[li] + heads.routers.b[li], labels[li])
        ropt.zero_grad()
        lr_loss.backward()
        ropt.step()
    skip_rate = labels.mean(1).tolist()
    logger.info("routers: per-layer skip-ok rate %s", [round(s, 3) for s in skip_rate])

    heads.save(out)
    NGram.from_stream(stream, net.c.vocab_size).save(out / "ngram.safetensors")  # superposed's smoothing
    metrics = {
        "recipe": "text-code-heads",
        "pipeline": str(folder),
        "seed": seed,
        "settings": {"chimera_steps": chimera_steps, "windows": windows, "positions": positions, "batch_size": batch_size, "seq_len": seq_len, "k": k, "lr": lr,
                     "router_windows": router_windows, "router_prompt": router_prompt,
                     "router_continuation": router_continuation, "router_agreement": router_agreement,
                     "threads": threads, "max_train_files": max_train_files, "transfer_steps": transfer_steps,
                     "transfer_layer": heads.transfer_layer, "transfer_batch": transfer_batch,
                     "transfer_positions": transfer_positions},
        "corpus_tokens": int(stream.numel()),
        "chimera_log": log,
        "transfer_log": transfer_log,
        "judge": {"examples": int(len(jy)), "positive_rate": float(jy.mean()), "heldout_accuracy": judge_acc,
                  "precision_at_0.8": prec},
        "routers": {"skip_ok_rate_per_layer": skip_rate},
        "wall_seconds": round(time.time() - t0, 1),
        "parameters": sum(p.numel() for p in heads.parameters()),
    }
    write_metrics(out, metrics, max_size_mb=10.0)
    logger.info("heads written to %s (%.0fs)", out, time.time() - t0)
    return metrics


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m leapgen.train.text_code_heads", description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", default=None)
    p.add_argument("--pipeline", default="leapgen/text-code")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chimera-steps", type=int, default=1500)
    p.add_argument("--windows", type=int, default=256)
    p.add_argument("--positions", type=int, default=256)
    p.add_argument("--router-windows", type=int, default=96)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--transfer-steps", type=int, default=1000)
    p.add_argument("--transfer-layer", type=int, default=None)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    return main(out_dir=a.out_dir, pipeline=a.pipeline, seed=a.seed, chimera_steps=a.chimera_steps,
                windows=a.windows, positions=a.positions, router_windows=a.router_windows, threads=a.threads,
                transfer_steps=a.transfer_steps, transfer_layer=a.transfer_layer)


if __name__ == "__main__":
    cli()
