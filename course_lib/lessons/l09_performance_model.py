"""Lesson 09's measurements: the step model (:mod:`course_lib.perf`) against the course's real step.

The mechanics live in :mod:`course_lib.perf` (``probe``: microbenchmarks; ``peaks``: reference
peaks; ``model``: counting, pricing, overlap, scaling). This module says what the lesson (and
``python -m course_lib.bench model``) measures, measures it, and tabulates the results:

* :func:`one_rank_measurements` (this process, one thread) and :func:`two_rank_worker` (two
  processes under ``launch``, one thread each, so 1 and 2 ranks get the same compute per rank
  and differ by communication): the probe, the measured steps of the course's engine (the
  sampler's next batch + ``Engine.step``, median per step), the sampler's time per batch,
  and, on one rank, the counted operations and the per-step overhead at a tiny batch;
* :func:`predictions` predicted vs measured per (model, batch, ranks), :func:`model_comparisons`
  the model's verdict rows, :func:`node_prediction` this model on a node of reference GPUs;
The traps the model shows (strong and weak scaling, the batch from which a larger one stops paying) are
:mod:`.l09_scaling`, Paleo's case studies :mod:`.l09_paleo`.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

from .. import compare
from ..comm import cost
from ..comm.bench import allreduce_benchmark
from ..config import pick
from ..data import load_implicit
from ..data.sampler import DeviceSampler, batch_production_rate
from ..data.text import shape_only_mlm_data
from ..parallel.data_parallel import DataParallel
from ..perf import model as M
from ..perf.peaks import GPU_OP_OVERHEAD_S, GPU_PEAK_SHARE, REFERENCE_PEAKS
from ..perf.probe import DeviceCurves, probe_hardware
from ..tables import Table
from ..train import mlm, ncf
from ..train.engine import Engine, sync

TINY_BATCH = 8  # samples (NeuMF: the smallest batch whose slices are not empty) or sequences (BERT)


@contextlib.contextmanager
def threads(n: int):
    """Run the block with ``n`` intra-op threads (the number of a rank launched with one thread each)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def lesson_spec(profile: str, dataset: str = "ml-1m", bert_preset: str | None = None) -> dict:
    """What lesson 09 measures: the batches of each model (global; each is run on 1 and on 2 ranks),
    the steps timed per point, the probe's sizes and the all-reduce sweep."""
    smoke = profile == "smoke"
    return {
        "profile": profile, "dataset": dataset,
        "ncf_batches": pick(profile, full=[1024, 4096, 16384], smoke=[256, 2048]),
        "bert": {"preset": bert_preset or pick(profile, full="mini", smoke="tiny"), "seq_len": pick(profile, full=64,
                 smoke=32), "vocab_size": pick(profile, full=4096, smoke=1024)},
        "bert_batches": pick(profile, full=[8, 16, 32], smoke=[4, 16]),
        "steps": pick(profile, full=15, smoke=3), "warmup": pick(profile, full=3, smoke=1),
        "matmul_sizes": pick(profile, full=(32, 64, 128, 256, 512, 1024), smoke=(32, 64, 128, 256)),
        "copy_sizes": [2**k for k in range(12, pick(profile, full=27, smoke=23), 2)],
        "allreduce_sizes": [2**k for k in range(8, pick(profile, full=25, smoke=21), pick(profile, full=2, smoke=3))],
        "allreduce_iters": pick(profile, full=10, smoke=4),
        "repeats": pick(profile, full=3, smoke=2),
        "smoke": smoke,
    }


# --------------------------------------------------------------------------- the course's step, per model


def ncf_config(batch: int) -> ncf.TrainConfig:
    return ncf.TrainConfig(global_batch_size=batch, optimizer="adam", base_lr=1e-3)


def _mlm_cfg(spec: dict, batch: int) -> mlm.MLMTrainConfig:
    return mlm.MLMTrainConfig(model=spec["bert"]["preset"], global_batch_size=batch, micro_batch_size=None,
                              optimizer="lamb", dropout=0.1)


def _mlm_data(spec: dict, rows: int):
    b = spec["bert"]
    return shape_only_mlm_data(b["vocab_size"], b["seq_len"], rows, device="cpu")


