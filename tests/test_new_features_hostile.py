"""Regression tests for bugs found by using the newest features as a hostile user would: stop
strings, chat prompts, concurrency mechanics, the CPU GEMM fast path and the TTS text normaliser.
Each test failed before its fix."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from leapgen import Pipeline, TextPipeline
from leapgen.errors import InputError
from leapgen.kernels import cpu_gemm
from leapgen.pipelines.text_stop import StopStrings
from leapgen.tokenizers.phones import clean_text
from leapgen.tokenizers.text_normalize import normalize_text

torch.set_num_threads(1)

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.from_pretrained("leapgen/text-code")


def chat_pipe(base, template):
    tok = copy.deepcopy(base.tokenizer)
    tok.chat_template = template
    return TextPipeline(base.model, tok, draft=base.draft)


# ---------------------------------------------------------------- stop strings
def test_a_multibyte_stop_string_ends_the_row_at_its_last_byte_token(pipe):
    """The byte-level BPE writes an emoji as four 1-byte tokens; the loop's check looked back
    len("😀") + 2 = 3 tokens and never saw it, so the row ran on (and was streamed) past the stop."""
    tok = pipe.tokenizer
    ids = tok.encode("print('😀 done')", add_special_tokens=False)
    stops = StopStrings(tok, ["😀"])
    first = next(k for k in range(1, len(ids) + 1) if "😀" in tok.decode(ids[:k]))
    assert [stops.reached(ids[:k]) for k in range(first - 1, first + 2)] == [False, True, True]
    assert stops.finish(ids)[0] == ids[:first]
    assert StopStrings(tok, ["\ud800x"]).window > 0  # a lone surrogate does not crash the window


# ---------------------------------------------------------------- chat prompts
def test_a_chat_template_that_renders_nothing_fails_that_item_alone(pipe):
    """Before: ``max()`` of no ids raised a raw ValueError that failed the whole batch."""
    cp = chat_pipe(pipe, "{% for m in messages %}{% endfor %}")
    out = cp([[{"role": "user", "content": "hi"}], "x = 1\n"], max_new_tokens=3)
    assert "no tokens" in out.errors[0] and out.texts[0] is None and out.texts[1] is not None
    with pytest.raises(InputError, match="no tokens"):
        cp([{"role": "user", "content": "hi"}], max_new_tokens=3)


def test_a_chat_ending_with_the_assistant_is_continued_as_transformers_does(pipe):
    """transformers' text-generation pipeline continues a final assistant message (a prefill);
    before, a new assistant header was appended after it."""
    cp = chat_pipe(pipe, TEMPLATE)
    chat = [{"role": "user", "content": "write add"}, {"role": "assistant", "content": "def add(a, b):"}]
    want = cp.tokenizer.apply_chat_template(chat, continue_final_message=True, add_generation_prompt=False,
                                            tokenize=False)
    assert want.endswith("def add(a, b):")
    out = cp(chat, max_new_tokens=4)
    assert out.prompt_token_ids[0] == cp.tokenizer(want, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- concurrency mechanics
def test_a_text_pipeline_still_copies_and_pickles(pipe):
    """The heads lock was a pipeline attribute: copy.deepcopy(pipe) and pickle raised TypeError."""
    want = pipe("def f(", max_new_tokens=4).token_ids
    assert copy.deepcopy(pipe)("def f(", max_new_tokens=4).token_ids == want
    assert pickle.loads(pickle.dumps(pipe))("def f(", max_new_tokens=4).token_ids == want


# ---------------------------------------------------------------- CPU GEMM
def test_packed_lean_weights_without_the_loaded_kernel_run_the_reference(pipe, monkeypatch):
    """A lean model packed in one process and unpickled in another has packed weights but no kernel:
    linear_rows raised AttributeError ('NoneType' has no 'small_m_gemm'); linear() fell back."""
    if not cpu_gemm.loaded():
        pytest.skip("the CPU GEMM kernel is not loaded here")
    want = pipe("def f(", max_new_tokens=6).token_ids
    monkeypatch.setattr(cpu_gemm, "_module", None)
    assert pipe("def f(", max_new_tokens=6).token_ids == want


def test_linear_rows_takes_a_strided_input():
    """A slice of a wider tensor raised the kernel's 'contiguous inputs only' RuntimeError."""
    if not cpu_gemm.available():
        pytest.skip("the CPU GEMM kernel cannot run here")
    w = torch.randn(64, 20)
    x = torch.randn(2, 3, 128)[:, :, :64]
    got = cpu_gemm.linear_rows(x, 20, None, cpu_gemm.pack(w))
    assert torch.equal(got, cpu_gemm.linear(x, w, None, cpu_gemm.pack(w)))


# ---------------------------------------------------------------- TTS text normaliser
@pytest.mark.parametrize("text", ["9" * 5000, "1" * 4400 + "th", "1" * 5000 + "/2", "$" + "7" * 5000],
                         ids=["cardinal", "ordinal", "fraction", "money"])
def test_a_number_past_pythons_int_string_limit_is_an_input_error(text):
    """Before: int() of more than 4300 digits raised a raw ValueError (and failed a whole TTS batch)."""
    for fn in (normalize_text, clean_text):
        with pytest.raises(InputError, match="too large to read"):
            fn(text)


@pytest.mark.parametrize(("text", "said"), [
    ("Dr.Dr.", "doctor doctor"),            # was "doctordoctor"
    ("Mr.Smith", "mister smith"),           # was "mistersmith"
    ("St.Louis", "saint louis"),            # was "streetlouis"
    ("7Mr.", "seven mister"),               # was "seven mr" (read differently a second time)
    ("e.g.apples", "for example apples"),   # was "for exampleapples"
    ("1¢", "one cent"),                     # was "one cents"
    ("1°", "one degree"),                   # was "one degrees"
    ("99¢ at 20°C", "ninety nine cents at twenty degrees celsius"),
])
def test_abbreviations_and_units_read_as_words(text, said):
    assert clean_text(text) == said
    assert normalize_text(normalize_text(text)) == normalize_text(text)


@pytest.mark.parametrize("text", ["1e10", "2.5E-3 m", "6e23"])
def test_scientific_notation_is_refused_not_read_as_letters(text):
    """Before: "1e10" was spoken "one e ten"."""
    with pytest.raises(InputError, match="scientific notation"):
        clean_text(text)
