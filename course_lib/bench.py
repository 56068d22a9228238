"""Measurements for lesson 01 (loader comparison, throughput vs batch size, a profile) and 07 (BERT throughput).

Command line (the lessons' numbers without the notebooks)::

    python -m course_lib.bench ncf [--batch-size 256] [--device cpu|cuda] [--dataset ml-1m]
    python -m course_lib.bench bert [--model base] [--seq-len 128] [--batch-size 64] [--device cuda]
    python -m course_lib.bench collectives [--world-size 2] [--size-mib 16] [--iters 10]
    python -m course_lib.bench hardware [--device cpu|cuda]
    python -m course_lib.bench model [--profile full|smoke]
    python -m course_lib.bench paleo [--net alexnet] [--device K80] [--network ethernet20] [--batch 2048]
        [--ppp-comp 0.62] [--ppp-comm 1.0] [--scaling strong|weak] [--workers 1,2,4,...,128] [--json]

prints lesson 01's data-loading ladder (a per-sample DataLoader, its textbook improvements,
the device-resident sampler: batch production and training throughput at the same batch
size) and ends with ``ratio loader: <x>`` (device-resident over the per-sample DataLoader,
loading alone). Under Nsight Systems the training
phases show up as NVTX ranges: ``nsys profile -t cuda,nvtx python -m course_lib.bench ncf``.

``bert`` times LAMB training steps of a BERT shape (BERT-base by default: 12 layers, hidden
768, vocabulary 30522, 128 tokens) on random token ids — the speed does not depend on the
text — in fp32 and in each mixed-precision mode the device supports, and ends with
``bert seqs/s <mode>: <x>`` lines and the speedup of the fastest mode over fp32.

``collectives`` (lesson 08) times the course's ring all-reduce, built from isend/irecv
(``course_lib.comm.collectives``), against the backend's own all-reduce at one message size,
in one launch, and ends with ``ratio ring/backend: <x>``: the ring's bus bandwidth over the
backend's (the same as the backend's time over the ring's).

``hardware`` (lesson 09) probes this machine (``course_lib.perf.probe``) and prints each
measurement as a fraction of the device's reference peak (``course_lib.perf.peaks``) with a
verdict, then the one-line summary. ``model`` (lesson 09) predicts the course's step for NeuMF
and mini BERT at three global batches on 1 and 2 ranks (one thread per rank), measures the
same steps, prints both per point and ends with ``median prediction error: <x>%``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from .data import load_implicit
from .data.movielens import ImplicitData
from .data.sampler import time_loading
from .data.text import shape_only_mlm_data
from .hardware import default_device, usable_cpu_cores
from .metrics import paired_speedup
from .precision import Precision
from .tables import Table
from .train.engine import PHASES
from .train.mlm import MLMTrainConfig
from .train.mlm import throughput as mlm_throughput
from .train.ncf import TrainConfig, make_batches, samples_per_epoch, train_to_target


def loader_rungs(workers: int) -> list[tuple[str, dict]]:
    """Lesson 01's data-loading ladder: ``(rung, TrainConfig changes)``, each rung keeping the one above
    and adding one textbook improvement (seed 001: "data loading ... is the first thing to check"),
    then the batched Dataset back in the training process, then the course's device-resident
    sampler. ``workers``: the tier plan's ``loader_workers``."""
    dl = {"loader": "dataloader"}
    rungs = [("DataLoader, a Python sample per __getitem__", dl)]
    for name, change in ((f"+ num_workers={workers}", {"num_workers": workers}), ("+ pin_memory", {"pin_memory": True}),
                         ("+ prefetch_factor=4", {"prefetch_factor": 4}),
                         ("+ persistent_workers", {"persistent_workers": True}),
                         ("+ batched Dataset (a batch per call)", {"loader": "dataloader-batched"})):
        dl = {**dl, **change}
        rungs.append((name, dl))
    # the batched Dataset without the workers: whether they still pay once a batch costs one call
    rungs.append(("batched Dataset, no workers", {"loader": "dataloader-batched"}))
    return rungs + [("device-resident sampler", {"loader": "device"})]


