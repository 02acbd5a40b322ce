"""De novo peptide sequencing: ``Pipeline.from_pretrained("leapgen/peptide")(spectra) -> sequences, scores, stats``.

Component: ``model`` (:class:`~leapgen.models.peptide.PeptideModel`: spectrum encoder, NAR CTC
decoder, AR decoder, bidirectional-augmented AR decoder).

Samplers:

* ``ar_bidirectional`` (default): AR decoding of the decoder that attends to the NAR decoder's
  hidden states (CrossNovo; one NAR pass + one forward per residue);
* ``ar`` / ``ar_beam`` and the other chain samplers: the plain AR decoder (the baseline);
* ``ctc_pmc``: the NAR CTC decoder with precise mass control (one pass + a mass DP on the CPU).

A spectrum is a dict ``{"mz": [...], "intensity": [...], "precursor_mz": float, "charge": int}``
(or a tuple in that order), or a spectrum as pyteomics' MGF / mzML readers give it
(``{"m/z array", "intensity array", "params": {"pepmass": (mz, intensity), "charge": [2]}}``). The
charge may be written as MGF writes it (``"2+"``), a whole float (``2.0``), a one-element list or a
0-d array / tensor (:func:`parse_charge`). ``scores[i]`` is the mean log-probability per residue (AR samplers:
teacher-forced under the decoder that produced it, ``</s>`` included; ``ctc_pmc``: the best
alignment's log-probability over the residues), ``precursor_ok[i]`` whether the sequence's mass is
within ``tolerance`` Da of the precursor's. A bad spectrum (no peaks, non-positive precursor, a
charge outside 1..max_charge, mismatched or multi-dimensional arrays, m/z values that are not
positive and finite or all beyond the trained range :data:`~leapgen.data.peptide.MAX_MZ`, intensities
all zero, a precursor heavier than any peptide the model can output or lighter than one residue and water) gets ``sequences[i] = None`` and ``errors[i]``; the
others still return. Peaks partly beyond the trained m/z range are kept, with a logged warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.peptide import MAX_MZ
from ..errors import InputError, NumericalError, a_type
from ..models.condition import EncoderInputs
from ..models.peptide import EOS, H2O, PROTON, PeptideModel
from ..models.peptide_lm import peptide_views
from ..samplers import DecodeConfig, DecodeStats, sampler_info
from ..samplers.base import Sampler
from .base import Pipeline
from .items import check_count
from .outputs import PipelineOutput

logger = logging.getLogger(__name__)


@dataclass(repr=False)
class PeptideOutput(PipelineOutput):
    """``sequences[i]`` (None when item i failed, see ``errors[i]``), ``scores[i]``,
    ``precursor_ok[i]``, ``mass_error[i]`` (Da) and the merged decode statistics."""

    sequences: list[str | None]
    scores: list[float | None]
    stats: DecodeStats
    errors: list[str | None] = field(default_factory=list)
    precursor_ok: list[bool | None] = field(default_factory=list)
    mass_error: list[float | None] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"PeptideOutput(sequences={self.sequences!r}, stats={self.stats.summary()})"


def _peaks(name: str, values: Any) -> np.ndarray:
    """One peak array as 1-D float64; InputError for anything else."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a 1-D array of numbers, got {type(values).__name__}") from None
    if arr.ndim > 1:
        raise InputError(f"{name} must be a 1-D array (one value per peak), got shape {arr.shape}; "
                         "pass one spectrum's peaks, or a list of spectra")
    return arr.ravel()


