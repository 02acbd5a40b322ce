"""Molecule generation pipeline: SAFE strings from a masked (GenMol-style) or an autoregressive model.

>>> from leapgen import Pipeline
>>> pipe = Pipeline.from_pretrained("leapgen/molecule-safe")
>>> out = pipe(num_samples=8, sampler="genmol", seed=0)                       # de novo
>>> out = pipe(num_samples=8, task="linker", fragments=["[*]c1ccccc1", "[*]C1CCNCC1"], seed=0)
>>> out = pipe(task="lead_opt", molecules=["CCOc1ccc(CC(=O)N2CCCC2)cc1"], num_rounds=3, num_samples=16)
>>> out.smiles, out.valid, out.stats

Components: ``model`` (a bidirectional masked LM, e.g. ``BertForMaskedLM``, put behind
:class:`~leapgen.models.masked.TorchMaskedLM`), ``ar_model`` (a causal LM, e.g.
``LlamaForCausalLM``, behind :class:`~leapgen.models.hf.HFCausalLM`; optional) and ``tokenizer``
(:class:`~leapgen.tokenizers.safe.SAFETokenizer`), plus ``pipeline_config.json``: the token-length
histogram of the training molecules and a description / hash of the training SMILES.

How each task is decoded (GenMol, Lee et al. ICML 2025, ``sampler.py``; reference notes masked.md §4):

* masked samplers (``genmol``, ``maskgit``, ``mask_predict``, any :class:`MaskedSampler`) fill rows
  ``[BOS] (fragment-SAFE .) [MASK]*n [EOS]``; n is drawn from the training length histogram
  (``n = max(L - len(fragment), min_add_len)``); de novo has no fragment part;
* ``sampler="ar"`` (or another causal-LM sampler) continues ``[BOS] (fragment-SAFE .)`` until EOS:
  SAFE-GPT's prefix prompting, valid because SAFE fragments can come in any order;
* the tokens are decoded to SAFE, then SMILES with ``safe.decode(fix=True)`` keeping the largest
  component (GenMol's post-processing: it raises validity, keep that in mind when comparing);
* fragment tasks (GenMol table): ``linker`` (two fragments with attachment points): by default
  GenMol v1's two-step linking (``linker_mode="two_step"``, SAFE-GPT style: each fragment is
  completed on its own, SAFE's ``MolSlicer`` cuts a linker out of each completion and
  ``MolSlicer.link_fragments`` joins the two fragments with it; ``token_ids`` is then empty and
  ``history[0]`` holds the side completions and linkers), or the one-step linker with both
  fragments in context (``linker_mode="one_step"``); ``motif`` (motif extension), ``scaffold`` (scaffold decoration),
  ``superstructure`` (a fragment without attachment points gets one of its attachment variants at
  random per sample, ``safe.utils.list_individual_attach_points(depth=3)``); with ``filter=True``
  (default) outputs that do not contain every given fragment as an RDKit substructure, with an atom
  bonded at each of its attachment points, become None and are counted in ``num_filtered``
  (GenMol's validity counts them as invalid too);
* ``lead_opt``: each round cuts the current best molecule into fragments (SAFE, non-ring single
  bonds: the ``rotatable`` slicer), re-masks one random fragment with 5-15 ``[MASK]`` (GenMol
  ``remask``; the AR model instead continues the other fragments, SAFE order being free), scores
  the valid candidates with ``score_fn`` (RDKit QED by default) and keeps the best if it improves.

When ``temperature`` is None the sampler's ``paper_config`` applies (GenMol: 0.5 de novo; fragment
tasks 1.2 with GenMol's randomness and context guidance γ per task, see :data:`TASK_DEFAULTS`);
``ar`` samples at temperature 1.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, InputError
from ..models.hf import as_causal_lm
from ..models.masked import TorchMaskedLM
from ..samplers.base import DecodeConfig, DecodeStats, Sampler, get_sampler, make_generator
from ..samplers.masked.loop import MaskedInputs, MaskedSampler
from ..tokenizers.safe import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID, SAFETokenizer, safe_to_smiles
from .base import Pipeline, resolve_pretrained

logger = logging.getLogger(__name__)

TASKS = ("de_novo", "linker", "motif", "scaffold", "superstructure", "lead_opt")
LINKER_MODES = ("two_step", "one_step")
CONFIG_FILE = "pipeline_config.json"

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


@dataclass
class MoleculeOutput:
    """Generated molecules, one entry per sample (per input molecule for ``lead_opt``).

    ``smiles[i]`` is canonical SMILES or None (not a molecule, or removed by the fragment filter);
    ``valid[i]`` is ``smiles[i] is not None``; ``errors[i]`` says why an entry is None;
    ``safe[i]`` is the SAFE string the model wrote (fragment part included; "" if none).
    """

    smiles: list[str | None]
    valid: list[bool]
    safe: list[str]
    errors: list[str | None]
    stats: DecodeStats
    task: str = "de_novo"
    token_ids: list[list[int]] = field(default_factory=list)
    num_filtered: int = 0
    unfiltered_smiles: list[str | None] = field(default_factory=list)
    scores: list[float | None] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def validity(self) -> float:
        return sum(self.valid) / len(self.valid) if self.valid else float("nan")

    def __repr__(self) -> str:
        return (
            f"MoleculeOutput(task={self.task!r}, n={len(self.smiles)}, valid={sum(self.valid)}, "
            f"filtered={self.num_filtered}, stats={self.stats.summary()})"
        )


def _merge_stats(parts: list[DecodeStats], name: str, batch_size: int) -> DecodeStats:
    """One DecodeStats over sequential batches: counts and wall time add up."""
    out = DecodeStats(sampler=name, batch_size=batch_size)
    for s in parts:
        out.new_tokens += s.new_tokens
        out.target_forwards += s.target_forwards
        out.draft_forwards += s.draft_forwards
        out.other_forwards += s.other_forwards
        out.drafted_tokens += s.drafted_tokens
        out.accepted_draft_tokens += s.accepted_draft_tokens
        out.baseline_steps += s.baseline_steps
        out.wall_time += s.wall_time
        out.accepted_per_step.extend(s.accepted_per_step)
    for key in ("steps", "hook_filled"):  # the masked engine's step counts add up over batches
        if parts and all(isinstance(s.extra.get(key), int) for s in parts):
            out.extra[key] = sum(s.extra[key] for s in parts)
    out.extra["batches"] = len(parts)
    return out


class MoleculePipeline(Pipeline):
    """De novo and fragment-constrained molecule generation over SAFE (see the module docstring)."""

    components = ("model", "ar_model", "tokenizer")
    optional_components = ("ar_model",)

    def __init__(
        self,
        model: Any,
        ar_model: Any = None,
        tokenizer: SAFETokenizer | None = None,
        length_histogram: dict[int, int] | None = None,
        training_smiles_hash: str | None = None,
        training_data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model=model, ar_model=ar_model, tokenizer=tokenizer)
        if not isinstance(self.tokenizer, SAFETokenizer):
            raise ConfigError(f"MoleculePipeline needs a SAFETokenizer, got {type(self.tokenizer).__name__}.")
        self._config: dict[str, Any] | None = None
        if length_histogram is not None:
            self._config = {
                "length_histogram": {str(k): int(v) for k, v in length_histogram.items()},
                "training_smiles_hash": training_smiles_hash,
                "training_data": training_data or {},
            }
            self._check_histogram()
        self._on_change()

    # ------------------------------------------------------------------------------ components
    def _on_change(self) -> None:
        v = len(self.tokenizer)
        out = self.model.get_output_embeddings().weight.shape[0] if hasattr(self.model, "get_output_embeddings") else v
        if out != v:
            raise ConfigError(f"the masked model has {out} output logits but the SAFE tokenizer has {v} tokens.")
        max_len = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        self._masked = TorchMaskedLM(self.model, mask_id=MASK_ID, vocab_size=v, max_length=max_len)
        self._lms = {"model": as_causal_lm(self.ar_model)} if self.ar_model is not None else None

    @property
    def config(self) -> dict[str, Any]:
        """``pipeline_config.json``: length histogram and training-data description (read lazily)."""
        if self._config is None:
            src = getattr(self, "name_or_path", None)
            if src is None:
                raise ConfigError(
                    "this MoleculePipeline has no length histogram; pass length_histogram= when building it."
                )
            path = resolve_pretrained(src) / CONFIG_FILE
            if not path.is_file():
                raise ConfigError(f"{path} is missing; the pipeline folder was not written by the molecule-safe recipe.")
            self._config = json.loads(path.read_text())
            self._check_histogram()
        return self._config

    def _check_histogram(self) -> None:
        hist = self._config["length_histogram"]
        if not hist or any(int(k) < 1 or int(v) < 0 for k, v in hist.items()) or sum(hist.values()) <= 0:
            raise ConfigError("length_histogram must map token counts >= 1 to non-negative counts, with some > 0.")

    @property
    def length_histogram(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.config["length_histogram"].items()}

    @property
    def training_smiles_hash(self) -> str | None:
        return self.config.get("training_smiles_hash")

    def training_smiles(self) -> list[str]:
        """The training SMILES, rebuilt from MOSES (cached) and checked against the stored hash."""
        from ..data.molecules import load_safe_dataset, smiles_hash

        desc = self.config.get("training_data") or {}
        if "num_molecules" not in desc:
            raise ConfigError("this pipeline does not record how its training set was built.")
        ds = load_safe_dataset(desc["num_molecules"], heldout_frac=desc["heldout_frac"], seed=desc["seed"])
        if self.training_smiles_hash and smiles_hash(ds.train_smiles) != self.training_smiles_hash:
            raise ConfigError("the rebuilt training SMILES do not match the stored hash (different MOSES/safe-mol version?).")
        return ds.train_smiles

    @property
    def max_length(self) -> int:
        return int(self._masked.max_length or 128)

    def save_pretrained(self, folder: str | Any) -> None:
        super().save_pretrained(folder)
        folder = Path(folder)
        index = json.loads((folder / "model_index.json").read_text())
        index["tokenizer"] = ["leapgen.tokenizers.safe", "SAFETokenizer"]
        (folder / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        (folder / CONFIG_FILE).write_text(json.dumps(self.config, indent=1) + "\n")

    # ------------------------------------------------------------------------------ inputs
    def _fragment_mols(self, task: str, fragments: Any) -> list[str]:
        from rdkit import Chem

        if fragments is None:
            raise InputError(f"task={task!r} needs fragments=[...] (SMILES with [*] attachment points).")
        if isinstance(fragments, str):
            fragments = [f for f in fragments.split(".")] if task == "linker" else [fragments]
        if not isinstance(fragments, (list, tuple)) or not fragments:
            raise InputError(f"fragments must be a non-empty list of SMILES strings, got {fragments!r}.")
        want = 2 if task == "linker" else 1
        if len(fragments) != want:
            raise InputError(
                f"task={task!r} takes {want} fragment(s), got {len(fragments)}"
                + (" (two fragments to link, e.g. ['[*]c1ccccc1', '[*]C1CCNCC1'])." if want == 2 else ".")
            )
        out = []
        for f in fragments:
            if not isinstance(f, str) or not f.strip():
                raise InputError(f"fragment {f!r} is not a SMILES string.")
            mol = Chem.MolFromSmiles(f)
            if mol is None:
                raise InputError(f"fragment {f!r} is not a valid SMILES (RDKit cannot parse it); check the string.")
            n_attach = sum(a.GetAtomicNum() == 0 for a in mol.GetAtoms())
            if n_attach == 0 and task != "superstructure":
                raise InputError(
                    f"fragment {f!r} has no attachment point, which task={task!r} needs; mark where the molecule "
                    "grows with [*], e.g. '[*]c1ccccc1' (or use task='superstructure')."
                )
            out.append(f)
        return out

    def _fragment_ids(self, smiles: str) -> list[int]:
        from ..tokenizers.safe import smiles_to_safe

        enc = smiles_to_safe(smiles, allow_empty=True)
        ids = self.tokenizer.encode(enc)
        if UNK_ID in ids:
            bad = [t for t in self.tokenizer.tokenize(enc) if t not in self.tokenizer.token_to_id]
            raise InputError(
                f"fragment {smiles!r} (SAFE {enc!r}) uses token(s) {bad} that this model's vocabulary does not have."
            )
        return ids

    def _sample_lengths(self, rng: random.Random, n: int) -> list[int]:
        hist = self.length_histogram
        keys = list(hist)
        return rng.choices(keys, weights=[hist[k] for k in keys], k=n)

    # ------------------------------------------------------------------------------ decoding
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
            if issubclass(info.cls, MaskedSampler) and params.get("guidance") == "context":
                params.setdefault("context_special_ids", (PAD_ID, BOS_ID, EOS_ID))
            smp = get_sampler(sampler, **params)
        masked = isinstance(smp, MaskedSampler)
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
        progress: bool,
    ) -> tuple[list[list[int]], DecodeStats]:
        """Run the sampler over ``rows`` in batches; returns full token rows (fixed part included)."""
        outs: list[list[int]] = []
        stats: list[DecodeStats] = []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            if masked:
                n_mask = max(sum(t == MASK_ID for t in r) for r in chunk)
                config = DecodeConfig(
                    max_new_tokens=max(1, n_mask), temperature=temperature, pad_token_id=PAD_ID, seed=seed, progress=progress
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
                    progress=progress,
                )
                with torch.inference_mode():
                    res = smp.generate(self._lms, [list(r) for r in chunk], config, generator)
                outs.extend([list(r) + list(map(int, s)) for r, s in zip(chunk, res.sequences)])
            stats.append(res.stats)
        merged = _merge_stats(stats, getattr(smp, "name", type(smp).__name__), batch_size)
        merged.extra["temperature"] = temperature
        return outs, merged

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

    # ------------------------------------------------------------------------------ call
    def __call__(
        self,
        num_samples: int = 16,
        task: str = "de_novo",
        fragments: str | Sequence[str] | None = None,
        molecules: Sequence[str] | None = None,
        sampler: str | Sampler = "genmol",
        seed: int | None = None,
        batch_size: int = 64,
        temperature: float | None = None,
        filter: bool = True,  # noqa: A002 - the GenMol option name
        min_add_len: int | None = None,
        score_fn: Callable[[list[Any]], list[float]] | None = None,
        num_rounds: int = 3,
        linker_mode: str = "two_step",
        progress: bool = False,
        **sampler_params: Any,
    ) -> MoleculeOutput:
        """Generate molecules; see the module docstring for the tasks and their settings."""
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}.")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise InputError(f"num_samples must be an integer >= 1, got {num_samples!r}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
        if min_add_len is not None and (isinstance(min_add_len, bool) or not isinstance(min_add_len, int) or min_add_len < 0):
            raise InputError(f"min_add_len must be an integer >= 0, got {min_add_len!r}.")
        if linker_mode not in LINKER_MODES:
            raise InputError(f"linker_mode must be one of {LINKER_MODES}, got {linker_mode!r}.")
        if task != "lead_opt" and (molecules is not None or score_fn is not None):
            raise InputError(f"molecules= and score_fn= belong to task='lead_opt', not task={task!r}.")
        if task in ("de_novo", "lead_opt") and fragments is not None:
            raise InputError(f"task={task!r} takes no fragments; use task='motif', 'scaffold', 'linker' or 'superstructure'.")
        smp, masked, temp = self._resolve_sampler(sampler, sampler_params, task, temperature)
        rng = random.Random(seed)
        generator = make_generator(DecodeConfig(seed=seed), self._masked.device)
        if task == "lead_opt":
            return self._lead_opt(molecules, score_fn, num_rounds, num_samples, smp, masked, temp, rng, generator, seed, batch_size, min_add_len, progress)
        t0 = time.perf_counter()
        if task == "de_novo":
            prefixes = [[] for _ in range(num_samples)]
            queries = None
        else:
            frags = self._fragment_mols(task, fragments)
            queries = [_substructure_query(f) for f in frags]
            two_step = task == "linker" and linker_mode == "two_step"
            if two_step:  # step 1: complete each side on its own, rows A0, B0, A1, B1, ...
                dot = self.tokenizer.token_to_id["."]
                sides = [self._fragment_ids(f) + [dot] for f in frags]
                prefixes = [sides[k % 2] for k in range(2 * num_samples)]
            else:
                prefixes = self._fragment_prefixes(task, frags, num_samples, rng)
        rows = self._build_rows(prefixes, masked, rng, TASK_DEFAULTS[task]["min_add_len"] if min_add_len is None else min_add_len)
        outs, stats = self._decode_rows(smp, masked, rows, temp, generator, seed, batch_size, progress)
        safes, smiles, errors = self._postprocess(outs)
        history: list[dict[str, Any]] = []
        if task == "linker" and linker_mode == "two_step":  # step 2: cut out linkers, join the fragments with them
            side = {"step": "sides", "token_ids": outs, "smiles": smiles, "safe": safes}
            smiles, errors, info = _mix_linkers(frags, smiles, num_samples)
            side["linkers"] = info.pop("linkers")
            history.append(side)
            safes = [_safe_or_empty(x) if x is not None else "" for x in smiles]
            outs = []
            stats.extra.update(linker_mode="two_step", **info)
        unfiltered = list(smiles)
        n_filtered = 0
        if queries is not None and filter:
            for i, smi in enumerate(smiles):
                if smi is not None and not _contains_all(smi, queries):
                    smiles[i] = None
                    errors[i] = f"molecule {i}: filtered out, it does not contain every given fragment"
                    n_filtered += 1
        stats.extra.update(task=task, num_filtered=n_filtered, pipeline_wall_s=time.perf_counter() - t0)
        return MoleculeOutput(
            smiles=smiles,
            valid=[s is not None for s in smiles],
            safe=safes,
            errors=errors,
            stats=stats,
            task=task,
            token_ids=outs,
            num_filtered=n_filtered,
            unfiltered_smiles=unfiltered,
            history=history,
        )

    def _fragment_prefixes(self, task: str, frags: list[str], n: int, rng: random.Random) -> list[list[int]]:
        dot = self.tokenizer.token_to_id.get(".")
        if dot is None:
            raise ConfigError("this SAFE vocabulary has no '.' token; fragment tasks need it.")
        if task == "linker":
            ids = self._fragment_ids(".".join(frags))
            return [ids + [dot] for _ in range(n)]
        from rdkit import Chem

        mol = Chem.MolFromSmiles(frags[0])
        if task == "superstructure" and not any(a.GetAtomicNum() == 0 for a in mol.GetAtoms()):
            from safe.utils import list_individual_attach_points

            variants = sorted(list_individual_attach_points(mol, depth=3))  # SAFE returns them in set order
            if not variants:
                raise InputError(f"fragment {frags[0]!r} has no atom where an attachment point can go.")
            cache: dict[str, list[int]] = {}
            out = []
            for _ in range(n):
                v = rng.choice(variants)
                if v not in cache:
                    cache[v] = self._fragment_ids(v) + [dot]
                out.append(cache[v])
            return out
        ids = self._fragment_ids(frags[0])
        return [ids + [dot] for _ in range(n)]

    def _build_rows(self, prefixes: list[list[int]], masked: bool, rng: random.Random, min_add_len: int) -> list[list[int]]:
        lengths = self._sample_lengths(rng, len(prefixes))
        rows = []
        limit = self.max_length if masked else self.ar_max_length
        for p, length in zip(prefixes, lengths):
            if masked:
                n = max(length - len(p), min_add_len, 1)
                n = min(n, limit - len(p) - 2)
                if n < 1:
                    raise InputError(
                        f"the fragment takes {len(p)} tokens, leaving no room in the model's {limit} positions; "
                        "use a smaller fragment."
                    )
                rows.append([BOS_ID, *p, *([MASK_ID] * n), EOS_ID])
            else:
                if len(p) + 2 >= limit:
                    raise InputError(f"the fragment takes {len(p)} tokens, too many for the model's {limit} positions.")
                rows.append([BOS_ID, *p])
        return rows

    # ------------------------------------------------------------------------------ lead optimisation
    def _lead_opt(
        self, molecules, score_fn, num_rounds, num_samples, smp, masked, temp, rng, generator, seed, batch_size, min_add_len, progress
    ) -> MoleculeOutput:
        from rdkit import Chem

        if molecules is None or isinstance(molecules, str):
            molecules = [molecules] if isinstance(molecules, str) else None
        if not molecules:
            raise InputError("task='lead_opt' needs molecules=[SMILES, ...] (at least one starting molecule).")
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise InputError(f"num_rounds must be an integer >= 1, got {num_rounds!r}.")
        starts = []
        for i, s in enumerate(molecules):
            mol = Chem.MolFromSmiles(s) if isinstance(s, str) and s.strip() else None
            if mol is None:
                raise InputError(f"molecules[{i}] = {s!r} is not a valid SMILES (RDKit cannot parse it); check the string.")
            starts.append(Chem.MolToSmiles(mol))
        score = score_fn if score_fn is not None else _qed_scores
        if not callable(score):
            raise InputError("score_fn must be a callable taking a list of molecules and returning one float each.")
        best = list(starts)
        best_scores = _call_score(score, best)
        history = [{"round": 0, "scores": list(best_scores)}]
        all_stats: list[DecodeStats] = []
        t0 = time.perf_counter()
        for r in range(1, num_rounds + 1):
            rows, owners = [], []
            for j, smi in enumerate(best):
                for _ in range(num_samples):
                    rows.append(self._remask_row(smi, masked, rng))
                    owners.append(j)
            outs, stats = self._decode_rows(smp, masked, rows, temp, generator, seed, batch_size, progress)
            all_stats.append(stats)
            _, smiles, _ = self._postprocess(outs)
            valid = [(k, s) for k, s in enumerate(smiles) if s is not None]
            scores = _call_score(score, [s for _, s in valid]) if valid else []
            improved = 0
            for (k, s), sc in zip(valid, scores):
                j = owners[k]
                if sc is not None and sc > (best_scores[j] if best_scores[j] is not None else float("-inf")) and s != best[j]:
                    best[j], best_scores[j] = s, sc
                    improved += 1
            history.append(
                {"round": r, "scores": list(best_scores), "valid_candidates": len(valid), "candidates": len(rows), "improvements": improved}
            )
        stats = _merge_stats(all_stats, getattr(smp, "name", "sampler"), batch_size)
        stats.extra.update(task="lead_opt", temperature=temp, rounds=num_rounds, pipeline_wall_s=time.perf_counter() - t0)
        return MoleculeOutput(
            smiles=list(best),
            valid=[True] * len(best),
            safe=[_safe_or_empty(s) for s in best],
            errors=[None] * len(best),
            stats=stats,
            task="lead_opt",
            scores=best_scores,
            history=history,
        )

    def _remask_row(self, smiles: str, masked: bool, rng: random.Random) -> list[int]:
        """GenMol ``remask``: SAFE with non-ring single bonds cut; one fragment becomes 5-15 masks
        (masked model, in place) or is dropped and regenerated after the others (AR model)."""
        from ..tokenizers.safe import smiles_to_safe

        dot = self.tokenizer.token_to_id["."]
        try:
            enc = smiles_to_safe(smiles, slicer="rotatable", allow_empty=True)
        except InputError:
            enc = smiles_to_safe(smiles, allow_empty=True)
        ids = self.tokenizer.encode(enc)
        frags: list[list[int]] = [[]]
        for t in ids:
            if t == dot:
                frags.append([])
            else:
                frags[-1].append(t)
        frags = [f for f in frags if f]
        if len(frags) < 2:  # nothing to cut: grow the molecule from a random attachment point instead
            from rdkit import Chem
            from safe.utils import list_individual_attach_points

            variants = sorted(list_individual_attach_points(Chem.MolFromSmiles(smiles), depth=1)) or [smiles]
            prefix = self._fragment_ids(rng.choice(variants)) + [dot]
            n = rng.randint(5, 15)
            return [BOS_ID, *prefix, *([MASK_ID] * n), EOS_ID] if masked else [BOS_ID, *prefix]
        k = rng.randrange(len(frags))
        if masked:
            n = rng.randint(5, 15)
            parts = [([MASK_ID] * n if i == k else f) for i, f in enumerate(frags)]
            body = [t for i, p in enumerate(parts) for t in ([dot] if i else []) + p]
            body = body[: self.max_length - 2]
            return [BOS_ID, *body, EOS_ID]
        keep = [f for i, f in enumerate(frags) if i != k]
        body = [t for f in keep for t in f + [dot]]
        return [BOS_ID, *body]


# ---------------------------------------------------------------------------------------- chemistry
def _substructure_query(fragment: str):
    """RDKit query for a fragment: its attachment points (``[*]``, ``[1*]``) match any atom, so a
    molecule contains it when the fragment's atoms are there **and** something is bonded at every
    attachment point (stricter than GenMol's filter, which deletes the attachment atoms and so also
    accepts the bare fragment)."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(fragment)
    for atom in mol.GetAtoms():
        if atom.GetAtomicNum() == 0:  # attachment labels must not restrict the match
            atom.SetIsotope(0)
            atom.SetAtomMapNum(0)
    params = Chem.AdjustQueryParameters.NoAdjustments()
    params.makeDummiesQueries = True
    return Chem.AdjustQueryProperties(mol, params)