def loader_comparison(data: ImplicitData, cfg: TrainConfig | None = None, *, device=None,
                      load_samples: int = 200_000, train_steps: int = 100, workers: int = 1) -> dict:
    """The data-loading ladder (:func:`loader_rungs`) at the same batch size, measured now. Per rung:

    * ``first_batch_s``: the wait for an epoch's first batch (its shuffle; a DataLoader's workers
      starting), paid once per epoch;
    * ``load_sps``: loading alone, samples/s after the first batch;
    * ``train_sps``: training samples/s after the epoch's start-up, from the same loop
      (``train_steps`` steps less one step: two runs, of ``train_steps`` and of 1 step).

    Two passes over the ladder, the second in reverse order (drift in the machine's load then
    favours no rung); each rung keeps its better pass and ``passes`` keeps both, so a comparison
    between two rungs can be paired pass by pass (:func:`loader_reading`). ``comp["rows"]`` holds
    the rungs; the first and the last (per-sample DataLoader, device sampler) also under their old
    keys, with their ratios. Worker processes (``workers`` of them) are shut down after each rung,
    also when the measurement is interrupted. ``pin_memory`` is measured on CUDA only."""
    cfg = cfg or TrainConfig()
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)
    base = {"loader": "device", "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
            "persistent_workers": False}
    rungs = [(name, cfg.replace(**{**base, **change})) for name, change in loader_rungs(workers)]
    # pinned memory only speeds up a copy to a GPU: on a CPU its rung would measure its neighbour again
    rows = [{"rung": name, "measured": device.type == "cuda" or name != "+ pin_memory", "passes": [{}, {}]}
            for name, _ in rungs]
    run = dict(device=device, progress="none", evaluate_points=False, time_phases=False)
    train_to_target(data, cfg.replace(**base, max_steps=5), **run)  # the process's first steps pay one-time costs
    for p, order in enumerate((list(zip(rows, rungs)), list(zip(rows, rungs))[::-1])):
        for row, (name, c) in order:
            if not row["measured"]:
                continue
            batches = make_batches(data, c)
            try:
                if c.loader == "device":
                    time_loading(batches, 4 * c.global_batch_size, device)  # its first epoch's permutation
                elif c.persistent_workers:
                    next(iter(batches))  # the workers start once; the timed epoch below reuses them
                first, sps, _ = time_loading(batches, load_samples * (10 if c.loader == "device" else 1), device)
            finally:
                getattr(batches, "close", lambda: None)()  # no worker outlives its rung
            one = train_to_target(data, c.replace(max_steps=1), **run)
            many = train_to_target(data, c.replace(max_steps=train_steps), **run)
            steady_s = max(many.train_time_s - one.train_time_s, 1e-9)
            row["passes"][p] = {"first_batch_s": first, "load_sps": sps,
                                "train_sps": (many.samples - one.samples) / steady_s}
    for row in rows:
        if row["measured"]:
            for key in ("load_sps", "train_sps"):
                row[key] = max(q[key] for q in row["passes"])
            row["first_batch_s"] = min(q["first_batch_s"] for q in row["passes"])
    first, last = rows[0], rows[-1]
    out = {"batch_size": cfg.global_batch_size, "device": str(device), "workers": workers,
           "cpu_cores": usable_cpu_cores(), "epoch_samples": samples_per_epoch(data, cfg), "rows": rows,
           "device_load_sps": last["load_sps"], "dataloader_load_sps": first["load_sps"],
           "device_train_sps": last["train_sps"], "dataloader_train_sps": first["train_sps"]}
    out["ratio_loading"] = out["device_load_sps"] / out["dataloader_load_sps"]
    out["ratio_training"] = out["device_train_sps"] / out["dataloader_train_sps"]
    return out