def _ncf_engine(cfg: ncf.TrainConfig, data, dev: torch.device) -> Engine:
    """The engine of the course's NeuMF step for ``cfg`` on one process (``data`` already on ``dev``), fp32."""
    return ncf.build_engine(data, cfg.replace(precision="fp32", micro_batch_size=None), dev)


def _engine_and_batch(kind: str, spec: dict, batch: int, data):
    """The engine of the course's step (one process) and one global batch of ``batch``."""
    dev = torch.device("cpu")
    if kind == "neumf":
        cfg = ncf_config(batch)
        return _ncf_engine(cfg, data, dev), (next(iter(ncf.make_batches(data, cfg))), None)
    cfg = _mlm_cfg(spec, batch)
    torch.manual_seed(cfg.seed)
    model = mlm.build_model(cfg, data.vocab_size, data.seq_len)
    engine = mlm._engine(cfg, model, dev)
    return engine, mlm._global_batch(data, cfg, torch.Generator().manual_seed(0), dev)


def bert_step_counts(cfg, batches, seq_len: int, *, gpu: bool = True) -> list[M.StepCounts]:
    """The course's BERT step (its engine, AdamW with global-norm clipping) for a model of ``cfg``
    (:class:`course_lib.models.bert.BertConfig`), counted at each of ``batches`` sequences of ``seq_len``
    tokens on PyTorch's ``meta`` device: shapes without values, so BERT-large (or larger) costs a second or
    two per count and no memory. The masked positions are BERT's 15 %, drawn on the CPU: their count sets
    the MLM head's rows (:func:`course_lib.perf.model.meta_nonzero`). ``gpu``: count the optimizer as a GPU
    runs it, one multi-tensor operation per step of Adam (``foreach``) instead of the CPU's loop over the
    tensors (about 9 operations per parameter tensor, each paying the per-operation overhead). Lesson 10
    prices BERT-base and BERT-large on a node of GPUs, and its decision table, with two such counts."""
    from ..models.bert import BertForMLM

    meta = torch.device("meta")
    with torch.device("meta"):
        model = BertForMLM(cfg)
    out = []
    engine = None
    for batch in batches:
        train_cfg = mlm.MLMTrainConfig(global_batch_size=batch, micro_batch_size=None, optimizer="adam",
                                       dropout=cfg.dropout)
        if engine is None:
            engine = mlm._engine(train_cfg, model, meta)
            if gpu:  # torch picks foreach on CUDA by itself; on the meta device it must be asked
                for group in engine.optimizer.param_groups:
                    group["foreach"] = True
            for p in model.parameters():  # one optimizer step first, uncounted: its state exists, as in a real run
                p.grad = torch.zeros_like(p)
            engine.optimizer.step()
            engine.optimizer.zero_grad(set_to_none=True)
        engine.parallel = DataParallel(batch, None, meta)  # this step's batch, one micro-batch
        data = shape_only_mlm_data(cfg.vocab_size, seq_len, batch, device="cpu")
        (inputs, labels), count = mlm._global_batch(data, train_cfg, torch.Generator().manual_seed(0),
                                                    torch.device("cpu"))
        step = ((inputs.to(meta), labels.to(meta)), count.to(meta))
        with M.meta_nonzero(int(count)):
            out.append(M.count_step(engine, *step, batch_size=batch))
    return out


def ncf_step_prediction(data, cfg: ncf.TrainConfig, curves, *, device=None, tiny_steps: int = 5) -> M.StepPrediction:
    """Lesson 09's model of one step of the NeuMF setting ``cfg`` on ``device`` (lesson 12 prunes with
    it before training): the step's operations counted at ``cfg``'s batch, the per-step overhead from
    a step timed at a tiny batch (the median of ``tiny_steps``), the sampler's time per batch; priced
    with ``curves`` (this device's :func:`~course_lib.perf.probe.probe_hardware`)."""
    dev = torch.device(device or "cpu")
    data = data.to(dev)

    def counted(c):  # the engine, its batches, and its step counted (after one untimed step: optimizer state exists)
        engine, batches = _ncf_engine(c, data, dev), iter(ncf.make_batches(data, c))
        engine.step(next(batches))
        return engine, batches, M.count_step(engine, next(batches), batch_size=c.global_batch_size)

    _, _, counts = counted(cfg)
    tiny_engine, tiny_batches, tiny_counts = counted(cfg.replace(global_batch_size=TINY_BATCH, micro_batch_size=None))
    times = []
    for _ in range(tiny_steps):
        b = next(tiny_batches)
        sync(dev)
        t0 = time.perf_counter()
        tiny_engine.step(b)
        sync(dev)
        times.append(time.perf_counter() - t0)
    overhead = M.step_overhead(statistics.median(times), tiny_counts, curves)
    sampler = DeviceSampler(data.train_users, data.train_items, data.num_items, batch_size=cfg.global_batch_size,
                            neg_per_pos=4, seed=0)
    data_s = cfg.global_batch_size / batch_production_rate(sampler, 4 * cfg.global_batch_size, dev)
    return M.predict_step(counts, curves, data_s=data_s, step_overhead_s=overhead)


