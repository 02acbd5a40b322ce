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
* de novo masked decoding keeps SAFE's ring-closure / attachment digits pairable and branches
  closed (``constraint="balanced"``, see :mod:`leapgen.samplers.masked.constraints`; before it,
  61 of 64 raw strings had an unpaired digit and strict validity was 0.01); pass
  ``constraint="none"`` for the unconstrained decoding, ``constraint="balanced"`` for fragment tasks;
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

Code layout: this module holds the pipeline (components, settings, the call);
:mod:`~leapgen.pipelines.molecule_tasks` what each task puts in the rows and the lead-optimisation
loop; :mod:`~leapgen.pipelines.molecule_sampling` the sampler settings per task, batched decoding
and SAFE -> SMILES; :mod:`leapgen.chem` the RDKit / SAFE chemistry (fragment queries, two-step
linking, QED); :class:`~leapgen.pipelines.outputs.MoleculeOutput` the result. The call takes
diffusers' ``generator=``, ``callback_on_step_end=`` and ``return_dict=`` (see
:mod:`leapgen.pipelines.base`).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..chem import contains_all, fragment_query, link_two_step, safe_or_empty
from ..errors import ConfigError, InputError
from ..models.hf import as_causal_lm
from ..models.masked import TorchMaskedLM
from ..samplers.base import Sampler
from ..tokenizers.safe import MASK_ID, SAFETokenizer
from .base import Pipeline, resolve_pretrained
from .items import batch_list
from .molecule_sampling import AR_TEMPERATURE, TASK_DEFAULTS, MoleculeSampling, RowHooks
from .molecule_tasks import LINKER_MODES, TASKS, MoleculeTasks
from .outputs import MoleculeOutput

CONFIG_FILE = "pipeline_config.json"
#: molecules one call may ask for: every row is laid out before the first batch decodes, so a
#: typo such as ``num_samples=10**9`` would fill the memory instead of failing
MAX_NUM_SAMPLES = 100_000


