"""Scale-out batch generation: JSONL prompts in, parquet + media files out, on one process or a Ray
cluster (``leapgen generate <modality> --input prompts.jsonl --output out/ [--ray ...]``)."""

from .records import read_records, read_results
from .runner import BatchGenerator, run_job

__all__ = ["BatchGenerator", "read_records", "read_results", "run_job"]
