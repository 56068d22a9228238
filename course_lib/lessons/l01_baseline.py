"""Lesson 01: the baseline's phases and pace, SGD against popularity, the loader ladder, throughput, a profile."""

import math
import os
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from .. import compare
from ..data.movielens import ImplicitData
from ..data.sampler import time_loading
from ..ladder import pace_uncertainty
from ..metrics import hr_standard_error
from ..tables import Table
from ..train.engine import PHASES
from ..train.ncf import TrainConfig, TrainResult, make_batches
from .l01_step import alternating, on_device, timed_run


def embedding_share(model: torch.nn.Module) -> float:
    """The fraction of ``model``'s parameters in its embedding tables."""
    tables = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    return tables / max(1, sum(p.numel() for p in model.parameters()))


def phase_table(result: TrainResult, profile=None) -> Table:
    """Each phase's share of the training clock, ms per step and share of ``profile``'s phase rows, largest first."""
    prof = getattr(profile, "phase_s", None) or {}
    total = sum(prof.values())
    t = Table(["phase", "clock", "ms/step", "profile"])
    for name, share in sorted(result.clock_shares().items(), key=lambda kv: -kv[1]):
        sec = result.phase_time_s.get(name, share * result.train_time_s)
        t.add(phase=name, clock=f"{share:.0%}", profile=f"{prof[name] / total:.0%}" if name in prof else None,
              **{"ms/step": round(1000 * sec / max(1, result.steps), 3)})
    return t


def sgd_comparisons(runs, floor_hr: float, *, users: int) -> list[compare.Comparison]:
    """Each plain-SGD run of the lr sweep against the popularity ranking, within the sampling error."""
    return [compare.quantity(f"HR@10, SGD lr {r.config['peak_lr']:g} vs popularity", r.final_hr,
                             hr_standard_error(r.final_hr, users), reference=floor_hr, needed=compare.HR_EFFECT,
                             n=f"{users} users", basis="sampling error")
            for r in runs if r.config.get("optimizer") == "sgd"]


def pace_table(result: TrainResult, *, min_share: float = 0.1) -> Table:
    """ms per step in the evaluation intervals of at least ``min_share`` of the longest one's steps (near the
    target the loop evaluates more often: a 3-step interval's pace is the clock's jitter), and over the fastest."""
    steps, times = result.curve.get("step", []), result.curve.get("time_s", [])
    spans = [(s0, s1 - s0, 1000 * (t1 - t0) / (s1 - s0))
             for s0, s1, t0, t1 in zip(steps, steps[1:], times, times[1:]) if s1 > s0]
    spans = [x for x in spans if x[1] >= min_share * max(n for _, n, _ in spans)] if spans else []
    fastest = min((ms for _, _, ms in spans), default=None)
    return Table(["first step", "steps", "ms/step", "vs fastest"],
                 [{"first step": s0, "steps": n, "ms/step": round(ms, 3), "vs fastest": round(ms / fastest, 2)}
                  for s0, n, ms in spans])


def pace_drift_table(pace: dict) -> Table:
    """The yardstick's samples/s (:meth:`course_lib.ladder.Pace.finish`'s record) before and after the baseline
    run, their mean, the run's own; how far it moved, the run against the mean, and :func:`pace_noise`."""
    before, after, run = pace.get("before"), pace.get("after"), pace.get("run")
    mean = pace.get("rate") or ((before + after) / 2 if before and after else before)
    row = {k: round(v) for k, v in (("before", before), ("after", after), ("mean", mean), ("run", run)) if v}
    if before and after:
        row["moved"] = f"{after / before - 1:+.0%}"
    if run and mean:
        row["run/mean"] = f"{run / mean - 1:+.0%}"
    row["±"] = f"{pace_noise(pace):.0%}"
    return Table(["before", "after", "mean", "run", "moved", "run/mean", "±"], [row])


def pace_noise(pace: dict) -> float:
    """The least uncertainty of a ratio of two timings taken at different moments of lesson 01
    (:func:`course_lib.ladder.pace_uncertainty`); 0 where the yardstick was timed once only."""
    if not pace.get("before") or not pace.get("after"):
        return 0.0
    return pace_uncertainty({"pace": {**pace, "rate": pace.get("rate") or (pace["before"] + pace["after"]) / 2}})


def loader_rungs(workers: int) -> list[tuple[str, dict]]:
    """``(rung, TrainConfig changes)``: the DataLoader plus one textbook improvement per rung (seed talk 001),
    the batched Dataset without workers (do they still pay?), and the course's device-resident sampler."""
    dl, rungs = {"loader": "dataloader"}, [("per-sample DataLoader", {"loader": "dataloader"})]
    for name, change in ((f"+ num_workers={workers}", {"num_workers": workers}), ("+ pin_memory", {"pin_memory": True}),
                         ("+ prefetch_factor=4", {"prefetch_factor": 4}),
                         ("+ persistent_workers", {"persistent_workers": True}),
                         ("+ batched Dataset", {"loader": "dataloader-batched"})):
        dl = {**dl, **change}
        rungs.append((name, dl))
    return rungs + [("batched, no workers", {"loader": "dataloader-batched"}), ("device sampler", {"loader": "device"})]


