"""Chat prompts of the text pipeline (``leapgen.pipelines.text_chat``): a list of messages is rendered
by the tokenizer's chat template with the generation prompt, exactly as transformers renders it."""

from __future__ import annotations

import copy

import pytest
import torch

from leapgen import Pipeline, TextPipeline
from leapgen.errors import InputError

torch.set_num_threads(1)

# a minimal ChatML-style template (the shipped code model has none)
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CHAT = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def add(a, b):"}]


@pytest.fixture(scope="module")
def chat_pipe():
    base = Pipeline.from_pretrained("leapgen/text-code")
    tok = copy.deepcopy(base.tokenizer)
    tok.chat_template = TEMPLATE
    return TextPipeline(base.model, tok, draft=base.draft)


def test_a_chat_is_rendered_by_the_template(chat_pipe):
    text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in CHAT) + "<|assistant|>\n"  # by hand
    out = chat_pipe(CHAT, max_new_tokens=12)
    as_text = chat_pipe(text, max_new_tokens=12)
    assert out.prompt_token_ids[0] == chat_pipe.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert out.token_ids == as_text.token_ids and out.texts == as_text.texts


def test_batches_mix_chats_and_strings_and_samplers_agree(chat_pipe):
    batch = [CHAT, "import os\n", [{"role": "user", "content": "class Stack:"}]]
    ar = chat_pipe(batch, max_new_tokens=16)
    spec = chat_pipe(batch, sampler="speculative", max_new_tokens=16)
    assert ar.token_ids == spec.token_ids and all(t is not None for t in ar.texts)
    assert ar.token_ids[0] == chat_pipe(CHAT, max_new_tokens=16).token_ids[0]


def test_bad_chats_fail_alone(chat_pipe):
    out = chat_pipe([CHAT, [{"role": "user"}], [{"role": "user", "content": 3}]], max_new_tokens=4)
    assert out.texts[0] is not None and out.texts[1] is None and out.texts[2] is None
    assert "string 'role' and 'content'" in out.errors[1] and "message 0" in out.errors[2]
    with pytest.raises(InputError, match="empty chat"):
        chat_pipe([[]], max_new_tokens=4)


def test_a_tokenizer_without_a_template_says_so():
    pipe = Pipeline.from_pretrained("leapgen/text-code")
    with pytest.raises(InputError, match="no chat template"):
        pipe(CHAT, max_new_tokens=4)