def comparison_table(comp: dict) -> Table:
    """The data-loading ladder as a table: a row per rung, with its ratio to the first rung."""
    t = Table(["rung", "first batch (ms, per epoch)", "loading (samples/s)", "loading vs first",
               "training (samples/s)", "training vs first"],
              title=f"The data-loading ladder, batch {comp['batch_size']} on {comp['device']} "
                    "(samples/s after an epoch's first batch; the better of two passes)")
    first = comp["rows"][0]
    for r in comp["rows"]:
        if not r["measured"]:
            t.add(rung=r["rung"], **{"first batch (ms, per epoch)": "—",
                                     "loading (samples/s)": "n/a on a CPU: no copy to a device",
                                     "loading vs first": "—", "training (samples/s)": "—", "training vs first": "—"})
            continue
        t.add(rung=r["rung"], **{"first batch (ms, per epoch)": round(1000 * r["first_batch_s"], 1),
                                 "loading (samples/s)": round(r["load_sps"]),
                                 "loading vs first": f"{r['load_sps'] / first['load_sps']:.2f}x",
                                 "training (samples/s)": round(r["train_sps"]),
                                 "training vs first": f"{r['train_sps'] / first['train_sps']:.2f}x"})
    return t


def _paired(a: dict, b: dict, key: str, higher_is_better: bool = True) -> str:
    """Rung ``a`` against rung ``b`` on ``key``, paired pass by pass: "1.60x", or "no measurable
    difference" when the passes disagree (or agree within 5 %)."""
    ratios = [(pa[key] / pb[key]) if higher_is_better else (pb[key] / pa[key]) for pa, pb in zip(a["passes"], b["passes"])]
    median, measurable = paired_speedup(ratios)
    return f"{median:.2f}x" if measurable else "no measurable difference"


def loader_reading(comp: dict) -> str:
    """What the data-loading ladder shows, read from its rows; every step between two rungs is paired
    pass by pass and counts only when both passes agree (by more than 5 %)."""
    rows = [r for r in comp["rows"] if r["measured"]]
    first, device = rows[0], rows[-1]
    best_load = max(rows[:-1], key=lambda r: r["load_sps"])
    best_train = max(rows[:-1], key=lambda r: r["train_sps"])
    parts = [f"loading alone went from {first['load_sps']:,.0f} samples/s (per-sample DataLoader) to "
             f"{best_load['load_sps']:,.0f} at the best DataLoader rung ({best_load['rung'].lstrip('+ ')}, "
             f"{_paired(best_load, first, 'load_sps')}) and {device['load_sps']:,.0f} with the device-resident "
             f"sampler ({_paired(device, first, 'load_sps')})"]
    if best_train is first:
        trained = f"training ran at {first['train_sps']:,.0f} samples/s with it, and no later DataLoader rung trained faster"
    else:
        trained = (f"training went from {first['train_sps']:,.0f} samples/s to {best_train['train_sps']:,.0f} at the best "
                   f"DataLoader rung ({best_train['rung'].lstrip('+ ')}: {_paired(best_train, first, 'train_sps')})")
    parts.append(f"{trained}; the device sampler trained at {device['train_sps']:,.0f}: against the best DataLoader, "
                 f"{_paired(device, best_train, 'train_sps')}")
    workers, cores = comp["workers"], comp["cpu_cores"]
    parts.append(f"{workers} worker process{'es' if workers > 1 else ''} changed loading by "
                 f"{_paired(rows[1], first, 'load_sps')} and training by {_paired(rows[1], first, 'train_sps')}: a "
                 "worker's batch reaches the training process through shared memory and a pipe, a cost per batch"
                 + (f"; on this {cores}-core machine the workers also compete with the training process for the "
                    "same cores" if cores <= workers + 1 else ""))
    names = [r["rung"] for r in rows]
    if "+ persistent_workers" in names:
        i = names.index("+ persistent_workers")
        before, persistent = rows[i - 1], rows[i]
        ratios = [b["first_batch_s"] / a["first_batch_s"] for a, b in zip(persistent["passes"], before["passes"])]
        median, measurable = paired_speedup(ratios)
        change = ("no measurable change" if not measurable else
                  f"{median:.2f}x shorter" if median > 1 else f"{1 / median:.2f}x longer")
        epoch_s = comp["epoch_samples"] / before["load_sps"]
        parts.append(f"with persistent workers the wait for an epoch's first batch went from "
                     f"{1000 * before['first_batch_s']:.0f} to {1000 * persistent['first_batch_s']:.0f} ms ({change}); "
                     f"paid once per epoch, it is {before['first_batch_s'] / epoch_s:.2%} of an epoch's loading here")
    if len(rows) < len(comp["rows"]):
        parts.append("pin_memory was not measured: it speeds up copies to a GPU, and there is none")
    return "; ".join(parts)


