"""Registry-harness benches for the ASR contracts ``paraformer`` and ``ctc`` (merged into
tests/registry_harness.py): a tiny random :class:`~leapgen.models.asr.ASRModel` seen through
:class:`~leapgen.models.asr_lm.ParaformerLM` / :class:`~leapgen.models.asr_lm.CTCLM`, fed
``EncoderInputs`` of rows with different lengths. NAR samplers decide the output length themselves
(CIF / CTC), so validity is checked without the fixed-length rule of the AR benches."""

from __future__ import annotations

from typing import Any

from asr_tiny import tiny_inputs, tiny_net
from registry_harness import Bench, generator, temperature_for

from leapgen.models.asr_lm import CTCLM, ParaformerLM
from leapgen.samplers import SamplerInfo, get_sampler


class _ASRBench(Bench):
    roles = ("model",)
    batches = (1, 3)
    max_new_tokens = 16
    vocab = 24
    view: type

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = tiny_net(0, device)

    def models(self) -> dict[str, Any]:
        return {"model": self.view(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[1]] * batch, tiny_inputs(batch, device=self.device)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        assert len(res.sequences) == batch
        for s in res.sequences:
            assert len(s) <= self.max_new_tokens and all(0 <= t < self.vocab for t in s)
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == sum(len(s) for s in res.sequences)
        assert st.target_forwards == models["model"].forwards == 1
        assert sum(n for step in st.accepted_per_step for n in step) == st.new_tokens
        assert st.extra["decoder_time"] >= 0 and st.extra["encoder_time"] >= 0


class ParaformerBench(_ASRBench):
    contract = "paraformer"
    view = ParaformerLM


class CTCBench(_ASRBench):
    contract = "ctc"
    view = CTCLM


def nar_runs_validly(info: SamplerInfo, b: _ASRBench) -> None:
    """Lossy NAR samplers: valid outputs at batch 1 and 3, T=0 and T=1; and row r of the batch
    decodes exactly as row r alone (padding never changes a row)."""
    for batch in b.batches:
        for temperature in {temperature_for(info), 0.0}:
            models = b.models()
            res = b.run(info.name, batch, temperature=temperature, models=models)
            b.assert_valid(res, batch, models)
            if any(res.sequences) and batch > 1:
                assert any(len(s) > 0 for s in res.sequences)
    full = b.run(info.name, 3)
    for r in range(3):
        one = tiny_inputs(3, device=b.device)
        n = int(one.attention_mask[r].sum())
        from leapgen.models.condition import EncoderInputs

        single = EncoderInputs(input_features=one.input_features[r : r + 1, :, :n])
        res = get_sampler(info.name).generate(b.models(), [[1]], b.config(0.0), generator(b.device, 0), cond=single)
        assert res.sequences[0] == full.sequences[r], (info.name, r)


BENCHES = {"paraformer": ParaformerBench, "ctc": CTCBench}
CHECKS = {("lossy", "paraformer"): (nar_runs_validly,), ("lossy", "ctc"): (nar_runs_validly,)}
