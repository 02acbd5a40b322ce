"""Chat prompts for :class:`~leapgen.pipelines.text.TextPipeline`, as transformers' text-generation
pipeline takes them: a chat is a list of ``{"role": ..., "content": ...}`` messages, rendered by the
tokenizer's chat template with the generation prompt appended (``add_generation_prompt=True``), so
the model writes the next assistant turn and ``texts[i]`` is that turn. A chat whose last message is
the assistant's is continued instead (``continue_final_message=True``, transformers' default there):
``texts[i]`` goes on from that message's text (a prefill).

``pipe([{"role": "user", "content": "Hi"}])`` is one chat; ``pipe([chat_a, chat_b])`` a batch of
two; strings and chats may be mixed in one batch. A tokenizer without a chat template, a message
without a string ``role`` and ``content``, or an empty chat fails that item alone with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InputError
from .items import prompt_list


def is_chat(item: Any) -> bool:
    """Whether ``item`` is one chat: a non-empty list of dicts (messages)."""
    return isinstance(item, (list, tuple)) and bool(item) and all(isinstance(m, Mapping) for m in item)


def text_prompt_list(prompt: Any) -> list[Any]:
    """``prompt`` as a list of items: strings and chats (one chat alone is one item)."""
    return [prompt] if is_chat(prompt) else prompt_list(prompt)


def chat_ids(tokenizer: Any, i: int, chat: Any) -> list[int]:
    """The ids of chat ``i`` rendered by the tokenizer's chat template, generation prompt included (or
    the final assistant message left open)."""
    if not isinstance(chat, (list, tuple)) or not chat:
        raise InputError(f"prompt {i} is an empty chat; give at least one message {{'role': ..., 'content': ...}}.")
    for j, m in enumerate(chat):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise InputError(f"prompt {i}, message {j} must be a dict with string 'role' and 'content', got {m!r}.")
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(f"prompt {i} is a chat, but this tokenizer has no chat template; pass the prompt as a "
                         "string, or set tokenizer.chat_template (a Jinja template) first.")
    prefill = chat[-1]["role"] == "assistant"  # continued, as transformers' pipeline does by default
    try:
        ids = tokenizer.apply_chat_template(list(chat), add_generation_prompt=not prefill,
                                            continue_final_message=prefill, tokenize=True)
    except Exception as err:  # the template's own check (e.g. roles must alternate)
        raise InputError(f"prompt {i}: the chat template refused this chat: {err}") from None
    if isinstance(ids, Mapping):  # a BatchEncoding (return_dict=True in some transformers versions)
        ids = ids["input_ids"]
    if not len(ids):
        raise InputError(f"prompt {i}: the chat template renders this chat as no tokens; check tokenizer.chat_template.")
    return [int(t) for t in ids]


__all__ = ["chat_ids", "is_chat", "text_prompt_list"]
