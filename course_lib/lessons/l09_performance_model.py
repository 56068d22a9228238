"""Lesson 09: the step model (:mod:`course_lib.perf`) against NeuMF's and BERT's steps on one rank and on two, one
thread each, and on a node of reference GPUs. Its traps: :mod:`.l09_scaling`; Paleo: :mod:`.l09_paleo`."""

from __future__ import annotations

import contextlib
import itertools
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
MODELS = ("neumf", "bert")


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
    return {
        "profile": profile, "dataset": dataset,
        "ncf_batches": pick(profile, full=[1024, 4096, 16384], smoke=[256, 2048]),
        "bert": {"preset": bert_preset or pick(profile, full="mini", smoke="tiny"),
                 "seq_len": pick(profile, full=64, smoke=32), "vocab_size": pick(profile, full=4096, smoke=1024)},
        "bert_batches": pick(profile, full=[8, 16, 32], smoke=[4, 16]),
        "steps": pick(profile, full=15, smoke=3), "warmup": pick(profile, full=3, smoke=1),
        "matmul_sizes": pick(profile, full=(32, 64, 128, 256, 512, 1024), smoke=(32, 64, 128, 256)),
        "copy_sizes": [2**k for k in range(12, pick(profile, full=27, smoke=23), 2)],
        "allreduce_sizes": [2**k for k in range(8, pick(profile, full=25, smoke=21), pick(profile, full=2, smoke=3))],
        "allreduce_iters": pick(profile, full=10, smoke=4), "repeats": pick(profile, full=3, smoke=2),
    }


def ncf_config(batch: int) -> ncf.TrainConfig:
    return ncf.TrainConfig(global_batch_size=batch, optimizer="adam", base_lr=1e-3)


def _mlm_cfg(spec: dict, batch: int) -> mlm.MLMTrainConfig:
    return mlm.MLMTrainConfig(model=spec["bert"]["preset"], global_batch_size=batch, micro_batch_size=None,
                              optimizer="lamb", dropout=0.1)


def _ncf_stepper(cfg: ncf.TrainConfig, data, dev: torch.device):
    """The course's NeuMF engine for ``cfg`` (one process, fp32), and a function giving its next step's arguments."""
    engine = ncf.build_engine(data, cfg.replace(precision="fp32", micro_batch_size=None), dev)
    batches = itertools.chain.from_iterable(itertools.repeat(ncf.make_batches(data, cfg)))
    return engine, lambda: (next(batches), None)


def _stepper(kind: str, spec: dict, batch: int, data):
    """:func:`_ncf_stepper` for ``kind`` at global ``batch``, on the CPU."""
    dev = torch.device("cpu")
    if kind == "neumf":
        return _ncf_stepper(ncf_config(batch), data, dev)
    cfg, gen = _mlm_cfg(spec, batch), torch.Generator().manual_seed(0)
    torch.manual_seed(cfg.seed)
    engine = mlm._engine(cfg, mlm.build_model(cfg, data.vocab_size, data.seq_len), dev)
    return engine, lambda: mlm._global_batch(data, cfg, gen, dev)


def _counted(engine: Engine, next_args, batch: int) -> M.StepCounts:
    """The next step counted, run once untimed first: the optimizer's state exists, as in a real run."""
    args = next_args()
    engine.step(*args)
    return M.count_step(engine, *args, batch_size=batch)


def _median_seconds(fn, n: int, warmup: int = 0, dev: torch.device = torch.device("cpu")) -> float:
    """The median seconds of ``n`` calls of ``fn`` after ``warmup`` (unmoved by a call another process interrupted)."""
    times = []
    for _ in range(warmup + n):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


def bert_step_counts(cfg, batches, seq_len: int, *, gpu: bool = True) -> list[M.StepCounts]:
    """The course's BERT step for ``cfg`` counted on the ``meta`` device (BERT-large: seconds, no memory) at each
    of ``batches``, its masks drawn on the CPU. ``gpu``: Adam ``foreach``, not the CPU's ~9 ops per tensor."""
    from ..models.bert import BertForMLM

    meta, cpu = torch.device("meta"), torch.device("cpu")
    with meta:
        model = BertForMLM(cfg)
    train_cfg = mlm.MLMTrainConfig(global_batch_size=batches[0], micro_batch_size=None, optimizer="adam",
                                   dropout=cfg.dropout)
    engine = mlm._engine(train_cfg, model, meta)
    if gpu:  # torch picks foreach on CUDA by itself; on the meta device it must be asked
        for group in engine.optimizer.param_groups:
            group["foreach"] = True
    for p in model.parameters():  # one optimizer step first, uncounted: its state exists, as in a real run
        p.grad = torch.zeros_like(p)
    engine.optimizer.step()
    engine.optimizer.zero_grad(set_to_none=True)
    out = []
    for batch in batches:
        engine.parallel = DataParallel(batch, None, meta)  # this step's batch, one micro-batch
        data = shape_only_mlm_data(cfg.vocab_size, seq_len, batch, device="cpu")
        (inputs, labels), count = mlm._global_batch(data, train_cfg.replace(global_batch_size=batch),
                                                    torch.Generator().manual_seed(0), cpu)
        with M.meta_nonzero(int(count)):
            out.append(M.count_step(engine, (inputs.to(meta), labels.to(meta)), count.to(meta), batch_size=batch))
    return out


