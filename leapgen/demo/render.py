"""How an output is shown: a small registry of renderers keyed by output class, a generic fallback.

A renderer takes ``(output, pipe)`` and returns a :class:`Rendered`: HTML (text, tables, SVG
molecules), a list of ``(PIL image, caption)`` for the gallery and an optional ``(sample_rate,
waveform)`` for the audio player. The renderer used for an output is, first found:

1. the pipeline's own ``demo_render`` attribute (a callable ``(output, pipe) -> Rendered``);
2. the renderer registered for the output's class or a base class, by class *name*
   (:func:`register_renderer`; names, so that this module imports no family's pipeline);
3. :func:`render_generic`: PIL images go to the gallery, 1-D arrays with ``sample_rate`` to the
   audio player, strings and short lists to an HTML table. A new family renders without an edit.
"""

from __future__ import annotations

import dataclasses
import html
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


@dataclass
class Rendered:
    html: str = ""
    images: list[tuple[Any, str]] = field(default_factory=list)
    audio: tuple[int, np.ndarray] | None = None


Renderer = Callable[[Any, Any], Rendered]
_RENDERERS: dict[str, Renderer] = {}


def register_renderer(*class_names: str) -> Callable[[Renderer], Renderer]:
    """Decorator: use the function for outputs of these classes (names, e.g. ``"TextOutput"``)."""

    def wrap(fn: Renderer) -> Renderer:
        for n in class_names:
            _RENDERERS[n] = fn
        return fn

    return wrap


def renderer_for(output: Any, pipe: Any = None) -> Renderer:
    own = getattr(pipe, "demo_render", None)
    if callable(own):
        return own
    for klass in type(output).__mro__:
        if klass.__name__ in _RENDERERS:
            return _RENDERERS[klass.__name__]
    return render_generic


def render(output: Any, pipe: Any = None) -> Rendered:
    """Render with the chosen renderer; a renderer that fails falls back to the generic one."""
    fn = renderer_for(output, pipe)
    try:
        return fn(output, pipe)
    except Exception:  # a renderer bug must not hide the result
        if fn is render_generic:
            raise
        logger.exception("demo: renderer %s failed; using the generic one", getattr(fn, "__name__", fn))
        return render_generic(output, pipe)


def esc(x: Any) -> str:
    return html.escape(str(x))


# ------------------------------------------------------------------------------------------ stats
def stats_html(stats: Any, wall: float) -> str:
    """The run's statistics as a small table (forwards, step compression, tokens/s, wall)."""
    if stats is None:
        return f'<table class="leapgen-stats"><tr><th>wall</th><td>{wall:.3f} s</td></tr></table>'
    wall_s = stats.wall_time or wall
    tps = stats.new_tokens / wall_s if wall_s else float("nan")
    rows = [
        ("sampler", stats.sampler),
        ("target forwards", stats.target_forwards),
        ("draft / other forwards", f"{stats.draft_forwards} / {stats.other_forwards}"),
        ("new tokens", stats.new_tokens),
        ("step compression", f"{stats.step_compression:.2f}x"),
        ("mean accepted", f"{stats.mean_accepted:.2f}"),
        ("tokens/s", f"{tps:.1f}"),
        ("wall", f"{wall_s:.3f} s"),
    ]
    body = "".join(f'<tr><th>{esc(k)}</th><td data-stat="{esc(k)}">{esc(v)}</td></tr>' for k, v in rows)
    return f'<table class="leapgen-stats">{body}</table>'


# ------------------------------------------------------------------------------------------ text
_COLOURS = ("#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6")


def _token_groups(out: Any) -> list[list[int]] | None:
    """Row 0's new tokens grouped by the target forward that committed them, when the stats say so."""
    ids = out.token_ids[0] if out.token_ids else []
    steps = [s[0] if isinstance(s, (list, tuple)) and s else s for s in out.stats.accepted_per_step]
    steps = [int(s) for s in steps if isinstance(s, (int, np.integer)) and s > 0]
    if not ids or not steps:
        return None
    if sum(steps) == len(ids) - 1:  # the prefill forward made the first token
        steps = [1, *steps]
    if sum(steps) < len(ids):
        return None
    groups, k = [], 0
    for n in steps:
        if k >= len(ids):
            break
        groups.append(ids[k : k + n])
        k += n
    return groups


