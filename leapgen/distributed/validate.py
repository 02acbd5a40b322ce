"""What a batch job's lines and ``--param`` may hold, checked against the pipeline's call before
any weights load (:func:`leapgen.pipelines.signature.call_signature`).

A job parameter the call does not take refuses the whole job (:class:`ConfigError`, nothing is
written). A line that lacks a required key (``prompt``, ``text``...) or has keys the call does not
take is an error entry with its line number and what is wrong, and the other lines run; so is a
bare JSON string when the call takes no input (e.g. molecule generation). The same check runs for
the CLI, :func:`leapgen.distributed.run_job` in Python, and Ray jobs."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..pipelines.signature import CallSignature, pipeline_signature
from .records import Record


def _sampler_keys() -> frozenset[str]:
    from ..samplers import list_samplers

    return frozenset(k for info in list_samplers() for k in info.defaults)


@dataclass(frozen=True)
class LineChecker:
    """The call of one pipeline, and the keys that may go on to its sampler."""

    pipeline: str
    cls_name: str
    sig: CallSignature
    sampler_keys: frozenset[str]

    @classmethod
    def for_pipeline(cls, pipeline: str) -> LineChecker:
        klass, sig = pipeline_signature(pipeline)
        return cls(pipeline, klass.__name__, sig, _sampler_keys())

    def unknown(self, keys: list[str]) -> list[str]:
        return [k for k in keys if k not in self.sig.names and not (self.sig.sampler_params and k in self.sampler_keys)]

    def _suggest(self, key: str) -> str:
        if key == "prompt" and self.sig.input_name:
            return f" (this pipeline's input is {self.sig.input_name!r})"
        pool = list(self.sig.names) + (sorted(self.sampler_keys) if self.sig.sampler_params else [])
        close = difflib.get_close_matches(key, pool, n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""

    def check_params(self, params: dict[str, Any]) -> None:
        """Refuse job parameters the call does not take (ConfigError naming what it takes)."""
        unknown = self.unknown(list(params))
        if unknown:
            raise ConfigError(f"--param {', '.join(unknown)}: {self.cls_name} ({self.pipeline}) takes no such argument; "
                              f"it takes {self.sig.describe()}.")

    def problem(self, data: dict[str, Any], job_keys: set[str] | frozenset[str] = frozenset()) -> str | None:
        """What is wrong with one line's object (None = fine): the required keys it lacks (the job's
        ``--param`` counts) and the keys the call does not take."""
        missing = [k for k in self.sig.required if k not in data and k not in job_keys]
        unknown = self.unknown(list(data))
        if not missing and not unknown:
            return None
        parts = []
        if missing:
            parts.append(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}")
        if unknown:
            parts.append("unknown key" + ("s " if len(unknown) > 1 else " ") + ", ".join(repr(k) + self._suggest(k) for k in unknown))
        example = json.dumps({k: "..." for k in self.sig.required} or {"seed": 0})
        return f"{'; '.join(parts)}. A {self.cls_name} line takes {self.sig.describe()}, e.g. {example}."

    def split(self, records: list[Record], params: dict[str, Any]) -> tuple[list[Record], list[dict[str, Any]]]:
        """The records that can run, and one error entry (line, error, text) per one that cannot."""
        good, errors = [], []
        for record in records:
            if record.bare and self.sig.input_name is None:
                error = (f"a bare string is no {self.cls_name} call; give a JSON object, e.g. {{\"seed\": 0}} "
                         f"(it takes {self.sig.describe()}).")
            else:
                error = self.problem(record.data, set(params))
            if error is None:
                good.append(record)
            else:
                errors.append({"line": record.line, "error": error, "text": json.dumps(record.data)[:200]})
        return good, errors


__all__ = ["LineChecker"]
