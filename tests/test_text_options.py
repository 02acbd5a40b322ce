"""The text pipeline's generation controls that transformers and vLLM users expect: ``min_p``,
``min_new_tokens``, ``num_return_sequences``, ``logprobs`` and ``presence_penalty`` /
``frequency_penalty`` (the sampler-level guarantees of min_p, min_new_tokens and the penalties are
checked registry-wide in ``tests/test_processing_guarantees.py``)."""

from __future__ import annotations

import pytest
import torch

from leapgen import Pipeline
from leapgen.errors import ConfigError, InputError
from leapgen.samplers import list_samplers

torch.set_num_threads(1)

PROMPT = "def parse_args(argv):\n"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.from_pretrained("leapgen/text-code")


# ------------------------------------------------------------------------------------------ min_p


def test_min_p_one_samples_only_the_top_token(pipe):
    """min_p=1 keeps only the most likely token: sampling at temperature 1 is greedy decoding."""
    greedy = pipe(PROMPT, max_new_tokens=24).token_ids[0]
    for seed in (0, 1):
        sampled = pipe(PROMPT, max_new_tokens=24, temperature=1.0, min_p=1.0, seed=seed).token_ids[0]
        assert sampled == greedy
    loose = [pipe(PROMPT, max_new_tokens=24, temperature=1.5, seed=s).token_ids[0] for s in (0, 1)]
    assert any(x != greedy for x in loose)  # without min-p, temperature 1.5 leaves the greedy path


def test_min_p_reaches_the_speculative_samplers(pipe):
    greedy = pipe(PROMPT, max_new_tokens=24).token_ids[0]
    out = pipe(PROMPT, sampler="speculative", max_new_tokens=24, temperature=1.0, min_p=1.0, seed=3)
    assert out.token_ids[0] == greedy


@pytest.mark.parametrize("bad", [-0.5, 2.0, float("nan")])
def test_bad_min_p_is_a_config_error(pipe, bad):
    with pytest.raises(ConfigError, match="min_p must be in"):
        pipe(PROMPT, max_new_tokens=4, temperature=1.0, min_p=bad)


# ------------------------------------------------------------------------------------------ min_new_tokens


@pytest.fixture(scope="module")
def early_eos(pipe):
    """The shipped pipeline with its tokenizer's EOS set to the third token greedy decoding writes
    after PROMPT: greedy rows then end after 3 tokens unless min_new_tokens holds EOS back."""
    import copy

    ids = pipe(PROMPT, max_new_tokens=8).token_ids[0]
    tok = copy.deepcopy(pipe.tokenizer)
    tok.eos_token = tok.convert_ids_to_tokens(ids[2])
    short = copy.copy(pipe)
    short.tokenizer = tok
    assert short(PROMPT, max_new_tokens=20).token_ids[0] == ids[:3]
    return short


TEXT = [s for s in list_samplers() if set(s.contracts) & {"causal", "text-heads"}]
HONOURS = [s.name for s in TEXT if s.cls.honours_min_new_tokens() and s.name != "ar"]
REFUSES = [s.name for s in TEXT if not s.cls.honours_min_new_tokens()]


@pytest.mark.parametrize("sampler", HONOURS)
def test_min_new_tokens_greedy_samplers_equal_ar(early_eos, sampler):
    """Every text sampler that takes min_new_tokens (the text-heads ones included) is greedy ar with it."""
    eos = early_eos.tokenizer.eos_token_id
    ref = early_eos([PROMPT, "import os\n"], max_new_tokens=24, min_new_tokens=10)
    got = early_eos([PROMPT, "import os\n"], sampler=sampler, max_new_tokens=24, min_new_tokens=10)
    assert got.token_ids == ref.token_ids
    for ids in ref.token_ids:
        assert len(ids) >= 10 and eos not in ids[:10]


def test_min_new_tokens_sampled_rows_never_end_early(early_eos):
    eos = early_eos.tokenizer.eos_token_id
    free = [early_eos(PROMPT, max_new_tokens=16, temperature=0.3, seed=s).token_ids[0] for s in range(4)]
    assert any(len(x) < 8 for x in free)  # without the bound, sampled rows end early too
    for s in range(4):
        out = early_eos(PROMPT, sampler="speculative", max_new_tokens=16, min_new_tokens=8, temperature=0.3, seed=s)
        ids = out.token_ids[0]
        assert len(ids) >= 8 and eos not in ids[:8]


