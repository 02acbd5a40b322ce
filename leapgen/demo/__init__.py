"""``leapgen demo``: a Gradio app with one tab per shipped pipeline, found at run time.

:mod:`.discovery` finds the pipelines and their samplers, :mod:`.render` shows each output class
(a registry with a generic fallback), :mod:`.app` builds and serves the app. Gradio is imported
only when the app is built (the ``demo`` extra)."""

from .discovery import PipelineSpec, discover
from .render import Rendered, register_renderer, render

__all__ = ["PipelineSpec", "Rendered", "discover", "register_renderer", "render"]
