"""What each molecule task puts in the rows the sampler fills, and the lead-optimisation loop.

* :meth:`MoleculeTasks._fragment_mols` checks the fragments a task takes (count, SMILES, attachment
  points); :meth:`MoleculeTasks._fragment_ids` encodes one to SAFE token ids of the model's vocabulary;
* :meth:`MoleculeTasks._fragment_prefixes` gives each sample its fixed part (``fragment-SAFE .``;
  for ``superstructure`` a random attachment variant per sample);
* :meth:`MoleculeTasks._build_rows` turns prefixes into masked rows (``[BOS] prefix [MASK]*n
  [EOS]``, n from the training length histogram) or AR prompts (``[BOS] prefix``);
* :meth:`MoleculeTasks._lead_opt` / :meth:`MoleculeTasks._remask_row`: GenMol's fragment
  remasking, scored with ``score_fn`` (QED by default), best kept per input molecule.
"""

from __future__ import annotations

import logging
import math
import numbers
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..chem import attachment_variants, qed_scores, quiet_rdkit, safe_or_empty, smiles_text
from ..errors import ConfigError, InputError
from ..samplers.base import DecodeStats
from ..tokenizers.safe import BOS_ID, EOS_ID, MASK_ID, UNK_ID
from .items import batch_list, check_items
from .molecule_sampling import RowHooks, merge_stats
from .outputs import MoleculeOutput

logger = logging.getLogger(__name__)

TASKS = ("de_novo", "linker", "motif", "scaffold", "superstructure", "lead_opt")
LINKER_MODES = ("two_step", "one_step")


