"""Decode loops of the image families that decode many tokens per step by design: NAR's
next-neighbour anti-diagonals (``nar``), VAR's next-scale and NFIG's next-frequency levels (``var``,
``nfig``), and CTF's coarse-to-fine two stages (``ctf``). Their orders are data
(:mod:`leapgen.models.image_orders`); each family declares its own model contract here."""
