"""Pipelines refuse, when the call starts, a sampler whose model contracts do not match their models.

Each pipeline declares the contracts of its models (``Pipeline.contracts`` / ``model_contracts()``:
text and image pipelines drive a causal LM; the molecule pipeline a masked model, plus a causal one
when it has an ``ar_model``), and :meth:`Pipeline.check_sampler` names, from the registry, the
samplers that can run on it.
"""

from __future__ import annotations

import pytest
from test_image_pipeline import make_pipe
from test_molecule_pipeline import HIST, _tiny_pipeline

from leapgen.errors import ConfigError, ModelMismatchError
from leapgen.pipelines import MoleculePipeline
from leapgen.samplers import get_sampler, list_samplers


def runnable(*contracts: str, lacks: tuple[str, ...] = ()) -> list[str]:
    """The registered samplers of ``contracts``, less those needing a model feature in ``lacks``."""
    return [s.name for s in list_samplers()
            if set(s.contracts) & set(contracts) and not set(get_sampler(s.name).model_features()) & set(lacks)]


def assert_names(err: pytest.ExceptionInfo, sampler: str, offered: tuple[str, ...], lacks: tuple[str, ...] = ()) -> None:
    msg = str(err.value)
    assert f"sampler {sampler!r} runs on" in msg
    tail = msg.split("samplers that can run on it:")[1]
    assert all(name in tail for name in runnable(*offered, lacks=lacks)), msg
    assert sampler not in tail.split(". ")[0].split(", "), msg


def test_text_pipeline_refuses_masked_samplers(pipe):
    assert pipe.model_contracts() == ("causal",)
    for sampler in ("maskgit", get_sampler("genmol")):
        name = sampler if isinstance(sampler, str) else sampler.name
        with pytest.raises(ModelMismatchError) as err:
            pipe("def f", sampler=sampler, max_new_tokens=2)
        assert_names(err, name, ("causal",))
        assert "masked models" in str(err.value)
    assert len(pipe("def f", sampler="ar", max_new_tokens=2).token_ids[0]) >= 1


def test_image_pipeline_refuses_masked_samplers():
    pipe = make_pipe()
    assert pipe.model_contracts() == ("causal",)
    with pytest.raises(ModelMismatchError) as err:
        pipe("animals", sampler="maskgit")
    assert_names(err, "maskgit", ("causal",), tuple(pipe.model_lacks))  # gear: LlamaGen has no lean cache
    assert "gear" not in str(err.value).split("samplers that can run on it:")[1]


def test_molecule_pipeline_offers_causal_only_with_an_ar_model():
    full = _tiny_pipeline()
    assert full.model_contracts() == ("masked", "causal")
    full.check_sampler("ar")
    full.check_sampler("maskgit")
    masked_only = MoleculePipeline(full.model, None, full.tokenizer, length_histogram=HIST)
    assert masked_only.model_contracts() == ("masked",)
    for sampler in ("ar", "speculative"):
        with pytest.raises(ModelMismatchError) as err:
            masked_only(num_samples=2, sampler=sampler)
        assert_names(err, sampler, ("masked",))
        assert "no ar_model" in str(err.value)
    assert issubclass(ModelMismatchError, ConfigError)  # callers catching ConfigError keep working
