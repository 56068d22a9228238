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
    l05_mixed_precision.py       gradients on fp16's number line, loss scaling, throughput per precision
    l06_data_parallel.py         the ring, the all-reduce sweep, communication share, compression, scaling
    l07_bert_lamb.py             Adam vs LAMB at a large batch: settings, sweeps, verdicts
    l08_collectives.py           the algorithms measured, their crossovers, extrapolation, staleness
    l09_performance_model.py     the step model against the course's step, strong/weak scaling
    l10_model_parallelism.py     equality with one process, the bubble, bytes per rank, the decision table
    l11_batch_size_science.py    B_simple against the bend, sharpness against the gap, BatchNorm per rank
    l12_hyperparameter_search.py searches at equal budget, epochs to the target, brackets, the verdict
    l13_multi_node.py            the path (SLURM, virtual cluster, model), a link's alpha-beta, 1 node x W
                                 vs W nodes x 1 with accumulation, the two-level all-reduce
"""
