"""Communication: what a collective costs, modelled and measured (lessons 06, 08, 09).

- :mod:`.cost` — bandwidth bookkeeping (algbw, busbw) and the alpha-beta(-gamma) model of
  the all-reduce algorithms; pure functions, no process group.
- :mod:`.bench` — benchmarks that run under ``course_lib.dist.launch``: all-reduce time
  per message size, DDP step time per gradient bucket size (with repeats, a timeline of each
  bucket's all-reduce, and fp16/bf16 compression).
- :mod:`.hooks` — DDP communication hooks that record what each bucket's all-reduce sent and
  when (host clock on CPU ranks, CUDA events on GPU ranks), compressed or not.
- :mod:`.collectives` — broadcast and all-reduce algorithms built from isend/irecv, each a
  pure schedule (who sends what to whom, round by round) and one executor (lesson 08).
- :mod:`.compression` — sending less: PowerSGD (torch's hook), top-k with and without error
  feedback, local SGD, delayed averaging, each a ``comm=`` of ``DataParallel``, counted (lesson 08).
- :mod:`.plots` — their figures.

The names of :mod:`.cost`, :mod:`.bench` and :mod:`.collectives` are re-exported:
``comm.fit_alpha_beta``, ``comm.ring_allreduce``.
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
from .collectives import (
    ALLREDUCES,
    BROADCASTS,
    SCHEDULES,
    Schedule,
    Transfer,
    binomial_tree_broadcast,
    chunk_bounds,
    flat_tree_broadcast,
    pipelined_broadcast,
    recursive_doubling_allreduce,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
    run_schedule,
    tree_allreduce,
)
from .cost import (
    ALLREDUCE_ALGORITHMS,
    BROADCAST_ALGORITHMS,
    GB,
    QUOTED_INTERCONNECTS,
    MB,
    algbw,
    allreduce_busbw_factor,
    best_algorithm,
    binary_tree_allreduce_time,
    binomial_tree_broadcast_time,
    crossover_size,
    flat_tree_broadcast_time,
    optimal_segments,
    pipelined_broadcast_time,
    ring_all_gather_time,
    ring_reduce_scatter_time,
    schedule_time,
    busbw,
    butterfly_allreduce_time,
    fit_alpha_beta,
    fit_text,
    flat_tree_allreduce_time,
    link_alpha_beta_from_ring_fit,
    predict_table,
    predict_times,
    rabenseifner_allreduce_time,
    ring_allreduce_time,
)