def throughput_vs_batch(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, device=None,
                        samples_per_point: int = 400_000, min_steps: int | None = None) -> Table:
    """Training samples/s per batch size (same model, device sampler, no evaluation).

    Each point runs ``samples_per_point`` samples, at least ``min_steps`` steps (default 8
    on a CPU, 30 on a GPU, where a step at batch 65536 takes milliseconds and a handful of
    them measures launch jitter rather than throughput)."""
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)  # once: each run below would otherwise copy the dataset again
    min_steps = min_steps or (30 if device.type == "cuda" else 8)
    t = Table(["batch size", "steps", "samples/s", "ms/step"], title="Training throughput vs batch size")
    for b in batch_sizes:
        steps = max(min_steps, samples_per_point // b)
        # one short untimed run first: allocator and thread-pool warm-up for this shape
        train_to_target(data, cfg.replace(global_batch_size=b, max_steps=2), device=device, progress="none",
                        evaluate_points=False, time_phases=False)
        r = train_to_target(data, cfg.replace(global_batch_size=b, max_steps=steps), device=device, progress="none",
                            evaluate_points=False, time_phases=False)
        t.add(**{"batch size": b, "steps": r.steps, "samples/s": round(r.samples_per_s),
                 "ms/step": 1000 * r.train_time_s / max(1, r.steps)})
    return t


def throughput_reading(table: Table) -> str:
    """What a :func:`throughput_vs_batch` table shows, read from its rows."""
    rows = [(r["batch size"], r["samples/s"]) for r in table.rows]
    if len(rows) < 2:
        return "one batch size measured: nothing to compare"
    (b0, s0), (b1, s1) = rows[0], rows[-1]
    (bp, sp) = rows[-2]
    last = s1 / sp
    trend = ("samples/s is flattening: the last step up gained less than 20 %" if last < 1.2 else
             "samples/s was still growing at the largest batch measured")
    return (f"from batch {b0} to {b1} ({b1 // b0}x) samples/s went from {s0:,} to {s1:,} ({s1 / s0:.1f}x); "
            f"batch {bp} -> {b1}: {last:.2f}x; {trend}")


@dataclass
class StepProfile:
    """What :func:`profile_steps` recorded: the top operators (``table``) and the training loop's phase
    rows (``phase_s``: seconds over the profiled steps, host time on a CPU, device time on CUDA)."""

    table: str
    phase_s: dict
    steps: int
    device: str

    def __str__(self) -> str:
        return self.table


def profile_steps(data: ImplicitData, cfg: TrainConfig, *, steps: int = 20, device=None,
                  sort_by: str | None = None, row_limit: int = 10) -> StepProfile:
    """``torch.profiler`` over a few training steps: the table of the top ops (and the phase ranges)."""
    device = torch.device(device) if device is not None else default_device()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    data = data.to(device)  # once, outside the profile: the dataset's copy is not a training step
    run = dict(device=device, progress="none", evaluate_points=False, time_phases=True)
    train_to_target(data, cfg.replace(max_steps=3), **run)  # warm-up
    # The profiler's C++ logger (kineto) prints "USDT: ... profiler_start/stop" lines to stderr at its
    # default level; 6 is above its highest level (measured with torch 2.13: 5 still prints them). Read
    # when kineto first starts, so set before the first profile; a level the user chose is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=activities) as prof:
        train_to_target(data, cfg.replace(max_steps=steps), **run)
    sort_by = sort_by or ("cuda_time_total" if device.type == "cuda" else "cpu_time_total")
    events = prof.key_averages()
    phase_s = {}
    for e in events:
        if e.key in PHASES:
            device_us = getattr(e, "device_time_total", 0.0) if device.type == "cuda" else 0.0
            phase_s[e.key] = (device_us or e.cpu_time_total) / 1e6
    return StepProfile(events.table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=60), phase_s,
                       steps, str(device))