class MoleculeTasks:
    """Task plumbing of :class:`~leapgen.pipelines.molecule.MoleculePipeline` (a mixin)."""

    tokenizer: Any
    length_histogram: dict[int, int]
    max_length: int
    ar_max_length: int
    _decode_rows: Callable[..., Any]
    _postprocess: Callable[..., Any]

    def _fragment_mols(self, task: str, fragments: Any) -> list[str]:
        from rdkit import Chem

        if fragments is None:
            raise InputError(f"task={task!r} needs fragments=[...] (SMILES with [*] attachment points).")
        if isinstance(fragments, str):
            fragments = [f for f in fragments.split(".")] if task == "linker" else [fragments]
        if isinstance(fragments, np.ndarray) and fragments.ndim == 1:  # a column of SMILES (df["smiles"].values)
            fragments = batch_list(fragments)
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
            f = smiles_text("fragment", f)
            with quiet_rdkit():  # the InputError says it; RDKit's C++ log would print its parse error to stderr
                mol = Chem.MolFromSmiles(f)
            if mol is None:
                raise InputError(f"fragment {f!r} is not a valid SMILES (RDKit cannot parse it); check the string.")
            n_attach = sum(a.GetAtomicNum() == 0 for a in mol.GetAtoms())
            if n_attach == mol.GetNumAtoms():  # e.g. '[*][*]': a "fragment" any bond would contain
                raise InputError(f"fragment {f!r} has no atom besides its attachment points; give the atoms the "
                                 "molecule must contain, e.g. '[*]c1ccccc1'.")
            parts = len(Chem.GetMolFrags(mol))
            if parts > 1:  # the model writes one molecule (largest component kept): every output was filtered out
                raise InputError(f"fragment {f!r} has {parts} disconnected parts; a fragment must be one connected piece, "
                                 "as the generated molecule is: drop the counter-ion or solvent (e.g. '[*]c1ccccc1' for "
                                 "'[*]c1ccccc1.Cl').")
            if has_stereo(mol):
                logger.warning("fragment %r: its stereo (@, @@, / or \\) is dropped: SAFE is encoded without stereo "
                               "(as in GenMol), so the outputs carry none and the fragment filter ignores it.", f)
            if n_attach == 0 and task != "superstructure":
                raise InputError(
                    f"fragment {f!r} has no attachment point, which task={task!r} needs; mark where the molecule "
                    "grows with [*], e.g. '[*]c1ccccc1' (or use task='superstructure')."
                )
            if task == "linker" and n_attach > 1:  # every sample then failed, each with a message about its own count
                raise InputError(
                    f"fragment {f!r} has {n_attach} attachment points; task='linker' joins two fragments with one [*] "
                    "each, e.g. ['[*]c1ccccc1', '[*]C1CCNCC1']; keep one [*] in it."
                )
            out.append(f)
        return out

    def _fragment_ids(self, smiles: str) -> list[int]:
        from ..tokenizers.safe import smiles_to_safe

        return self._known_ids(f"fragment {smiles!r}", smiles_to_safe(smiles, allow_empty=True))

    def _known_ids(self, what: str, enc: str) -> list[int]:
        """Token ids of the SAFE string ``enc``; InputError naming ``what`` if the vocabulary lacks a token."""
        ids = self.tokenizer.encode(enc)
        if UNK_ID in ids:
            bad = [t for t in self.tokenizer.tokenize(enc) if t not in self.tokenizer.token_to_id]
            raise InputError(f"{what} (SAFE {enc!r}) uses token(s) {bad} that this model's vocabulary does not have.")
        return ids

    def _sample_lengths(self, rng: random.Random, n: int) -> list[int]:
        hist = self.length_histogram
        keys = list(hist)
        return rng.choices(keys, weights=[hist[k] for k in keys], k=n)


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
            variants = attachment_variants(mol, depth=3)  # sorted: SAFE returns them in set order
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

    def _build_rows(self, prefixes: list[list[int]], masked: bool, rng: random.Random, min_add_len: int,
                    explicit_min: bool = False) -> list[list[int]]:
        """Masked rows get ``max(sampled length - prefix, min_add_len)`` masks, cut to the model's
        positions; a ``min_add_len`` the caller set that cannot fit is refused, not cut."""
        lengths = self._sample_lengths(rng, len(prefixes))
        rows = []
        limit = self.max_length if masked else self.ar_max_length
        for p, length in zip(prefixes, lengths):
            if masked:
                room = limit - len(p) - 2
                if explicit_min and min_add_len > room:
                    raise InputError(f"min_add_len={min_add_len} does not fit: the model has {limit} positions and "
                                     f"{'the fragment takes ' + str(len(p)) + ' tokens' if p else 'BOS/EOS take 2'}; "
                                     f"use min_add_len <= {max(room, 0)}.")
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
        self, molecules, score_fn, num_rounds, num_samples, smp, masked, temp, rng, generator, seed, batch_size, min_add_len, hooks: RowHooks
    ) -> MoleculeOutput:
        from rdkit import Chem

        if molecules is None or isinstance(molecules, str):
            molecules = [molecules] if isinstance(molecules, str) else None
        if not molecules:
            raise InputError("task='lead_opt' needs molecules=[SMILES, ...] (at least one starting molecule).")
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise InputError(f"num_rounds must be an integer >= 1, got {num_rounds!r}.")
        def parse(i: int, s: Any) -> str:
            with quiet_rdkit():  # a bad molecule's error says it; RDKit's log would print its own to stderr
                mol = Chem.MolFromSmiles(smiles_text(f"molecules[{i}]", s)) if isinstance(s, str) and s.strip() else None
            if mol is None:
                raise InputError(f"molecules[{i}] = {s!r} is not a valid SMILES (RDKit cannot parse it); check the string.")
            return Chem.MolToSmiles(mol)

        # a bad starting molecule fails alone (smiles[i] None, errors[i]); all bad -> InputError
        best, errors = check_items(list(molecules), parse, what="starting molecule")
        score = score_fn if score_fn is not None else qed_scores
        if not callable(score):
            raise InputError("score_fn must be a callable taking a list of molecules and returning one float each.")
        good = [j for j, e in enumerate(errors) if e is None]
        best_scores: list[float | None] = [None] * len(best)
        for j, sc in zip(good, call_score(score, [best[j] for j in good])):
            best_scores[j] = sc
        history = [{"round": 0, "scores": list(best_scores)}]
        all_stats: list[DecodeStats] = []
        t0 = time.perf_counter()
        for r in range(1, num_rounds + 1):
            rows, owners = [], []
            for j in good:
                try:
                    made = [self._remask_row(best[j], masked, rng) for _ in range(num_samples)]
                except InputError as err:  # e.g. a token this vocabulary lacks: this molecule stops here
                    if r == 1:
                        errors[j], best[j], best_scores[j] = f"molecules[{j}]: {err}", None, None
                    logger.warning("lead_opt: molecule %d is not optimised further: %s", j, err)
                    continue
                rows.extend(made)
                owners.extend([j] * num_samples)
            good = sorted(set(owners))
            if not rows:
                if r == 1:
                    raise InputError("no starting molecule could be used: " + "; ".join(e for e in errors if e))
                break
            outs, stats = self._decode_rows(smp, masked, rows, temp, generator, seed, batch_size, hooks)
            all_stats.append(stats)
            _, smiles, _ = self._postprocess(outs)
            valid = [(k, s) for k, s in enumerate(smiles) if s is not None]
            scores = call_score(score, [s for _, s in valid]) if valid else []
            improved = 0
            for (k, s), sc in zip(valid, scores):
                j = owners[k]
                if sc is not None and sc > (best_scores[j] if best_scores[j] is not None else float("-inf")) and s != best[j]:
                    best[j], best_scores[j] = s, sc
                    improved += 1
            history.append(
                {"round": r, "scores": list(best_scores), "valid_candidates": len(valid), "candidates": len(rows), "improvements": improved}
            )
        stats = merge_stats(all_stats, getattr(smp, "name", "sampler"), batch_size)
        stats.extra.update(task="lead_opt", temperature=temp, rounds=num_rounds, pipeline_wall_s=time.perf_counter() - t0)
        return MoleculeOutput(
            smiles=list(best),
            valid=[s is not None for s in best],
            safe=[safe_or_empty(s) if s is not None else "" for s in best],
            errors=errors,
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
        # an [UNK] the remasking keeps makes every candidate invalid: the molecule was silently never optimised
        ids = self._known_ids(f"molecule {smiles!r}", enc)
        frags: list[list[int]] = [[]]
        for t in ids:
            if t == dot:
                frags.append([])
            else:
                frags[-1].append(t)
        frags = [f for f in frags if f]
        if len(frags) < 2:  # nothing to cut: grow the molecule from a random attachment point instead
            variants = attachment_variants(smiles, depth=1) or [smiles]
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



def has_stereo(mol: Any) -> bool:
    """True when an RDKit molecule has a chiral tag (``@``/``@@``) or a double-bond stereo (``/``/``\\``)."""
    from rdkit import Chem

    return any(a.GetChiralTag() != Chem.ChiralType.CHI_UNSPECIFIED for a in mol.GetAtoms()) or any(
        b.GetStereo() != Chem.BondStereo.STEREONONE for b in mol.GetBonds()
    )


def call_score(fn: Callable, molecules: list[str]) -> list[float | None]:
    """``fn(molecules)``, checked: one finite number (or None: cannot score) per molecule, else InputError."""
    got = fn(list(molecules))
    if got is None or isinstance(got, (str, bytes, numbers.Number)) or not isinstance(got, Iterable):
        raise InputError(f"score_fn returned {type(got).__name__} {got!r}, not a list; it is called with a list of "
                         f"molecules (SMILES strings) and must return one score per molecule (None for one it cannot "
                         f"score), e.g. score_fn=lambda smiles: [my_score(s) for s in smiles].")
    scores = list(got)
    if len(scores) != len(molecules):
        raise InputError(f"score_fn returned {len(scores)} scores for {len(molecules)} molecules; return one per molecule.")
    out: list[float | None] = []
    for smiles, s in zip(molecules, scores):
        value = None if s is None else _as_number(s)
        if s is not None and (value is None or not math.isfinite(value)):
            raise InputError(f"score_fn returned {s!r} for {smiles!r}; return a finite number per molecule (None for "
                             "one it cannot score), so the best molecule can be chosen.")
        out.append(value)
    return out


def _as_number(s: Any) -> float | None:
    if isinstance(s, (bool, str, bytes)):
        return None
    try:
        return float(s)
    except (TypeError, ValueError):
        return None

