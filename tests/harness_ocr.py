"""Registry-harness bench for the OCR contract ``cppd`` (merged into tests/registry_harness.py): a
tiny random :class:`~leapgen.models.ocr.OCRModel` seen through :class:`~leapgen.models.ocr_lm.CPPDLM`.
CPPD decides the reading's length itself (cut at ``</s>``), so validity is checked without the
fixed-length rule of the AR benches."""

from __future__ import annotations

from typing import Any

from ocr_tiny import tiny_inputs, tiny_net
from registry_harness import Bench, generator, temperature_for

from leapgen.models.condition import EncoderInputs
from leapgen.models.ocr_lm import CPPDLM
from leapgen.samplers import DecodeConfig, SamplerInfo, get_sampler


class CPPDBench(Bench):
    contract = "cppd"
    roles = ("model",)
    batches = (1, 3)
    max_new_tokens = 7
    vocab = 38

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = tiny_net(0, device)

    def models(self) -> dict[str, Any]:
        return {"model": CPPDLM(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[1]] * batch, tiny_inputs(batch, device=self.device)

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=self.max_new_tokens, temperature=temperature, eos_token_id=1, pad_token_id=0)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        assert len(res.sequences) == batch
        for s in res.sequences:
            assert len(s) <= self.max_new_tokens and all(0 <= t < self.vocab for t in s)
            assert 1 not in s[:-1], "nothing may follow the end token"
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == sum(len(s) for s in res.sequences)
        assert st.target_forwards == models["model"].forwards == 1
        assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens


def cppd_runs_validly(info: SamplerInfo, b: CPPDBench) -> None:
    """Valid outputs at batch 1 and 3, T=0 and T=1; row r of a batch reads exactly as row r alone."""
    for batch in b.batches:
        for temperature in {temperature_for(info), 0.0}:
            models = b.models()
            b.assert_valid(b.run(info.name, batch, temperature=temperature, models=models), batch, models)
    full = b.run(info.name, 3)
    assert any(len(s) > 1 for s in full.sequences)
    x = tiny_inputs(3, device=b.device).input_features
    for r in range(3):
        single = EncoderInputs(input_features=x[r : r + 1])
        res = get_sampler(info.name).generate(b.models(), [[1]], b.config(0.0), generator(b.device, 0), cond=single)
        assert res.sequences[0] == full.sequences[r], (info.name, r)


BENCHES = {"cppd": CPPDBench}
CHECKS = {("lossy", "cppd"): (cppd_runs_validly,)}