def ncf_step_prediction(data, cfg: ncf.TrainConfig, curves, *, device=None, tiny_steps: int = 5) -> M.StepPrediction:
    """The model of the NeuMF step ``cfg`` on ``device``, its overhead timed at a tiny batch: lesson 12 prunes by it."""
    dev = torch.device(device or "cpu")
    data = data.to(dev)
    counts = _counted(*_ncf_stepper(cfg, data, dev), cfg.global_batch_size)
    tiny_engine, tiny_args = _ncf_stepper(cfg.replace(global_batch_size=TINY_BATCH, micro_batch_size=None), data, dev)
    tiny_counts = _counted(tiny_engine, tiny_args, TINY_BATCH)
    batches = iter([tiny_args() for _ in range(tiny_steps)])  # drawn first: the sampler is not timed
    tiny_s = _median_seconds(lambda: tiny_engine.step(*next(batches)), tiny_steps, dev=dev)
    sampler = DeviceSampler(data.train_users, data.train_items, data.num_items, batch_size=cfg.global_batch_size,
                            neg_per_pos=4, seed=0)
    data_s = cfg.global_batch_size / batch_production_rate(sampler, 4 * cfg.global_batch_size, dev)
    return M.predict_step(counts, curves, data_s=data_s, step_overhead_s=M.step_overhead(tiny_s, tiny_counts, curves))


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
    return _median_seconds(lambda: mlm._global_batch(data, cfg, gen, dev), 5, warmup=1)


def _batches(kind: str, spec: dict) -> list[int]:
    return spec["ncf_batches"] if kind == "neumf" else spec["bert_batches"]


def _data_for(kind: str, spec: dict):
    if kind == "neumf":
        return load_implicit(spec["dataset"], profile=spec["profile"])
    b = spec["bert"]
    return shape_only_mlm_data(b["vocab_size"], b["seq_len"], max(*spec["bert_batches"], 16), device="cpu")


def _probe(spec: dict) -> dict:
    p = probe_hardware("cpu", matmul_sizes=spec["matmul_sizes"], copy_sizes=spec["copy_sizes"],
                       repeats=spec["repeats"])
    return {"device_name": p.device_name, "curves": p.curves.to_dict(), "matmul_by_dtype": p.matmul_by_dtype}


def _timed(kind: str, spec: dict, data, world_size: int = 1) -> dict:
    """Seconds of the step (DDP in a process group) at a tiny batch per rank and each global batch, and of the data."""
    def measured(batch):
        engine, next_args = _stepper(kind, spec, batch, data)
        return _median_seconds(lambda: engine.step(*next_args()), spec["steps"], spec["warmup"])

    return {"tiny_s": measured(TINY_BATCH * world_size),
            "data_s": {b: _data_seconds(kind, spec, b, data) for b in _batches(kind, spec)},
            "measured_s": {b: measured(b) for b in _batches(kind, spec)}}


