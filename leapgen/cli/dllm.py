"""``leapgen bench dllm | parallel | genmol-fix``: the masked diffusion family's benchmark suites.

* ``bench dllm``: diffusion LMs on the code corpus (models compared, samplers timed at batch 1
  and 8) -> ``docs/bench_dllm.md`` / ``.json`` (:mod:`leapgen.bench.dllm`);
* ``bench parallel``: the ParallelBench-style suite, quality vs tokens per step ->
  ``docs/bench_parallel.md`` / ``.json`` and ``docs/parallel_quality_vs_tokens_per_step.png``
  (:mod:`leapgen.bench.parallel`);
* ``bench genmol-fix``: the molecule bench with and without GenMol's ring-digit constraint ->
  ``docs/bench_molecule_constraint.md`` / ``.json`` (:mod:`leapgen.bench.dllm_genmol`).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from .common import declare_outputs


def cmd_dllm(args: argparse.Namespace) -> int:
    import torch

    from ..bench.dllm import format_markdown, run_dllm_bench, write_outputs

    torch.set_num_threads(args.threads)
    if min(args.num_prompts, args.batch8_prompts, args.gen_length, args.repeats) < 1 or min(args.long_prompts, args.long_length) < 0:
        raise ConfigError("--num-prompts, --batch8-prompts, --gen-length and --repeats must be >= 1; "
                          "--long-prompts and --long-length >= 0.")
    r = run_dllm_bench(args.pipeline, None if args.scratch == "none" else args.scratch, args.ar, args.num_prompts,
                       args.gen_length, args.batch8_prompts, args.long_length, args.long_prompts, args.repeats)
    r["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:])
    print(format_markdown(r))
    write_outputs(r, args.markdown, args.json)
    return 0


def cmd_parallel(args: argparse.Namespace) -> int:
    import torch

    from ..bench.parallel import format_markdown, run_parallel_bench, write_outputs

    torch.set_num_threads(args.threads)
    if args.num_per_task < 1:
        raise ConfigError("--num-per-task must be >= 1.")
    r = run_parallel_bench(args.models, n_per_task=args.num_per_task, seed=args.seed)
    r["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:])
    print(format_markdown(r))
    write_outputs(r, args.markdown, args.json, args.png)
    return 0


def cmd_genmol_fix(args: argparse.Namespace) -> int:
    import torch

    from ..bench.dllm_genmol import run_genmol_fix
    from ..bench.molecule_tables import format_markdown, write_outputs
    from ..pipelines import Pipeline

    torch.set_num_threads(args.threads)
    if args.num_samples < 1:
        raise ConfigError("--num-samples must be >= 1.")
    pipe = Pipeline.from_pretrained(args.pipeline)
    r = run_genmol_fix(pipe, num_samples=args.num_samples, batch_size=args.batch_size, seed=args.seed, threads=args.threads,
                       novelty=args.novelty)
    r["settings"]["pipeline"] = args.pipeline
    r["settings"]["command"] = "leapgen " + " ".join(sys.argv[1:])
    print(format_markdown(r, header=False))
    write_outputs(r, args.json, args.markdown)
    return 0


def register_cli(parsers) -> None:
    p = parsers.bench.add_parser("dllm", help="diffusion LMs on the code corpus: models and masked samplers",
                                 description=__doc__)
    p.add_argument("--pipeline", default="leapgen/text-code-diffusion-adapted")
    p.add_argument("--scratch", default="leapgen/text-code-diffusion", help="the from-scratch model to compare ('none' to skip)")
    p.add_argument("--ar", default="leapgen/text-code")
    p.add_argument("--num-prompts", type=int, default=4)
    p.add_argument("--batch8-prompts", type=int, default=8)
    p.add_argument("--gen-length", type=int, default=64)
    p.add_argument("--long-length", type=int, default=256, help="batch-1 samplers also at this length (the papers')")
    p.add_argument("--long-prompts", type=int, default=2, help="prompts at --long-length (0 skips it)")
    p.add_argument("--repeats", type=int, default=3,
                   help="times each sampler entry is timed, entries interleaved; the median wall counts")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default="docs/bench_dllm.json")
    p.add_argument("--markdown", default="docs/bench_dllm.md")
    p.set_defaults(func=cmd_dllm)
    declare_outputs(p, json="file", markdown="file")

    q = parsers.bench.add_parser("parallel", help="ParallelBench-style suite: quality vs tokens per step", description=__doc__)
    q.add_argument("--models", default="oracle",
                   help="'oracle' (the exact task model: errors are parallel-decoding errors) or a folder written by "
                        "`leapgen train parallel-tasks`")
    q.add_argument("--num-per-task", type=int, default=50)
    q.add_argument("--seed", type=int, default=2024)
    q.add_argument("--threads", type=int, default=1)
    q.add_argument("--json", default="docs/bench_parallel.json")
    q.add_argument("--markdown", default="docs/bench_parallel.md")
    q.add_argument("--png", default="docs/parallel_quality_vs_tokens_per_step.png")
    q.set_defaults(func=cmd_parallel)
    declare_outputs(q, json="file", markdown="file", png="file")

    g = parsers.bench.add_parser("genmol-fix", help="molecule bench with / without GenMol's ring-digit constraint",
                                 description=__doc__)
    g.add_argument("--pipeline", default="leapgen/molecule-safe")
    g.add_argument("--num-samples", type=int, default=256)
    g.add_argument("--batch-size", type=int, default=64)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=int, default=1)
    g.add_argument("--novelty", action="store_true", help="also compute novelty against MOSES train (slow)")
    g.add_argument("--json", default="docs/bench_molecule_constraint.json")
    g.add_argument("--markdown", default="docs/bench_molecule_constraint.md")
    g.set_defaults(func=cmd_genmol_fix)
    declare_outputs(g, json="file", markdown="file")
