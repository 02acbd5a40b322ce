"""Hostile sweep (3) of the latest text-pipeline features, as transformers / vLLM users try them:
``logprobs=k`` against a vocabulary smaller than k and over long prompts (only the generated
positions' logits), the per-call freshness check of the components under threads and its walk
of the parameters, and damaged side files of a pipeline folder (heads/, the learn2pd filter, the
example voice's text). Tiny models from conftest; each test well under a few seconds."""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import make_llama
from safetensors.torch import save_file

from leapgen import TextPipeline
from leapgen.errors import ConfigError
from leapgen.models.text_heads import TextHeads
from leapgen.pipelines import freshness
from leapgen.pipelines.base import resolve_pretrained
from leapgen.pipelines.text_logprobs import token_logprobs
from leapgen.pipelines.tts import TTSPipeline
from leapgen.samplers.masked.learn2pd import CommitFilter

torch.set_num_threads(1)


def _reference(model, prompt: list[int], out: list[int]) -> torch.Tensor:
    """log_softmax of the model's own forward over one row, no batching, no padding: [len(out), V]."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out])).logits[0].double()
    return logits.log_softmax(-1)[len(prompt) - 1 : len(prompt) - 1 + len(out)]


def test_logprobs_k_larger_than_the_vocabulary_lists_every_token_paired_right():
    """k=20 (the most one call may ask) on a model of 8 tokens: every position lists the 8 tokens with
    their own values (the ids were once read from the wrong slots of the transfer: misaligned pairs)."""
    model = make_llama(8, seed=5)
    prompts, outs = [[1, 2, 3], [4]], [[5, 6], [7, 0, 1]]
    lps, tops = token_logprobs(model, prompts, outs, 20)
    for p, o, lp, top in zip(prompts, outs, lps, tops):
        ref = _reference(model, p, o)
        assert torch.allclose(torch.tensor(lp, dtype=torch.double), ref[torch.arange(len(o)), torch.tensor(o)], atol=1e-5)
        for t in range(len(o)):
            assert sorted(top[t]) == list(range(8))
            assert list(top[t].values()) == sorted(top[t].values(), reverse=True)
            for tok, v in top[t].items():
                assert abs(v - float(ref[t, tok])) < 1e-5


def test_logprobs_forward_keeps_only_the_generated_positions(pipe):
    """The teacher-forced forward asks for the logits of the positions that predict generated tokens
    only (a long prompt times a large vocabulary was gigabytes of logits), and the values still equal
    an independent unbatched forward, rows of different prompt lengths, one cut by a stop string."""
    shapes: list[tuple[int, ...]] = []
    hook = pipe.model.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.logits.shape)))
    try:
        prompts = ["the quick brown fox jumps over the lazy dog. the dog", "x = 1\n"]
        out = pipe(prompts, max_new_tokens=6, temperature=1.0, seed=3, logprobs=2, stop=["e"], stop_at_eos=False)
    finally:
        hook.remove()
    lens = [len(p) for p in out.prompt_token_ids]
    width = max(p + len(o) for p, o in zip(lens, out.token_ids))
    # not the whole padded batch: the prompts are left-padded to one end column, so the forward keeps
    # the longest output's positions + 1 (hostile sweep 5), whatever the mix of prompt lengths
    assert shapes[-1][1] == max(len(o) for o in out.token_ids) + 1 <= width - min(lens) + 1 < width
    for p, ids, lp, top in zip(out.prompt_token_ids, out.token_ids, out.logprobs, out.top_logprobs):
        ref = _reference(pipe.model, p, ids)
        assert len(lp) == len(top) == len(ids)
        assert torch.allclose(torch.tensor(lp, dtype=torch.double), ref[torch.arange(len(ids)), torch.tensor(ids)],
                              atol=1e-4)
        assert [list(d) for d in top] == ref.topk(2, dim=-1).indices.tolist()


def test_threads_that_find_one_change_rebuild_the_adapters_once(tokenizer, pipe_models):
    """Three threads call one pipeline after its model changed in place: one rebuild (the others wait
    for it), not one lean copy of the weights per thread; every call decodes the changed weights."""
    target = copy.deepcopy(pipe_models[0])
    pipe = TextPipeline(model=target, tokenizer=tokenizer)
    with torch.no_grad():
        target.lm_head.weight.mul_(-1.0)  # a real change: the lean runtime's copy is stale
    want = TextPipeline(model=copy.deepcopy(target), tokenizer=tokenizer)("x = 1\n", max_new_tokens=4).token_ids
    rebuild = pipe._on_change

    def slow_rebuild() -> None:  # widens the window in which the other threads find the change too
        time.sleep(0.3)
        rebuild()

    pipe._on_change = slow_rebuild
    start, got = threading.Barrier(3), {}

    def call(i: int) -> None:
        start.wait()
        got[i] = pipe("x = 1\n", max_new_tokens=4).token_ids

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert freshness.rebuild_count(pipe) == 1
    assert got == {0: want, 1: want, 2: want}


def test_the_key_walks_every_parameter_once_per_module_and_follows_a_replaced_one():
    """The key's walk of the module dicts sees the parameters ``parameters()`` sees (tied ones and a
    shared submodule included, a cycle does not hang it), and a parameter replaced changes the key."""
    model = make_llama(16, seed=2)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied
    model.extra = model.model.layers[0]  # a submodule registered twice
    model.model.layers[1].loop = model.model  # a cycle
    walked = list(freshness._tensors(model))  # parameters and buffers (hostile sweep 5: buffers count too)
    assert {id(p) for p in walked} == {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}

    class Holder:
        components = ("model",)

    holder = Holder()
    holder.model = model
    before = freshness.components_key(holder)
    assert freshness.components_key(holder) == before
    model.model.norm.weight = torch.nn.Parameter(model.model.norm.weight.detach().clone())
    assert freshness.components_key(holder) != before


def test_a_damaged_heads_folder_names_the_file(tmp_path):
    """A pipeline's heads/ (copied by save_pretrained, read on the first chimera / first / judge call)
    that is damaged raised a raw JSONDecodeError / SafetensorError / load_state_dict RuntimeError; now
    a ConfigError naming the file, as a damaged component folder does."""
    TextHeads(8, 2, parts=("chimera",)).save(tmp_path)
    assert TextHeads.load(tmp_path).dim == 8
    good = (tmp_path / "config.json").read_text()
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match=r"config\.json cannot be read \(JSONDecodeError"):
        TextHeads.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in json.loads(good).items() if k != "dim"}))
    with pytest.raises(ConfigError, match=r"config\.json cannot be read \(KeyError"):
        TextHeads.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**json.loads(good), "dim": 16}))  # other shapes
    with pytest.raises(ConfigError, match=r"model\.safetensors cannot be read \(RuntimeError"):
        TextHeads.load(tmp_path)
    (tmp_path / "config.json").write_text(good)
    with open(tmp_path / "model.safetensors", "r+b") as fh:
        fh.truncate(20)
    with pytest.raises(ConfigError, match=r"model\.safetensors cannot be read"):
        TextHeads.load(tmp_path)


def test_a_damaged_learn2pd_filter_or_example_voice_text_names_the_file(tmp_path):
    """The other files save_pretrained now copies beside the components: a truncated or foreign
    learn2pd_filter.safetensors raised a raw SafetensorError / KeyError at the learn2pd call, and a
    damaged examples/prompt.json a raw JSONDecodeError at a TTS call without prompt_audio."""
    path = tmp_path / "learn2pd_filter.safetensors"
    CommitFilter(32).save(path)
    assert CommitFilter.load(path).block_length == 32
    save_file({"other": torch.zeros(2)}, str(path))
    with pytest.raises(ConfigError, match=r"learn2pd_filter\.safetensors cannot be read as a Learn2PD commit filter \(KeyError"):
        CommitFilter.load(path)
    with open(path, "r+b") as fh:
        fh.truncate(20)
    with pytest.raises(ConfigError, match=r"cannot be read as a Learn2PD commit filter \(SafetensorError"):
        CommitFilter.load(path)
    # the TTS example voice's text (read only when no prompt_audio is given): no TTS model is needed
    folder = tmp_path / "tts"
    folder.mkdir()
    shutil.copy(_shipped("tts-en") / "model_index.json", folder)
    shutil.copytree(_shipped("tts-en") / "examples", folder / "examples")
    (folder / "examples" / "prompt.json").write_text("{")
    pipe = object.__new__(TTSPipeline)
    pipe.name_or_path = str(folder)
    with pytest.raises(ConfigError, match=r"prompt\.json cannot be read \(JSONDecodeError"):
        pipe._example_prompt(None)


def _shipped(name: str) -> Path:
    return Path(resolve_pretrained(f"leapgen/{name}"))
