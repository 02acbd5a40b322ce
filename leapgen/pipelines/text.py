"""Text generation pipeline: a transformers causal LM, an optional draft LM, one tokenizer.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/text-code")
>>> out = pipe("def parse_args(", sampler="speculative", max_new_tokens=64, seed=0)
>>> print(out.texts[0], out.stats)

The call follows diffusers' conventions (see :mod:`leapgen.pipelines.base`): ``generator=``,
``callback_on_step_end=``, ``return_dict=False`` for a tuple, ``set_progress_bar_config``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, InputError, ModelMismatchError
from ..models.lean import lean_or_hf
from ..models.text_heads import RECIPE as HEADS_RECIPE
from ..models.text_heads import HeadedLM, heads_folder
from ..samplers.base import DecodeConfig, Sampler
from ..samplers.features import MODEL_FEATURES, missing_feature
from .base import Pipeline
from .items import check_count, check_items, check_text_prompt, repeat_each, scatter
from .outputs import TextOutput
from .text_chat import chat_ids, text_prompt_list
from .text_logprobs import check_logprobs, token_logprobs
from .text_stop import StopStrings, TokenStream, check_stop, finish_reason

logger = logging.getLogger(__name__)

#: samples per prompt of one call (all decoded in one batch): more would ask for thousands of rows at once
MAX_RETURN_SEQUENCES = 256

#: concurrent first calls load a pipeline's text heads once (module-level: a lock attribute would
#: make the pipeline refuse copy.deepcopy and pickle)
_HEADS_LOCK = threading.Lock()


def prompt_ids(tokenizer: Any, text: str) -> list[int] | None:
    """The ids ``model.generate(**tokenizer(text))`` would see, without what the tokenizer appends.

    The special tokens a tokenizer puts before the text (the BOS of Llama, Mistral or Gemma
    tokenizers) are kept: a model trained with them decodes other tokens without. Those it puts
    after the text (an EOS some tokenizers append) are dropped: the continuation starts where the
    text ends. None when the text itself encodes to no tokens.
    """
    # verbose=False: a too-long prompt gets the pipeline's InputError, not transformers' indexing warning
    plain = list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
    if not plain:
        return None
    full = list(tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])
    n = len(plain)
    for start in range(len(full) - n + 1):
        if full[start : start + n] == plain:
            return full[: start + n]
    return plain  # the specials changed how the text itself is split: the text's own ids


class TextPipeline(Pipeline):
    """Prompt(s) in, text out, with any registered text sampler."""

    components = ("model", "tokenizer", "draft")
    optional_components = ("draft",)
    contracts = ("causal",)

    #: decode runtimes: "lean" (Llama models run on leapgen.models.lean, any other causal LM on the
    #: transformers adapter) or "transformers" (always transformers' own forward)
    RUNTIMES = ("lean", "transformers")

    def __init__(self, model, tokenizer, draft=None, runtime: str = "lean", compile: bool = False) -> None:
        """``runtime="lean"`` (default) decodes Llama-architecture models with the lean runtime
        (:mod:`leapgen.models.lean`: static KV cache, fused forward; same greedy tokens);
        ``runtime="transformers"`` keeps transformers' forward. ``compile=True`` compiles the lean
        forward with ``torch.compile`` on CUDA (ignored on CPU)."""
        if runtime not in self.RUNTIMES:
            raise ConfigError(f"runtime={runtime!r} is not one of {self.RUNTIMES}")
        self.runtime = runtime
        self.compile = bool(compile)
        super().__init__(model=model, tokenizer=tokenizer, draft=draft)
        for name, m in (("model", model), ("draft", draft)):
            if getattr(getattr(m, "config", None), "is_encoder_decoder", False):
                raise ModelMismatchError(
                    f"the {name} is an encoder-decoder model ({type(m).__name__}, config.is_encoder_decoder=True); "
                    "TextPipeline drives decoder-only causal LMs. Wrap it with "
                    "leapgen.models.hf_seq2seq.as_seq2seq_lm (the EncoderDecoder contract every chain sampler "
                    "runs on) for a sequence-to-sequence pipeline, or pick a causal LM (AutoModelForCausalLM)."
                )
        self._check_draft()
        self._on_change()

    def _check_draft(self) -> None:
        if self.draft is None:
            return
        tv = self.model.get_output_embeddings().weight.shape[0]
        dv = self.draft.get_output_embeddings().weight.shape[0]
        if tv != dv:
            raise ModelMismatchError(
                f"the draft model has {dv} output logits but the target has {tv}: the draft must use the "
                "target's tokenizer. Train or pick a draft with the same vocabulary."
            )

    def _on_change(self) -> None:
        self._lms = {
            name: lean_or_hf(getattr(self, name), self.runtime, self.compile) for name in ("model", "draft")
        }
        self._headed: HeadedLM | None = None
        self._heads_path = self._heads_dir()  # looked up once per model change, not per call
        lm = self._lms["model"]  # what its model lacks of the features some samplers need (gpt2: no lean cache)
        self.model_lacks = {f: why for f in MODEL_FEATURES if (why := missing_feature(lm, f)) is not None}

    # ------------------------------------------------------------------ trained heads (text-heads contract)
    def _heads_dir(self) -> Any:
        """``<pipeline>/heads`` when the target runs on the lean runtime and the folder has trained heads."""
        lm = self._lms["model"]
        if not hasattr(lm, "net"):  # the transformers runtime captures no hidden states
            return None
        folder = heads_folder(lm)
        return folder if folder is not None and (folder / "config.json").is_file() else None

    def model_contracts(self) -> tuple[str, ...]:
        """``causal``, plus ``text-heads`` when the pipeline folder ships trained heads (chimera, judge,
        first, superposed then run on the target with its heads, loaded on first use)."""
        return ("causal", "text-heads") if self._heads_path is not None else ("causal",)

    @classmethod
    def folder_contracts(cls, folder: Path) -> tuple[str, ...]:
        """``causal``, plus ``text-heads`` when the folder ships trained heads (``heads/config.json``)."""
        return ("causal", "text-heads") if (Path(folder) / "heads" / "config.json").is_file() else ("causal",)

    def contract_hint(self, contract: str) -> str:
        if contract == "text-heads":
            return (f"Train the target's heads with `{HEADS_RECIPE}` (they go in <pipeline>/heads) and load the "
                    "pipeline with the lean runtime.")
        return ""

    def _models_for(self, smp: Sampler) -> dict[str, Any]:
        """The models a sampler decodes with: the target with its heads for a ``text-heads`` sampler."""
        if "causal" in smp.contracts or "text-heads" not in smp.contracts:
            return self._lms
        lms, headed = self._lms, self._headed  # read once: a component change between reads cannot mix them
        if headed is None:
            with _HEADS_LOCK:  # concurrent first calls load the heads once
                lms, headed = self._lms, self._headed
                if headed is None:
                    headed = self._headed = HeadedLM(lms["model"])  # loads and checks <pipeline>/heads
        return {**lms, "model": headed}

    def set_compile(self, compile: bool) -> None:
        """Turn ``torch.compile`` of the lean forward on or off (CUDA only; ignored on CPU with a log line)."""
        self.compile = bool(compile)
        self._on_change()

    def set_draft(self, draft: Any) -> None:
        """Attach (or remove, with None) a draft model; it must share the target's vocabulary."""
        self.draft = draft
        self._check_draft()
        self._on_change()

    @property
    def context_window(self) -> int:
        return self._lms["model"].max_length

    def encode(self, prompts: str | list[str]) -> list[list[int]]:
        """Token ids of every prompt (a string or a chat); raises ``InputError`` on the first bad one."""
        items = text_prompt_list(prompts)
        return [self._encode_one(i, p) for i, p in enumerate(items)]

    def _encode_one(self, i: int, p: Any, max_new_tokens: int | None = None) -> list[int]:
        """One prompt's ids, checked (type, empty, fits the context window with ``max_new_tokens``);
        a chat (a list of messages) is rendered by the tokenizer's chat template."""
        window = self.context_window
        if isinstance(p, (list, tuple)):
            toks = chat_ids(self.tokenizer, i, p)
        else:
            check_text_prompt(i, p)
            toks = prompt_ids(self.tokenizer, p)
        if toks is None:
            raise InputError(f"prompt {i} encodes to no tokens; give more context.")
        vocab = self.model.get_output_embeddings().weight.shape[0]
        if max(toks) >= vocab:  # a tokenizer larger than the model: this prompt fails alone
            raise InputError(f"prompt {i} encodes to token id {max(toks)}, outside the model's vocabulary of {vocab}; "
                             "the tokenizer does not match the model.")
        if max_new_tokens is not None and len(toks) + max_new_tokens > window:
            raise InputError(
                f"prompt {i} has {len(toks)} tokens and max_new_tokens={max_new_tokens}, more than the model's "
                f"context window of {window} tokens; shorten the prompt to at most {window - max_new_tokens} "
                "tokens or lower max_new_tokens."
            )
        return list(toks)

    def __call__(
        self,
        prompt: str | list[str],
        sampler: str | Sampler = "ar",
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        stop_at_eos: bool = True,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Callable[[Pipeline, int, dict[str, Any]], Any] | None = None,
        stop: str | list[str] | None = None,
        streamer: Any = None,
        return_dict: bool = True,
        min_p: float = 0.0,
        min_new_tokens: int = 0,
        num_return_sequences: int = 1,
        logprobs: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        **sampler_params: Any,
    ) -> TextOutput | tuple:
        """Generate a continuation of each prompt: a string, or a chat (a list of ``{"role", "content"}``
        messages rendered by the tokenizer's chat template; see :mod:`leapgen.pipelines.text_chat`).

        ``sampler`` is a registered name (see ``leapgen.list_samplers()``) or a Sampler instance;
        extra keyword arguments are that sampler's parameters (e.g. ``num_draft_tokens=4``).
        ``temperature=0`` is greedy decoding. ``min_p`` (vLLM / transformers; 0 = off) keeps, after
        repetition penalty, temperature, top-k and top-p, the tokens at least ``min_p`` times as likely
        as the top one (draft and target alike, so lossless samplers stay exact). ``min_new_tokens``
        (transformers; 0 = off): no end-of-sequence token before a row has that many new tokens (stop
        strings still apply); the lossless samplers honour it exactly, the others refuse it.
        ``num_return_sequences`` (transformers): that many samples of every prompt, decoded in one
        batch and returned prompt-major (prompt 0's samples, then prompt 1's ...; a bad prompt fills
        its slots with its error); more than 1 needs sampling (``temperature > 0``). ``logprobs=k``
        (vLLM; None = off, k in [0, 20]): ``logprobs[i]`` holds each generated token's log-probability
        under the model's raw distribution and ``top_logprobs[i]`` the k most likely tokens at each
        position, from one teacher-forced forward after decoding (the same for every sampler; see
        :mod:`leapgen.pipelines.text_logprobs`). ``presence_penalty`` / ``frequency_penalty`` (OpenAI /
        vLLM, in [-2, 2], 0 = off): each logit drops by ``frequency_penalty`` times the times its token
        was generated so far, plus ``presence_penalty`` once it was (the prompt does not count), before
        temperature; the loop samplers apply them (lossless ones stay exact), others refuse them.
        Randomness comes from ``generator`` (a
        ``torch.Generator`` on the pipeline's device) or, as a shortcut, ``seed``.
        ``callback_on_step_end(pipe, step, {"stats": stats})`` runs after each target forward;
        ``progress=True`` shows a progress bar (see ``set_progress_bar_config``).
        ``stop`` (a string or a list): a row ends at the token that completes one of them; its text
        stops before the string, its ``token_ids`` include that token. ``finish_reasons[i]`` is ``"stop"``
        (a stop string or an end-of-sequence token: ``stop_reasons[i]`` is the string or the token id)
        or ``"length"``, as vLLM reports them. ``streamer``: a transformers streamer
        (``TextStreamer``, ``TextIteratorStreamer``) fed each step's accepted tokens; one prompt per
        call (see :mod:`leapgen.pipelines.text_stop`).
        A bad prompt in a list fails alone: ``texts[i]`` and ``token_ids[i]`` are None and
        ``errors[i]`` says why (an ``InputError`` when every prompt is bad).
        ``return_dict=False`` returns ``(texts, token_ids, stats, prompt_token_ids, errors, finish_reasons,
        stop_reasons, logprobs, top_logprobs)``.
        """
        smp = self.make_sampler(sampler, sampler_params)
        logprobs = check_logprobs(logprobs)
        check_count("num_return_sequences", num_return_sequences, high=MAX_RETURN_SEQUENCES,
                    why=" (one call decodes them in one batch); call the pipeline several times for more")
        config = DecodeConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            min_p=min_p,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            eos_token_id=self.tokenizer.eos_token_id if stop_at_eos else None,
            pad_token_id=self.tokenizer.pad_token_id or 0,
            seed=seed,
        )
        if num_return_sequences > 1 and config.greedy:
            raise ConfigError(
                f"num_return_sequences={num_return_sequences} with greedy decoding (temperature=0) would return the same "
                "text every time (transformers' generate refuses it too); sample with temperature > 0, or pass "
                "num_return_sequences=1."
            )
        if config.min_new_tokens > config.max_new_tokens:  # it would be silently cut to max_new_tokens
            raise ConfigError(
                f"min_new_tokens={config.min_new_tokens} is above max_new_tokens={config.max_new_tokens}: no output can "
                "reach it (vLLM refuses this too); lower min_new_tokens or raise max_new_tokens."
            )
        window = self.context_window
        if max_new_tokens >= window:
            raise InputError(
                f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's context window of "
                f"{window} tokens; use max_new_tokens < {window}."
            )
        stops = StopStrings(self.tokenizer, check_stop(stop))
        prompts = text_prompt_list(prompt)
        stream = TokenStream(streamer) if streamer is not None else None
        try:
            if stream is not None and len(prompts) * num_return_sequences != 1:
                raise InputError(f"streamer= streams one sequence per call (as transformers' streamers), got {len(prompts)} "
                                 f"prompt(s) x num_return_sequences={num_return_sequences}; call once per sequence, or "
                                 "drop streamer= for a batch.")
            # 1. encode: a bad prompt fails alone (texts[i] None, errors[i] says why); all bad -> InputError;
            #    then each prompt num_return_sequences times, prompt-major (as transformers)
            ids, errors = check_items(prompts, lambda i, p: self._encode_one(i, p, max_new_tokens))
            ids, errors = repeat_each(ids, num_return_sequences), repeat_each(errors, num_return_sequences)
            good = [p for p in ids if p is not None]
            generator = self.prepare_generator(generator, seed)
            # 2. decode, stopping rows at their stop strings and streaming the accepted tokens
            config.stop_check = stops.reached if stops else None
            if stream is not None:
                stream.start(good[0])
                config.on_commit = stream.on_commit
            with self.step_hooks(max_new_tokens, progress, callback_on_step_end) as step_callback:
                config.step_callback = step_callback
                with torch.inference_mode():
                    result = smp.generate(self._models_for(smp), good, config, generator)
            # 3. cut at the stop strings; the texts and why each row ended
            finished = [stops.finish(list(seq)) for seq in result.sequences]
            sequences = [f[0] for f in finished]
            reasons = [finish_reason(seq, f[2], config.eos_ids) for seq, f in zip(sequences, finished)]
            if stream is not None:
                stream.send_rest(sequences[0])
        except BaseException as err:  # a consumer iterating the streamer must not wait forever, whatever happened
            if stream is not None:
                stream.end(after=err)  # a failing end() is noted on err, never raised instead of it
            raise
        if stream is not None:
            stream.end()  # a failing end() surfaces as an InputError naming it
        out = TextOutput(texts=scatter([f[1] for f in finished], errors), token_ids=scatter(sequences, errors),
                         stats=result.stats, prompt_token_ids=ids, errors=errors,
                         finish_reasons=scatter([r[0] for r in reasons], errors),
                         stop_reasons=scatter([r[1] for r in reasons], errors))
        if logprobs is not None:  # 4. one teacher-forced forward over prompt + output, whatever the sampler
            lps, tops = token_logprobs(self.model, good, sequences, logprobs, config.pad_token_id)
            out.logprobs, out.top_logprobs = scatter(lps, errors), scatter(tops, errors)
        return self._return(out, return_dict)


__all__ = ["TextPipeline", "TextOutput"]