def _loader_pass(data: ImplicitData, c: TrainConfig, device, load_samples: int, train_steps: int) -> dict:
    """One rung once: its first batch's wait, loading alone, and training (``train_steps`` less 1 step)."""
    batches = make_batches(data, c)
    try:
        if c.loader == "device":
            time_loading(batches, 4 * c.global_batch_size, device)  # its first epoch's permutation
        elif c.persistent_workers:
            next(iter(batches))  # the workers start once; the timed epoch below reuses them
        first, sps, _ = time_loading(batches, load_samples * (10 if c.loader == "device" else 1), device)
    finally:
        getattr(batches, "close", lambda: None)()  # no worker outlives its rung
    one, many = (timed_run(data, c, device, steps, phases=False) for steps in (1, train_steps))
    steady_s = many.train_time_s - one.train_time_s
    # a load spike can make the 1-step run the longer: then the pass measured nothing (None, not 1e12 samples/s)
    return {"first_batch_s": first, "load_sps": sps,
            "train_sps": (many.samples - one.samples) / steady_s if steady_s > 0 else None}


def loader_comparison(data: ImplicitData, cfg: TrainConfig | None = None, *, device=None,
                      load_samples: int = 200_000, train_steps: int = 100, workers: int = 1) -> dict:
    """The data-loading ladder (:func:`loader_rungs`) in two :func:`alternating` passes. Per rung, the better pass's
    ``first_batch_s`` (an epoch's first batch: its shuffle, the workers starting), ``load_sps`` (loading alone) and
    ``train_sps``, and both ``passes``. ``pin_memory`` is measured on CUDA only: a CPU has no copy to speed up."""
    cfg = cfg or TrainConfig()
    data, device = on_device(data, device)
    base = {"loader": "device", "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
            "persistent_workers": False}
    rungs = [(name, cfg.replace(**{**base, **change})) for name, change in loader_rungs(workers)]
    rows = [{"rung": name, "measured": device.type == "cuda" or name != "+ pin_memory", "passes": [{}, {}]}
            for name, _ in rungs]
    timed_run(data, cfg.replace(**base), device, 5, phases=False)  # the process's first steps pay one-time costs
    measured = [(row, c) for row, (_, c) in zip(rows, rungs) if row["measured"]]
    passes = alternating(measured, 2, lambda rc: _loader_pass(data, rc[1], device, load_samples, train_steps))
    for (row, _), ps in zip(measured, passes):
        rates = {k: max((q[k] for q in ps if q[k] is not None), default=math.nan) for k in ("load_sps", "train_sps")}
        row.update(passes=ps, first_batch_s=min(q["first_batch_s"] for q in ps), **rates)
    first, last = rows[0], rows[-1]
    return {"batch_size": cfg.global_batch_size, "device": str(device), "rows": rows, "train_steps": train_steps,
            "ratio_loading": last["load_sps"] / first["load_sps"],
            "ratio_training": last["train_sps"] / first["train_sps"]}


def comparison_table(comp: dict) -> Table:
    """Per rung: the first batch's ms, loading and training samples/s and their ratios to the first rung's."""
    t = Table(["rung", "first batch ms", "load/s", "load x", "train/s", "train x"],
              title=f"batch {comp['batch_size']} on {comp['device']}")
    first = comp["rows"][0]
    for r in comp["rows"]:
        if not r["measured"]:
            t.add(rung=r["rung"], **{"load/s": "n/a on CPU"})
            continue
        t.add(rung=r["rung"], **{"first batch ms": round(1000 * r["first_batch_s"], 1),
                                 "load/s": round(r["load_sps"]), "load x": round(r["load_sps"] / first["load_sps"], 2),
                                 "train/s": r["train_sps"] if math.isnan(r["train_sps"]) else round(r["train_sps"]),
                                 "train x": round(r["train_sps"] / first["train_sps"], 2)})
    return t


def _pass_ratio(what: str, a: dict, b: dict, key: str) -> compare.Comparison | None:
    """Rung ``a`` over ``b`` on ``key`` paired pass by pass (a wait: shorter is higher); None below two pairs."""
    pairs = [(pb[key], pa[key]) for pa, pb in zip(a["passes"], b["passes"]) if pa.get(key) and pb.get(key)]
    if len(pairs) < 2:
        return None
    ref, other = zip(*pairs) if key != "first_batch_s" else zip(*[(y, x) for x, y in pairs])
    return compare.paired_ratio(f"{what}, {a['rung'].lstrip('+ ')} / {b['rung'].lstrip('+ ')}", ref, other,
                                needed=compare.SPEED_EFFECT, basis=f"{len(pairs)} passes")


