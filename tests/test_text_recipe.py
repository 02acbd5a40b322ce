"""The text-code recipe end to end with tiny budgets: it writes a pipeline folder that loads offline."""

from __future__ import annotations

import json

from leapgen import Pipeline, TextPipeline


def test_text_recipe_smoke(tmp_path):
    from leapgen.train.text_code import main

    out = tmp_path / "tc"
    m = main(out_dir=out, target_tokens=4000, draft_tokens=4000, eval_tokens=2000, batch_size=2)
    index = json.loads((out / "model_index.json").read_text())
    assert index["_class_name"] == "TextPipeline"
    assert index["model"] == ["transformers", "LlamaForCausalLM"] and index["draft"][1] == "LlamaForCausalLM"
    assert m["target_params"] > m["draft_params"] > 0
    pipe = Pipeline.from_pretrained(out)
    assert isinstance(pipe, TextPipeline)
    res = pipe("def f(", sampler="speculative", max_new_tokens=6)
    assert len(res.token_ids[0]) == 6