@register_renderer("TextOutput")
def render_text(out: Any, pipe: Any) -> Rendered:
    """The text, with tokens committed by one forward together (accepted drafts) highlighted."""
    text = out.texts[0] if out.texts else ""
    groups = _token_groups(out)
    tok = getattr(pipe, "tokenizer", None)
    if groups is None or tok is None or not hasattr(tok, "decode"):
        return Rendered(html=f'<pre class="leapgen-text">{esc(text)}</pre>')
    parts, c = [], 0
    for g in groups:
        piece = esc(tok.decode(g, skip_special_tokens=True))
        if len(g) > 1:
            parts.append(f'<span class="leapgen-accepted" title="{len(g)} tokens in one forward" '
                         f'style="background:{_COLOURS[c % len(_COLOURS)]}">{piece}</span>')
            c += 1
        else:
            parts.append(piece)
    legend = f'<p class="leapgen-legend">{c} forwards committed more than one token (highlighted).</p>'
    return Rendered(html=f'<pre class="leapgen-text">{"".join(parts)}</pre>{legend}')


# ------------------------------------------------------------------------------------------ images
@register_renderer("ImageOutput", "ContinuousImageOutput")
def render_images(out: Any, pipe: Any) -> Rendered:
    """Each image, and its acceptance map (which forward made each token) when the sampler recorded one."""
    images: list[tuple[Any, str]] = []
    for i, img in enumerate(out.images):
        if img is None:
            continue
        images.append((img, f"image {i} ({img.size[0]}x{img.size[1]})"))
        if hasattr(out, "acceptance_map"):
            try:
                images.append((out.acceptance_map(i, with_image=False).resize(img.size), f"acceptance map {i}"))
            except Exception as err:  # no token_steps recorded
                logger.debug("no acceptance map: %s", err)
    errors = [e for e in (getattr(out, "errors", None) or []) if e]
    note = "".join(f'<p class="leapgen-item-error">{esc(e)}</p>' for e in errors)
    sizes = ", ".join(f"{img.size[0]}x{img.size[1]}" for img in out.images if img is not None)
    return Rendered(html=f'<p class="leapgen-image-info">{len(images)} pictures; image size {sizes}</p>{note}',
                    images=images)


# ------------------------------------------------------------------------------------------ molecules
@register_renderer("MoleculeOutput")
def render_molecules(out: Any, pipe: Any) -> Rendered:
    """Valid molecules drawn by RDKit (SVG) with QED; invalid samples listed with the reason."""
    from rdkit import Chem
    from rdkit.Chem import QED
    from rdkit.Chem.Draw import rdMolDraw2D

    cards = []
    for i, (smi, err) in enumerate(zip(out.smiles, out.errors)):
        mol = Chem.MolFromSmiles(smi) if smi else None
        if mol is None:
            cards.append(f'<div class="leapgen-mol invalid"><b>{i}</b> invalid: {esc(err or "not a molecule")}</div>')
            continue
        d = rdMolDraw2D.MolDraw2DSVG(180, 150)
        d.DrawMolecule(mol)
        d.FinishDrawing()
        svg = d.GetDrawingText().replace("<?xml version='1.0' encoding='iso-8859-1'?>", "")
        cards.append(f'<div class="leapgen-mol valid" style="display:inline-block;margin:4px;text-align:center">'
                     f'{svg}<br><code>{esc(smi)}</code><br>QED {QED.qed(mol):.2f}</div>')
    head = f'<p class="leapgen-validity">valid {sum(out.valid)}/{len(out.valid)} ({out.validity:.0%})</p>'
    return Rendered(html=head + "".join(cards))


