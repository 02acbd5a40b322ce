"""``leapgen bench text-lossy``: the quality-for-speed text samplers (bild, chimera, judge, first, gear,
superposed, cntp) against ``ar`` and ``speculative`` on the shipped text-code target, in one process
(:mod:`leapgen.bench.text_lossy`)."""

from __future__ import annotations

import argparse

from .common import declare_outputs


def cmd_bench_text_lossy(args: argparse.Namespace) -> int:
    from ..bench.text_lossy import run

    rows = [r.strip() for r in args.rows.split(",")] if args.rows else None
    out = run(prompts=args.prompts, max_new_tokens=args.max_new_tokens, runs=args.runs, long_tokens=args.long_tokens,
              seed=args.seed, threads=args.threads, rows=rows, out_dir=args.out, heads=args.heads)
    for r in out["rows"]:
        print(f"{r['method']:<24} compr {r['step_compression']:.2f}  wall x{r['wall_ratio_to_ar']:.2f}  "
              f"agree {r['greedy_agreement_with_ar']:.3f}  ppl {r['heldout_ppl']:.2f}  ast {r['ast_pass_rate']:.2f}")
    for g in out["gear"]:
        print(f"gear {g['setting']}: KV x{g['kv_ratio_vs_fp32']:.2f} (fp32) x{g['kv_ratio_vs_fp16']:.2f} (fp16)  "
              f"KL {g['kl_vs_uncompressed']:.4f}  agree {g['greedy_agreement']:.3f}")
    print(f"wrote {args.out}/bench_text_lossy.md, .json and {args.out}/text_lossy_quality_speed.png")
    return 0


def register_cli(parsers) -> None:
    b = parsers.bench.add_parser(
        "text-lossy", help="quality-for-speed text samplers vs ar / speculative (text-code, batch 1)",
        description="Step compression, wall ratio to ar, greedy agreement, held-out perplexity and ast pass rate of "
                    "bild, chimera, judge, first, gear, superposed and cntp on the shipped text-code target.")
    b.add_argument("--prompts", type=int, default=6)
    b.add_argument("--max-new-tokens", type=int, default=96)
    b.add_argument("--runs", type=int, default=2, help="interleaved timing runs (medians)")
    b.add_argument("--long-tokens", type=int, default=256, help="GEAR agreement length (0: skip the GEAR table)")
    b.add_argument("--seed", type=int, default=0, help="seed of the prompt selection; prompt i samples with seed + i (default: %(default)s)")
    b.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    b.add_argument("--rows", default=None, help="comma list of row labels (default: all)")
    b.add_argument("--heads", default=None, help="a heads folder instead of <pipeline>/heads")
    b.add_argument("--out", default="docs", help="folder for bench_text_lossy.md/.json and the plot (default: %(default)s)")
    b.set_defaults(func=cmd_bench_text_lossy)
    declare_outputs(b, out="dir")
