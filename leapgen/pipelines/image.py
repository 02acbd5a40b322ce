"""Autoregressive image pipeline (LlamaGen style): VQ tokenizer + class/text-conditional GPT (+ draft).

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/image-emoji")
>>> out = pipe(["animals", "red apple"], sampler="speculative", cfg_scale=3.0, seed=0)
>>> out.images[0].save("animal.png"); out.acceptance_map(0).save("animal_acceptance.png")
>>> print(out.stats)

A prompt is a class name (``pipe.class_names``), a class id, a text (for models with a text
encoder; the shipped emoji model knows the Unicode names of the emoji, e.g. ``"red apple"``), or a
list of those. It becomes a typed condition (:class:`~leapgen.models.condition.ClassCondition`:
class labels, text word ids, and the call's guidance), which the sampler hands to every model with
its cache; the prompts given to the sampler are empty (the model fills its condition positions
itself), so every autoregressive sampler of the registry (``ar``, ``speculative``, and the image
samplers) decodes it unchanged; the 16x16 codes are decoded by the VQ tokenizer. Classifier-free
guidance (``cfg_scale``, ``cfg_interval``) travels in the condition and is applied inside the model
adapters, identically for target and draft.

Outputs: :class:`ImageOutput` with the PIL images, the token grids, the decode statistics, and
``acceptance_map(i)``: which target forward produced each token of image ``i``.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import unicodedata
from typing import Any

import torch

from ..errors import ConfigError, InputError, ModelMismatchError, a_type
from ..models.condition import NULL_LABEL, ClassCondition, Guidance, check_guidance_scale
from ..models.llamagen import LlamaGenGPT
from ..models.llamagen_lm import LlamaGenLM
from ..samplers.base import DecodeConfig, DecodeResult, DecodeStats, Sampler
from .base import Pipeline, _same_device
from .items import batch_list, check_items, check_num_images, plain_scalar, repeat_each, scatter
from .outputs import ImageOutput

logger = logging.getLogger(__name__)

Prompt = str | int

#: where the image families that need their own model live (named in a refused sampler's error)
FAMILY_HINTS = {
    "causal": "Raster samplers run on the raster models: leapgen/image-emoji (and the NAR model's right head, "
              "leapgen/image-emoji-nar; CTF's coarse stage, leapgen/image-emoji-ctf).",
    "next-neighbour": "The NAR family runs it: Pipeline.from_pretrained('leapgen/image-emoji-nar').",
    "next-scale": "The VAR family runs it: Pipeline.from_pretrained('leapgen/image-emoji-var').",
    "next-frequency": "The NFIG family runs it: Pipeline.from_pretrained('leapgen/image-emoji-nfig').",
    "coarse-fine": "The CTF family runs it: Pipeline.from_pretrained('leapgen/image-emoji-ctf').",
}


def sampling_temperature(value: Any) -> float:
    """A call's ``temperature`` as a float, refused (``InputError``) unless it is a number: ``float()``
    alone would take ``True`` and ``"1"`` and fail on None with a bare TypeError. The range (finite,
    >= 0) is :class:`~leapgen.samplers.base.DecodeConfig`'s check."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"temperature must be a number >= 0 (0 = greedy), got {value!r} ({type(value).__name__})")
    return float(value)


def emoji_text(text: str) -> str:
    """``text`` with its emoji as the lower-cased Unicode names the emoji model was trained on ('🍎' ->
    'red apple'; a regional-indicator pair -> 'flag: fr'; variation selectors and joiners dropped);
    letters, digits and ASCII unchanged."""
    out: list[str] = []
    k = 0
    while k < len(text):
        o = ord(text[k])
        if 0x1F1E6 <= o <= 0x1F1FF and k + 1 < len(text) and 0x1F1E6 <= ord(text[k + 1]) <= 0x1F1FF:
            out.append(f" flag: {chr(o - 0x1F1E6 + 97)}{chr(ord(text[k + 1]) - 0x1F1E6 + 97)} ")
            k += 2
            continue
        c = text[k]
        name = unicodedata.name(c, "") if o > 0x7F and not c.isalnum() else ""
        if name.startswith("VARIATION SELECTOR") or name == "ZERO WIDTH JOINER":
            name = " "
        out.append(f" {name.lower()} " if name else c)
        k += 1
    return " ".join("".join(out).split())