@pytest.mark.parametrize("sampler", REFUSES)
def test_min_new_tokens_refused_by_a_sampler_that_cannot_keep_it(early_eos, sampler):
    with pytest.raises(ConfigError, match=f"sampler {sampler!r}.*min_new_tokens=6.*speculative"):
        early_eos(PROMPT, sampler=sampler, max_new_tokens=8, min_new_tokens=6)


def test_bad_min_new_tokens_is_a_config_error(early_eos):
    with pytest.raises(ConfigError, match="min_new_tokens must be an integer >= 0"):
        early_eos(PROMPT, max_new_tokens=8, min_new_tokens=-2)


# ------------------------------------------------------------------------------------------ num_return_sequences


def test_num_return_sequences_is_prompt_major(pipe):
    prompts = [PROMPT, "import os\n"]
    out = pipe(prompts, max_new_tokens=12, temperature=1.0, seed=0, num_return_sequences=3)
    assert len(out.texts) == len(out.token_ids) == len(out.errors) == len(out.finish_reasons) == 6
    assert out.prompt_token_ids[:3] == [pipe.encode(PROMPT)[0]] * 3
    assert out.prompt_token_ids[3:] == [pipe.encode("import os\n")[0]] * 3
    assert len({tuple(t) for t in out.token_ids[:3]}) > 1  # independent samples, not one repeated
    # the same rows as a batch with each prompt written out three times (one generator, same seed)
    same = pipe([PROMPT] * 3 + ["import os\n"] * 3, max_new_tokens=12, temperature=1.0, seed=0)
    assert same.token_ids == out.token_ids


def test_num_return_sequences_with_greedy_is_refused(pipe):
    with pytest.raises(ConfigError, match="num_return_sequences=2 with greedy decoding"):
        pipe(PROMPT, max_new_tokens=4, num_return_sequences=2)
    assert len(pipe(PROMPT, max_new_tokens=4, num_return_sequences=1).texts) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 10_000])
def test_bad_num_return_sequences_is_refused(pipe, bad):
    with pytest.raises(InputError, match="num_return_sequences must be"):
        pipe(PROMPT, max_new_tokens=4, temperature=1.0, num_return_sequences=bad)


def test_num_return_sequences_a_bad_prompt_fails_alone(pipe):
    out = pipe([PROMPT, "", "x = 1\n"], max_new_tokens=6, temperature=1.0, seed=1, num_return_sequences=2)
    assert out.texts[2] is None and out.texts[3] is None and out.token_ids[2:4] == [None, None]
    assert out.errors[2] == out.errors[3] and "prompt 1 is empty" in out.errors[2]
    assert all(out.texts[i] is not None and out.errors[i] is None for i in (0, 1, 4, 5))


def test_num_return_sequences_refuses_a_streamer_for_several(pipe):
    class Sink:
        def put(self, value):
            pass

        def end(self):
            pass

    with pytest.raises(InputError, match="one sequence per call"):
        pipe(PROMPT, max_new_tokens=4, temperature=1.0, num_return_sequences=2, streamer=Sink())


# ------------------------------------------------------------------------------------------ logprobs


def _independent_logprobs(pipe, prompt_ids, ids):
    """log_softmax of the target's own forward over one row, no batching, no padding."""
    with torch.no_grad():
        logits = pipe.model(torch.tensor([prompt_ids + ids])).logits[0].double()
    lp = logits.log_softmax(-1)
    return [float(lp[len(prompt_ids) - 1 + t, tok]) for t, tok in enumerate(ids)], lp


def test_logprobs_greedy_are_the_raw_top_tokens(pipe):
    prompts = [PROMPT, "x = 1\n"]  # different lengths: the batched forward pads one row
    out = pipe(prompts, max_new_tokens=10, logprobs=3)
    for i in range(2):
        ids, lps, tops = out.token_ids[i], out.logprobs[i], out.top_logprobs[i]
        assert len(lps) == len(tops) == len(ids) == 10
        want, _ = _independent_logprobs(pipe, out.prompt_token_ids[i], ids)
        assert lps == pytest.approx(want, abs=1e-4)
        for t, tok in enumerate(ids):
            keys, vals = list(tops[t]), list(tops[t].values())
            assert len(keys) == 3 and vals == sorted(vals, reverse=True)
            assert keys[0] == tok and vals[0] == pytest.approx(lps[t])  # greedy took the raw argmax
            assert all(v <= 0 for v in vals)


