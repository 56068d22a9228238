"""What each lesson measures and reads from its results: one module per notebook, named like it (a large
lesson adds a module per section, ``lNN_<section>.py``, which its notebook imports beside its own).

A notebook imports its own module one way, ``from course_lib.lessons import l05_mixed_precision as study``,
and calls ``study.<name>``. The mechanics those measurements run (the training engine, collectives,
the parallel layers, the probes) live in the packages of their kind; a lesson module may import from
them and from an earlier lesson's module (lesson 12 reads lesson 07's saved setting), never the reverse.

    l00_setup.py                 the backend chosen for the first all-reduce, and why
    l01_baseline.py              the data-loading ladder, throughput vs batch size, the pace, a profile
    l01_step.py                  the optimizer step (dense Adam's implementations, SparseAdam's lazy Adam),
                                 torch.compile
    l02_linear_scaling.py        Shallue's regimes from a batch sweep, the generalization gap
    l03_warmup.py                warmup against none
    l04_lars.py                  per-layer gradient and weight norms, the optimizer race's reading
    l05_mixed_precision.py       gradients on fp16's number line, loss scaling, unscale before LARS
    l05_speed.py                 throughput per precision and why, the fifth rung's decision
    l06_data_parallel.py         the ring, the all-reduce sweep, communication share, compression, scaling
    l07_bert_lamb.py             Adam vs LAMB at a large batch: settings, sweeps, verdicts
    l08_collectives.py           the algorithms measured, their crossovers, extrapolation, staleness
    l08_compression.py           lesson 08's last section: sending fewer bytes, measured from a warm start
    l08_prices.py                lesson 08's last section priced: other links and ranks, the GPU's own compute
    l09_performance_model.py     the step model against the course's step, strong/weak scaling
    l09_scaling.py               lesson 09's traps: strong vs weak scaling, where a larger batch stops paying
    l09_paleo.py                 lesson 09's Paleo case studies: the talk's figures from the course's model
    l10_model_parallelism.py     equality with one process, bytes per rank, the sharded steps, the checks
    l10_pipelines.py             lesson 10's pipelines: the bubble at 2-4 stages, PipeDream's stale weights
    l10_choice.py                lesson 10's choice: BERT on a node of 8 GPUs, the decision table for this machine
    l11_batch_size_science.py    B_simple against the bend, sharpness against the gap, BatchNorm per rank
                                 (its sections: l11_noise_scale.py, l11_critical_batch.py, l11_sharpness.py,
                                 l11_adaptive.py, l11_scaling.py, l11_batchnorm.py)
    l12_hyperparameter_search.py searches at equal budget, epochs to the target, brackets, their comparisons
    l12_replay.py                the tabular benchmark: a pool's curves replayed over many seeds, the winner
    l12_bert.py                  the same search on lesson 07's BERT
    l13_multi_node.py            a link's alpha-beta, 1 node x W vs W nodes x 1 with accumulation, time to target
    l13_nodes.py                 the path (SLURM, virtual cluster, model), a node lost
    l13_hierarchy.py             the two-level all-reduce
    l13_placement.py             the input's placement: a shard per node or the whole set
"""