def parse_charge(z: Any, max_charge: int) -> int:
    """A precursor charge as the int it is: an integer, a whole float (``2.0``, a pandas column), MGF's
    ``"2+"`` / ``"2"``, a one-element list (pyteomics' ``ChargeList``), a 0-d array or tensor. A
    negative, zero, fractional or several-valued charge, or one above ``max_charge``, is an InputError."""
    orig = z
    if hasattr(z, "ndim") and hasattr(z, "tolist") and z.ndim <= 1:  # numpy array / torch tensor
        z = z.tolist()
    if isinstance(z, (list, tuple)) and len(z) == 1:
        z = z[0]
    if isinstance(z, str):
        text = z.strip()
        text = text[:-1] if text.endswith("+") else text
        z = int(text) if text.isdigit() else z
    if isinstance(z, (float, np.floating)) and float(z).is_integer():
        z = int(z)
    if isinstance(z, bool) or not isinstance(z, (int, np.integer)):
        several = " (several candidate charges: give one spectrum per charge)" if isinstance(z, (list, tuple)) else ""
        raise InputError(f"the precursor charge must be one whole number (2, or MGF's '2+'), got {orig!r}{several}")
    if not 1 <= int(z) <= max_charge:
        raise InputError(f"unsupported precursor charge {orig!r}; this model handles charges 1..{max_charge}")
    return int(z)