def read_as(text: str, class_names: Any, tokenizer: Any) -> int | str | None:
    """A prompt with no word the model knows, read another way: a class name with a plural 's' added
    or dropped ('animal', 'foods'), or its words without a plural 's' ('apples'); None when nothing fits."""
    key = text.lower().removesuffix("s")
    for k, name in enumerate(class_names):
        if name.removesuffix("s") == key:
            return k
    singular = " ".join(w[:-1] if w.endswith("s") and len(w) > 3 else w for w in text.lower().split())
    known = len(tokenizer.split(singular)) - len(tokenizer.unknown_words(singular))
    return singular if singular != text.lower() and known > 0 else None


class ImageARPipeline(Pipeline):
    """Class/text prompt(s) in, images out, with any autoregressive sampler of the registry."""

    components = ("vq", "model", "draft", "text_tokenizer")
    optional_components = ("draft", "text_tokenizer")
    contracts = ("causal",)
    #: LlamaGen's GPT is not a transformers Llama, so the lean runtime's cache (gear) is not there
    model_lacks = {"lean_cache": "LlamaGenLM is not a Llama the lean runtime can run"}

    def __init__(self, vq, model, draft=None, text_tokenizer=None, class_names: tuple[str, ...] | None = None) -> None:
        super().__init__(vq=vq, model=model, draft=draft, text_tokenizer=text_tokenizer)
        if not isinstance(model, LlamaGenGPT):
            raise TypeError(f"model must be a LlamaGenGPT, got {type(model).__name__}")
        cfg = model.config
        if class_names is None:
            class_names = cfg.class_names or tuple(f"class {i}" for i in range(cfg.num_classes))
        if len(class_names) != cfg.num_classes:
            raise ConfigError(f"{len(class_names)} class names given for a model with {cfg.num_classes} classes")
        self.class_names = tuple(class_names)
        if vq.codebook_size != cfg.vocab_size:
            raise ModelMismatchError(
                f"the VQ codebook has {vq.codebook_size} codes but the model predicts {cfg.vocab_size} image tokens"
            )
        if cfg.text_len and text_tokenizer is None:
            raise ConfigError("this model has a text encoder; pass its text_tokenizer (WordVocab)")
        self._check_draft()
        self._on_change()

    def _check_draft(self) -> None:
        if self.draft is None:
            return
        a, b = self.model.config, self.draft.config
        same = (a.vocab_size, a.num_classes, a.text_vocab_size, a.text_len, a.grid_size) == (
            b.vocab_size, b.num_classes, b.text_vocab_size, b.text_len, b.grid_size)
        if not same:
            raise ModelMismatchError(
                "the draft must share the target's image vocabulary, classes, text vocabulary/length and grid; "
                "train the draft with the same recipe settings"
            )

    def _on_change(self) -> None:
        latents = self.vq.codebook().float().cpu()
        self._lms = {"model": LlamaGenLM(self.model), "draft": LlamaGenLM(self.draft) if self.draft is not None else None}
        for lm in self._lms.values():
            if lm is not None:
                lm.set_token_latents(latents)

    def set_draft(self, draft: LlamaGenGPT | None) -> None:
        self.draft = draft
        self._check_draft()
        self._on_change()

    @property
    def grid(self) -> tuple[int, int]:
        g = self.model.config.grid_size
        return (g, g)

    @property
    def lms(self) -> dict[str, LlamaGenLM | None]:
        """The :class:`LlamaGenLM` adapters (``model``, ``draft``) the samplers run on."""
        return self._lms

    # ------------------------------------------------------------------ prompts
    def _resolve(self, p: Any, i: int) -> tuple[int | None, str | None]:
        names = ", ".join(repr(c) for c in self.class_names)
        p = plain_scalar(p)  # a class id read off an array (np.int64) is the int it holds
        if isinstance(p, bool) or not isinstance(p, (str, int)):
            raise InputError(f"prompt {i} is {a_type(p)}; give a class name ({names}), a class id or a text")
        if isinstance(p, int):
            if not 0 <= p < len(self.class_names):
                raise InputError(f"class id {p} is out of range; valid ids are 0..{len(self.class_names) - 1} ({names})")
            return p, None
        text = p.strip()
        if not text:
            raise InputError(f"prompt {i} is empty; give a class name ({names}) or a text such as 'red apple'")
        if text.lower() in self.class_names:
            return self.class_names.index(text.lower()), None
        if not self.model.config.text_len:
            raise InputError(f"unknown class {p!r}; this model is class-conditional only, valid classes: {names}")
        unknown = self.text_tokenizer.unknown_words(text)
        named = emoji_text(text) if unknown else text  # the emoji themselves ('🍎'): their names, as trained
        if named != text and len(self.text_tokenizer.unknown_words(named)) < len(unknown):
            logger.info("prompt %r read as %r", p, named)
            text, unknown = named, self.text_tokenizer.unknown_words(named)
        if len(unknown) == len(self.text_tokenizer.split(text)):
            read = read_as(text, self.class_names, self.text_tokenizer)  # a plural ('apples', 'foods') or a singular ('animal')
            if read is not None:
                logger.info("prompt %r read as %r", p, self.class_names[read] if isinstance(read, int) else read)
                return (read, None) if isinstance(read, int) else (None, read)
            raise InputError(
                f"prompt {p!r} has no word the model knows (it was trained on Unicode emoji names, e.g. 'red apple', "
                f"'grinning face', 'flag: fr') and is not a class ({names})"
            )
        if unknown:
            logger.warning("prompt %r: unknown words %s are ignored (mapped to <unk>)", p, unknown)
        return None, text

    def encode(
        self, prompt: Prompt | list[Prompt], cfg_scale: float = 1.0, cfg_interval: int = -1
    ) -> ClassCondition:
        """The condition of the prompts (one row each): class labels (``NULL_LABEL`` for a text
        prompt), the text word ids for models with a text encoder (null text for a class prompt),
        and the guidance (``cfg_scale`` 1 = none, as metrics score the model's conditional
        logits). Raises ``InputError`` on the first bad prompt."""
        prompts = batch_list(prompt)  # a list, a tuple, a 1-D array / tensor of class ids, or one prompt
        if not prompts:
            raise InputError("no prompt given; pass a class name, a class id, a text or a non-empty list of those")
        return self.condition([self._resolve(p, i) for i, p in enumerate(prompts)], cfg_scale, cfg_interval)

    def condition(
        self, resolved: list[tuple[int | None, str | None]], cfg_scale: float = 1.0, cfg_interval: int = -1,
        negative: list[tuple[int | None, str | None] | None] | None = None,
    ) -> ClassCondition:
        """The condition of resolved prompts (``(class id, text)`` from ``_resolve``), one row each;
        ``negative``: one resolved negative prompt per row (None = the null condition), the
        condition of guidance's unconditional half."""
        labels, text_ids = self._condition_rows(resolved)
        cond = ClassCondition(labels=labels, text_ids=text_ids, guidance=Guidance(float(cfg_scale), cfg_interval))
        if negative is None:
            return cond
        neg_labels, neg_text_ids = self._condition_rows([(None, None) if r is None else r for r in negative])
        return dataclasses.replace(cond, neg_labels=neg_labels, neg_text_ids=neg_text_ids)

    def _condition_rows(self, resolved: list[tuple[int | None, str | None]]) -> tuple[torch.Tensor, torch.Tensor | None]:
        labels, words = [], []
        for cls, text in resolved:
            labels.append(NULL_LABEL if cls is None else cls)
            words.append(self.model.text_words(self.text_tokenizer.encode(text) if text is not None else None))
        text_ids = torch.tensor(words, dtype=torch.long) if self.model.config.text_len else None
        return torch.tensor(labels, dtype=torch.long), text_ids

    def _resolve_negative(self, p: Any, i: int, cfg_scale: float) -> tuple[int | None, str | None] | None:
        """A negative prompt resolved as a prompt (None = the null condition)."""
        if p is None:
            return None
        if cfg_scale == 1:
            raise InputError("negative_prompt needs classifier-free guidance (cfg_scale != 1): with cfg_scale=1 the "
                             "unconditional half, which the negative prompt replaces, is not computed")
        try:
            return self._resolve(p, i)
        except InputError as err:
            raise InputError(f"negative prompt {i}: {err}") from None

    def batch_condition(
        self, prompt: Prompt | list[Prompt], cfg_scale: float, cfg_interval: int, num_images_per_prompt: int,
        negative_prompt: Prompt | list[Prompt | None] | None = None,
    ) -> tuple[ClassCondition, list[Prompt], list[str | None]]:
        """Resolve every prompt (a bad one fails alone; all bad -> ``InputError``): the condition of
        the good ones, each repeated ``num_images_per_prompt`` times, and the prompt and error of
        every image. ``negative_prompt``: one for all prompts or a list with one per prompt (None =
        the null condition); a bad one fails its prompt alone, one shared bad one the whole call."""
        prompts = batch_list(prompt)  # a list, a tuple, a 1-D array / tensor of class ids, or one prompt
        if not prompts:
            raise InputError("no prompt given; pass a class name, a class id, a text or a non-empty list of those")
        negatives = self._negatives(negative_prompt, len(prompts), cfg_scale)

        def resolve(i: int, p: Any) -> tuple[Any, Any]:
            return self._resolve(p, i), (None if negatives is None else self._resolve_negative(negatives[i], i, cfg_scale))

        resolved, errors = check_items(prompts, resolve)
        good = [r for r in resolved if r is not None]
        cond = self.condition([r[0] for r in good], cfg_scale, cfg_interval,
                              None if negatives is None else [r[1] for r in good])
        n = num_images_per_prompt
        return cond.repeat_interleave(n), repeat_each(prompts, n), repeat_each(errors, n)

    def _negatives(self, negative_prompt: Any, n: int, cfg_scale: float) -> list[Any] | None:
        """``negative_prompt`` as one entry per prompt (None: none given); a shared one is checked here."""
        if negative_prompt is None:
            return None
        if not isinstance(negative_prompt, (list, tuple, str, int)):
            items = batch_list(negative_prompt)  # a 1-D array / tensor of class ids: one per prompt
            one_each = isinstance(negative_prompt, range) or len(getattr(negative_prompt, "shape", ())) == 1
            negative_prompt = items if one_each else items[0]  # a 0-d array, or anything else: one shared
        if isinstance(negative_prompt, (list, tuple)):
            if len(negative_prompt) != n:
                raise InputError(f"negative_prompt has {len(negative_prompt)} entries for {n} prompts; give one for "
                                 "all prompts or one per prompt (None = no negative prompt for that one)")
            return list(negative_prompt)
        self._resolve_negative(negative_prompt, 0, cfg_scale)  # one bad shared negative prompt fails the call
        return [negative_prompt] * n

    # ------------------------------------------------------------------ generation
    def __call__(
        self,
        prompt: Prompt | list[Prompt],
        sampler: str | Sampler = "ar",
        cfg_scale: float = 3.0,
        cfg_interval: int = -1,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        num_images_per_prompt: int = 1,
        progress: bool = False,
        generator: torch.Generator | None = None,
        callback_on_step_end: Any = None,
        return_dict: bool = True,
        negative_prompt: Prompt | list[Prompt | None] | None = None,
        **sampler_params: Any,
    ) -> ImageOutput | tuple:
        """Generate ``num_images_per_prompt`` images per prompt.

        ``cfg_scale``: classifier-free guidance scale (``uncond + (cond - uncond) * scale``; 1 = off);
        ``cfg_interval``: LlamaGen's guidance cutoff (-1 = guide every token; see
        :func:`~leapgen.models.guidance.cfg_logits`). ``temperature`` / ``top_k`` / ``top_p`` as in
        LlamaGen's sampling (0 temperature = greedy). Extra keyword arguments are the sampler's
        parameters (e.g. ``num_draft_tokens=4``). ``generator`` / ``seed`` (``generator`` may also be a
        list of one torch.Generator per image, as in diffusers: each image is then decoded by a sampler
        call of its own, so it is what that prompt alone with that generator gives, whatever the rest of
        the batch; the callback's step count restarts per image), ``callback_on_step_end(pipe,
        step, {"stats": stats})``, ``progress`` and ``return_dict=False`` (a tuple of the
        :class:`ImageOutput` fields) follow diffusers (:mod:`leapgen.pipelines.base`).
        ``negative_prompt`` (a class name / id / text, one for all prompts or a list with one per
        prompt; None = the null condition) conditions guidance's unconditional half, so images
        move away from it; it needs ``cfg_scale != 1``.
        """
        check_guidance_scale(cfg_scale)
        if not isinstance(cfg_interval, int) or cfg_interval < -1:
            raise InputError(f"cfg_interval must be an int >= -1 (-1 = guide every token), got {cfg_interval!r}")
        check_num_images(num_images_per_prompt)
        smp = self.make_sampler(sampler, sampler_params)
        cond, prompts, errors = self.batch_condition(prompt, cfg_scale, cfg_interval, num_images_per_prompt,
                                                     negative_prompt)
        rows = len(cond.labels)
        h, w = self.grid
        config = DecodeConfig(max_new_tokens=h * w, temperature=sampling_temperature(temperature), top_k=top_k, top_p=top_p,
                              eos_token_id=None, pad_token_id=0, seed=seed)
        models = self.models_for(smp)
        missing = [n for n in getattr(smp, "needs", ("model",)) if n not in models]
        if missing:
            raise ConfigError(f"sampler {smp.name!r} needs {missing}; this pipeline has no draft model (load one with set_draft)")
        per_row = row_generators(generator, seed, len(errors), self.device)
        if per_row is None:
            generator = self.prepare_generator(generator, seed)
        # the pipeline's progress bar and the user's callback run after each target step
        total = h * w * (1 if per_row is None else rows)
        with self.step_hooks(total, progress, callback_on_step_end) as config.step_callback, torch.inference_mode():
            if per_row is None:
                result = smp.generate(models, [[] for _ in range(rows)], config, generator, cond=cond)
            else:
                gens = [g for g, e in zip(per_row, errors) if e is None]
                result = self._rows_alone(smp, models, config, gens, cond)
        bad = [len(s) for s in result.sequences if len(s) != h * w]
        if bad:
            raise RuntimeError(f"the sampler returned {bad} tokens instead of {h * w} for some rows")
        tokens = torch.tensor(result.sequences, dtype=torch.long).view(-1, h, w)
        out = image_output(self.vq.decode(tokens), tokens, result.stats, result.token_steps, prompts, errors)
        return self._return(out, return_dict)

    @staticmethod
    def _rows_alone(smp: Sampler, models: dict[str, Any], config: DecodeConfig, gens: list[torch.Generator],
                    cond: Any) -> DecodeResult:
        """diffusers' per-image generators: each row decoded by a sampler call of its own with its
        generator and its row of the condition, so its image is the one a call with that prompt alone
        and that generator gives, whatever else is in the batch (the sampler's maths untouched; a
        batch costs one decode per image). Statistics add up over the calls (:meth:`DecodeStats.merged`)."""
        parts = [smp.generate(models, [[]], config, g, cond=cond.select_rows(torch.tensor([r])))
                 for r, g in enumerate(gens)]
        return DecodeResult(sequences=[s for p in parts for s in p.sequences],
                            stats=DecodeStats.merged([p.stats for p in parts], smp.name),
                            token_steps=[t for p in parts for t in p.token_steps])

    def contract_hint(self, contract: str) -> str:
        return FAMILY_HINTS.get(contract, "")

    def models_for(self, sampler: Sampler) -> dict[str, Any]:
        """The model adapters ``sampler`` runs on (subclasses offering other contracts override it)."""
        return {k: v for k, v in self._lms.items() if v is not None}

    # ------------------------------------------------------------------ save
    def pipeline_config(self) -> dict[str, Any]:
        """Saved in ``model_index.json`` by :meth:`Pipeline.save_pretrained` and given back to ``__init__``."""
        return {"class_names": list(self.class_names)}


