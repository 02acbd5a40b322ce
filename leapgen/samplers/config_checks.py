"""The check every sampler's ``generate`` runs before it decodes (wired by ``Sampler.__init_subclass__``).

:func:`checked_generate` wraps a sampler class's own ``generate`` so that a config it cannot honour
is refused before anything runs (:meth:`~leapgen.samplers.base.Sampler.check_config`: nothing a
sampler ignores passes silently). A model of the wrong contract is the first thing to fix, so when
both are wrong the model is reported (:meth:`~leapgen.samplers.base.Sampler.check_models`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError


def checked_generate(own: Callable[..., Any], config_type: type) -> Callable[..., Any]:
    """``own`` (a ``generate(self, models, prompts, config, ...)``) preceded by the sampler's checks."""

    @functools.wraps(own)
    def generate(self: Any, *args: Any, **kw: Any) -> Any:
        models = kw.get("models", args[0] if args else None)
        config = kw.get("config", args[2] if len(args) > 2 else None)
        try:
            if isinstance(config, config_type):
                self.check_config(config)
        except ConfigError:
            if isinstance(models, dict) and all(models.get(n) is not None for n in self.needs):
                self.check_models(models)  # a model of another contract: the error to fix first
            raise
        return own(self, *args, **kw)

    generate._checks_config = True  # type: ignore[attr-defined]
    return generate
