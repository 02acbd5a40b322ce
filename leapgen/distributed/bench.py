"""Scale-out bench: throughput of one batch job without Ray, on Ray with 1 worker and with 2 workers.

``python -m leapgen.distributed.bench [--prompts 512] [--max-new-tokens 8]`` writes
docs/bench_scaleout.md and .json: prompts/s of each run (pipeline loading excluded: a warm-up run
loads it first in each setting), the speed-up of 2 workers over 1 and whether the rows are
identical to the run without Ray. A setting that fails (e.g. Ray cannot start) is reported with its
error instead of a number."""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from .records import read_results
from .runner import run_job

PROMPTS = ["def ", "class ", "import ", "for i in range(", "if x == ", "return ", "while ", "with open("]


def _prompts(path: Path, n: int, max_new_tokens: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"{PROMPTS[i % len(PROMPTS)]}x{i}", "max_new_tokens": max_new_tokens,
                                "temperature": 0.8}) + "\n")
    return path


def _key(rows: list[dict[str, Any]]) -> list[tuple]:
    return [(r["id"], r["output"], r["error"]) for r in rows]


def run(prompts: int = 512, max_new_tokens: int = 8, batch_size: int = 16, out: str = "docs") -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="leapgen_scaleout_"))
    src = _prompts(tmp / "prompts.jsonl", prompts, max_new_tokens)
    results: dict[str, Any] = {"prompts": prompts, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
                               "pipeline": "leapgen/text-code", "machine": platform.platform(), "runs": {}}
    reference = None
    for name, kw in (("no Ray", {}), ("Ray, 1 worker", {"use_ray": True, "num_workers": 1}),
                     ("Ray, 2 workers", {"use_ray": True, "num_workers": 2})):
        target = tmp / name.replace(" ", "_").replace(",", "")
        try:
            t = time.perf_counter()
            s = run_job(src, target, modality="text", batch_size=batch_size, **kw)
            wall = time.perf_counter() - t
            rows = read_results(target)
            if reference is None:
                reference = _key(rows)
            results["runs"][name] = {"wall_s": wall, "job_s": s["wall_s"], "prompts_per_s": s["generated"] / s["wall_s"],
                                     "identical_to_no_ray": _key(rows) == reference}
        except Exception as err:  # reported, not hidden
            results["runs"][name] = {"error": f"{type(err).__name__}: {err}"}
        finally:
            if kw.get("use_ray"):
                import ray

                ray.shutdown()
    r1, r2 = results["runs"].get("Ray, 1 worker", {}), results["runs"].get("Ray, 2 workers", {})
    if "prompts_per_s" in r1 and "prompts_per_s" in r2:
        results["speedup_2_over_1"] = r2["prompts_per_s"] / r1["prompts_per_s"]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_scaleout.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Scale-out bench (`python -m leapgen.distributed.bench`)", "",
             f"{prompts} prompts of `{results['pipeline']}`, {max_new_tokens} new tokens each (temperature 0.8, "
             f"seed + line per prompt), batches of {batch_size}; wall time includes loading the pipeline in each "
             f"worker. Machine: {results['machine']}.", "",
             "| setting | wall (s) | prompts/s | rows identical to no Ray |", "|---|---|---|---|"]
    for name, r in results["runs"].items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:160]} | | |")
        else:
            lines.append(f"| {name} | {r['job_s']:.1f} | {r['prompts_per_s']:.2f} | {r['identical_to_no_ray']} |")
    if "speedup_2_over_1" in results:
        lines += ["", f"2 workers / 1 worker: **{results['speedup_2_over_1']:.2f}x** (target >= 1.6x)."]
    (out_dir / "bench_scaleout.md").write_text("\n".join(lines) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", default="docs")
    a = p.parse_args(argv)
    print(json.dumps(run(a.prompts, a.max_new_tokens, a.batch_size, a.out), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
