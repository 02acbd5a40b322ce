"""What both loops do before their first step: check the models, build the acceptance rule and
the run, resolve the generator, create the proposer and (if it asks) run the prefill step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ...errors import ConfigError
from ..base import DecodeConfig, DecodeResult, Sampler, make_generator
from ..proposers.base import Proposer
from ..runtime import DecodeRun

#: what each loop asks of its models (``CausalLM.CAPABILITIES``); ``ragged_rows`` is added at batch > 1
CHAIN_NEEDS = ("rollback", "multi_token")
TREE_NEEDS = ("rollback", "multi_token", "tree_mask")


def loop_generator(generator: torch.Generator | None, config: DecodeConfig, device: torch.device) -> torch.Generator:
    """The caller's generator (on the logits' device), or one seeded from ``config.seed``."""
    if generator is None:
        return make_generator(config, device)
    if torch.device(generator.device).type != torch.device(device).type:
        raise ConfigError(
            f"the generator is on {generator.device} but the model runs on {device}; create it there, "
            f"e.g. torch.Generator(device={str(device)!r}).manual_seed(0)."
        )
    return generator


def require(lm: Any, needs: tuple[str, ...], sampler: str, batch_size: int) -> None:
    """Refuse, before anything runs, a model that cannot run this loop (``CausalLM.require``
    names the reason)."""
    check = getattr(lm, "require", None)
    if callable(check):
        check(*needs, "ragged_rows", sampler=sampler, batch_size=batch_size)


def open_run(
    sampler: Sampler,
    models: dict[str, Any],
    prompts: list[list[int]],
    config: DecodeConfig,
    generator: torch.Generator | None,
    cond: Any,
    needs: tuple[str, ...],
):
    """``(run, proposer, rule, generator)`` for one ``generate`` call of ``sampler`` (whose class
    names its ``proposer`` and ``acceptance``); the prefill step has run when the proposer asks."""
    sampler.check_models(models)
    proposer_cls = sampler.proposer
    proposer_cls.check(sampler, models, config)
    needs = needs if proposer_cls.drafts else ()  # plain AR never rolls back
    for name in ("model", "draft") if proposer_cls.uses_draft else ("model",):
        require(models[name], needs, sampler.name, len(prompts))
    rule = sampler.make_rule(models["model"])
    run = DecodeRun(sampler, models, prompts, config, draft=proposer_cls.uses_draft, cond=cond)
    gen = loop_generator(generator, config, run.target.lm.device)
    proposer = proposer_cls(sampler, run, gen)
    if proposer.prefill and run.target.active:
        run.plain_step(gen)
        run.drop_finished()
    return run, proposer, rule, gen


class LoopSampler(Sampler):
    """A sampler that is a ``proposer`` class plus an acceptance rule, run by one of the two
    loops (:class:`~.chain.ChainSampler`, :class:`~.tree.TreeLoopSampler`)."""

    proposer: ClassVar[type[Proposer]]
    #: an encoder-decoder's decoder is a CausalLM (the encoder state rides in the condition)
    contracts: ClassVar[tuple[str, ...]] = ("causal", "encoder-decoder")
    #: what the loop asks of the models (``CausalLM.CAPABILITIES``)
    loop_needs: ClassVar[tuple[str, ...]] = ()
    #: one step of the loop: ``step(run, proposer, rule, generator)``
    step: ClassVar[Callable[..., None]]
    #: the loops hand every target distribution its position's context (the coded counts when
    #: presence / frequency penalties are on: :mod:`..penalties`), and so do the draft-model
    #: proposers; any other draft is verified against the q it was drawn from, so exactness holds
    honours_penalties: ClassVar[bool] = True
    #: the same context (its ``!= 0`` mask) carries the CTRL repetition penalty
    honours_repetition_penalty: ClassVar[bool] = True

    @classmethod
    def honours_min_new_tokens(cls) -> bool:
        """The lossless loop samplers: the loops ban EOS in the target's raw logits at every verified
        position before ``min_new_tokens`` (:meth:`~leapgen.samplers.runtime.DecodeRun.ban_eos`), and a
        greedy-exact or distribution-exact rule commits only what that distribution allows (a draft of
        EOS there is rejected: p(EOS) = 0). Relaxed (bounded, lossy) rules could accept it: refused."""
        return cls.guarantee in ("greedy-exact", "distribution-exact")

    def make_rule(self, lm: Any) -> Any:
        """The acceptance rule for one call (it may read what it needs from the target ``lm``)."""
        raise NotImplementedError

    def generate(self, models, prompts, config: DecodeConfig, generator=None, cond=None) -> DecodeResult:
        run, proposer, rule, gen = open_run(self, models, prompts, config, generator, cond, self.loop_needs)
        step = type(self).step
        while run.target.active:
            step(run, proposer, rule, gen)
            run.drop_finished()
        proposer.finish()
        return run.finish()
