"""Per-item input checks for batched pipeline calls: a bad item fails alone.

:func:`check_items` runs ``check(i, item)`` on every item of a batch. An :class:`InputError` marks that
item as failed (its message is kept for ``out.errors[i]``) and the others go on. When **every** item
fails the call raises one :class:`InputError` with all the reasons, so a single bad prompt still gets a
plain error. :func:`scatter` puts the good items' results back at their positions (``fill`` elsewhere).

>>> def upper(i, s):
...     if not s:
...         raise InputError(f"prompt {i} is empty")
...     return s.upper()
>>> values, errors = check_items(["ab", "", "c"], upper)    # ['AB', None, 'C'], [None, 'prompt 1 is empty', None]
>>> scatter([v + "!" for v in values if v is not None], errors)
['AB!', None, 'C!']
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import InputError, a_type

T = TypeVar("T")
R = TypeVar("R")


def check_items(items: Sequence[T], check: Callable[[int, T], R], what: str = "prompt") -> tuple[list[R | None], list[str | None]]:
    """``(values, errors)``: ``check(i, item)`` per item, or None and the ``InputError`` message.

    Raises ``InputError`` when no item passes (``what`` names the items in that message).
    """
    values: list[R | None] = []
    errors: list[str | None] = []
    for i, item in enumerate(items):
        try:
            values.append(check(i, item))
            errors.append(None)
        except InputError as err:
            values.append(None)
            errors.append(str(err))
    if items and all(e is not None for e in errors):
        if len(errors) == 1:
            raise InputError(errors[0])
        raise InputError(f"no {what} could be used: " + "; ".join(e.rstrip(".") for e in errors if e) + ".")
    return values, errors


def scatter(results: Iterable[R], errors: Sequence[str | None], fill: Any = None) -> list[Any]:
    """The good items' ``results`` (in order) at their positions; ``fill`` where ``errors[i]`` is set."""
    it = iter(results)
    return [fill if e is not None else next(it) for e in errors]


def batch_list(prompt: Any) -> list[Any]:
    """The items of a batch argument: a list or tuple as a list; a 1-D numpy array or torch tensor (class
    ids read off a dataset: ``np.arange(8)``, ``torch.tensor([1, 2])``; an array of strings) or a
    ``range`` as the list of the Python values it holds; anything else (one item: a string, an int, a
    0-d array) as a list of one. An array of more than one dimension is refused (``InputError``):
    which axis is the batch is not for the pipeline to guess."""
    if isinstance(prompt, (list, tuple)):
        return list(prompt)
    if isinstance(prompt, range):
        return list(prompt)
    shape = getattr(prompt, "shape", None)
    if shape is not None and (isinstance(prompt, np.ndarray) or type(prompt).__module__.startswith("torch")):
        if len(shape) == 0:
            return [plain_scalar(prompt.item())]
        if len(shape) > 1:
            raise InputError(f"the prompts are an array of shape {tuple(shape)}; pass a list or a 1-D array "
                             "(one prompt per entry).")
        return [plain_scalar(v) for v in prompt.tolist()]
    return [prompt]


def prompt_list(prompts: Any) -> list[Any]:
    """A text prompt or a list of them (or a 1-D array of strings) as a list; anything else (an empty
    list, None) is refused."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, np.ndarray) and prompts.ndim == 1:
        prompts = batch_list(prompts)
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise InputError("prompt must be a non-empty string or a non-empty list of strings.")
    return list(prompts)


def check_text_prompt(i: int, p: Any) -> str:
    """Prompt ``i`` of a text pipeline, refused (``InputError``) unless it is a non-empty string."""
    if not isinstance(p, str):
        raise InputError(f"prompt {i} is {a_type(p)}, expected a string.")
    if not p:
        raise InputError(f"prompt {i} is empty; give at least one character of context.")
    return p


def plain_scalar(value: Any) -> Any:
    """A numpy scalar (``np.int64(4)``, ``np.float32(0.5)``, ``np.bool_(True)``) as the Python number it
    holds; anything else unchanged. Every pipeline call takes its arguments through this
    (:class:`~leapgen.pipelines.base.Pipeline`), so values read off arrays (``num_samples=arr.max()``,
    ``duration=np.float32(2)``) pass the calls' ``int`` / ``float`` checks."""
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    return value


def with_plain_scalars(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` taking numpy scalar arguments (``max_new_tokens=np.int64(64)``, ``cfg_scale=np.float32(3)``,
    a sampler's ``num_draft_tokens=arr[0]``) as the Python numbers they hold (:func:`plain_scalar`):
    the calls' checks and the samplers' are written for ``int`` / ``float``. A parameter annotated
    ``bool`` (``return_dict``, ``progress``, ``filter`` ...) takes only True or False: ``"no"`` would
    otherwise count as true."""
    flags = [n for n, p in inspect.signature(call).parameters.items() if p.annotation in (bool, "bool")]

    @functools.wraps(call)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple(plain_scalar(a) for a in args)
        kwargs = {k: plain_scalar(v) for k, v in kwargs.items()}
        for name in flags:
            if name in kwargs and not isinstance(kwargs[name], bool):
                raise InputError(f"{name} must be True or False, got {kwargs[name]!r} ({type(kwargs[name]).__name__}).")
        return call(self, *args, **kwargs)

    return wrapped


def check_count(name: str, value: Any, optional: bool = False, high: int | None = None, why: str = "") -> None:
    """``InputError`` unless ``value`` is an integer >= 1 (and <= ``high``; or None when ``optional``):
    a batch size or a token budget, refused up front rather than silently ignored."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"{name} must be an integer >= 1{' or None' if optional else ''}, got {value!r}.")
    if high is not None and value > high:
        raise InputError(f"{name} must be <= {high}, got {value}{why}.")


#: images of one prompt are generated together in one batch (with CFG, twice): more than this would
#: ask for the memory of thousands of batch rows at once
MAX_IMAGES_PER_PROMPT = 256


def check_num_images(value: Any) -> None:
    """``num_images_per_prompt``: an integer in [1, MAX_IMAGES_PER_PROMPT]."""
    check_count("num_images_per_prompt", value, high=MAX_IMAGES_PER_PROMPT,
                why=" (one call decodes them in one batch); call the pipeline several times for more")


def repeat_each(values: Sequence[T], n: int) -> list[T]:
    """Every value ``n`` times in a row (``num_images_per_prompt``)."""
    return [v for v in values for _ in range(n)]


__all__ = ["batch_list", "check_count", "check_items", "check_text_prompt", "plain_scalar", "prompt_list", "repeat_each", "scatter",
           "with_plain_scalars"]
