"""course_lib: the tested helpers every lesson of the large-batch course imports."""

# The module map: the one list of what lives where (a name ending in / is a package), lowest layer first. A module
# imports only from
# its own layer or the layers before it, never from a later one (tests/test_layers.py reads this
# list, fails on a module missing from it or listed but absent, and checks every import against it).
# Importing the package does no work beyond definitions: no seeding, no rcParams, no device touched.
MAP = (
    ("Foundations (no other course_lib module, or only these)", (
        ("tables", "Table: the tables every lesson prints (text, HTML, Markdown)"),
        ("config", "run profiles (full / smoke); BatchConfig: global = ranks x micro x accumulation"),
        ("fileio", "atomic writes, verified downloads, the cache directory"),
        ("userdirs", "each learner's own folders (results, caches, torch.compile's cache): 0700, owner checked"),
        ("compile_cache", "torch.compile's caches in the learner's own folder before anything compiles (setup())"),
        ("progress", "bar vs log lines: one rule for every long-running call"),
        ("metrics", "HR@K, NDCG@K, time to target, speedups, HR@10's standard error"),
        ("_forkserver_preload", "what launch()'s fork server imports once for every worker (torch, torch._dynamo)"),
    )),
    ("The machine", (
        ("_cgroup", "the CPU quota of this process's cgroup (v1 and v2), for hardware.usable_cpu_cores"),
        ("hardware", "what this machine has (cores, GPUs, backends, 16-bit support)"),
        ("cluster", "a virtual cluster on this host: nodes as network namespaces on shaped links "
                    "(python -m course_lib.cluster up|run|down; lesson 13 and the multi-node tests)"),
    )),
    ("Processes and numbers", (
        ("precision", "Precision: autocast, fp16 loss scaling (static, dynamic or none), unscale before the step"),
        ("dist/", "groups.py (process groups, rank helpers, backends, init_from_env: what a learner "
                 "reads) and launcher.py (launch() from a notebook cell and its supervisor: watchdog, "
                 "interrupt shield, log pump, fork server)"),
        ("node_loss", "which node a lost peer was: a multi-node job's error names the node and its ranks"),
        ("nodes", "a worker run on nodes, a virtual cluster's or SLURM's (lessons 08 and 13)"),
    )),
    ("Decisions and records", (
        ("tiers", "the tier plan: every per-tier decision, a pure function of a hardware description"),
        ("budget", "each lesson's time budget, and its runs sized to it from the measured pace (fewer sweep "
                   "points or steps, down to a floor)"),
        ("results", "each lesson's measurements saved as JSON"),
        ("compare", "Comparison: the one place a difference is decided (estimate, 95% interval, the effect "
                    "that counts, a fixed outcome word); Estimate rows; the verdict tables"),
        ("plots", "the lessons' figures, one function per figure, each naming its lesson (pyplot imported "
                  "inside each function)"),
        ("diagrams", "the lessons' drawings, made from the learner's objects (launch, NeuMF, k steps vs one, "
                     "fp16's number line, the kinds of parallelism)"),
    )),
    ("Models, data, optimizers", (
        ("data/", "movielens.py, synthetic.py, sampler.py (NeuMF's batches), text.py (BERT's corpus)"),
        ("models/", "ncf.py (NeuMF), bert.py, mlp_bn.py"),
        ("optim/", "schedules.py (scaling rules, warmup, decay), lars.py, lamb.py, param groups, "
                  "adam.py (Adam's for-loop/foreach/fused implementations; SparseAdam tables + Adam)"),
        ("settings", "RunSettings: one vocabulary for every training run (global batch, base lr + rule -> "
                     "peak lr, warmup, decay, precision, optimizer, budget), checked by field"),
    )),
    ("Distributed mechanics", (
        ("parallel/", "data_parallel.py (the per-rank slice, accumulation, DDP wrap), checkpoint.py, "
                     "sync_batchnorm.py, staleness.py (stale/async updates, a parameter server); tensor.py "
                     "(Megatron layers, DTensor), pipeline.py (GPipe/1F1B, executor, bubble), "
                     "async_pipeline.py (PipeDream: no flushes, stale weights, stashing), sharded.py "
                     "(ZeRO, FSDP2), spatial.py (halo exchange), hybrid.py (2-D mesh)"),
        ("comm/", "cost.py (alpha-beta(-gamma) model of collectives), bench.py (measured), plots.py, "
                 "collectives.py (broadcasts and all-reduces from isend/irecv, as schedules), hooks.py "
                 "(DDP comm hooks that count and time every bucket's all-reduce, fp16/bf16 compression), "
                 "compression.py (PowerSGD, top-k with error feedback, local SGD, delayed averaging; lesson 08)"),
        ("perf/", "peaks.py (reference peaks, each with its source), probe.py (this machine "
                 "measured), model.py (the Paleo-style step model), schemes.py (the same counts per "
                 "scheme: DDP, ZeRO, FSDP, tensor, pipeline), paleo.py (Paleo's devices, networks, PPP "
                 "and communication schemes; any nn.Module's step counted on the meta device), "
                 "paleo_nets.py (a reader of Paleo's JSON network format: AlexNet v2, VGG-16, NiN, "
                 "Inception v3), im2col.py (a convolution as a GEMM)"),
    )),
    ("Training", (
        ("train/", "engine.py (the one step and the clock), ncf.py (NeuMF to a target HR@10), "
                  "mlm.py (BERT to a target loss), workers.py (the same runs for launch/torchrun/SLURM)"),
    )),
    ("What several lessons share", (
        ("sweeps", "scaled settings, sweeps and their tables, lr grids that extend at their edge, the race "
                   "of optimizers, confirm at more seeds (lessons 01-07, 11)"),
        ("journal", "lesson 12's journal files: a cut-off line repaired, 0600, study folders that never collide"),
        ("optuna_search", "the Optuna search: random search / successive halving / Hyperband in a journal "
                          "file several processes share, the objectives, the search worker (lesson 12)"),
        ("bert_setting", "lesson 07's saved BERT setting (model, target, small-batch runs) as lessons 11 and 12 "
                         "read it"),
        ("ladder", "the trick ladder: the one writer and reader of its rungs (lessons 01-06)"),
        ("ladder_view", "the ladder's figure, and the seed talk's ladder beside this machine's"),
        ("batch_science", "the estimators of lesson 11: gradient noise scale, the Hessian's top eigenvalue "
                          "and trace, loss slices between solutions"),
        ("widgets", "interactive sliders: explore, schedule builder, loss-scaling, all-reduce and step "
                    "explorers (a static figure under papermill/CI)"),
        ("lesson", "setup(): every lesson's first cell (profile, hardware, plan, data, target)"),
        ("checks/", "the exercises' checks, one module per lesson, and their harness"),
    )),
    ("What each lesson measures and reads", (
        ("lessons/", "one module per notebook, named like it (l05_mixed_precision.py for "
                    "05_mixed_precision.ipynb); the notebook imports it as `study`"),
    )),
    ("Entry points", (
        ("summary", "the run summary of `make course` and gpu-check's FIGURE lines"),
        ("bench", "`python -m course_lib.bench ncf|bert|collectives|hardware|model|paleo`"),
        ("run", "`python -m course_lib.run module:worker` under torchrun"),
        ("train_ddp", "lesson 06 as a script (torchrun, SLURM)"),
    )),
)

WHERE_NEW_CODE_GOES = """\
Where a new lesson's code goes: what the lesson measures and reads from its results in
lessons/lNN_<notebook name>.py; mechanics in the package of their kind (a collective in comm/, a way
of splitting a model in parallel/, a probe of the hardware in perf/, a training loop's piece in
train/); worker functions beside the mechanics they run (train/workers.py, parallel/, comm/bench.py).
Workers must live in an importable module, never in a notebook: launch() starts processes with
`spawn`, and a spawned process finds its function by module and name (a notebook's __main__ is not
importable there). Each with tests in tests/, next to the invariant it makes true."""


def _render_map() -> str:
    lines = [__doc__, "", "The map, lowest layer first (a module imports only from its own layer or earlier ones):"]
    for title, entries in MAP:
        lines.append(title)
        for name, what in entries:
            lines.append(f"    {name if name.endswith('/') else name + '.py':<24}{what}")
    return "\n".join(lines + ["", WHERE_NEW_CODE_GOES])


__doc__ = _render_map()
__version__ = "0.1.0"
