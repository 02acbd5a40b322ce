"""DA-Transformer DAG decoding: ``dag_greedy``, ``dag_lookahead`` and ``dag_viterbi`` (joint Viterbi),
on the model contract ``"dag"`` (:class:`~leapgen.models.s2st_lm.DAGLM`); the shared path search
and read-out live in :mod:`leapgen.samplers.dag.common`."""
