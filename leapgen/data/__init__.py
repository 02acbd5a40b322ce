"""Offline corpus builders: the data every shipped asset is trained on, available without network.

* :mod:`leapgen.data.code`: the Python standard library's sources, split into train / held-out by a
  hash of each file's path (text recipe, text benchmark prompts).
* :mod:`leapgen.data.emoji`: every emoji of Noto Color Emoji rendered to small RGB images, with
  Unicode names and eight classes (image recipe, image benchmark references).
* :mod:`leapgen.data.emoji_classifier`: the small CNN whose penultimate features give
  "FID (emoji features)"; trained by :mod:`leapgen.train.feature_classifier`, used by the image bench.
* :mod:`leapgen.data.molecules`: MOSES SMILES as SAFE strings (molecule recipe, novelty reference).

Layering: this package sits beside the main stack. It imports only :mod:`leapgen.errors` and third-party
libraries (never samplers, pipelines, bench or train), so the training recipes, the benchmarks and
the pipelines can all depend on it without pointing at each other.
"""
