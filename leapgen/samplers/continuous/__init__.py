"""Samplers for continuous-token image models (issue #14): ``mar`` (MAR with a diffusion head),
``cspd`` (continuous speculative decoding, draft + target MAR) and ``dd`` (Distilled Decoding:
one- or two-step generation by a generator distilled from the raster emoji GPT).

* ``common.py``: the ``"mar"`` model contract, MAR's cosine schedule, random orders, linear CFG,
  the shared noise bank, :class:`ContinuousDecodeResult`;
* ``mar.py``, ``cspd.py``, ``dd.py``: one method per file.
"""