# Quoted, not measured here: NVIDIA DeepLearningExamples' BERT README, one V100, phase 1
# (128 tokens), mixed precision, as the lesson-07 issue cites it.
V100_PHASE1_AMP_SEQS_PER_S = 172.0


def bert_throughput(model: str = "base", *, seq_len: int = 128, batch_size: int = 64, vocab_size: int = 30522,
                    device=None, steps: int = 10, warmup_steps: int = 3, precisions=None) -> dict:
    """Training sequences/s of a BERT shape per precision mode: ``{mode: throughput() record}``."""
    device = torch.device(device) if device is not None else default_device()
    if precisions is None:
        precisions = ["fp32", "bf16"] + (["fp16"] if device.type == "cuda" else [])  # CPU bf16 may be emulated: measured
    data = shape_only_mlm_data(vocab_size, seq_len, max(batch_size, 8), device=device)
    cfg = MLMTrainConfig(model=model, global_batch_size=batch_size, micro_batch_size=batch_size, optimizer="lamb",
                         dropout=0.1)
    out = {}
    for mode in precisions:
        out[mode] = mlm_throughput(cfg.replace(precision=mode), data, device=device, steps=steps,
                               warmup_steps=warmup_steps)
        out[mode]["batch_size"] = batch_size
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["paleo"]:  # lesson 09's Paleo case studies: options of their own
        from .perf.paleo_study import cli

        return cli(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m course_lib.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["ncf", "bert", "collectives", "hardware", "model", "paleo"],
                        help="which benchmark (paleo: see python -m course_lib.bench paleo --help)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 256 (ncf), 64 (bert)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dataset", default="ml-1m", help="ncf: ml-1m, ml-20m or synthetic")
    parser.add_argument("--profile", default="full", help="ncf, model: full or smoke ($COURSE_PROFILE overrides for ncf)")
    parser.add_argument("--model", default="base", help="bert: a preset of course_lib.models.bert (default base)")
    parser.add_argument("--seq-len", type=int, default=128, help="bert: tokens per sequence")
    parser.add_argument("--steps", type=int, default=10, help="bert: timed steps per precision mode")
    parser.add_argument("--world-size", type=int, default=2, help="collectives: ranks (default 2)")
    parser.add_argument("--size-mib", type=float, default=16, help="collectives: message size in MiB (default 16)")
    parser.add_argument("--iters", type=int, default=10, help="collectives: timed all-reduces per algorithm")
    args = parser.parse_args(argv)
    if args.what == "bert":
        return _main_bert(args)
    if args.what == "collectives":
        return _main_collectives(args)
    if args.what == "hardware":
        return _main_hardware(args)
    if args.what == "model":
        return _main_model(args)

    from .hardware import detect
    from .tiers import plan

    data = load_implicit(args.dataset, profile=args.profile)
    print(f"data: {data.source}")
    workers = plan(detect(), args.profile).loader_workers
    comp = loader_comparison(data, TrainConfig(global_batch_size=args.batch_size or 256), device=args.device,
                             workers=workers, **({"load_samples": 50_000, "train_steps": 40} if args.profile == "smoke"
                                                 else {}))
    print(comparison_table(comp))
    print(loader_reading(comp))
    print(f"ratio training: {comp['ratio_training']:.2f}")
    print(f"ratio loader: {comp['ratio_loading']:.1f}")
    return 0