def test_logprobs_are_the_same_for_every_sampler_and_raw_under_sampling(pipe):
    ref = pipe(PROMPT, max_new_tokens=12, logprobs=2)
    spec = pipe(PROMPT, sampler="speculative", max_new_tokens=12, logprobs=2)
    assert spec.token_ids == ref.token_ids and spec.logprobs[0] == pytest.approx(ref.logprobs[0], abs=1e-5)
    # sampled with a filter and a penalty: still the raw distribution (not the processed one)
    out = pipe(PROMPT, sampler="prompt_lookup", max_new_tokens=12, temperature=1.3, top_k=5, repetition_penalty=1.2,
               seed=4, logprobs=5)
    want, lp = _independent_logprobs(pipe, out.prompt_token_ids[0], out.token_ids[0])
    assert out.logprobs[0] == pytest.approx(want, abs=1e-4)
    raw_top = lp[len(out.prompt_token_ids[0]) - 1].topk(5)
    assert list(out.top_logprobs[0][0]) == raw_top.indices.tolist()


def test_logprobs_zero_off_bad_prompt_and_return_sequences(pipe):
    off = pipe(PROMPT, max_new_tokens=4)
    assert off.logprobs is None and off.top_logprobs is None
    out = pipe([PROMPT, ""], max_new_tokens=5, temperature=1.0, seed=2, num_return_sequences=2, logprobs=0)
    assert out.logprobs[2:] == [None, None] and out.top_logprobs[2:] == [None, None]
    for i in (0, 1):
        assert len(out.logprobs[i]) == len(out.token_ids[i]) and out.top_logprobs[i] == [{}] * len(out.token_ids[i])
        want, _ = _independent_logprobs(pipe, out.prompt_token_ids[i], out.token_ids[i])
        assert out.logprobs[i] == pytest.approx(want, abs=1e-4)
    tup = pipe(PROMPT, max_new_tokens=3, logprobs=1, return_dict=False)
    assert len(tup) == 9 and len(tup[7][0]) == 3 and len(tup[8][0]) == 3


def test_logprobs_follow_the_stop_cut(pipe):
    full = pipe(PROMPT, max_new_tokens=24).token_ids[0]
    stop = pipe.tokenizer.decode(full[10:12])
    out = pipe(PROMPT, max_new_tokens=24, stop=stop, logprobs=1)
    assert out.finish_reasons == ["stop"] and len(out.logprobs[0]) == len(out.token_ids[0]) < 24


@pytest.mark.parametrize("bad", [-1, 21, 2.0, True, "3"])
def test_bad_logprobs_is_a_config_error(pipe, bad):
    with pytest.raises(ConfigError, match="logprobs must be None"):
        pipe(PROMPT, max_new_tokens=2, logprobs=bad)


def test_diffusion_text_pipeline_refuses_logprobs():
    dllm = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    with pytest.raises(ConfigError, match="logprobs: DiffusionTextPipeline"):
        dllm("def add(a, b):", max_new_tokens=8, logprobs=2)


# ------------------------------------------------------------------------------------------ CLI


