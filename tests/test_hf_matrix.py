"""Any transformers causal LM: every exact text sampler against transformers' own greedy ``generate``.

The matrix is architectures (``tests/hf_zoo.py``: the families of issue 10 plus one model per
further attention variant: sliding windows narrower than the sequence, mixed sliding/full
layers, soft-capping, ALiBi three ways, q/k norms, partial rotary, MQA/GQA, NoPE layers ...)
times the registered samplers whose guarantee is greedy-exact or distribution-exact and whose
models a causal LM (+ a draft of the same family) satisfies. Nothing is hand-listed: a newly
registered sampler or zoo entry is covered by the matrix.

Each pair runs at batch 1 and batch 3 (prompts of different lengths; each row is compared with
``generate`` on that prompt alone, since transformers counts left padding inside a sliding
window). A pair either matches token for token or is refused when the call starts with a
``ModelMismatchError`` naming a capability the model declares it lacks; the declared gaps are
themselves pinned below, so a refusal can never hide a regression.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hf_zoo import ZOO, build_pair

from leapgen.errors import ModelMismatchError
from leapgen.models import HFCausalLM
from leapgen.samplers import DecodeConfig, get_sampler, list_samplers

NEW = 24
PROMPTS_1 = [[5, 17, 3, 17, 5, 9, 5, 17]]
PROMPTS_3 = [[5, 17, 3, 17, 5, 9, 5, 17], [1, 2, 3], [40, 41, 40, 41, 7, 8, 9, 10, 40, 41, 40, 41]]
EXACT = ("greedy-exact", "distribution-exact")
BUILDABLE = {"model", "draft"}
SAMPLERS = [
    s.name
    for s in list_samplers()
    if "causal" in s.contracts and s.guarantee in EXACT and set(s.needs) <= BUILDABLE
]

#: smaller settings where a sampler's defaults cost many draft forwards (the defaults are covered
#: by tests/test_greedy_identity.py); keeps this file fast
PARAMS = {"spectr": {"num_candidates": 2}}

#: what each zoo model declares it cannot do (anything else must run and match)
DECLARED_GAPS = {"mpt": {"ragged_rows"}, "gpt_neo_local": {"tree_mask", "ragged_rows"}}


@functools.cache
def models(arch: str):
    return build_pair(arch)


@functools.cache
def reference(arch: str, prompt: tuple[int, ...]) -> list[int]:
    """transformers' greedy continuation of one prompt (batch 1, no padding)."""
    target, _ = models(arch)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            pad_token_id=0,
            eos_token_id=None,
        )
    return out[0, len(prompt) :].tolist()


def decode(arch: str, sampler: str, prompts: list[list[int]]):
    target, draft = models(arch)
    available = {"model": HFCausalLM(target), "draft": HFCausalLM(draft)}
    smp = get_sampler(sampler, **PARAMS.get(sampler, {}))
    return smp.generate(
        {k: available[k] for k in smp.needs},
        [list(p) for p in prompts],
        DecodeConfig(max_new_tokens=NEW, pad_token_id=0),
        torch.Generator().manual_seed(0),
    )


def test_matrix_is_populated():
    assert {"ar", "speculative", "prompt_lookup", "spec_tree", "aded"} <= set(SAMPLERS)
    assert len(ZOO) >= 20


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_declared_capabilities(arch):
    lm = HFCausalLM(models(arch)[0])
    assert set(lm.unsupported) == DECLARED_GAPS.get(arch, set()), lm.unsupported
    for cap, reason in lm.unsupported.items():
        assert not lm.supports(cap) and len(reason) > 20


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("arch", sorted(ZOO))
def test_greedy_identity_with_transformers_generate(arch, sampler):
    gaps = DECLARED_GAPS.get(arch, set())
    refused = []
    for prompts in (PROMPTS_1, PROMPTS_3):
        try:
            got = decode(arch, sampler, prompts)
        except ModelMismatchError as err:
            msg = str(err)
            named = [cap for cap in gaps if cap in msg]
            assert named, f"{arch}/{sampler}: refused without naming a declared gap: {msg}"
            assert sampler in msg and "does not support" in msg
            if len(prompts) > 1:
                assert "ragged_rows" in named or "tree_mask" in named
            refused.append((len(prompts), named))
            continue
        for i, (row, prompt) in enumerate(zip(got.sequences, prompts)):
            ref = reference(arch, tuple(prompt))
            assert row == ref, (
                f"{arch} / {sampler} / batch {len(prompts)} row {i} differs from transformers' generate:\n"
                f"  got {row}\n  ref {ref}"
            )
    if "ragged_rows" in gaps:  # every sampler needs ragged rows at batch 3
        assert any(b == 3 for b, _ in refused), f"{arch}/{sampler}: batch 3 should have been refused"
    if not gaps:
        assert not refused


def test_tree_samplers_refuse_slot_counted_windows():
    """GPT-Neo's local window counts slots: every tree sampler of the causal contract must refuse
    it even at batch 1 (``hidden_transfer`` runs on the text-heads contract only, which an HF model
    never offers: it is refused earlier, for its contract)."""
    trees = [s.name for s in list_samplers() if s.family == "ar-tree" and "causal" in s.contracts]
    assert trees
    for name in trees:
        with pytest.raises(ModelMismatchError, match="tree_mask"):
            decode("gpt_neo_local", name, PROMPTS_1)


def test_wrapping_leaves_generate_alone():
    """The ALiBi hooks only act inside the adapter's forward: the model's own generate is unchanged."""
    for arch in ("bloom", "falcon_alibi", "mpt"):
        target, _ = models(arch)
        before = reference.__wrapped__(arch, tuple(PROMPTS_1[0]))
        HFCausalLM(target)
        decode(arch, "ar", PROMPTS_1)
        assert reference.__wrapped__(arch, tuple(PROMPTS_1[0])) == before


def test_recurrent_models_are_refused():
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=96, hidden_size=16, num_hidden_layers=1, state_size=4)
    with pytest.raises(ModelMismatchError, match="rolled back"):
        HFCausalLM(MambaForCausalLM(cfg))


def test_decoding_raises_no_deprecation_warnings():
    """The adapters pass the KV cache by the name the installed transformers takes (``cache`` on
    5.2x, where ``past_key_values`` warns on every forward)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        for arch in ("llama", "gpt2"):
            decode(arch, "ar", PROMPTS_1)