def loader_comparisons(comp: dict) -> list[compare.Comparison]:
    """The best DataLoader rung and the device sampler over the first rung, the device sampler over the best, the
    first worker rung over none, persistent workers over the rung before (their first batch's wait, training)."""
    rows = [r for r in comp["rows"] if r["measured"]]
    first, device = rows[0], rows[-1]
    best = {key: max(rows[:-1], key=lambda r: -math.inf if math.isnan(r[key]) else r[key])
            for key in ("load_sps", "train_sps")}
    plan = [("loading", "load_sps", best["load_sps"], first), ("loading", "load_sps", device, first),
            ("training", "train_sps", best["train_sps"], first), ("training", "train_sps", device, best["train_sps"]),
            ("loading", "load_sps", rows[1], first), ("training", "train_sps", rows[1], first)]
    names = [r["rung"] for r in rows]
    if "+ persistent_workers" in names:
        i = names.index("+ persistent_workers")
        plan += [("first-batch wait", "first_batch_s", rows[i], rows[i - 1]),
                 ("training", "train_sps", rows[i], rows[i - 1])]
    comps = [_pass_ratio(what, a, b, key) for what, key, a, b in plan if a is not b]
    return [c for c in comps if c is not None]


def throughput_vs_batch(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, device=None,
                        samples_per_point: int = 400_000, min_steps: int | None = None) -> Table:
    """Training samples/s per batch, at least ``min_steps`` steps each (8 on a CPU; 30 on a GPU, where a few
    steps measure launch jitter)."""
    data, device = on_device(data, device)
    min_steps = min_steps or (30 if device.type == "cuda" else 8)
    t = Table(["batch size", "steps", "samples/s", "ms/step"])
    for b in batch_sizes:
        c = cfg.replace(global_batch_size=b)
        timed_run(data, c, device, 2, phases=False)  # allocator and thread-pool warm-up for this shape
        r = timed_run(data, c, device, max(min_steps, samples_per_point // b), phases=False)
        t.add(**{"batch size": b, "steps": r.steps, "samples/s": round(r.samples_per_s),
                 "ms/step": 1000 * r.train_time_s / max(1, r.steps)})
    return t


def throughput_comparisons(table: Table, *, noise: float = 0.0) -> list[compare.Comparison]:
    """Samples/s at the largest batch over the smallest and over the one before. Single runs: the interval is a
    resolution, ``noise`` (:func:`pace_noise`), the least speed difference that counts, or the largest factor by which
    a larger batch's step was faster than a smaller one's (the machine's pace moved between them)."""
    rows = [(r["batch size"], r["samples/s"], r["ms/step"]) for r in table.rows]
    if len(rows) < 2:
        return []
    inverted = [a[2] / b[2] - 1 for i, a in enumerate(rows) for b in rows[i + 1:] if b[2] < a[2]]
    resolution = max([noise, compare.SPEED_EFFECT] + inverted)
    (b1, s1, _), smaller = rows[-1], [rows[0]] if len(rows) == 2 else [rows[0], rows[-2]]
    return [compare.ratio(f"samples/s, batch {b1} / batch {b}", [s], [s1], needed=compare.SPEED_EFFECT,
                          resolution=resolution, basis=f"single runs, resolution {resolution:.0%}")
            for b, s, _ in smaller]


@dataclass
class StepProfile:
    """The top operators (``table``) and the phase rows' seconds (host time on a CPU, device time on CUDA)."""

    table: str
    phase_s: dict

    def __str__(self) -> str:
        return self.table


def profile_steps(data: ImplicitData, cfg: TrainConfig, *, steps: int = 20, device=None,
                  sort_by: str | None = None, row_limit: int = 10) -> StepProfile:
    """``torch.profiler`` over a few training steps."""
    data, device = on_device(data, device)  # outside the profile: the dataset's copy is not a training step
    timed_run(data, cfg, device, 3)  # warm-up
    # kineto prints "USDT: ... profiler_start/stop" lines to stderr at its default level; 6 is above its highest
    # (torch 2.13: 5 still prints them). Read when it first starts; a level the user chose is kept
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
        timed_run(data, cfg, device, steps)
    events = prof.key_averages()
    phase_s = {e.key: ((getattr(e, "device_time_total", 0.0) if cuda else 0.0) or e.cpu_time_total) / 1e6
               for e in events if e.key in PHASES}
    table = events.table(sort_by=sort_by or ("cuda_time_total" if cuda else "cpu_time_total"), row_limit=row_limit,
                         max_name_column_width=60)
    return StepProfile(table, phase_s)
