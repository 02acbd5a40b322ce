"""Registry-harness bench for the S2ST contract ``dag`` (merged into tests/registry_harness.py): a tiny
random :class:`~leapgen.models.s2st.S2STModel` seen through :class:`~leapgen.models.s2st_lm.DAGLM`,
fed ``EncoderInputs`` of rows with different lengths. DAG samplers decide the output length
themselves (the path), so validity is checked as for the other NAR benches (harness_asr)."""

from __future__ import annotations

from typing import Any

from asr_tiny import tiny_inputs
from harness_asr import nar_runs_validly
from registry_harness import Bench
from s2st_tiny import tiny_net

from leapgen.models.s2st_lm import DAGLM


class DAGBench(Bench):
    contract = "dag"
    roles = ("model",)
    batches = (1, 3)
    max_new_tokens = 16
    vocab = 24

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = tiny_net(0, device)

    def models(self) -> dict[str, Any]:
        return {"model": DAGLM(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[1]] * batch, tiny_inputs(batch, device=self.device)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        assert len(res.sequences) == batch
        for s, a in zip(res.sequences, res.alignment):
            assert len(s) <= self.max_new_tokens and all(2 <= t < self.vocab for t in s)
            assert len(a) == len(s) and a == sorted(set(a))  # one increasing vertex per token
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == sum(len(s) for s in res.sequences)
        assert st.target_forwards == models["model"].forwards == 1
        assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens


BENCHES = {"dag": DAGBench}
CHECKS = {("lossy", "dag"): (nar_runs_validly,)}
