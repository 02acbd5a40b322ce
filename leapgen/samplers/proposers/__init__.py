"""What a speculative-family sampler guesses: the proposer half of the proposer / acceptance split.

:mod:`.base` holds the two-method interface the loops call (``propose`` before the target
forward, ``update`` after verification; transformers' ``CandidateGenerator`` in spirit) and the
one validity rule every draft obeys. The proposers themselves live beside the method they belong
to (``speculative.py``'s draft-model chain, ``prompt_lookup.py``'s n-gram copies, ...), so that
one method stays one file.
"""
