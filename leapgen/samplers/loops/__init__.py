"""The two autoregressive decode loops: one over draft chains, one over draft trees.

They alone commit tokens and roll caches back; samplers only choose a proposer
(:mod:`leapgen.samplers.proposers`) and an acceptance rule (:mod:`leapgen.samplers.acceptance`).
"""

from .chain import ChainSampler, chain_step
from .common import LoopSampler
from .tree import TreeLoopSampler, tree_step

__all__ = ["ChainSampler", "LoopSampler", "TreeLoopSampler", "chain_step", "tree_step"]
