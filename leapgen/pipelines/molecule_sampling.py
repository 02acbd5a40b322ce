"""How the molecule pipeline runs a sampler: choosing its settings per task, decoding rows in
batches, and turning token rows into SAFE strings and SMILES.

* :meth:`MoleculeSampling._resolve_sampler` builds the sampler with the task's GenMol defaults
  (randomness, context guidance), the special ids a masked sampler must never propose, and the
  temperature (the sampler's ``paper_config``, GenMol's per-task value, or 1 for ``ar``);
* :meth:`MoleculeSampling._decode_rows` runs it over rows in batches (masked rows ``[BOS] ...
  [MASK]*n [EOS]``; AR rows ``[BOS] prefix`` continued until EOS) and merges the statistics;
* :meth:`MoleculeSampling._postprocess` decodes rows to SAFE, then SMILES (GenMol's
  ``fix=True``: largest component kept).
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError, InputError
from ..samplers.base import DecodeConfig, DecodeStats, Sampler, get_sampler
from ..samplers.masked import MaskedInputs, MaskedSampler
from ..tokenizers.safe import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID, safe_to_smiles

#: GenMol v1 task recipes (softmax temperature, randomness, context-guidance γ, min_add_len)
TASK_DEFAULTS: dict[str, dict[str, float]] = {
    "de_novo": {"temperature": 0.5, "randomness": 0.5, "gamma": 0.0, "min_add_len": 0},
    "linker": {"temperature": 1.2, "randomness": 3.0, "gamma": 0.0, "min_add_len": 30},
    "motif": {"temperature": 1.2, "randomness": 1.2, "gamma": 0.3, "min_add_len": 18},
    "scaffold": {"temperature": 1.2, "randomness": 2.0, "gamma": 0.3, "min_add_len": 18},
    "superstructure": {"temperature": 1.2, "randomness": 2.0, "gamma": 0.4, "min_add_len": 18},
    "lead_opt": {"temperature": 1.2, "randomness": 2.0, "gamma": 0.0, "min_add_len": 0},
}
AR_TEMPERATURE = 1.0


def ring_digit_ids(tokenizer: Any) -> tuple[int, ...]:
    """Ids of the ring-closure / SAFE attachment labels (``1``..``9``, ``%nn``): each must occur an
    even number of times in a connected, valid SAFE string."""
    return tuple(i for t, i in tokenizer.token_to_id.items() if re.fullmatch(r"[0-9]|%[0-9]{2}|%\([0-9]+\)", t))


def branch_pairs(tokenizer: Any) -> tuple[tuple[int, int], ...]:
    """``((id of "(", id of ")"),)`` when both are in the vocabulary."""
    v = tokenizer.token_to_id
    return ((v["("], v[")"]),) if "(" in v and ")" in v else ()


def merge_stats(parts: list[DecodeStats], name: str, batch_size: int) -> DecodeStats:
    """One DecodeStats over sequential batches (:meth:`DecodeStats.merged`); the masked engine's
    step and cache counts add up too (``cache`` names the policy), and ``extra["batches"]`` counts
    the batches."""
    out = DecodeStats.merged(parts, name, batch_size,
                             sum_extra=("steps", "hook_filled", "cache_refreshes", "cache_reuses"))
    if parts and "cache" in parts[0].extra:
        out.extra["cache"] = parts[0].extra["cache"]
    out.extra["batches"] = len(parts)
    return out



@dataclass
class RowHooks:
    """Per-call hooks of a decode over batches of rows: the pipeline's progress bar (advanced by
    the rows of each finished batch) and the user's ``callback_on_step_end(pipe, step, info)``
    (``info``: ``{"stats": the batch's DecodeStats, "batch": its index}``)."""

    pipe: Any = None
    bar: Any = None
    callback: Callable[..., Any] | None = None

    def step_callback(self, batch: int) -> Callable[[int, DecodeStats], None] | None:
        if self.callback is None:
            return None
        pipe, callback = self.pipe, self.callback
        return lambda step, stats: callback(pipe, step, {"stats": stats, "batch": batch})

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)


class MoleculeSampling:
    """Sampler plumbing of :class:`~leapgen.pipelines.molecule.MoleculePipeline` (a mixin: it reads
    the pipeline's tokenizer, ``_masked`` model and ``_lms``)."""

    tokenizer: Any
    _masked: Any
    _lms: dict[str, Any] | None
    max_length: int

    def _resolve_sampler(self, sampler: str | Sampler, params: dict[str, Any], task: str, temperature: float | None):
        """(sampler instance, is_masked, temperature)."""
        if isinstance(sampler, Sampler):
            if params:
                raise InputError("pass sampler parameters to the Sampler instance, not to the call.")
            smp = sampler
        else:
            if not isinstance(sampler, str):
                raise InputError(f"sampler must be a registered name or a Sampler, got {type(sampler).__name__}.")
            from ..samplers.base import sampler_info

            info = sampler_info(sampler)
            params = dict(params)
            if issubclass(info.cls, MaskedSampler) and sampler == "genmol" and task != "de_novo":
                d = TASK_DEFAULTS[task]
                params.setdefault("choice_temperature", d["randomness"])
                if d["gamma"] > 0 and "guidance" not in params:
                    params.setdefault("guidance", "context")
                    params.setdefault("context_gamma", d["gamma"])
            if issubclass(info.cls, MaskedSampler):
                # masked positions are always molecule tokens (training never masks BOS/EOS/PAD)
                params.setdefault("suppress_ids", (PAD_ID, BOS_ID, EOS_ID, UNK_ID))
                # de novo: ring-closure / attachment digits must pair up and branches close (strict
                # validity) -- the 'balanced' constraint (constraint="none" turns it off; fragment
                # tasks take constraint="balanced" explicitly)
                if params.setdefault("constraint", "balanced" if task == "de_novo" else "none") == "balanced":
                    params.setdefault("pair_ids", ring_digit_ids(self.tokenizer))
                    params.setdefault("bracket_pairs", branch_pairs(self.tokenizer))
            if issubclass(info.cls, MaskedSampler) and params.get("guidance") == "context":
                params.setdefault("context_special_ids", (PAD_ID, BOS_ID, EOS_ID))
            smp = get_sampler(sampler, **params)
        masked = isinstance(smp, MaskedSampler)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)):
            raise ConfigError(f"temperature must be a number >= 0 (0 = greedy) or None (the task's GenMol value), "
                              f"got {temperature!r} ({type(temperature).__name__}).")
        if temperature is None:
            if masked:
                pc = dict(getattr(type(smp), "paper_config", {}) or {})
                temperature = pc.get("temperature", 1.0)
                if getattr(smp, "name", "") == "genmol":
                    temperature = TASK_DEFAULTS[task]["temperature"]
            else:
                temperature = AR_TEMPERATURE
        if not masked and self._lms is None:
            raise ConfigError(
                f"sampler {getattr(smp, 'name', smp)!r} needs the autoregressive model, but this pipeline has no ar_model."
            )
        return smp, masked, float(temperature)

    def _decode_rows(
        self,
        smp: Sampler,
        masked: bool,
        rows: list[list[int]],
        temperature: float,
        generator: torch.Generator,
        seed: int | None,
        batch_size: int,
        hooks: RowHooks | None = None,
        by_length: bool = False,
    ) -> tuple[list[list[int]], DecodeStats]:
        """Run the sampler over ``rows`` in batches; returns full token rows (fixed part included).

        ``by_length`` (de novo): masked rows that fill more than one batch are batched by length
        (the outputs come back in the rows' order): a masked batch is padded to its longest row and
        takes as many steps as that row has masks, so rows of similar lengths waste neither
        positions nor forwards (256 de novo samples at batch 64, one call: 230 -> 195 forwards,
        1.19x faster, 1.32x on the masked cache; 2026-11-28, *ad hoc*). Fragment tasks keep their
        order: most of their rows hold the same ``min_add_len`` masks, so there is little to gain
        (the two-step linker over 28 seeds linked 540 products sorted and 538 not: no difference)."""
        hooks = hooks or RowHooks()
        order = list(range(len(rows)))
        if by_length and masked and len(rows) > batch_size:
            order.sort(key=lambda i: sum(t == MASK_ID for t in rows[i]))
            rows = [rows[i] for i in order]
        outs: list[list[int]] = []
        stats: list[DecodeStats] = []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            step_callback = hooks.step_callback(start // batch_size)
            if masked:
                n_mask = max(sum(t == MASK_ID for t in r) for r in chunk)
                config = DecodeConfig(
                    max_new_tokens=max(1, n_mask), temperature=temperature, pad_token_id=PAD_ID, seed=seed,
                    step_callback=step_callback,
                )
                inputs = MaskedInputs.coerce(chunk, mask_id=MASK_ID, num_codebooks=1, pad_id=PAD_ID)
                with torch.inference_mode():
                    res = smp.generate({"model": self._masked}, inputs, config, generator)
                outs.extend([list(map(int, s)) for s in res.sequences])
            else:
                longest = max(len(r) for r in chunk)
                config = DecodeConfig(
                    max_new_tokens=self.ar_max_length - longest,
                    temperature=temperature,
                    eos_token_id=EOS_ID,
                    pad_token_id=PAD_ID,
                    seed=seed,
                    step_callback=step_callback,
                )
                with torch.inference_mode():
                    res = smp.generate(self._lms, [list(r) for r in chunk], config, generator)
                outs.extend([list(r) + list(map(int, s)) for r, s in zip(chunk, res.sequences)])
            stats.append(res.stats)
            hooks.advance(len(chunk))
        # the batch the sampler ran: batch_size rows, or every row when there are fewer
        merged = merge_stats(stats, getattr(smp, "name", type(smp).__name__), min(batch_size, len(rows)))
        merged.extra["temperature"] = temperature
        back = [0] * len(order)
        for k, i in enumerate(order):
            back[i] = k
        return [outs[k] for k in back], merged

    @property
    def ar_max_length(self) -> int:
        return int(self._lms["model"].max_length) if self._lms else self.max_length

    def _postprocess(self, rows: list[list[int]]) -> tuple[list[str], list[str | None], list[str | None]]:
        """(SAFE strings, SMILES or None, error messages) for full token rows."""
        safes, smiles, errors = [], [], []
        for i, row in enumerate(rows):
            body = []
            for t in row:
                if t == EOS_ID:
                    break
                if t not in (BOS_ID, PAD_ID):
                    body.append(t)
            if MASK_ID in body or UNK_ID in body:
                safes.append("")
                smiles.append(None)
                errors.append(f"molecule {i}: the output still holds [MASK]/[UNK] tokens")
                continue
            s = self.tokenizer.decode(body)
            safes.append(s)
            smi = safe_to_smiles(s, fix=True)
            smiles.append(smi)
            errors.append(None if smi is not None else f"molecule {i}: SAFE string {s!r} does not decode to a molecule")
        return safes, smiles, errors

