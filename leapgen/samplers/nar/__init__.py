"""Non-autoregressive sequence-to-sequence samplers: ``paraformer`` (CIF + one decoder pass),
``ctc_greedy`` and ``ctc_prefix_beam``, on the model contracts ``"paraformer"`` and ``"ctc"``
(:mod:`leapgen.models.asr_lm`)."""