def _measure_step(kind: str, spec: dict, batch: int, data) -> float:
    """Seconds per step of the course's own step at global ``batch``: the sampler's next batch and
    ``Engine.step`` (in a process group: data parallel over its ranks, DDP all-reduce included).
    The median over ``spec["steps"]`` timed steps after ``spec["warmup"]``: on a shared machine a
    step that another process interrupted does not move it."""
    dev = torch.device("cpu")
    engine, _ = _engine_and_batch(kind, spec, batch, data)
    if kind == "neumf":
        batches = ncf.make_batches(data, ncf_config(batch))
        it = iter(batches)

        def step():
            nonlocal it
            b = next(it, None)
            if b is None:
                it = iter(batches)
                b = next(it)
            engine.step(b)
    else:
        cfg, gen = _mlm_cfg(spec, batch), torch.Generator().manual_seed(0)

        def step():
            engine.step(*mlm._global_batch(data, cfg, gen, dev))

    times = []
    for i in range(spec["warmup"] + spec["steps"]):
        t0 = time.perf_counter()
        step()
        if i >= spec["warmup"]:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _data_seconds(kind: str, spec: dict, batch: int, data) -> float:
    """Seconds to produce one global batch with the course's sampler (what every rank pays)."""
    dev = torch.device("cpu")
    if kind == "neumf":
        s = DeviceSampler(data.train_users, data.train_items, data.num_items, batch_size=batch, neg_per_pos=4, seed=0)
        # two of the sampler's chunks (or an epoch, if shorter): its per-chunk work is spread over the batches
        n = max(4 * batch, min(s.samples_per_epoch, 2 * s.chunk_positives * (1 + s.neg_per_pos)))
        batch_production_rate(s, 2 * batch, dev)
        return batch / batch_production_rate(s, n, dev)
    cfg, gen = _mlm_cfg(spec, batch), torch.Generator().manual_seed(0)
    mlm._global_batch(data, cfg, gen, dev)
    t0 = time.perf_counter()
    for _ in range(5):
        mlm._global_batch(data, cfg, gen, dev)
    return (time.perf_counter() - t0) / 5


def _data_for(kind: str, spec: dict, max_batch: int):
    if kind == "neumf":
        return load_implicit(spec["dataset"], profile=spec["profile"])
    return _mlm_data(spec, max(max_batch, 16))


def _batches(kind: str, spec: dict) -> list[int]:
    return spec["ncf_batches"] if kind == "neumf" else spec["bert_batches"]


MODELS = ("neumf", "bert")


def _probe(spec: dict) -> dict:
    p = probe_hardware("cpu", matmul_sizes=spec["matmul_sizes"], copy_sizes=spec["copy_sizes"],
                       repeats=spec["repeats"])
    return {"device_name": p.device_name, "curves": p.curves.to_dict(), "matmul_by_dtype": p.matmul_by_dtype}