def _contains_all(smiles: str, queries: list[Any]) -> bool:
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    return mol is not None and all(mol.HasSubstructMatch(q) for q in queries)


def _mix_linkers(frags: list[str], side_smiles: list[str | None], n: int) -> tuple[list[str | None], list[str | None], dict[str, Any]]:
    """GenMol / SAFE-GPT two-step linking: ``side_smiles`` alternate completions of ``frags[0]`` and
    ``frags[1]``; each one that contains its fragment is cut head-linker-tail with SAFE's
    ``MolSlicer`` (shortest linker, the fragment as head), and every linker found joins the two
    fragments (``MolSlicer.link_fragments``). Returns n SMILES (None where too few products),
    error messages and counts."""
    from rdkit import Chem
    from safe.utils import MolSlicer

    slicer = MolSlicer(shortest_linker=True, require_ring_system=False, min_linker_size=0)
    cores = [Chem.DeleteSubstructs(Chem.MolFromSmiles(f), Chem.MolFromSmarts("[#0]")) for f in frags]
    queries = [_substructure_query(f) for f in frags]
    linkers: list[str] = []
    side_ok = 0
    for k, smi in enumerate(side_smiles):
        j = k % 2
        if smi is None or not _contains_all(smi, [queries[j]]):
            continue
        side_ok += 1
        try:
            _, linker, _ = slicer(smi, cores[j])
        except Exception:  # noqa: BLE001 - SAFE's slicer raises on molecules it cannot cut
            continue
        if linker is not None:
            linkers.append(Chem.MolToSmiles(linker))
    products: list[str] = []
    for linker in linkers:
        try:
            made = MolSlicer.link_fragments(linker, frags[0], frags[1]) or []
        except Exception:  # noqa: BLE001
            continue
        for p in made:
            mol = Chem.MolFromSmiles(p) if p else None
            if mol is not None and not any(a.GetAtomicNum() == 0 for a in mol.GetAtoms()):
                products.append(Chem.MolToSmiles(mol))
        if len(products) >= n:
            break
    products = products[:n]
    k = len(products)
    smiles: list[str | None] = [*products, *([None] * (n - k))]
    errors = [
        None if i < k else f"molecule {i}: two-step linking made only {k} molecules ({len(linkers)} linkers from "
        f"{side_ok} side completions that kept their fragment); ask for more samples or use linker_mode='one_step'"
        for i in range(n)
    ]
    return smiles, errors, {"side_completions_kept": side_ok, "linkers": linkers, "linker_count": len(linkers)}


def _safe_or_empty(smiles: str) -> str:
    from ..tokenizers.safe import smiles_to_safe

    try:
        return smiles_to_safe(smiles)
    except InputError:
        return ""


def _qed_scores(molecules: list[Any]) -> list[float]:
    from rdkit import Chem
    from rdkit.Chem import QED

    out = []
    for m in molecules:
        mol = Chem.MolFromSmiles(m) if isinstance(m, str) else m
        out.append(float(QED.qed(mol)) if mol is not None else None)
    return out


def _call_score(fn: Callable, molecules: list[str]) -> list[float | None]:
    scores = list(fn(list(molecules)))
    if len(scores) != len(molecules):
        raise InputError(f"score_fn returned {len(scores)} scores for {len(molecules)} molecules; return one per molecule.")
    return [None if s is None else float(s) for s in scores]


__all__ = ["TASKS", "TASK_DEFAULTS", "MoleculeOutput", "MoleculePipeline"]
