"""Registry-harness bench for the ``text-heads`` contract (merged into tests/registry_harness.py):
conftest's tiny random Llama on the lean runtime, seen through
:class:`~leapgen.models.text_heads.HeadedLM` with randomly initialised
:class:`~leapgen.models.text_heads.TextHeads` (Chimera heads, judge head, FiRST routers biased
to skip, a bigram table of a random stream), and conftest's close draft as ``draft``.

Checks: distribution-exact samplers (``chimera``) equal greedy ``ar`` on the plain lean target at
batch 1 and 4, and sample the exact joint of the vocabulary-6 model within the TV bound
(test_distribution's enumeration); lossy ones run validly (``runs_validly``)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from conftest import VOCAB, make_llama, perturbed_copy
from registry_harness import CausalBench, dist_setup, generator, runs_validly
from test_distribution import N_SAMPLES, tv, tv_bound
from test_greedy_identity import PROMPTS_1, PROMPTS_4

from leapgen.models import HFCausalLM
from leapgen.models.lean import LeanCausalLM
from leapgen.models.text_heads import HeadedLM, NGram, TextHeads, fingerprint
from leapgen.samplers import DecodeConfig, SamplerInfo, get_sampler


def random_heads(lean: LeanCausalLM, seed: int = 0) -> TextHeads:
    """Untrained heads for ``lean`` (routers biased so that some layer is skipped)."""
    torch.manual_seed(seed)
    c = lean.net.c
    heads = TextHeads(c.hidden_size, c.n_layers, k=3, target=fingerprint(lean.net))
    with torch.no_grad():
        heads.routers.b.fill_(0.0)
        heads.routers.w.normal_(0, 1.0)
    g = torch.Generator().manual_seed(seed)
    heads.ngram = NGram.from_stream(torch.randint(0, c.vocab_size, (4000,), generator=g), c.vocab_size, min_count=1)
    return heads.eval()


class TextHeadsBench(CausalBench):
    contract = "text-heads"
    roles = ("model", "draft")

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.lean = LeanCausalLM.from_hf(self.target)
        self.heads = random_heads(self.lean)

    def models(self, far: bool = False) -> dict[str, Any]:
        return {"model": HeadedLM(LeanCausalLM.from_hf(self.target), self.heads),
                "draft": HFCausalLM(self.far if far else self.draft)}

    def plain(self) -> dict[str, Any]:
        return {"model": LeanCausalLM.from_hf(self.target)}


def heads_greedy_identity(info: SamplerInfo, b: TextHeadsBench) -> None:
    """Greedy output == greedy ``ar`` on the same target without heads, batch 1 and 4."""
    for batch in b.batches:
        prompts = [list(p) for p in (PROMPTS_1 if batch == 1 else PROMPTS_4[:batch])]
        ref = get_sampler("ar").generate(b.plain(), prompts, b.config(0.0), generator(b.device, 0))
        got = b.run(info.name, batch)
        assert got.sequences == ref.sequences, f"{info.name}: differs from greedy ar at batch {batch}"


@functools.cache
def dist_headed(device: str):
    setup, target, _, exact = dist_setup(device)
    lean = LeanCausalLM.from_hf(target)
    return setup, lean, random_heads(lean, seed=1), exact


def heads_enumeration(info: SamplerInfo, b: TextHeadsBench) -> None:
    """20,000 samples at T=1 within the TV bound of the exact joint; both verification branches run."""
    setup, lean, heads, exact = dist_headed(b.device)
    config = DecodeConfig(max_new_tokens=setup.new, temperature=1.0)
    smp = get_sampler(info.name)
    gen = generator(b.device, 2000 + len(info.name))
    counts = np.zeros(setup.vocab**setup.new, dtype=np.int64)
    weights = setup.vocab ** np.arange(setup.new - 1, -1, -1)
    drafted = accepted = 0
    batch = 2500
    for _ in range(N_SAMPLES // batch):
        res = smp.generate({"model": HeadedLM(lean, heads)}, [list(setup.prompt)] * batch, config, gen)
        seqs = np.array(res.sequences)
        counts += np.bincount(seqs @ weights, minlength=len(counts))
        drafted, accepted = drafted + res.stats.drafted_tokens, accepted + res.stats.accepted_draft_tokens
    dist, bound = tv(counts / N_SAMPLES, exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"{info.name}: TV {dist:.4f} >= bound {bound:.4f}"
    assert 0 < accepted < drafted, f"{info.name}: both branches of verification must run ({accepted}/{drafted})"


_ = (VOCAB, make_llama, perturbed_copy)  # the bench's models come from conftest through CausalBench

BENCHES = {"text-heads": TextHeadsBench}
CHECKS = {
    ("distribution-exact", "text-heads"): (heads_greedy_identity, heads_enumeration),
    ("greedy-exact", "text-heads"): (heads_greedy_identity,),
    ("lossy", "text-heads"): (runs_validly,),
}