def one_rank_measurements(spec: dict, models=MODELS) -> dict:
    """Everything lesson 09 measures on one rank, in this process at one thread: the probe; per model,
    the counted step at each per-rank batch (global, and half of it for 2 ranks), the step measured at
    a tiny batch (for the overhead), the sampler's time and the measured step at each global batch."""
    out = {"probe": None, "models": {}}
    with threads(1):
        out["probe"] = _probe(spec)
        for kind in models:
            batches = _batches(kind, spec)
            data = _data_for(kind, spec, max(batches))
            per_rank = sorted({TINY_BATCH, *batches, *(b // 2 for b in batches)})
            counts = {}
            for b in per_rank:
                engine, (batch, count) = _engine_and_batch(kind, spec, b, data)
                engine.step(batch, count)  # once untimed: optimizer state exists, as in the steps measured
                counts[b] = M.count_step(engine, batch, count, batch_size=b)
            out["models"][kind] = {
                "counts": counts,
                "tiny_s": _measure_step(kind, spec, TINY_BATCH, data),
                "data_s": {b: _data_seconds(kind, spec, b, data) for b in batches},
                "measured_s": {b: _measure_step(kind, spec, b, data) for b in batches},
            }
    return out


def two_rank_worker(rank: int, world_size: int, spec: dict, models=MODELS) -> dict:
    """What lesson 09 measures on ``world_size`` ranks (a worker for ``launch``, one thread each): the
    probe with every rank busy, the all-reduce sweep (lesson 08's fit), the data-parallel step at a tiny
    batch (its overhead: DDP's hooks and buckets), the sampler and the measured step at each global batch."""
    out = {"probe": _probe(spec), "models": {}}
    out["allreduce"] = allreduce_benchmark(rank, world_size, spec["allreduce_sizes"], spec["allreduce_iters"], 2)
    for kind in models:
        batches = _batches(kind, spec)
        data = _data_for(kind, spec, max(batches))
        out["models"][kind] = {"tiny_s": _measure_step(kind, spec, TINY_BATCH * world_size, data),
                               "data_s": {b: _data_seconds(kind, spec, b, data) for b in batches},
                               "measured_s": {b: _measure_step(kind, spec, b, data) for b in batches}}
    return out


# --------------------------------------------------------------------------- predicted vs measured


def link_from(two: dict) -> tuple[float, float, tuple[float, float]]:
    """``(alpha, beta)`` of the measured all-reduce (lesson 08's robust fit), and per link (read as a ring)."""
    rows = two["allreduce"]
    p = rows[0]["world_size"]
    a, b = cost.fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_s"] for r in rows])
    return a, b, cost.link_alpha_beta_from_ring_fit(a, b, p)


def one_rank_overhead(one: dict, kind: str) -> float:
    """The measured per-step overhead of ``kind``'s step on one rank (:func:`course_lib.perf.model.step_overhead`)."""
    m = one["models"][kind]
    return M.step_overhead(m["tiny_s"], m["counts"][TINY_BATCH], DeviceCurves.from_dict(one["probe"]["curves"]))


def overhead_table(one: dict) -> Table:
    """Per model: the step measured at a tiny batch, what the roofline explains of it, and the rest."""
    curves = DeviceCurves.from_dict(one["probe"]["curves"])
    t = Table(["model", "tiny batch", "measured (ms)", "roofline (ms)", "overhead (ms)", "operations"],
              title="the per-step overhead: a step at a tiny batch, less its roofline")
    for kind, m in one["models"].items():
        tiny = m["counts"][TINY_BATCH]
        t.add(**{"model": kind, "tiny batch": TINY_BATCH, "measured (ms)": m["tiny_s"] * 1e3,
                 "roofline (ms)": M.roofline_sum(tiny, curves) * 1e3,
                 "overhead (ms)": one_rank_overhead(one, kind) * 1e3, "operations": len(tiny.ops)})
    return t


def step_overheads(one: dict, two: dict | None, kind: str) -> dict[int, float]:
    """``{ranks: seconds}``: the per-step overhead of ``kind``'s step on 1 rank, and (``two`` given) on 2: what
    the tiny data-parallel step spent beyond its roofline and its modelled all-reduce (DDP's hooks), never
    below one rank's."""
    overhead = {1: one_rank_overhead(one, kind)}
    if two:
        tiny, curves2 = one["models"][kind]["counts"][TINY_BATCH], DeviceCurves.from_dict(two["probe"]["curves"])
        comm = M.predict_step(tiny, curves2, world_size=2, link=link_from(two)[2], step_overhead_s=0.0)
        overhead[2] = max(M.step_overhead(two["models"][kind]["tiny_s"], tiny, curves2)
                          - comm.exposed_comm_s - comm.ddp_copy_s, overhead[1])
    return overhead


def saved_overheads(one: dict, two: dict | None, models=MODELS) -> dict:
    """What later lessons read of the per-step overhead: per model and ranks, the seconds and the operations
    of the tiny step it was measured on (lesson 10 spreads it over the operations of its own steps)."""
    return {kind: {str(p): {"overhead_s": s, "operations": len(one["models"][kind]["counts"][TINY_BATCH].ops)}
                   for p, s in step_overheads(one, two, kind).items()} for kind in models}


def predictions(one: dict, two: dict | None, spec: dict, models=MODELS) -> list[dict]:
    """Per model, global batch and ranks (1; 2 when ``two`` is given): predicted and measured step."""
    curves1 = DeviceCurves.from_dict(one["probe"]["curves"])
    curves2 = DeviceCurves.from_dict(two["probe"]["curves"]) if two else None
    link = link_from(two)[2] if two else None
    rows = []
    for kind in models:
        m1 = one["models"][kind]
        overhead = step_overheads(one, two, kind)
        for b in _batches(kind, spec):
            for p, curves, m in [(1, curves1, m1)] + ([(2, curves2, two["models"][kind])] if two else []):
                counts = m1["counts"][b // p]
                pred = M.predict_step(counts, curves, world_size=p, link=link if p > 1 else None,
                                      data_s=m["data_s"][b], step_overhead_s=overhead[p])
                measured = m["measured_s"][b]
                rows.append({"model": kind if kind == "neumf" else f"bert-{spec['bert']['preset']}", "batch": b,
                             "ranks": p, "predicted (ms)": pred.step_s * 1e3, "measured (ms)": measured * 1e3,
                             "error": (pred.step_s - measured) / measured, "prediction": pred})
    return rows


def comparison_table(rows: list[dict]) -> Table:
    t = Table(["model", "global batch", "ranks", "predicted (ms)", "measured (ms)", "error", "largest part"],
              title="step time: the model against the course's own step")
    for r in rows:
        parts = r["prediction"].parts()
        t.add(**{"model": r["model"], "global batch": r["batch"], "ranks": r["ranks"],
                 "predicted (ms)": r["predicted (ms)"], "measured (ms)": r["measured (ms)"],
                 "error": f"{r['error']:+.0%}", "largest part": max(parts, key=parts.get)})
    return t


def parts_table(rows: list[dict]) -> Table:
    """Each prediction split into its parts (ms)."""
    names = list(rows[0]["prediction"].parts()) if rows else []
    t = Table(["model", "global batch", "ranks"] + [f"{n} (ms)" for n in names] + ["memory (MB)"],
              title="where the predicted step goes")
    for r in rows:
        pred = r["prediction"]
        t.add(**{"model": r["model"], "global batch": r["batch"], "ranks": r["ranks"],
                 **{f"{n} (ms)": v * 1e3 for n, v in pred.parts().items()}, "memory (MB)": pred.memory_bytes / 1e6})
    return t


def median_error(rows: list[dict]) -> float:
    """Median of |predicted - measured| / measured over the rows the model predicts (the calibration steps,
    :func:`calibration_step`, left out): the figure saved with the lesson's results."""
    errors = [abs(r["error"]) for r in rows if not calibration_step(r)]
    return statistics.median(errors) if errors else float("nan")


def calibration_step(row: dict) -> bool:
    """Whether ``row`` is a step the model's per-step overhead was measured on (a global batch of
    :data:`TINY_BATCH` per rank): predicted from itself, so it tests nothing."""
    return row["batch"] == TINY_BATCH * row["ranks"]


def model_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """The model against the course's step: per model, and over every model, the predicted step relative to the
    measured one (:func:`course_lib.compare.paired_ratio`: each step predicted and measured is a pair; the
    interval comes from how much the ratio varies from step to step), against :data:`course_lib.compare.MODEL_EFFECT`.
    The calibration steps are left out; a group with fewer than two steps left has no spread and no row."""
    held = [r for r in rows if not calibration_step(r)]
    groups = {m: [r for r in held if r["model"] == m] for m in dict.fromkeys(r["model"] for r in held)}
    if len(groups) > 1:
        groups["every model"] = held
    out = []
    for name, rs in groups.items():
        if len(rs) >= 2:
            out.append(compare.paired_ratio(f"step time, model / measured: {name}",
                                            [r["measured (ms)"] for r in rs], [r["predicted (ms)"] for r in rs],
                                            needed=compare.MODEL_EFFECT,
                                            basis=f"{len(rs)} steps on {' and '.join(_ranks(rs))} rank(s)"))
    return out


def _ranks(rows: list[dict]) -> list[str]:
    return [str(p) for p in sorted({r["ranks"] for r in rows})]


def mfu_table(rows: list[dict], peak_flops: float) -> Table:
    """Model FLOPs utilisation of each 1-rank step, measured and predicted, of ``peak_flops`` (the probe's best)."""
    t = Table(["model", "global batch", "MFU measured", "MFU predicted"],
              title=f"model FLOPs utilisation on one rank, of this machine's best matmul ({peak_flops / 1e9:.1f} "
                    "GFLOP/s)")
    for r in rows:
        if r["ranks"] == 1:
            pred = r["prediction"]
            t.add(**{"model": r["model"], "global batch": r["batch"],
                     "MFU measured": f"{pred.flops / (r['measured (ms)'] / 1e3) / peak_flops:.0%}",
                     "MFU predicted": f"{pred.mfu(peak_flops):.0%}"})
    return t


# --------------------------------------------------------------------------- what it predicts elsewhere


def reference_curves(name: str, dtype: str = "bf16", fraction: float = 1.0, overhead_s: float = 5e-6) -> DeviceCurves:
    """A device of the reference table as flat curves: ``fraction`` of its datasheet peaks at every size
    (an optimistic device: small operations on a real GPU get far less), ``overhead_s`` per operation."""
    ref = REFERENCE_PEAKS[name]
    flops = (ref.flops.get(dtype) or ref.flops["fp32"]) * fraction
    bw = ref.memory_bandwidth * fraction
    return DeviceCurves(name, [(1.0, flops), (1e15, flops)], [(1.0, bw), (1e15, bw)], overhead_s)


def node_prediction(counts_a: M.StepCounts, counts_b: M.StepCounts, *, device: str = "H100 SXM", p: int = 8,
                    global_batch: int, dtype: str = "bf16", fraction: float = GPU_PEAK_SHARE,
                    op_overhead_s: float = GPU_OP_OVERHEAD_S) -> dict:
    """This lesson's model on a node of ``p`` reference GPUs with NVLink (quoted): step, throughput,
    strong-scaling efficiency and MFU. The device runs at ``fraction`` of its datasheet peaks at every
    size and each operation pays ``op_overhead_s`` (assumed: this machine's Python overhead is not a
    GPU node's)."""
    q = cost.QUOTED_INTERCONNECTS["NVLink 4 via NVSwitch (H100 node)"]
    curves = reference_curves(device, dtype, fraction, op_overhead_s)
    link = (q["alpha_s"], 1 / q["bandwidth_Bps"])
    rows = M.scaling_curve(counts_a, counts_b, curves, link, batch=global_batch, ps=[1, p])
    per = global_batch / p
    pred = M.predict_step(M.interpolate(counts_a, counts_b, per), curves, world_size=p, link=link)
    peak = REFERENCE_PEAKS[device].flops.get(dtype) or REFERENCE_PEAKS[device].flops["fp32"]
    return {
        "device": device,
        "p": p,
        "global_batch": global_batch,
        "step_s": pred.step_s,
        "samples_per_s": global_batch / pred.step_s,
        "efficiency": rows[-1]["efficiency"] if len(rows) > 1 else None,
        "mfu": pred.mfu(peak),
        "overhead_share": len(counts_a.ops) * op_overhead_s / pred.step_s,
    }


def node_table(node: dict) -> Table:
    """:func:`node_prediction` as a table."""
    t = Table(["device", "devices", "global batch", "step (ms)", "sequences/s", "efficiency over 1 device", "MFU",
               "per-op overhead share"],
              title=f"this model on a node (assumed: 80 % of the datasheet peaks at every size, "
                    f"{GPU_OP_OVERHEAD_S * 1e6:.0f} us per operation; NVLink quoted)")
    t.add(**{"device": node["device"], "devices": node["p"], "global batch": node["global_batch"],
             "step (ms)": node["step_s"] * 1e3, "sequences/s": f"{node['samples_per_s']:,.0f}",
             "efficiency over 1 device": node["efficiency"], "MFU": f"{node['mfu']:.1%}",
             "per-op overhead share": f"{node['overhead_share']:.0%}"})
    return t
