"""The Gradio app of ``leapgen demo``: one tab per shipped pipeline, built from what is found at run time.

Each tab has the pipeline's input (:mod:`.discovery` decides text / image / audio / number), a
sampler from those registered for its model contracts with their defaults as editable JSON
parameters, pipeline options (JSON keyword arguments of the call, e.g. ``{"cfg_scale": 2}``), a
seed and a compare mode that runs the baseline sampler beside the chosen one on the same input and
seed. Outputs are rendered by :mod:`.render`; statistics (forwards, step compression, tokens/s,
wall) under each. Pipelines load on first use and stay loaded; requests are queued one at a time
(CPU work); leapgen errors are shown as their message, anything else as a one-line internal error
(the traceback goes to the server log only) and the app keeps serving.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from typing import Any

from ..errors import ConfigError, InputError, LeapgenError
from .discovery import OCR_EXAMPLE_WORD, PipelineSpec, discover, sampler_defaults, sampler_label
from .render import esc, render, stats_html

logger = logging.getLogger(__name__)

#: upper bounds of the size knobs in the demo (a shared CPU); over them the request is refused
MAX_SIZE: dict[str, float] = {"max_new_tokens": 512, "num_images_per_prompt": 8, "duration": 10.0, "num_samples": 64}
MAX_AUDIO_SECONDS = 30.0
#: most items of a JSON list input (e.g. spectra) in one request
MAX_ITEMS = 64
#: bounds on integer sampler parameters in the demo: PARAM_FACTOR x the default (at least
#: PARAM_FLOOR); PARAM_CAP for step counts whose default is None (see ``_param_limit``)
PARAM_FACTOR, PARAM_FLOOR, PARAM_CAP = 16, 64, 1024
_RUNS = itertools.count(1)
CSS = """
.leapgen-error {color:#b00020; font-weight:600; white-space:pre-wrap}
.leapgen-stats th {text-align:left; padding-right:1em}
pre.leapgen-text {white-space:pre-wrap}
"""


class PipelineCache:
    """Pipelines loaded once, on first use (thread-safe)."""

    def __init__(self) -> None:
        self._pipes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Any:
        with self._lock:
            if name not in self._pipes:
                import torch

                from ..pipelines import Pipeline

                torch.set_num_threads(int(os.environ.get("LEAPGEN_DEMO_THREADS", "1")))
                t = time.perf_counter()
                self._pipes[name] = Pipeline.from_pretrained(name)
                logger.info("demo: loaded %s in %.1f s", name, time.perf_counter() - t)
            return self._pipes[name]


def _json_arg(text: str | None, what: str) -> dict[str, Any]:
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{what} must be a JSON object such as {{\"key\": 1}}; {err.msg} at column {err.colno}.") from None
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object ({{...}}), got {type(value).__name__}.")
    return value


def _input_value(spec: PipelineSpec, value: Any) -> Any:
    if spec.input_kind == "text":
        if value is None or not str(value).strip():
            raise InputError(f"the {spec.input_param} is empty; type something (e.g. {spec.example!r}).")
        text = str(value).strip()
        if spec.input_param != "prompt" and text[0] in "[{":  # structured input (e.g. spectra) as JSON
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as err:
                raise InputError(f"{spec.input_param} looks like JSON but is not valid: {err.msg} at column {err.colno}.") from None
            if isinstance(parsed, list) and len(parsed) > MAX_ITEMS:
                raise InputError(f"{spec.input_param} holds {len(parsed)} items; the demo takes at most {MAX_ITEMS} "
                                 "(use `leapgen batch` for more).")
            return parsed
        return str(value)
    if spec.input_kind == "number":
        if value is None:
            raise InputError(f"{spec.input_param} is empty; give a number.")
        try:
            n = int(value)
        except (TypeError, ValueError, OverflowError):  # NaN, inf, text
            raise InputError(f"{spec.input_param} must be a whole number, got {value!r}.") from None
        limit = MAX_SIZE.get(spec.input_param)
        if n < 1 or (limit is not None and n > limit):
            raise InputError(f"{spec.input_param} must be between 1 and {int(limit or n)} in the demo, got {n}.")
        return n
    if spec.input_kind == "image":
        if value is None:
            raise InputError("no image: upload one (PNG or JPEG).")
        return value
    if value is None:
        raise InputError("no audio: upload a clip (wav, flac or ogg).")
    import soundfile as sf

    try:
        info = sf.info(str(value))
    except Exception:  # soundfile raises its own error types for non-audio
        raise InputError(f"{os.path.basename(str(value))!r} is not an audio file soundfile can read (wav, flac, ogg).") from None
    if info.duration > MAX_AUDIO_SECONDS:
        raise InputError(f"the clip is {info.duration:.1f} s long; the demo takes at most {MAX_AUDIO_SECONDS:.0f} s.")
    return str(value)


def _check_bound(key: str, value: Any) -> None:
    """Refuse a size knob (``max_new_tokens``, ``num_samples`` ...) over the demo's bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return  # not a number: the pipeline says what it takes
    if not value <= MAX_SIZE[key]:  # NaN too
        raise InputError(f"{key} must be <= {MAX_SIZE[key]:g} in the demo, got {value:g}.")


def _size_value(spec: PipelineSpec, size: Any) -> Any:
    if spec.size_param is None or size is None:
        return None
    limit = MAX_SIZE.get(spec.size_param)
    value = float(size)
    if not value > 0 or (limit is None and not value < float("inf")):
        raise InputError(f"{spec.size_param} must be a finite number > 0, got {value:g}.")
    if value <= 0 or (limit is not None and value > limit):
        raise InputError(f"{spec.size_param} must be > 0 and <= {limit:g} in the demo, got {value:g}.")
    return int(value) if float(spec.size or 1).is_integer() and value.is_integer() else value


def call_kwargs(spec: PipelineSpec, value: Any, sampler: str, size: Any, params: str, options: str, seed: Any) -> dict:
    """The keyword arguments of one pipeline call, checked (InputError says what is wrong)."""
    if not sampler:
        raise InputError("choose a sampler.")
    if sampler not in spec.samplers:
        raise InputError(f"sampler {sampler!r} does not run on {spec.tab}; choose one of {', '.join(spec.samplers)}.")
    kw: dict[str, Any] = {spec.input_param: _input_value(spec, value), "sampler": sampler}
    opts = _json_arg(options, "pipeline options")
    own = [k for k in opts if k in (spec.input_param, "sampler", "seed", "progress")]
    if own:  # the tab's own fields: an option must not silently replace what the form shows
        raise InputError(f"pipeline option(s) {own} are set by the tab's own fields ({spec.input_param}, sampler, seed); "
                         "remove them from the options.")
    unknown = [k for k in opts if not spec.accepts(k)]
    if unknown and not spec.takes_kwargs:
        raise InputError(f"unknown pipeline option(s) {unknown}; {spec.class_name} takes {sorted(spec.call_params)}.")
    for key, val in opts.items():  # the demo's bounds on the work hold for options too (a shared CPU)
        if key in MAX_SIZE:
            _check_bound(key, val)
    kw.update(opts)
    if spec.size_param is not None and spec.size_param not in opts:
        size_value = _size_value(spec, size)
        if size_value is not None:
            kw[spec.size_param] = size_value
    if spec.accepts("seed"):
        try:
            kw["seed"] = int(seed) if seed is not None else 0
        except (TypeError, ValueError):
            raise InputError(f"the seed must be an integer, got {seed!r}.") from None
    if spec.accepts("progress"):
        kw["progress"] = True
    defaults = sampler_defaults(sampler)
    for key, val in _json_arg(params, "sampler parameters").items():
        if key not in defaults and key not in sampler_defaults_all(sampler):
            raise InputError(f"sampler {sampler!r} has no parameter {key!r}; its parameters: {sorted(defaults)}.")
        _check_sampler_bound(sampler, key, val)
        if val != defaults.get(key, object()):
            kw[key] = tuple(val) if isinstance(val, list) and isinstance(_raw_default(sampler, key), tuple) else val
    return kw


def _param_limit(key: str, default: Any) -> int | None:
    """The demo's bound on an integer sampler parameter (a count of steps, beams, nodes ...):
    ``PARAM_FACTOR`` times its default (at least ``PARAM_FLOOR``), ``PARAM_CAP`` for a step count
    resolved per call (default None); None for ids and everything else."""
    if key.endswith(("_id", "_ids")) or isinstance(default, bool):
        return None
    if isinstance(default, int) and default > 0:
        return max(PARAM_FLOOR, PARAM_FACTOR * default)
    if default is None and key.endswith("steps"):
        return PARAM_CAP
    return None


def _check_sampler_bound(sampler: str, key: str, value: Any) -> None:
    """Refuse a sampler parameter so large that one request would hold the shared queue for
    minutes (e.g. spec_tree num_nodes=100000, ctc_prefix_beam beam_size=100000)."""
    default = _raw_default(sampler, key)
    pairs = (zip(value, default) if isinstance(value, list) and isinstance(default, (list, tuple)) and default
             else [(value, default)])
    for val, dflt in pairs:
        limit = _param_limit(key, dflt)
        if limit is not None and isinstance(val, int) and not isinstance(val, bool) and val > limit:
            raise InputError(f"sampler parameter {key}={val} is more than the demo runs on a shared CPU "
                             f"(at most {limit}); lower it, or use the Python API for larger values.")


def _raw_default(sampler: str, key: str) -> Any:
    from ..samplers.base import sampler_info

    return sampler_info(sampler).defaults.get(key)


def sampler_defaults_all(sampler: str) -> dict[str, Any]:
    from ..samplers.base import sampler_info

    return dict(sampler_info(sampler).defaults)


def run_once(pipe: Any, kwargs: dict[str, Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = pipe(**kwargs)
    return out, time.perf_counter() - t


def _side(out: Any, pipe: Any, wall: float) -> list[Any]:
    import gradio as gr

    r = render(out, pipe)
    audio = gr.update(value=r.audio, visible=r.audio is not None)
    gallery = gr.update(value=[(img, cap) for img, cap in r.images] or None, visible=bool(r.images))
    return [r.html, gallery, audio, stats_html(getattr(out, "stats", None), wall)]


def _compare_side(pipe: Any, kwargs: dict[str, Any], spec: PipelineSpec) -> tuple[list[Any], str | None]:
    """One column of the compare view, or its message when the pipeline refused that sampler's run
    (the column then shows the message, the other column its output)."""
    try:
        out, wall = run_once(pipe, kwargs)
    except (LeapgenError, ValueError, TypeError) as err:
        msg = str(err) if isinstance(err, LeapgenError) else f"{type(err).__name__}: {err}"
        logger.info("demo %s: %s refused: %s", spec.tab, kwargs.get("sampler"), msg)
        side = _empty_side()
        side[0] = f'<div class="leapgen-error">error: {esc(msg)}</div>'
        return side, msg
    return _side(out, pipe, wall), None


def _empty_side() -> list[Any]:
    import gradio as gr

    return ["", gr.update(value=None, visible=False), gr.update(value=None, visible=False), ""]


def make_runner(spec: PipelineSpec, cache: PipelineCache):
    """The click handler of one tab."""
    import gradio as gr

    def run(value, size, sampler, params, options, seed, compare, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
        try:
            kw = call_kwargs(spec, value, sampler, size, params, options, seed)
            progress(0, desc=f"loading {spec.name}")
            pipe = cache.get(spec.name)
            pipe.check_sampler(sampler)
            base = _empty_side()
            if compare:
                if spec.baseline is None:
                    raise InputError(f"{spec.tab} has no baseline sampler to compare with.")
                progress(0, desc=f"baseline {spec.baseline}")
                bkw = {k: v for k, v in kw.items() if k not in sampler_defaults_all(sampler)}
                bkw["sampler"] = spec.baseline
                base, base_err = _compare_side(pipe, bkw, spec)
                progress(0, desc=f"{sampler}")
                chosen, chosen_err = _compare_side(pipe, kw, spec)
                if base_err and chosen_err:
                    raise InputError(f"baseline {spec.baseline}: {base_err}\n{sampler}: {chosen_err}")
                # one side refused (e.g. a greedy-only sampler on a sampling pipeline): the other side stays
                failed = f"baseline {spec.baseline}: {base_err}" if base_err else f"{sampler}: {chosen_err}" if chosen_err else None
                done = (f'<div class="leapgen-error" role="alert" data-run="{next(_RUNS)}">error: {esc(failed)}</div>'
                        if failed else f'<div class="leapgen-done" data-run="{next(_RUNS)}"></div>')
                return [done, gr.update(visible=True), *base, *chosen]
            progress(0, desc=f"{sampler}")
            out, wall = run_once(pipe, kw)
            chosen = _side(out, pipe, wall)
            done = f'<div class="leapgen-done" data-run="{next(_RUNS)}"></div>'
            return [done, gr.update(visible=False), *base, *chosen]
        except (LeapgenError, ValueError, TypeError) as err:
            msg = str(err) if isinstance(err, LeapgenError) else f"{type(err).__name__}: {err}"
            logger.info("demo %s: refused: %s", spec.tab, msg)
            error = f'<div class="leapgen-error" role="alert" data-run="{next(_RUNS)}">error: {esc(msg)}</div>'
        except Exception as err:  # never a stack trace in the UI; the log keeps it
            logger.exception("demo %s: internal error", spec.tab)
            error = f'<div class="leapgen-error" role="alert" data-run="{next(_RUNS)}">internal error ({esc(type(err).__name__)}): {esc(err)}; see the server log.</div>'
        return [error, gr.update(visible=False), *_empty_side(), *_empty_side()]

    return run


def _ocr_example() -> Any:
    """A word crop like the ones the recogniser reads: the word fills the picture (a TrueType
    font when one is installed; PIL's small bitmap font would leave most of the crop empty)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 30)
    except OSError:
        font = ImageFont.load_default()
    left, top, right, bottom = ImageDraw.Draw(Image.new("L", (1, 1))).textbbox((0, 0), OCR_EXAMPLE_WORD, font=font)
    img = Image.new("L", (right - left + 12, bottom - top + 12), 255)
    ImageDraw.Draw(img).text((6 - left, 6 - top), OCR_EXAMPLE_WORD, fill=0, font=font)
    return img


def _input_component(spec: PipelineSpec):
    import gradio as gr

    eid = f"{spec.tab}-input"
    if spec.input_kind == "image":
        value = spec.example if spec.example is not None else _ocr_example()
        return gr.Image(value=value, type="pil", label=spec.input_param, elem_id=eid, sources=["upload", "clipboard"])
    if spec.input_kind == "audio":
        return gr.Audio(value=spec.example, type="filepath", label=spec.input_param, elem_id=eid, sources=["upload"])
    if spec.input_kind == "number":
        return gr.Number(value=spec.size or 8, precision=0, label=spec.input_param, elem_id=eid)
    return gr.Textbox(value=spec.example, label=spec.input_param, lines=2, elem_id=eid)


def _output_column(tab: str, side: str, title: str, visible: bool):
    import gradio as gr

    with gr.Column(visible=visible) as col:
        gr.Markdown(f"**{title}**")
        html = gr.HTML(elem_id=f"{tab}-{side}-output")
        gallery = gr.Gallery(visible=False, elem_id=f"{tab}-{side}-gallery", columns=4, height="auto")
        audio = gr.Audio(visible=False, elem_id=f"{tab}-{side}-audio", type="numpy", interactive=False)
        stats = gr.HTML(elem_id=f"{tab}-{side}-stats")
    return col, [html, gallery, audio, stats]


def build_tab(spec: PipelineSpec, cache: PipelineCache) -> None:
    import gradio as gr

    tab = spec.tab
    with gr.Tab(tab, id=tab, elem_id=f"tab-{tab}"):
        gr.Markdown(f"`{spec.name}` ({spec.class_name}): {len(spec.samplers)} samplers run on its models.")
        with gr.Row():
            inp = _input_component(spec)
            with gr.Column():
                choices = [(sampler_label(s), s) for s in spec.samplers]
                sampler = gr.Dropdown(choices=choices, value=spec.baseline, label="sampler", elem_id=f"{tab}-sampler")
                size = gr.Number(value=spec.size, label=spec.size_param or "size", visible=spec.size_param is not None,
                                 elem_id=f"{tab}-size")
                seed = gr.Number(value=0, precision=0, label="seed", elem_id=f"{tab}-seed")
                compare = gr.Checkbox(value=False, label=f"compare with the baseline ({spec.baseline})",
                                      elem_id=f"{tab}-compare")
        with gr.Accordion("parameters", open=False):
            params = gr.Textbox(value=json.dumps(sampler_defaults(spec.baseline)) if spec.baseline else "{}",
                                label="sampler parameters (JSON; defaults shown)", elem_id=f"{tab}-params")
            options = gr.Textbox(value="", label="pipeline options (JSON keyword arguments of the call)",
                                 placeholder='{"temperature": 0.8}', elem_id=f"{tab}-options")
        button = gr.Button("Run", variant="primary", elem_id=f"{tab}-run")
        error = gr.HTML(elem_id=f"{tab}-error")
        with gr.Row():
            base_col, base = _output_column(tab, "baseline", f"baseline: {spec.baseline}", visible=False)
            _, chosen = _output_column(tab, "chosen", "chosen sampler", visible=True)
        sampler.change(lambda s: json.dumps(sampler_defaults(s)) if s else "{}", sampler, params)
        button.click(make_runner(spec, cache), [inp, size, sampler, params, options, seed, compare],
                     [error, base_col, *base, *chosen], concurrency_limit=1, concurrency_id="leapgen")


def build_app(pipelines: list[str] | None = None) -> Any:
    """The ``gr.Blocks`` app: one tab per shipped pipeline (or per name in ``pipelines``)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr

    specs = discover(pipelines)
    if not specs and pipelines:
        from ..pipelines.base import list_shipped

        raise ConfigError(f"no pipeline to show: none of --pipeline {', '.join(pipelines)} could be read (the warnings "
                          f"above say why); shipped pipelines: {', '.join(list_shipped()) or 'none'}.")
    if not specs:
        raise ConfigError("no pipeline to show: no shipped pipeline is installed (see `leapgen train`).")
    cache = PipelineCache()
    with gr.Blocks(title="leapgen demo") as app:
        gr.Markdown("# leapgen demo\nEvery shipped pipeline, with every sampler registered for its model. "
                    "Tick *compare* to run the baseline beside the chosen sampler on the same input and seed.")
        with gr.Tabs():
            for spec in specs:
                build_tab(spec, cache)
    app.leapgen_specs = specs
    return app


def launch(port: int = 7860, host: str = "127.0.0.1", share: bool = False, pipelines: list[str] | None = None,
           block: bool = True) -> Any:
    """Build and serve the app on ``host:port`` (127.0.0.1 by default). ``share`` is refused: the
    demo runs offline and never opens a public tunnel."""
    if share:
        raise ConfigError("--share is refused: the leapgen demo runs offline and opens no public tunnel. "
                          "Serve it on your network with --host 0.0.0.0 (behind your own proxy) instead.")
    if host in ("0.0.0.0", "::"):
        logger.warning("demo: binding to %s makes the demo reachable from every network interface; "
                       "use --host 127.0.0.1 unless that is what you want.", host)
    if not 0 < int(port) < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}.")
    app = build_app(pipelines)
    app.queue(default_concurrency_limit=1, max_size=64)
    app.launch(server_name=host, server_port=int(port), share=False, prevent_thread_lock=not block,
               show_error=False, inbrowser=False, css=CSS)
    return app


__all__ = ["MAX_SIZE", "PipelineCache", "build_app", "call_kwargs", "launch"]
