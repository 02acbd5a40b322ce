"""Batch generation of a JSONL file of prompts, in one process or scaled out on Ray.

:func:`run_job` reads the prompts (:mod:`.records`) and checks them against the pipeline's call
(:mod:`.validate`; bad lines go to ``errors.jsonl`` with their line numbers), leaves out the ids already written (resume), then either

* without Ray, runs :class:`BatchGenerator` over the prompts in this process, or
* with Ray, builds a Ray Data dataset of the prompts and ``map_batches`` it through an actor pool
  of ``num_workers`` :class:`BatchGenerator` actors (each loads the pipeline once, on a GPU when
  Ray assigns one), joining the cluster at ``address`` or starting a local Ray.

Results stream back to the driver, which writes each finished batch as a parquet part and its
media files (so a job on a multi-node cluster needs no shared file system, and an interrupted job
keeps every finished batch). Every prompt is generated alone with its own seed (``seed + line``),
so the rows are the same whatever the number of workers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError, LeapgenError
from .records import (
    DEFAULT_PIPELINES,
    Record,
    done_ids,
    output_row,
    read_records,
    write_errors,
    write_part,
)
from .validate import LineChecker

logger = logging.getLogger(__name__)


class BatchGenerator:
    """One worker: loads the pipeline once; called on a batch of rows (``line``, ``id``, ``record``),
    returns one result row per input row (a failing prompt fails alone, with its error)."""

    def __init__(self, pipeline: str, sampler: str | None = None, params: dict[str, Any] | None = None,
                 seed: int = 0, threads: int = 1) -> None:
        import torch

        from ..pipelines import Pipeline

        torch.set_num_threads(threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.pipe = Pipeline.from_pretrained(pipeline, device=device)
        self.sampler = sampler
        self.params = dict(params or {})
        self.seed = int(seed)
        self.pipe.set_progress_bar_config(disable=True)

    def generate(self, line: int, rid: str, data: dict[str, Any]) -> dict[str, Any]:
        # the job's --sampler / --param are defaults: what a line sets for itself wins (like its seed)
        kwargs = {**({"sampler": self.sampler} if self.sampler is not None else {}), **self.params, **data}
        seed = kwargs.pop("seed", self.seed + line)
        good_seed = isinstance(seed, int) and not isinstance(seed, bool)
        base = {"line": int(line), "id": rid, "seed": seed if good_seed else None, "input": json.dumps(data, sort_keys=True)}
        try:
            if not good_seed:  # this line fails alone, the job goes on
                raise InputError(f"seed must be an integer, got {seed!r}.")
            out = self.pipe(seed=seed, **kwargs)
            return {**base, "error": None, **output_row(out)}  # output_row sets "error" when the item failed
        except (LeapgenError, ValueError, TypeError) as err:
            return {**base, "output": None, "media_bytes": [], "media_ext": [], "error": f"{type(err).__name__}: {err}"}
        except Exception as err:  # noqa: BLE001 - any other failure of one item fails that item alone, never the batch
            logger.exception("batch: line %d (id %s) failed with an internal error", line, rid)
            return {**base, "output": None, "media_bytes": [], "media_ext": [],
                    "error": f"internal error ({type(err).__name__}): {err}"}

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        rows = [self.generate(int(line), str(rid), json.loads(rec))
                for line, rid, rec in zip(batch["line"], batch["id"], batch["record"])]
        return _columns(rows)


_COLUMNS = ("line", "id", "seed", "input", "output", "valid", "sampler", "new_tokens", "target_forwards",
            "step_compression", "wall_s", "error", "media_bytes", "media_ext", "num_sequences", "sequences")


#: columns holding text or None (never a number)
_TEXT_COLUMNS = ("id", "output", "error", "sequences")
#: columns holding a whole number or None
_INT_COLUMNS = ("num_sequences",)


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {c: [r.get(c) for r in rows] for c in _COLUMNS}


def _rows(columns: dict[str, Any]) -> list[dict[str, Any]]:
    n = len(columns["id"])
    out = []
    for i in range(n):
        row = {}
        for c in _COLUMNS:
            v = columns[c][i]
            v = v.tolist() if hasattr(v, "tolist") else v
            # Ray's batches turn an all-None object column (no errors) into NaN; a row must read
            # back as the no-Ray run writes it, so a missing text value is None again
            if c in _TEXT_COLUMNS + _INT_COLUMNS and isinstance(v, float) and math.isnan(v):
                v = None
            elif c in _INT_COLUMNS and v is not None:
                v = int(v)
            row[c] = v
        out.append(row)
    return out


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401 - the job needs Ray Data, not only Ray core
    except ImportError as err:
        raise ConfigError(f"--ray needs Ray with Ray Data, which cannot be imported ({err}); install it with "
                          "`pip install -e \".[demo]\"` (or `pip install \"ray[data]\"`), or run without --ray.") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``host:port`` or ``ray://host:port`` address nothing answers at (Ray itself retries
    for minutes before it gives up)."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return  # "auto", "local" or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(f"--address {address}: no Ray cluster answers there ({err}); start one (`ray start --head`) "
                          "and pass its address, or leave out --address to start a local Ray.") from None


def _ray_init(address: str | None, num_workers: int) -> None:
    ray = _import_ray()

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    # a busy machine starts Ray's agents slowly: wait for them longer than the default (then fail clearly)
    os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as err:  # e.g. --address auto with no cluster running
            raise ConfigError(f"--address {address}: could not join a Ray cluster ({err}); start one with "
                              "`ray start --head`, or leave out --address to start a local Ray.") from None
        return
    attempts = int(os.environ.get("LEAPGEN_RAY_START_ATTEMPTS", "3"))
    for attempt in range(attempts):  # a loaded machine can miss Ray's fixed 30 s raylet start-up wait
        try:
            ray.init(num_cpus=max(2, num_workers), include_dashboard=False, log_to_driver=False, configure_logging=False)
            return
        except Exception as err:  # Ray raises a bare Exception on a start-up timeout
            logger.warning("batch: local Ray did not start (%s); attempt %d of %d", err, attempt + 1, attempts)
            ray.shutdown()
    raise ConfigError(f"a local Ray could not be started ({attempts} attempts); start one with `ray start --head` and pass "
                      "--address auto, or run without --ray.")


def run_job(input_path: str | os.PathLike, out_dir: str | os.PathLike, modality: str = "text",
            pipeline: str | None = None, sampler: str | None = None, params: dict[str, Any] | None = None,
            seed: int = 0, use_ray: bool = False, address: str | None = None, num_workers: int = 1,
            batch_size: int = 8, limit: int | None = None, retry_failed: bool = False) -> dict[str, Any]:
    """Generate every prompt of ``input_path`` into ``out_dir``; returns a summary (counts, wall, throughput).

    A rerun into the same ``out_dir`` skips the ids already written (resume); with
    ``retry_failed`` it also generates again the ids whose rows failed (their new row replaces the
    failure in :func:`~leapgen.distributed.records.read_results` when it succeeds)."""
    pipeline = pipeline or DEFAULT_PIPELINES.get(modality)
    if pipeline is None:
        raise ConfigError(f"no default pipeline for modality {modality!r}; pass --pipeline "
                          f"(defaults exist for {', '.join(DEFAULT_PIPELINES)}).")
    if num_workers < 1 or batch_size < 1:
        raise ConfigError(f"--num-workers and --batch-size must be >= 1, got {num_workers} and {batch_size}.")
    if address and not use_ray:
        raise ConfigError("--address joins a Ray cluster; pass --ray with it.")
    params = dict(params or {})
    checker = LineChecker.for_pipeline(pipeline)  # the pipeline's call, read without loading weights
    checker.check_params(params)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out} exists and is not a folder.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--output {out} cannot be created ({err.strerror or err}); pass a folder you can write to.") from None
    records, errors = read_records(input_path, checker.sig.input_name or "prompt")
    if not records and not errors:
        raise InputError(f"--input {input_path} holds no prompts (it is empty or only blank lines); write one JSON "
                         'object per line, e.g. {"prompt": "def f():", "id": "a1"}.')
    records, refused = checker.split(records, params)  # missing or unknown keys: those lines fail alone
    errors += refused
    if limit is not None:
        records = records[:limit]
    written = done_ids(out)
    done = done_ids(out, failed=False) if retry_failed else written
    todo = [r for r in records if r.id not in done]
    retried = sum(1 for r in todo if r.id in written)
    logger.info("batch: %d prompts, %d already done, %d to do (%d failed before, retried), %d bad lines", len(records),
                len(records) - len(todo), len(todo), retried, len(errors))
    t = time.perf_counter()
    args = {"pipeline": pipeline, "sampler": sampler, "params": params, "seed": seed}
    rows = _run_ray(todo, args, address, num_workers, batch_size, out) if use_ray and todo else \
        _run_local(todo, args, batch_size, out) if todo else []
    wall = time.perf_counter() - t
    from .records import read_results

    errors += [{"line": r["line"], "id": r["id"], "error": r["error"]} for r in read_results(out) if r.get("error")]
    write_errors(out, errors)
    summary = {"prompts": len(records), "skipped_done": len(records) - len(todo), "retried": retried, "generated": len(rows),
               "failed": sum(1 for r in rows if r.get("error")), "bad_lines": sum(1 for e in errors if "id" not in e),
               "wall_s": wall, "prompts_per_s": len(rows) / wall if wall > 0 and rows else 0.0,
               "workers": num_workers if use_ray else 0}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _run_local(todo: list[Record], args: dict[str, Any], batch_size: int, out: Path) -> list[dict[str, Any]]:
    gen = BatchGenerator(**args)
    rows: list[dict[str, Any]] = []
    for i in range(0, len(todo), batch_size):
        chunk = [r.as_row() for r in todo[i : i + batch_size]]
        part = _rows(gen({k: [c[k] for c in chunk] for k in ("line", "id", "record")}))
        rows += part
        _log_part(write_part(out, part), part, len(rows), len(todo))
    return rows


def _log_part(path: Path | None, part: list[dict[str, Any]], done: int, total: int) -> None:
    """The job's progress, one line per finished batch (a long job is never silent)."""
    failed = sum(1 for r in part if r.get("error"))
    logger.info("batch: %d/%d prompts done; %s: %d rows, %d failed", done, total, path.name if path else "-",
                len(part), failed)


def _run_ray(todo: list[Record], args: dict[str, Any], address: str | None, num_workers: int, batch_size: int,
             out: Path) -> list[dict[str, Any]]:
    ray = _import_ray()
    _ray_init(address, num_workers)
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= num_workers else 0
    ds = ray.data.from_items([r.as_row() for r in todo], override_num_blocks=max(1, len(todo) // batch_size))
    results = ds.map_batches(BatchGenerator, fn_constructor_kwargs=args, batch_size=batch_size,
                             concurrency=num_workers, num_cpus=1, num_gpus=gpus, batch_format="numpy")
    rows: list[dict[str, Any]] = []
    for batch in results.iter_batches(batch_size=None, batch_format="numpy"):
        part = _rows(batch)
        rows += part
        _log_part(write_part(out, part), part, len(rows), len(todo))
    return rows


__all__ = ["BatchGenerator", "run_job"]
