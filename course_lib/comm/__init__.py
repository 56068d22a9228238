"""Communication: what a collective costs, modelled and measured (lessons 06, 08, 09).

- :mod:`.cost` — bandwidth bookkeeping (algbw, busbw) and the alpha-beta(-gamma) model of
  the all-reduce algorithms; pure functions, no process group.
- :mod:`.bench` — benchmarks that run under ``course_lib.dist.launch``: all-reduce time
  per message size, DDP step time per gradient bucket size.
- :mod:`.plots` — their figures.

Lesson 08's collectives built from send/recv go in a module of their own here.
The names of :mod:`.cost` and :mod:`.bench` are re-exported: ``comm.fit_alpha_beta``.
"""

from .bench import (
    BenchResult,
    BucketResult,
    MLPSpec,
    allreduce_benchmark,
    ddp_bucket_benchmark,
    default_mlp_spec,
    default_sizes,
    run_allreduce_benchmark,
    run_ddp_bucket_benchmark,
)
from .cost import (
    ALLREDUCE_ALGORITHMS,
    GB,
    MB,
    algbw,
    allreduce_busbw_factor,
    best_algorithm,
    binary_tree_allreduce_time,
    busbw,
    butterfly_allreduce_time,
    fit_alpha_beta,
    flat_tree_allreduce_time,
    link_alpha_beta_from_ring_fit,
    predict_table,
    predict_times,
    rabenseifner_allreduce_time,
    ring_allreduce_time,
)
