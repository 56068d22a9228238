"""course_lib: the tested helpers every lesson of the large-batch course imports.

One concept per module. Importing the package does no work beyond definitions: no
seeding, no rcParams, no device touched. The map, lowest layer first (a module imports
only from the layers above it in this list, never from one below):

Foundations (no other course_lib module, or only these)
    tables.py        Table: the tables every lesson prints (text, HTML, Markdown)
    config.py        run profiles (full / smoke); BatchConfig: global = ranks x micro x accumulation
    fileio.py        atomic writes, verified downloads, the cache directory
    progress.py      bar vs log lines: one rule for every long-running call
    metrics.py       HR@K, NDCG@K, time to target
    hardware.py      what this machine has (cores, GPUs, backends, 16-bit support)
    cluster.py       a virtual cluster on this host: nodes as network namespaces on shaped links
                     (`python -m course_lib.cluster up|run|down`; lesson 13, the multi-node tests)
    _forkserver_preload.py  what launch()'s fork server imports once for every worker (torch, torch._dynamo)
    precision.py     Precision: autocast, fp16 loss scaling (static, dynamic or none), unscale before the step
    dist.py          process groups, rank helpers, launch() from a notebook cell, torchrun entry
    node_loss.py     which node a lost peer was: a multi-node job's error names the node and its ranks
    tiers.py         the tier plan: every per-tier decision, a pure function of a hardware description
    results.py       each lesson's measurements saved as JSON
    plots.py         the lessons' figures (pyplot imported inside each function)
    diagrams.py      the lessons' drawings, made from the learner's objects (launch, NeuMF, k steps vs one,
                     fp16's number line, the kinds of parallelism)
Models, data, optimizers
    data/            movielens.py, synthetic.py, sampler.py (NeuMF's batches), text.py (BERT's corpus)
    models/          ncf.py (NeuMF), bert.py, mlp_bn.py
    optim/           schedules.py (scaling rules, warmup, decay), lars.py, lamb.py, param groups, adam.py
                     (Adam's for-loop/foreach/fused implementations; SparseAdam tables + Adam; lesson 01)
    settings.py      RunSettings: one vocabulary for every training run (global batch, base lr + rule
                     -> peak lr, warmup, decay, precision, optimizer, budget), checked by field
Distributed mechanics
    parallel/        data_parallel.py (the per-rank slice, accumulation, DDP wrap), checkpoint.py,
                     sync_batchnorm.py, scaling.py, staleness.py (stale/async updates, a parameter server;
                     lesson 08); lesson 10: tensor.py (Megatron column/row layers, heads, DTensor),
                     pipeline.py (GPipe/1F1B schedules, executor, bubble), sharded.py (ZeRO arithmetic,
                     stage 1 from ring collectives, FSDP2), spatial.py (halo exchange), hybrid.py (2-D mesh)
    comm/            cost.py (alpha-beta(-gamma) model of collectives), bench.py (measured), plots.py,
                     collectives.py (broadcasts and all-reduces from isend/irecv, as schedules; lesson 08),
                     hooks.py (DDP comm hooks that count and time every bucket's all-reduce, fp16/bf16 compression)
    perf/            peaks.py (reference peaks of the accelerators, each with its source; the bands),
                     probe.py (matmul, memory, host-to-device, per-op overhead: this machine measured),
                     model.py (the Paleo-style step model: ops counted from the real step, roofline,
                     DDP bucket overlap, scaling; lesson 09), schemes.py (the same counts split per scheme:
                     DDP, ZeRO, FSDP, tensor, pipeline; memory, bytes and step per rank; lesson 10)
Training
    train/           engine.py (the one step and the clock), ncf.py (NeuMF to a target HR@10),
                     mlm.py (BERT to a target loss), workers.py (the same runs for launch/torchrun/SLURM)
What the lessons measure and show
    search.py        scaled settings, sweeps and their tables, lr grids that extend at their edge; Optuna-based
                     random search / successive halving / Hyperband in a journal file processes share (lesson 12)
    ladder.py        the trick ladder: the one writer and reader of its rungs
    step_study.py    what lesson 01 measures about one device's step: the optimizer phase (dense Adam's
                     implementations, SparseAdam's lazy Adam and its accuracy), torch.compile's payback
    mixed_precision.py   gradients on fp16's number line (parameter and activation), fp16 with no / static /
                     dynamic scaling, trust ratios unscaled or not, throughput per precision and why (lesson 05)
    data_parallel_study.py  what lesson 06 reads from its measurements: the ring, the all-reduce sweep,
                     the communication share and what overlap saved, gradient compression
    optimizer_study.py   Adam vs LAMB at a large batch: settings, sweeps, verdicts (lesson 07)
    collectives_study.py what lesson 08 measures, its crossovers, extrapolation and verdict
    performance_study.py what lesson 09 measures: the step model against the course's step, the verdict
    model_parallel_study.py  what lesson 10 measures: equality with one process, the bubble, bytes per
                     rank, lesson 09's model of BERT-base/large on 8 GPUs and of this machine (decision table), verdict
    batch_science.py     the estimators of lesson 11: gradient noise scale (two batch sizes), the Hessian's
                     top eigenvalue and trace (Hessian-vector products), loss slices between solutions
    batch_science_study.py  what lesson 11 measures: B_simple against the bend, sharpness against the gap,
                     growing the batch instead of decaying the lr, BatchNorm per rank; tables and verdicts
    search_study.py  what lesson 12 measures: searches at equal budget, epochs to the target, brackets, verdict
    widgets.py       interactive sliders: explore, schedule builder, loss-scaling and all-reduce
                     explorers (a static figure under papermill/CI)
    lesson.py        setup(): every lesson's first cell (profile, hardware, plan, data, target)
    lessons/         l13_multi_node.py: what lesson 13 measures on many nodes and reads from it
    summary.py       the run summary of `make course` and gpu-check's FIGURE lines
    bench.py         `python -m course_lib.bench ncf|bert|collectives|hardware|model`; lesson 01's
                     data-loading ladder, throughput vs batch size and profile
    checks.py        the exercises' checks
Entry points: run.py (`python -m course_lib.run module:worker` under torchrun),
train_ddp.py (lesson 06 as a script, SLURM).

Where a new lesson's helpers go: mechanics in the package of their kind (a collective in
comm/, a way of splitting a model in parallel/, a probe of the hardware in a perf/
package); what the lesson measures and reads from its results in a module named for the
concept (like optimizer_study.py); its worker functions in train/workers.py or beside the
mechanics they run. Each with tests in tests/, next to the invariant it makes true.
"""

__version__ = "0.1.0"
