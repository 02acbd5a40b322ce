"""Text generation with a masked diffusion LM (LLaDA / Fast-dLLM / Prophet / Learn2PD / dKV-Cache).

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/text-code-diffusion-adapted")
>>> out = pipe("def parse_args(", sampler="fast_dllm", max_new_tokens=64, seed=0)
>>> print(out.texts[0], out.stats)

Components: ``model`` (a :class:`~leapgen.models.diffusion_lm.DiffusionLM`, put behind
:class:`~leapgen.models.masked.TorchMaskedLM`; it supports the masked cache) and ``tokenizer``
(the AR ``text-code`` byte-level BPE; the model's extra last id is ``[MASK]``). A pipeline folder
may also hold ``learn2pd_filter.safetensors``, the Learn2PD commit filter trained on this model
(used by ``sampler="learn2pd"`` unless ``commit_filter=`` is given).

The call, step by step: (1) encode the prompts, each behind ``<|endoftext|>`` (the model's
position 0 must be known); (2) append ``max_new_tokens`` ``[MASK]`` positions (a length that is
not a multiple of ``block_length`` gives a shorter last block); (3) decode with the masked
sampler (``llada``, ``fast_dllm``, ``prophet``, ``learn2pd``, ``dkv_cache`` or any masked
sampler; the ``<|endoftext|>`` id is the End-of-Text token for EoTP and for cutting the text);
(4) cut each row at its first generated ``<|endoftext|>`` (``stop_at_eos``) and decode to text.
Temperature 0 (default) is greedy; ``generator=`` / ``seed=``, ``callback_on_step_end``,
``progress`` and ``return_dict`` follow :mod:`leapgen.pipelines.base`. Autoregressive samplers
are refused with the list of masked ones (``TextPipeline`` runs the AR ``leapgen/text-code``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, InputError
from ..models.masked import TorchMaskedLM
from ..samplers.base import DecodeConfig, Sampler
from .base import Pipeline, resolve_pretrained
from .items import check_items, check_text_prompt, prompt_list, scatter
from .outputs import TextOutput
from .text_chat import is_chat, text_prompt_list
from .text_logprobs import refuse_logprobs
from .text_stop import StopStrings, check_stop

FILTER_FILE = "learn2pd_filter.safetensors"


class DiffusionTextPipeline(Pipeline):
    """Prompt(s) in, text out, with a masked diffusion LM and any masked sampler."""

    components = ("model", "tokenizer")
    contracts = ("masked",)

    def __init__(self, model: Any, tokenizer: Any) -> None:
        super().__init__(model=model, tokenizer=tokenizer)
        cfg = getattr(model, "config", None)
        if not hasattr(cfg, "mask_id"):
            raise ConfigError(f"DiffusionTextPipeline needs a DiffusionLM-like model with config.mask_id, got {type(model).__name__}.")
        if len(tokenizer) >= cfg.vocab_size:
            raise ConfigError(f"the tokenizer has {len(tokenizer)} tokens but the model only {cfg.vocab_size} ids (incl. [MASK]).")
        self._on_change()

    def _on_change(self) -> None:
        cfg = self.model.config
        self._masked = TorchMaskedLM(self.model, mask_id=cfg.mask_id, vocab_size=cfg.vocab_size,
                                     max_length=cfg.max_position_embeddings)

    @property
    def eot_id(self) -> int:
        return int(self.model.config.eot_id)

    def commit_filter_path(self) -> Path | None:
        src = getattr(self, "name_or_path", None)
        if src is None:
            return None
        path = resolve_pretrained(src) / FILTER_FILE
        return path if path.is_file() else None

    def encode(self, prompts: str | list[str]) -> list[list[int]]:
        """``<|endoftext|>`` + the ids of every prompt; raises ``InputError`` on the first bad one."""
        return [self._encode_one(i, p) for i, p in enumerate(prompt_list(prompts))]

    def _encode_one(self, i: int, p: Any, max_new_tokens: int | None = None) -> list[int]:
        """One row's prompt ids, checked (a non-empty string; fits the positions with ``max_new_tokens``)."""
        if is_chat(p):
            raise InputError(f"prompt {i} is a chat (a list of messages), but {type(self).__name__} decodes plain text "
                             "(its model has no chat template); pass the text to continue as a string.")
        check_text_prompt(i, p)
        ids = [self.eot_id, *self.tokenizer(p, add_special_tokens=False, verbose=False)["input_ids"]]
        if len(ids) == 1:
            raise InputError(f"prompt {i} encodes to no tokens; give more context.")
        window = self.model.config.max_position_embeddings
        if max_new_tokens is not None and len(ids) + max_new_tokens > window:
            raise InputError(
                f"prompt {i} has {len(ids)} tokens and max_new_tokens={max_new_tokens}: more than the model's "
                f"{window} positions; shorten the prompt or lower max_new_tokens."
            )
        return ids

    def __call__(
        self,
        prompt: str | list[str],
        sampler: str | Sampler = "fast_dllm",
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int | None = None,
        stop_at_eos: bool = True,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Callable[[Pipeline, int, dict[str, Any]], Any] | None = None,
        stop: str | list[str] | None = None,
        return_dict: bool = True,
        logprobs: int | None = None,
        **sampler_params: Any,
    ) -> TextOutput | tuple:
        """Generate ``max_new_tokens`` positions after each prompt with a masked sampler (module docstring).
        ``stop`` cuts each text before the first stop string (after decoding: the blocks are not
        written left to right); ``finish_reasons[i]`` / ``stop_reasons[i]`` as in the causal text pipeline."""
        refuse_logprobs(logprobs, type(self).__name__)  # no left-to-right distribution to teacher-force
        stops = StopStrings(self.tokenizer, check_stop(stop))
        # 1. sampler: masked only; learn2pd gets the pipeline's trained filter
        if sampler == "learn2pd" and "commit_filter" not in sampler_params:
            path = self.commit_filter_path()
            if path is not None and sampler_params.get("block_length", 32) == 32:
                sampler_params["commit_filter"] = str(path)
        smp = self.make_sampler(sampler, sampler_params)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}.")
        # 2. rows: <|endoftext|> prompt [MASK] * max_new_tokens
        #    a bad prompt fails alone (texts[i] None, errors[i] says why); all bad -> InputError
        all_ids, errors = check_items(text_prompt_list(prompt), lambda i, p: self._encode_one(i, p, max_new_tokens))
        ids = [p for p in all_ids if p is not None]
        mask = self.model.config.mask_id
        rows = [p + [mask] * max_new_tokens for p in ids]
        # the masked loop's own bar counts the tokens each step reveals (its stats fill at the end,
        # so a bar driven by the step callback would never move)
        config = DecodeConfig(max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=self.eot_id,
                              pad_token_id=self.eot_id, seed=seed, progress=self._show_progress(progress))
        generator = self.prepare_generator(generator, seed)
        # 3. decode
        with self.step_hooks(max_new_tokens, False, callback_on_step_end) as step_callback:
            config.step_callback = step_callback
            with torch.inference_mode():
                result = smp.generate({"model": self._masked}, rows, config, generator)
        # 4. cut at the first generated <|endoftext|> and at the stop strings, decode
        new_ids, texts, reasons, why = [], [], [], []
        for p, seq in zip(ids, result.sequences):
            gen = [int(t) for t in seq[len(p):]]
            ended = stop_at_eos and self.eot_id in gen
            if ended:
                gen = gen[: gen.index(self.eot_id)]
            gen, text, matched = stops.finish(gen)
            new_ids.append(gen)
            texts.append(text)
            reasons.append("stop" if matched is not None or ended else "length")
            why.append(matched if matched is not None else self.eot_id if ended else None)
        out = TextOutput(texts=scatter(texts, errors), token_ids=scatter(new_ids, errors), stats=result.stats,
                         prompt_token_ids=[None if p is None else p[1:] for p in all_ids], errors=errors,
                         finish_reasons=scatter(reasons, errors), stop_reasons=scatter(why, errors))
        return self._return(out, return_dict)


__all__ = ["DiffusionTextPipeline", "FILTER_FILE"]