class MoleculePipeline(MoleculeTasks, MoleculeSampling, Pipeline):
    """De novo and fragment-constrained molecule generation over SAFE (see the module docstring)."""

    components = ("model", "ar_model", "tokenizer")
    optional_components = ("ar_model",)
    #: ``model`` is masked; ``ar_model`` (optional) is causal
    contracts = ("masked", "causal")

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

    def model_contracts(self) -> tuple[str, ...]:
        return ("masked", "causal") if self.ar_model is not None else ("masked",)

    def contract_hint(self, contract: str) -> str:
        if contract == "causal" and self.ar_model is None:
            return "This pipeline has no ar_model: load one (MoleculePipeline(..., ar_model=...)) for causal samplers."
        return ""

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

    def _save_extra(self, folder: Path) -> None:
        """``pipeline_config.json`` (length histogram, training data) beside model_index.json."""
        (folder / CONFIG_FILE).write_text(json.dumps(self.config, indent=1) + "\n")

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
        generator: torch.Generator | None = None,
        callback_on_step_end: Callable[[Pipeline, int, dict[str, Any]], Any] | None = None,
        return_dict: bool = True,
        **sampler_params: Any,
    ) -> MoleculeOutput | tuple:
        """Generate molecules; see the module docstring for the tasks and their settings.

        Randomness comes from ``generator`` (a ``torch.Generator`` on the pipeline's device; the
        lengths and fragment choices use a Python RNG seeded with its ``initial_seed()``) or, as a
        shortcut, ``seed``. ``callback_on_step_end(pipe, step, {"stats": ..., "batch": ...})`` runs
        after each decode step of each batch; ``progress=True`` shows a bar over the rows
        (``set_progress_bar_config``); ``return_dict=False`` returns the
        :class:`~leapgen.pipelines.outputs.MoleculeOutput` fields as a tuple.
        """
        if callback_on_step_end is not None and not callable(callback_on_step_end):
            raise InputError(f"callback_on_step_end must be callable as callback(pipe, step, info), got {callback_on_step_end!r}.")
        if isinstance(task, str) and task.strip().lower().replace("-", "_") in TASKS:
            task = task.strip().lower().replace("-", "_")  # 'Linker', ' motif ', 'lead-opt'
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}.")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise InputError(f"num_samples must be an integer >= 1, got {num_samples!r}.")
        if num_samples > MAX_NUM_SAMPLES:  # every row is laid out before the first batch decodes
            raise InputError(f"num_samples must be <= {MAX_NUM_SAMPLES:,} per call, got {num_samples:,}; call the "
                             "pipeline several times (different seeds) or use `leapgen batch` for more.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
        if min_add_len is not None and (isinstance(min_add_len, bool) or not isinstance(min_add_len, int) or min_add_len < 0):
            raise InputError(f"min_add_len must be an integer >= 0, got {min_add_len!r}.")
        if linker_mode not in LINKER_MODES:
            raise InputError(f"linker_mode must be one of {LINKER_MODES}, got {linker_mode!r}.")
        if task != "lead_opt" and (molecules is not None or score_fn is not None):
            raise InputError(f"molecules= and score_fn= belong to task='lead_opt', not task={task!r}.")
        if task != "lead_opt" and num_rounds != 3:  # a setting the task never reads is refused, not ignored
            raise InputError(f"num_rounds belongs to task='lead_opt', not task={task!r}; leave it out.")
        if task != "linker" and linker_mode != "two_step":
            raise InputError(f"linker_mode belongs to task='linker', not task={task!r}; leave it out.")
        if task in ("de_novo", "lead_opt") and fragments is not None:
            raise InputError(f"task={task!r} takes no fragments; use task='motif', 'scaffold', 'linker' or 'superstructure'.")
        self.check_sampler(sampler)
        smp, masked, temp = self._resolve_sampler(sampler, sampler_params, task, temperature)
        user_generator = generator is not None
        generator = self.prepare_generator(generator, seed, self._masked.device)
        rng = random.Random(generator.initial_seed() if user_generator else seed)
        hooks = RowHooks(pipe=self, callback=callback_on_step_end)
        if task == "lead_opt":
            if isinstance(molecules, np.ndarray) and molecules.ndim == 1:  # a column of SMILES (df["smiles"].values)
                molecules = batch_list(molecules)
            if molecules is not None and not isinstance(molecules, (str, list, tuple)):
                raise InputError(f"molecules must be a SMILES string or a list of them, got {type(molecules).__name__}: "
                                 f"{molecules!r}; e.g. molecules=['CCOc1ccc(CC(=O)N2CCCC2)cc1'].")
            n_in = 1 if isinstance(molecules, str) else len(molecules or ())
            total = num_rounds * num_samples * n_in if isinstance(num_rounds, int) else None
            with self._row_bar(total, progress) as hooks.bar:
                out = self._lead_opt(molecules, score_fn, num_rounds, num_samples, smp, masked, temp, rng, generator, seed,
                                     batch_size, min_add_len, hooks)
            return self._return(out, return_dict)
        t0 = time.perf_counter()
        if task == "de_novo":
            prefixes = [[] for _ in range(num_samples)]
            queries = None
        else:
            frags = self._fragment_mols(task, fragments)
            queries = [fragment_query(f) for f in frags]
            two_step = task == "linker" and linker_mode == "two_step"
            if two_step:  # step 1: complete each side on its own, rows A0, B0, A1, B1, ...
                dot = self.tokenizer.token_to_id["."]
                sides = [self._fragment_ids(f) + [dot] for f in frags]
                prefixes = [sides[k % 2] for k in range(2 * num_samples)]
            else:
                prefixes = self._fragment_prefixes(task, frags, num_samples, rng)
        rows = self._build_rows(prefixes, masked, rng, TASK_DEFAULTS[task]["min_add_len"] if min_add_len is None else min_add_len,
                                explicit_min=min_add_len is not None)
        with self._row_bar(len(rows), progress) as hooks.bar:
            outs, stats = self._decode_rows(smp, masked, rows, temp, generator, seed, batch_size, hooks,
                                            by_length=task == "de_novo")
        safes, smiles, errors = self._postprocess(outs)
        history: list[dict[str, Any]] = []
        if task == "linker" and linker_mode == "two_step":  # step 2: cut out linkers, join the fragments with them
            side = {"step": "sides", "token_ids": outs, "smiles": smiles, "safe": safes}
            smiles, errors, info = link_two_step(frags, smiles, num_samples)
            side["linkers"] = info.pop("linkers")
            history.append(side)
            safes = [safe_or_empty(x) if x is not None else "" for x in smiles]
            outs = []
            stats.extra.update(linker_mode="two_step", **info)
        unfiltered = list(smiles)
        n_filtered = 0
        if queries is not None and filter:
            for i, smi in enumerate(smiles):
                if smi is not None and not contains_all(smi, queries):
                    smiles[i] = None
                    errors[i] = f"molecule {i}: filtered out, it does not contain every given fragment"
                    n_filtered += 1
        stats.extra.update(task=task, num_filtered=n_filtered, pipeline_wall_s=time.perf_counter() - t0)
        out = MoleculeOutput(
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
        return self._return(out, return_dict)

    @contextlib.contextmanager
    def _row_bar(self, total: int | None, progress: bool) -> Iterator[Any]:
        """The pipeline's progress bar over the rows decoded in this call (None when hidden)."""
        bar = self.progress_bar(total=total, unit="mol") if self._show_progress(progress) else None
        try:
            yield bar
        finally:
            if bar is not None:
                bar.close()


__all__ = ["AR_TEMPERATURE", "LINKER_MODES", "TASKS", "TASK_DEFAULTS", "MoleculeOutput", "MoleculePipeline"]