def one_rank_measurements(spec: dict, models=MODELS) -> dict:
    """Lesson 09 on one rank, one thread: the probe, each step counted per batch per rank, :func:`_timed`."""
    with threads(1):
        out = {"probe": _probe(spec), "models": {}}
        for kind in models:
            data = _data_for(kind, spec)
            per_rank = {TINY_BATCH, *_batches(kind, spec), *(b // 2 for b in _batches(kind, spec))}
            counts = {b: _counted(*_stepper(kind, spec, b, data), b) for b in sorted(per_rank)}
            out["models"][kind] = {"counts": counts, **_timed(kind, spec, data)}
    return out


def two_rank_worker(rank: int, world_size: int, spec: dict, models=MODELS) -> dict:
    """Lesson 09 on ``world_size`` ranks: the probe with every rank busy, the all-reduce sweep, :func:`_timed`."""
    return {"probe": _probe(spec),
            "allreduce": allreduce_benchmark(rank, world_size, spec["allreduce_sizes"], spec["allreduce_iters"], 2),
            "models": {kind: _timed(kind, spec, _data_for(kind, spec), world_size) for kind in models}}


def link_from(two: dict) -> tuple[float, float, tuple[float, float]]:
    """``(alpha, beta)`` of the measured all-reduce (lesson 08's robust fit), and per link (read as a ring)."""
    rows = two["allreduce"]
    a, b = cost.fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_s"] for r in rows])
    return a, b, cost.link_alpha_beta_from_ring_fit(a, b, rows[0]["world_size"])


def one_rank_overhead(one: dict, kind: str) -> float:
    m = one["models"][kind]
    return M.step_overhead(m["tiny_s"], m["counts"][TINY_BATCH], DeviceCurves.from_dict(one["probe"]["curves"]))


def overhead_table(one: dict) -> Table:
    """Per model: the step measured at a tiny batch (ms), what the roofline explains of it, and the rest."""
    curves = DeviceCurves.from_dict(one["probe"]["curves"])
    return Table(["model", "batch", "measured", "roofline", "overhead", "operations"], [
        {"model": kind, "batch": TINY_BATCH, "measured": m["tiny_s"] * 1e3,
         "roofline": M.roofline_sum(m["counts"][TINY_BATCH], curves) * 1e3,
         "overhead": one_rank_overhead(one, kind) * 1e3, "operations": len(m["counts"][TINY_BATCH].ops)}
        for kind, m in one["models"].items()])


def step_overheads(one: dict, two: dict | None, kind: str) -> dict[int, float]:
    """``{ranks: seconds}``: the overhead on 1 rank and on 2 (beyond the modelled all-reduce: DDP's hooks)."""
    overhead = {1: one_rank_overhead(one, kind)}
    if two:
        tiny, curves2 = one["models"][kind]["counts"][TINY_BATCH], DeviceCurves.from_dict(two["probe"]["curves"])
        comm = M.predict_step(tiny, curves2, world_size=2, link=link_from(two)[2], step_overhead_s=0.0)
        overhead[2] = max(M.step_overhead(two["models"][kind]["tiny_s"], tiny, curves2)
                          - comm.exposed_comm_s - comm.ddp_copy_s, overhead[1])
    return overhead


def saved_overheads(one: dict, two: dict | None, models=MODELS) -> dict:
    """Per model and ranks, the overhead and the operations of its tiny step (lesson 10 spreads it over its own)."""
    return {kind: {str(p): {"overhead_s": s, "operations": len(one["models"][kind]["counts"][TINY_BATCH].ops)}
                   for p, s in step_overheads(one, two, kind).items()} for kind in models}


def predictions(one: dict, two: dict | None, spec: dict, models=MODELS) -> list[dict]:
    """Per model, global batch and ranks (1; 2 when ``two`` is given): predicted and measured step."""
    runs = [(1, one, None)] + ([(2, two, link_from(two)[2])] if two else [])
    rows = []
    for kind in models:
        overhead = step_overheads(one, two, kind)
        for b in _batches(kind, spec):
            for p, run, link in runs:
                m, curves = run["models"][kind], DeviceCurves.from_dict(run["probe"]["curves"])
                pred = M.predict_step(one["models"][kind]["counts"][b // p], curves, world_size=p, link=link,
                                      data_s=m["data_s"][b], step_overhead_s=overhead[p])
                measured = m["measured_s"][b]
                rows.append({"model": kind if kind == "neumf" else f"bert-{spec['bert']['preset']}", "batch": b,
                             "ranks": p, "predicted (ms)": pred.step_s * 1e3, "measured (ms)": measured * 1e3,
                             "error": (pred.step_s - measured) / measured, "prediction": pred})
    return rows


def comparison_table(rows: list[dict]) -> Table:
    cols = ["model", "batch", "ranks", "predicted (ms)", "measured (ms)", "error", "largest part"]
    return Table(cols, [{**r, "error": f"{r['error']:+.0%}", "largest part": max(
        r["prediction"].parts(), key=r["prediction"].parts().get)} for r in rows])


def parts_table(rows: list[dict]) -> Table:
    """Each prediction split into its parts (ms), and its memory (MB)."""
    names = list(rows[0]["prediction"].parts()) if rows else []
    return Table(["model", "batch", "ranks", *names, "memory"], [
        {**r, **{n: v * 1e3 for n, v in r["prediction"].parts().items()}, "memory": r["prediction"].memory_bytes / 1e6}
        for r in rows])


def calibration_step(row: dict) -> bool:
    """Was the overhead measured on ``row``'s step? Then it tests nothing."""
    return row["batch"] == TINY_BATCH * row["ranks"]


def median_error(rows: list[dict]) -> float:
    """Median |predicted - measured| / measured, the calibration steps left out (the lesson saves it)."""
    errors = [abs(r["error"]) for r in rows if not calibration_step(r)]
    return statistics.median(errors) if errors else float("nan")


def model_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """Predicted / measured step per model and over all, calibration steps left out, groups of two steps or more."""
    held = [r for r in rows if not calibration_step(r)]
    groups = {m: [r for r in held if r["model"] == m] for m in dict.fromkeys(r["model"] for r in held)}
    if len(groups) > 1:
        groups["every model"] = held
    out = []
    for name, rs in groups.items():
        if len(rs) >= 2:
            ranks = " and ".join(str(p) for p in sorted({r["ranks"] for r in rs}))
            out.append(compare.paired_ratio(f"step time, model / measured: {name}",
                                            [r["measured (ms)"] for r in rs], [r["predicted (ms)"] for r in rs],
                                            needed=compare.MODEL_EFFECT, basis=f"{len(rs)} steps on {ranks} rank(s)"))
    return out


def mfu_table(rows: list[dict], peak_flops: float) -> Table:
    """Model FLOPs utilisation of each 1-rank step, measured and predicted, of ``peak_flops``."""
    return Table(["model", "batch", "measured", "predicted"], [
        {**r, "measured": f"{r['prediction'].flops / (r['measured (ms)'] / 1e3) / peak_flops:.0%}",
         "predicted": f"{r['prediction'].mfu(peak_flops):.0%}"} for r in rows if r["ranks"] == 1],
        title=f"MFU of {peak_flops / 1e9:.1f} GFLOP/s")


def reference_curves(name: str, dtype: str = "bf16", fraction: float = 1.0, overhead_s: float = 5e-6) -> DeviceCurves:
    """A reference device as flat curves: ``fraction`` of its peaks at every size (optimistic for small operations)."""
    ref = REFERENCE_PEAKS[name]
    flops = (ref.flops.get(dtype) or ref.flops["fp32"]) * fraction
    bw = ref.memory_bandwidth * fraction
    return DeviceCurves(name, [(1.0, flops), (1e15, flops)], [(1.0, bw), (1e15, bw)], overhead_s)


def node_prediction(counts_a: M.StepCounts, counts_b: M.StepCounts, *, device: str = "H100 SXM", p: int = 8,
                    global_batch: int, dtype: str = "bf16", fraction: float = GPU_PEAK_SHARE,
                    op_overhead_s: float = GPU_OP_OVERHEAD_S) -> dict:
    """This model on ``p`` reference GPUs over NVLink at ``fraction`` of the peaks and an assumed per-op overhead."""
    q = cost.QUOTED_INTERCONNECTS["NVLink 4 via NVSwitch (H100 node)"]
    curves = reference_curves(device, dtype, fraction, op_overhead_s)
    link = (q["alpha_s"], 1 / q["bandwidth_Bps"])
    rows = M.scaling_curve(counts_a, counts_b, curves, link, batch=global_batch, ps=[1, p])
    pred = M.predict_step(M.interpolate(counts_a, counts_b, global_batch / p), curves, world_size=p, link=link)
    peak = REFERENCE_PEAKS[device].flops.get(dtype) or REFERENCE_PEAKS[device].flops["fp32"]
    return {"device": device, "p": p, "global_batch": global_batch, "step_s": pred.step_s,
            "samples_per_s": global_batch / pred.step_s,
            "efficiency": rows[-1]["efficiency"] if len(rows) > 1 else None,
            "mfu": pred.mfu(peak), "overhead_share": len(counts_a.ops) * op_overhead_s / pred.step_s}


def node_table(node: dict) -> Table:
    return Table(["device", "p", "global batch", "step ms", "sequences/s", "efficiency", "MFU", "overhead share"],
                 [{**node, "global batch": node["global_batch"], "step ms": node["step_s"] * 1e3,
                   "sequences/s": f"{node['samples_per_s']:,.0f}",
                   "MFU": f"{node['mfu']:.1%}", "overhead share": f"{node['overhead_share']:.0%}"}])
