"""Registry-driven: the logits processing added after the harness's plain case keeps every
distribution-exact causal sampler exact.

``tests/registry_harness.py`` checks each distribution-exact sampler by enumeration at temperature
1 with no filter. Here the same enumeration (``causal_enumeration``: 20,000 samples of the tiny
vocabulary-6 model, TV bound with delta = 1e-6) runs under ``min_p``, for every sampler the registry
lists as distribution-exact on the causal contract: a sampler whose draft or target path skipped
min-p (or applied it differently from ``LogitsProcessor``) would sample continuations the exact
joint gives probability 0. The power of the check is shown on ``ar`` with min-p dropped from the
decode loops' logits processor.
"""

from __future__ import annotations

import pytest
import torch
from registry_harness import bench, causal_enumeration

from leapgen.samplers import list_samplers, sampler_info
from leapgen.samplers.logits import LogitsProcessor

torch.set_num_threads(1)

EXACT = [s.name for s in list_samplers() if s.guarantee == "distribution-exact" and "causal" in s.contracts]
MIN_P = 0.2


def test_the_registry_has_distribution_exact_causal_samplers():
    assert {"ar", "speculative", "prompt_lookup", "spec_tree"} <= set(EXACT)


@pytest.mark.parametrize("name", EXACT)
def test_min_p_keeps_the_sampler_distribution_exact(name):
    emp, exact = causal_enumeration(sampler_info(name), bench("causal", "cpu"), min_p=MIN_P)
    assert (exact == 0).any(), "min-p must remove some continuations of the tiny model"
    assert emp[exact == 0].sum() == 0, f"{name}: a continuation min-p removes was generated"


def test_a_sampler_that_ignores_min_p_fails_the_check(monkeypatch):
    """Broken on purpose: the decode loops' logits processor ignores min-p (the exact joint, built
    with ``leapgen.samplers.logits.LogitsProcessor``, still applies it)."""
    import leapgen.samplers.runtime as runtime

    class NoMinP(LogitsProcessor):
        def __init__(self, config):
            super().__init__(config)
            self.min_p = 0.0

    monkeypatch.setattr(runtime, "LogitsProcessor", NoMinP)
    with pytest.raises(AssertionError, match="TV"):
        causal_enumeration(sampler_info("ar"), bench("causal", "cpu"), min_p=MIN_P)