def _pyteomics(item: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(mz, intensity, precursor m/z, charge)`` of a spectrum as pyteomics reads it from MGF."""
    params = item.get("params") or {}
    pmz = params.get("pepmass", item.get("precursor_mz"))
    if isinstance(pmz, (tuple, list)):  # MGF's PEPMASS=mz [intensity]
        pmz = pmz[0] if pmz else None
    z = params.get("charge", item.get("charge"))
    if pmz is None or z is None:
        what = "PEPMASS (the precursor m/z)" if pmz is None else "CHARGE"
        title = f" {params['title']!r}" if params.get("title") else ""
        raise InputError(f"the spectrum{title} has no {what}; the model needs the precursor m/z "
                         "and charge (set params['pepmass'] / params['charge'], or pass a dict with precursor_mz and charge)")
    return item["m/z array"], item["intensity array"], pmz, z


def parse_spectrum(item: Any, max_charge: int, max_mass: float = math.inf,
                   min_mass: float = 0.0) -> tuple[np.ndarray, np.ndarray, float, int]:
    """``(mz, intensity normalised to max 1, neutral precursor mass, charge)``; InputError when bad
    (``max_mass`` / ``min_mass``: the heaviest / lightest neutral peptide mass the model can output, Da)."""
    if isinstance(item, dict) and "mz" not in item and "m/z array" in item and "intensity array" in item:
        mz, inten, pmz, z = _pyteomics(item)
    elif isinstance(item, dict):
        try:
            mz, inten, pmz, z = item["mz"], item["intensity"], item["precursor_mz"], item["charge"]
        except KeyError as err:
            raise InputError(f"a spectrum dict needs mz, intensity, precursor_mz and charge; missing {err}") from None
    elif isinstance(item, (tuple, list)) and len(item) == 4:
        mz, inten, pmz, z = item
    else:
        got = f"{a_type(item)} of {len(item)}" if isinstance(item, (tuple, list)) else type(item).__name__
        raise InputError(f"a spectrum is a dict (mz, intensity, precursor_mz, charge) or a 4-tuple (mz, intensity, "
                         f"precursor_mz, charge), got {got}")
    mz, inten = _peaks("mz", mz), _peaks("intensity", inten)
    if mz.size == 0:
        raise InputError("the spectrum has no peaks")
    if mz.size != inten.size:
        raise InputError(f"mz has {mz.size} values but intensity has {inten.size}")
    if not (np.isfinite(mz).all() and np.isfinite(inten).all()) or (inten < 0).any():
        raise InputError("peaks must be finite and intensities >= 0")
    if not inten.any():
        raise InputError("every peak has zero intensity; there is no signal to read a sequence from")
    if (mz <= 0).any():
        raise InputError(f"m/z values must be positive; {int((mz <= 0).sum())} of {mz.size} are not (min {mz.min():g})")
    beyond = int((mz >= MAX_MZ).sum())
    if beyond == mz.size:
        raise InputError(f"every peak lies beyond m/z {MAX_MZ:g} (min {mz.min():g}), outside the range the model was "
                         "trained on; check the m/z values (and their units)")
    if beyond:
        logger.warning("%d of %d peaks lie beyond m/z %g, outside the range the model was trained on; the sequence "
                       "may be unreliable", beyond, mz.size, MAX_MZ)
    try:
        pmz = float(pmz)
    except (TypeError, ValueError):
        raise InputError(f"precursor_mz must be a number, got {pmz!r}") from None
    if not (math.isfinite(pmz) and pmz > 0):
        raise InputError(f"the precursor m/z must be positive, got {pmz}")
    z = parse_charge(z, max_charge)
    mass = (pmz - PROTON) * z
    if mass > max_mass:
        raise InputError(f"the precursor (m/z {pmz:g}, charge {int(z)}) weighs {mass:.1f} Da, more than the heaviest "
                         f"peptide this model can output ({max_mass:.1f} Da)")
    if mass < min_mass:
        raise InputError(f"the precursor (m/z {pmz:g}, charge {int(z)}) weighs {mass:.2f} Da, less than the lightest "
                         f"peptide ({min_mass:.2f} Da: one residue and water); check the precursor m/z and charge")
    order = np.argsort(mz)
    return mz[order], inten[order] / max(inten.max(), 1e-12), mass, int(z)


class PeptidePipeline(Pipeline):
    """MS/MS spectra to peptide sequences (see the module docstring)."""

    components = ("model",)
    contracts = ("encoder-decoder", "peptide-bidirectional", "peptide-ctc")
    #: the attention decoder reads residues through its own embedding; it exposes no embedding table or latents
    model_lacks = {"embeddings": "PeptideARLM.embeddings() returns None", "token_latents": "PeptideARLM.token_latents() returns None"}

    def __init__(self, model: PeptideModel, max_peaks: int = 150, tolerance: float = 0.1) -> None:
        super().__init__(model=model)
        self.max_peaks = int(max_peaks)
        self.tolerance = float(tolerance)
        self._views: dict[str, Any] | None = None

    def pipeline_config(self) -> dict[str, Any]:
        return {"max_peaks": self.max_peaks, "tolerance": self.tolerance}

    @property
    def max_mass(self) -> float:
        """The heaviest neutral peptide (Da) the model can output: its longest sequence of its heaviest
        residue (AR: ``max_len``; CTC: ``ctc_slots``), plus water and the tolerance."""
        c = self.model.config
        return max(c.max_len, getattr(c, "ctc_slots", 0)) * max(c.masses) + H2O + self.tolerance

    @property
    def min_mass(self) -> float:
        """The lightest neutral peptide (Da): its lightest residue plus water, less the tolerance."""
        return min(self.model.config.masses) + H2O - self.tolerance

    def _on_change(self) -> None:
        self._views = None

    @property
    def views(self) -> dict[str, Any]:
        if self._views is None or self._views["ar"].net is not self.model:
            self._views = peptide_views(self.model)
        return self._views

    def __call__(self, spectra: Any, sampler: str | Sampler = "ar_bidirectional", *, batch_size: int = 32,
                 max_new_tokens: int | None = None, temperature: float = 0.0, seed: int | None = None,
                 generator: torch.Generator | None = None, progress: bool = False, return_dict: bool = True,
                 **sampler_params: Any) -> Any:
        """Sequence ``spectra``: one spectrum or a list of them."""
        # 1. the sampler, checked against the model's contracts
        pmc = isinstance(sampler, str) and sampler_info(sampler).name == "ctc_pmc"
        smp = self.make_sampler(sampler, sampler_params, {"tolerance": self.tolerance} if pmc else None)
        check_count("batch_size", batch_size)
        room = self.views["ar"].max_length - 1  # the decoder's positions after its start token
        check_count("max_new_tokens", max_new_tokens, optional=True, high=room,
                    why=f" (the decoder has {room + 1} positions, one for its start token)")
        gen = self.prepare_generator(generator, seed)
        # 2. spectra -> arrays; a bad item fails alone
        single = isinstance(spectra, dict) or (isinstance(spectra, tuple) and len(spectra) == 4 and np.ndim(spectra[2]) == 0)
        if not single and (isinstance(spectra, (str, bytes)) or not hasattr(spectra, "__iter__")):
            raise InputError(f"spectra must be a dict (mz, intensity, precursor_mz, charge), a 4-tuple or a list of "
                             f"them, got {type(spectra).__name__}.")
        items = [spectra] if single else list(spectra)
        if not items:
            raise InputError("no spectra given; pass a dict (mz, intensity, precursor_mz, charge) or a list of them.")
        parsed: list[Any] = [None] * len(items)
        errors: list[str | None] = [None] * len(items)
        for i, item in enumerate(items):
            try:
                parsed[i] = parse_spectrum(item, self.model.config.max_charge, self.max_mass, self.min_mass)
            except InputError as err:
                errors[i] = str(err)
        # 3. decode in batches (encode once per batch)
        seqs: list[str | None] = [None] * len(items)
        scores: list[float | None] = [None] * len(items)
        ok: list[bool | None] = [None] * len(items)
        err_da: list[float | None] = [None] * len(items)
        parts: list[DecodeStats] = []
        todo = [i for i, p in enumerate(parsed) if p is not None]
        chunks = [todo[s : s + batch_size] for s in range(0, len(todo), batch_size)]
        for chunk in self.progress_bar(chunks, desc="spectra") if self._show_progress(progress) else chunks:
            try:
                res, sc, state = self._decode(smp, [parsed[i] for i in chunk], max_new_tokens, temperature, gen)
            except (InputError, NumericalError) as err:  # the call's own errors (ConfigError) raise
                for i in chunk:
                    errors[i] = str(err)
                continue
            parts.append(res.stats)
            for row, i in enumerate(chunk):
                ids = [t for t in res.sequences[row] if t >= 2]
                seqs[i], scores[i] = self.model.decode_ids(ids), sc[row]
                err_da[i] = self.model.sequence_mass(ids) - parsed[i][2]
                ok[i] = abs(err_da[i]) <= self.tolerance
        # 4. outputs
        stats = DecodeStats.merged(parts, smp.name, sum_extra=("pmc_fallback",))  # ctc_pmc's greedy fallbacks, summed
        out = PeptideOutput(sequences=seqs, scores=scores, stats=stats, errors=errors, precursor_ok=ok, mass_error=err_da)
        return self._return(out, return_dict)

    @torch.inference_mode()
    def _decode(self, smp: Sampler, rows: list[tuple], max_new_tokens: int | None, temperature: float,
                gen: torch.Generator) -> tuple[Any, list[float], Any]:
        views = self.views
        p = min(self.max_peaks, max(r[0].size for r in rows))
        x = torch.zeros(len(rows), 2, p)
        mask = torch.zeros(len(rows), p, dtype=torch.long)
        for k, (mz, inten, _, _) in enumerate(rows):
            if mz.size > p:  # keep the most intense peaks
                keep = np.sort(np.argsort(-inten)[:p])
                mz, inten = mz[keep], inten[keep]
            x[k, 0, : mz.size], x[k, 1, : mz.size] = torch.from_numpy(mz), torch.from_numpy(inten)
            mask[k, : mz.size] = 1
        extra = {"precursor_mass": torch.tensor([r[2] for r in rows], dtype=torch.float64),
                 "charge": torch.tensor([r[3] for r in rows])}
        state = views["ar"].encode(EncoderInputs(input_features=x.to(self.device), attention_mask=mask.to(self.device),
                                                 extra=extra))
        limit = self.model.config.max_len + 1 if max_new_tokens is None else max_new_tokens
        config = DecodeConfig(max_new_tokens=limit, temperature=temperature,
                              eos_token_id=EOS, pad_token_id=0)
        contracts = set(smp.contracts)
        view = views["ctc"] if "peptide-ctc" in contracts else views["bidirectional"] if (
            "peptide-bidirectional" in contracts) else views["ar"]
        res = smp.generate({"model": view}, [[EOS]] * len(rows), config, gen, cond=state)
        ids = [[t for t in s if t >= 2] for s in res.sequences]
        if "peptide-ctc" in contracts:
            scores = [float(s) / max(1, len(i)) for s, i in zip(res.stats.extra.get("scores", [0.0] * len(rows)), ids)]
        else:
            lps = view.teacher_forced_logprobs(state, ids)
            scores = [float(lp.mean()) for lp in lps]
        return res, scores, state


__all__ = ["PeptideOutput", "PeptidePipeline", "parse_charge", "parse_spectrum"]