def row_generators(generator: Any, seed: int | None, n: int, device: torch.device) -> list[torch.Generator] | None:
    """diffusers' list form: ``generator`` as one torch.Generator per requested image (``n``), each on
    ``device``; None when ``generator`` is not a list (:meth:`Pipeline.prepare_generator` takes it)."""
    if not isinstance(generator, (list, tuple)):
        return None
    if seed is not None:
        raise InputError("pass either seed= or generator=, not both (a list of generators seeds each image itself).")
    if len(generator) != n:
        raise InputError(f"generator= holds {len(generator)} generators for {n} images (prompts x "
                         "num_images_per_prompt); give one torch.Generator per image, or one for the whole call.")
    for i, g in enumerate(generator):
        if not isinstance(g, torch.Generator):
            raise InputError(f"generator[{i}] must be a torch.Generator, got {type(g).__name__}.")
        if not _same_device(torch.device(g.device), device):
            raise InputError(f"generator[{i}] is on {g.device} but the pipeline runs on {device}; create it there: "
                             f"torch.Generator(device={str(device)!r}).manual_seed(...).")
    if len({id(g) for g in generator}) != len(generator):
        raise InputError("generator= lists one torch.Generator twice; give each image its own (a shared one's draws "
                         "would depend on the order the images run in), or pass it once for the whole call.")
    return list(generator)


def image_output(images: list, tokens: torch.Tensor, stats: Any, token_steps: list[list[int]], prompts: list[Prompt],
                 errors: list[str | None]) -> ImageOutput:
    """An :class:`ImageOutput` with one entry per requested image: the good rows' images, tokens and
    forward records at their positions; a failed prompt's image is None, its token rows -1."""
    good = torch.tensor([e is None for e in errors], dtype=torch.bool)
    full = tokens.new_full((len(errors), *tokens.shape[1:]), -1)
    full[good] = tokens
    return ImageOutput(images=scatter(images, errors), token_ids=full, stats=stats,
                       token_steps=scatter(token_steps, errors, fill=[]), prompts=prompts, errors=errors)


__all__ = ["ImageARPipeline", "ImageOutput", "image_output", "row_generators", "sampling_temperature"]