def test_cli_generate_text_takes_the_new_options(capsys):
    from leapgen.cli import main

    args = ["generate", "text", "def add(a, b):", "--max-new-tokens", "6", "--temperature", "0.8", "--seed", "1"]
    assert main(args + ["--min-p", "0.05", "--num-return-sequences", "2", "--logprobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "--- sample 0 ---" in out and "--- sample 1 ---" in out and "--- sample 2 ---" not in out
    assert out.count("logprob total") == 2 and "top: " in out
    assert main(["generate", "text", "def add(a, b):", "--max-new-tokens", "6", "--min-new-tokens", "4",
                 "--sampler", "speculative"]) == 0
    assert "new_tokens=6" in capsys.readouterr().out
    assert main(["generate", "text", "x", "--max-new-tokens", "4", "--min-new-tokens", "2", "--sampler", "bild"]) == 2
    assert "min_new_tokens=2" in capsys.readouterr().err
    assert main(["generate", "text", "x", "--max-new-tokens", "4", "--num-return-sequences", "2"]) == 2
    assert "greedy" in capsys.readouterr().err
    assert main(["generate", "text", "x", "--max-new-tokens", "4", "--min-p", "3"]) == 2
    assert "min_p" in capsys.readouterr().err


def test_cli_diffusion_pipeline_refuses_the_causal_only_options(capsys):
    from leapgen.cli import main

    for flag, value in (("--min-p", "0.1"), ("--min-new-tokens", "3"), ("--num-return-sequences", "2"),
                        ("--logprobs", "1")):
        argv = ["generate", "text", "x = ", "--pipeline", "leapgen/text-code-diffusion", flag, value]
        assert main(argv) == 2
        assert flag in capsys.readouterr().err


# ------------------------------------------------------------------------------ presence / frequency penalties


def _repeats(ids: list[int]) -> int:
    return len(ids) - len(set(ids))


def test_frequency_and_presence_penalties_stop_greedy_repetition(pipe):
    """Greedy decoding of the small code model repeats tokens; the penalties (keyword parameters
    after the existing ones) make repeats rarer, and every lossless sampler gives greedy ar's text."""
    plain = pipe(PROMPT, max_new_tokens=32).token_ids[0]
    pen = pipe(PROMPT, max_new_tokens=32, frequency_penalty=1.0, presence_penalty=1.0)
    ids = pen.token_ids[0]
    assert ids != plain and _repeats(ids) < _repeats(plain)
    for sampler in ("speculative", "prompt_lookup", "spec_tree"):
        got = pipe(PROMPT, sampler=sampler, max_new_tokens=32, frequency_penalty=1.0, presence_penalty=1.0)
        assert got.token_ids[0] == ids, sampler
    worse = pipe(PROMPT, max_new_tokens=32, frequency_penalty=-2.0).token_ids[0]  # negative: encourages repeats
    assert _repeats(worse) >= _repeats(plain)


def test_the_prompt_does_not_count(pipe):
    """Tokens of the prompt only are not penalised: the first generated token is unchanged."""
    plain = pipe(PROMPT, max_new_tokens=1).token_ids[0]
    assert pipe(PROMPT, max_new_tokens=1, presence_penalty=2.0, frequency_penalty=2.0).token_ids[0] == plain


@pytest.mark.parametrize("bad", [2.5, -3, float("nan")])
def test_bad_penalty_is_a_config_error(pipe, bad):
    with pytest.raises(ConfigError, match="presence_penalty must be a number in"):
        pipe(PROMPT, max_new_tokens=4, presence_penalty=bad)
    with pytest.raises(ConfigError, match="frequency_penalty must be a number in"):
        pipe(PROMPT, max_new_tokens=4, frequency_penalty=bad)


def test_a_sampler_that_cannot_count_refuses_the_penalties(pipe):
    dllm = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    with pytest.raises(ConfigError, match="presence_penalty"):
        dllm("def add(a, b):", max_new_tokens=8, presence_penalty=0.5)


def test_cli_generate_text_takes_the_penalties(capsys):
    from leapgen.cli import main

    base = ["generate", "text", "def add(a, b):", "--max-new-tokens", "8"]
    assert main(base + ["--presence-penalty", "0.8", "--frequency-penalty", "0.5", "--sampler", "ar,speculative"]) == 0
    out = capsys.readouterr().out
    ar, spec = out.split("--- speculative ---")
    text = lambda chunk: chunk.split("--- ar ---")[-1].split("sampler=")[0].strip("\n")  # noqa: E731
    assert text(ar) and text(ar) == text(spec)  # greedy: speculative gives ar's text
    assert main(base + ["--frequency-penalty", "2.5"]) == 2
    assert "frequency_penalty" in capsys.readouterr().err
    argv = ["generate", "text", "x = ", "--pipeline", "leapgen/text-code-diffusion", "--presence-penalty", "0.5"]
    assert main(argv) == 2
    assert "--presence-penalty" in capsys.readouterr().err