# ------------------------------------------------------------------------------------------ audio
def spectrogram(wave: np.ndarray, sample_rate: int, n_fft: int = 512, hop: int = 128) -> Any:
    """A log-magnitude spectrogram picture (PIL, low frequencies at the bottom)."""
    from PIL import Image

    w = np.asarray(wave, dtype=np.float32).reshape(-1)
    if w.size < n_fft:
        w = np.pad(w, (0, n_fft - w.size))
    frames = np.lib.stride_tricks.sliding_window_view(w, n_fft)[::hop] * np.hanning(n_fft)
    mag = 20 * np.log10(np.abs(np.fft.rfft(frames, axis=1)).T + 1e-6)
    mag = np.clip((mag - (mag.max() - 80)) / 80, 0, 1)[::-1]
    rgb = np.stack([mag ** 0.5, mag ** 1.5, 0.4 + 0.6 * mag * (1 - mag)], -1)
    return Image.fromarray((rgb * 255).astype(np.uint8)).resize((max(256, mag.shape[1]), 160))


@register_renderer("AudioOutput")
def render_audio(out: Any, pipe: Any) -> Rendered:
    """The first clip in the player, a spectrogram per clip."""
    clips = [(i, a) for i, a in enumerate(out.audios) if a is not None]
    images = [(spectrogram(a, out.sample_rate), f"spectrogram {i} ({a.shape[-1] / out.sample_rate:.2f} s)") for i, a in clips]
    errs = "".join(f'<p class="leapgen-item-error">{esc(e)}</p>' for e in (out.errors or []) if e)
    audio = (out.sample_rate, np.asarray(clips[0][1], dtype=np.float32)) if clips else None
    info = ", ".join(f"clip {i}: {a.shape[-1] / out.sample_rate:.2f} s" for i, a in clips)
    return Rendered(html=f'<p class="leapgen-audio-info">{esc(info)}</p>{errs}', images=images, audio=audio)


@register_renderer("ASROutput")
def render_transcript(out: Any, pipe: Any) -> Rendered:
    """The transcript and a table of word timestamps."""
    parts = []
    for i, text in enumerate(out.texts):
        if text is None:
            parts.append(f'<p class="leapgen-item-error">{esc(out.errors[i] if out.errors else "failed")}</p>')
            continue
        parts.append(f'<p class="leapgen-transcript">{esc(text)}</p>')
        words = out.timestamps[i] if out.timestamps and i < len(out.timestamps) else None
        if words:
            rows = "".join(f"<tr><td>{esc(w)}</td><td>{s:.2f}</td><td>{e:.2f}</td></tr>" for w, s, e in words)
            parts.append(f'<table class="leapgen-words"><tr><th>word</th><th>start s</th><th>end s</th></tr>{rows}</table>')
    return Rendered(html="".join(parts))


# ------------------------------------------------------------------------------------------ fallback
def _is_pil(x: Any) -> bool:
    return type(x).__module__.startswith("PIL.")


def render_generic(out: Any, pipe: Any) -> Rendered:
    """Any output: pictures to the gallery, waveforms to the player, the rest as a table."""
    fields = [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out)] if dataclasses.is_dataclass(out) \
        else list(vars(out).items()) if hasattr(out, "__dict__") else [("output", out)]
    rows, images, audio = [], [], None
    rate = getattr(out, "sample_rate", None)
    errors = getattr(out, "errors", None)
    failed = [(i, e) for i, e in enumerate(errors) if e] if isinstance(errors, (list, tuple)) else []
    # the items the pipeline refused, in full and marked as errors (not cut short in the table)
    note = "".join(f'<p class="leapgen-item-error">item {i}: {esc(e)}</p>' for i, e in failed)
    for name, value in fields:
        if name == "stats" or value is None or (name == "errors" and failed):
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        pics = [v for v in items if _is_pil(v)]
        if pics:
            images += [(p, f"{name} {i}") for i, p in enumerate(pics)]
            continue
        waves = [v for v in items if isinstance(v, np.ndarray) and v.ndim == 1 and v.size > 0]
        if waves and isinstance(rate, int):
            audio = audio or (rate, waves[0].astype(np.float32))
            images += [(spectrogram(w, rate), f"{name} {i} spectrogram") for i, w in enumerate(waves)]
            continue
        text = repr(value)
        rows.append(f"<tr><th>{esc(name)}</th><td><code>{esc(text[:400] + ('...' if len(text) > 400 else ''))}</code></td></tr>")
    return Rendered(html=f'{note}<table class="leapgen-generic">{"".join(rows)}</table>', images=images, audio=audio)


__all__ = ["Rendered", "register_renderer", "render", "render_generic", "renderer_for", "spectrogram", "stats_html"]
