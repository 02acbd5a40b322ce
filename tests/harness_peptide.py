"""Registry-harness benches for the peptide contracts ``peptide-ctc`` (NAR CTC + precise mass
control) and ``peptide-bidirectional`` (the NAR-augmented AR decoder), on a tiny random
:class:`~leapgen.models.peptide.PeptideModel`."""

from __future__ import annotations

from typing import Any

from peptide_tiny import tiny_inputs, tiny_net
from registry_harness import Bench, generator, temperature_for

from leapgen.models.condition import EncoderInputs
from leapgen.models.peptide_lm import PeptideBiARLM, PeptideCTCLM
from leapgen.samplers import DecodeConfig, SamplerInfo, get_sampler


class _PeptideBench(Bench):
    roles = ("model",)
    batches = (1, 3)
    max_new_tokens = 8
    vocab = 21
    view: type

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.net = tiny_net(0, device)

    def models(self) -> dict[str, Any]:
        return {"model": self.view(self.net)}

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[1]] * batch, tiny_inputs(batch, device=self.device)

    def config(self, temperature: float) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=self.max_new_tokens, temperature=temperature, eos_token_id=1, pad_token_id=0)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        assert len(res.sequences) == batch
        for s in res.sequences:
            assert len(s) <= self.max_new_tokens and all(0 <= t < self.vocab for t in s)
            assert 0 not in s and 1 not in s[:-1]
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == sum(len(s) for s in res.sequences)
        assert st.target_forwards == models["model"].forwards > 0


class PeptideCTCBench(_PeptideBench):
    contract = "peptide-ctc"
    view = PeptideCTCLM


class PeptideBiBench(_PeptideBench):
    contract = "peptide-bidirectional"
    view = PeptideBiARLM

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        super().assert_valid(res, batch, models)
        assert res.stats.other_forwards == models["model"].nar_forwards == 1  # one NAR pass per call


def pmc_runs_validly(info: SamplerInfo, b: PeptideCTCBench) -> None:
    """Valid outputs at batch 1 and 3; every output (when the DP found one) is within the mass
    tolerance of its precursor; row r of the batch decodes as row r alone."""
    for batch in b.batches:
        for temperature in {temperature_for(info), 0.0}:
            models = b.models()
            res = b.run(info.name, batch, temperature=temperature, models=models)
            b.assert_valid(res, batch, models)
            masses = tiny_inputs(batch).extra["precursor_mass"].tolist()
            for s, m in zip(res.sequences, masses):
                assert abs(b.net.sequence_mass([t for t in s if t >= 2]) - m) <= 0.1
    full = b.run(info.name, 3)
    x = tiny_inputs(3, device=b.device)
    for r in range(3):
        n = int(x.attention_mask[r].sum())
        one = EncoderInputs(input_features=x.input_features[r : r + 1, :, :n],
                            extra={k: v[r : r + 1] for k, v in x.extra.items()})
        res = get_sampler(info.name).generate(b.models(), [[1]], b.config(0.0), generator(b.device, 0), cond=one)
        assert res.sequences[0] == full.sequences[r]


def bidirectional_greedy_identity(info: SamplerInfo, b: PeptideBiBench) -> None:
    """Greedy output equals a step-by-step greedy decode of the bidirectional decoder (uncached
    full forwards), at batch 1 and 3; outputs are valid."""
    import torch

    for batch in b.batches:
        models = b.models()
        res = b.run(info.name, batch, models=models)
        torch.set_grad_enabled(False)
        b.assert_valid(res, batch, models)
        view = models["model"]
        state = view.encode(tiny_inputs(batch, device=b.device))
        for r in range(batch):
            row = state.select_rows(torch.tensor([r], device=b.device))
            seq: list[int] = []
            for _ in range(b.max_new_tokens):
                cache = view._new_cache(1, row)
                n = len(view.stack.layers)
                layers = cache.cross_layers()
                inp = torch.tensor([[1] + seq], device=b.device)
                pos = torch.arange(inp.shape[1], device=b.device)[None]
                logits = view.stack(inp, pos, [(la.keys, la.values) for la in layers[:n]], row.mask,
                                    nar=[(la.keys, la.values) for la in layers[n:]],
                                    precursor_mass=row.extra["precursor_mass"],
                                    peaks=(row.extra["peak_mz"], row.extra["peak_intensity"], row.extra["peak_mask"]))
                nxt = int(logits[0, -1].argmax())
                seq.append(nxt)
                if nxt == 1:
                    break
            assert res.sequences[r] == seq, (r, res.sequences[r], seq)
        torch.set_grad_enabled(True)


BENCHES = {"peptide-ctc": PeptideCTCBench, "peptide-bidirectional": PeptideBiBench}
CHECKS = {("lossy", "peptide-ctc"): (pmc_runs_validly,), ("greedy-exact", "peptide-bidirectional"): (bidirectional_greedy_identity,)}