def _main_bert(args) -> int:
    batch = args.batch_size or 64
    print(f"BERT {args.model}, {args.seq_len} tokens, batch {batch}, LAMB training steps on random ids", flush=True)
    res = bert_throughput(args.model, seq_len=args.seq_len, batch_size=batch, device=args.device, steps=args.steps,
                          warmup_steps=max(1, min(3, args.steps)))
    fp32 = Precision("fp32", args.device or default_device()).fp32_matmul
    print(f"fp32 here runs its matmuls in {fp32}" + ("" if fp32 == "tf32" else
          " (TensorFloat-32 off: torch's default; torch.backends.cuda.matmul.allow_tf32 = True for tf32)"))
    t = Table(["precision", "sequences/s", "tokens/s", "step (ms)", "speedup vs fp32"])
    for mode, r in res.items():
        t.add(precision=mode, **{"sequences/s": round(r["seqs_per_s"], 1), "tokens/s": round(r["tokens_per_s"]),
                                 "step (ms)": round(r["step_s"] * 1e3, 1),
                                 "speedup vs fp32": round(r["seqs_per_s"] / res["fp32"]["seqs_per_s"], 2)})
    print(t)
    for mode, r in res.items():
        print(f"bert seqs/s {mode}: {r['seqs_per_s']:.1f}")
    best = max(res, key=lambda m: res[m]["seqs_per_s"])
    print(f"ratio {best} vs fp32: {res[best]['seqs_per_s'] / res['fp32']['seqs_per_s']:.2f}")
    if args.model == "base" and args.seq_len == 128:
        print(f"ratio {best} vs V100 phase-1 AMP (~{V100_PHASE1_AMP_SEQS_PER_S:.0f} seq/s, NVIDIA, quoted): "
              f"{res[best]['seqs_per_s'] / V100_PHASE1_AMP_SEQS_PER_S:.2f}")
    return 0


def _main_collectives(args) -> int:
    from .comm.bench import ring_vs_backend

    size = int(args.size_mib * 2**20)
    res = ring_vs_backend(args.world_size, size, args.iters)
    print(res.table(args.world_size))
    busbw = {r["algorithm"]: r["busbw_GBps"] for r in res.rows}
    for name, bw in busbw.items():
        print(f"busbw {name}: {bw:.3f} GB/s")
    print(f"ratio ring/backend: {busbw['ring'] / busbw['backend']:.2f}")
    return 0


def _main_hardware(args) -> int:
    from .perf.probe import probe_hardware

    probe = probe_hardware(args.device)
    print(probe.table())
    print(f"summary: {probe.summary()}")
    return 0


def _main_model(args) -> int:
    from . import performance_study as study
    from .dist import launch

    spec = study.lesson_spec(args.profile or "full", bert_preset="mini")
    print(f"NeuMF batches {spec['ncf_batches']}, BERT {spec['bert']} batches {spec['bert_batches']}; "
          "1 rank here, 2 ranks under launch (gloo), one thread per rank", flush=True)
    one = study.one_rank_measurements(spec)
    two = launch(study.two_rank_worker, 2, spec, backend="gloo", threads_per_worker=1)[0]
    rows = study.predictions(one, two, spec)
    print(study.comparison_table(rows))
    print(study.parts_table(rows))
    print(study.verdict(rows))
    print(f"median prediction error: {100 * study.median_error(rows):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
