"""What lesson 01 measures about one device's training step once batches come from the device-resident
sampler, as tables and :class:`~course_lib.compare.Comparison` rows (``*_comparisons``); the optimizer step and
torch.compile are :mod:`course_lib.lessons.l01_step`'s.

* :func:`phase_table` -- the baseline run's phases, and the profile's.
* :func:`sgd_comparisons` -- where the lr sweep's plain-SGD run ended against the popularity ranking.
* :func:`pace_table` / :func:`pace_drift_table` -- how steady the baseline's pace was, within the run and in the
  yardstick's bursts around it (the least uncertainty of every paced speedup, :func:`pace_noise`).
* :func:`loader_comparison` -- the data-loading ladder, two passes; :func:`loader_comparisons` pairs them.
* :func:`throughput_vs_batch` -- samples/s per batch size; :func:`throughput_comparisons`.
* :func:`profile_steps` -- ``torch.profiler`` over a few training steps.

Every run is :func:`course_lib.train.train_to_target`'s loop with one setting changed (``TrainConfig.loader``):
the engine the lessons train with.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from ..data.movielens import ImplicitData
from ..hardware import default_device
from .. import compare
from ..data.sampler import time_loading
from ..hardware import usable_cpu_cores
from ..metrics import hr_standard_error
from ..tables import Table
from ..train.engine import PHASES, RunHooks
from ..train.ncf import TrainConfig, TrainResult, make_batches, samples_per_epoch, train_to_target

# --------------------------------------------------------------------------- the bottleneck


def embedding_share(model: torch.nn.Module) -> float:
    """The fraction of ``model``'s parameters in its embedding tables."""
    total = sum(p.numel() for p in model.parameters())
    tables = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    return tables / total if total else 0.0


def profile_phase_shares(profile_rows: dict[str, float]) -> dict[str, float]:
    """Each phase's share of the profiled steps, from the profile's phase rows ({phase: seconds})."""
    total = sum(profile_rows.values())
    return {k: v / total for k, v in profile_rows.items()} if total else {}


def phase_table(result: TrainResult, profile=None) -> Table:
    """The baseline run's phases: each one's share of the training clock and ms per step, and, with ``profile``
    (:class:`StepProfile`), its share of the profiled steps' phase rows (the profile's own percentages are of all
    its self time)."""
    shares = result.clock_shares()
    prof = profile_phase_shares(profile.phase_s) if profile is not None and profile.phase_s else {}
    t = Table(["phase", "share of the training clock", "ms per step", "share of the profiled phase rows"],
              title="The baseline's step, phase by phase")
    for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        sec = result.phase_time_s.get(name, share * result.train_time_s)
        t.add(**{"phase": name, "share of the training clock": f"{share:.0%}",
                 "ms per step": round(1000 * sec / max(1, result.steps), 3),
                 "share of the profiled phase rows": f"{prof[name]:.0%}" if name in prof else "—"})
    return t


def sgd_comparisons(runs, floor_hr: float, *, users: int) -> list[compare.Comparison]:
    """Each plain-SGD run of the lr sweep (:func:`course_lib.sweeps.lr_sweep`) against the popularity ranking: its
    final HR@10 with the evaluation's sampling error over ``users`` users (:func:`course_lib.metrics.hr_standard_error`)
    against ``floor_hr``."""
    return [compare.quantity(f"HR@10, plain SGD lr {r.config['peak_lr']:g} vs popularity", r.final_hr,
                             hr_standard_error(r.final_hr, users), reference=floor_hr, needed=compare.HR_EFFECT,
                             n=f"{users} users", basis="the evaluation's sampling error")
            for r in runs if r.config.get("optimizer") == "sgd"]


def pace_intervals(result: TrainResult, *, min_share: float = 0.1) -> list[tuple[int, int, float]]:
    """The evaluation intervals :func:`pace_table` shows: ``(first step, steps, ms per step)`` for
    every interval of at least ``min_share`` times the longest one's steps. Near the target the loop
    evaluates more often (and can evaluate twice a few steps apart), so its intervals differ in length:
    a 3-step interval's ms per step is mostly the clock's jitter and the evaluation's set-up around it,
    not the training pace, and is left out rather than labelled with another interval's length."""
    steps, times = result.curve.get("step", []), result.curve.get("time_s", [])
    spans = [(s0, s1 - s0, t1 - t0) for s0, s1, t0, t1 in zip(steps, steps[1:], times, times[1:]) if s1 > s0]
    if not spans:
        return []
    longest = max(n for _, n, _ in spans)
    return [(s0, n, 1000 * t / n) for s0, n, t in spans if n >= min_share * longest]


def pace_table(result: TrainResult) -> Table:
    """ms of training clock per step in each of the run's evaluation intervals of comparable length
    (:func:`pace_intervals`). On a shared machine other jobs' load shows up here, and it stretches the time to target
    of the run it hits."""
    t = Table(["first step", "steps", "ms per step", "vs the fastest interval"],
              title="The baseline's pace between evaluations")
    spans = pace_intervals(result)
    fastest = min((ms for _, _, ms in spans), default=None)
    for s0, n, ms in spans:
        t.add(**{"first step": s0, "steps": n, "ms per step": round(ms, 3),
                 "vs the fastest interval": f"{ms / fastest:.2f}x"})
    return t


def pace_drift_table(pace: dict) -> Table:
    """The yardstick's pace around the baseline run (``pace``: :meth:`course_lib.ladder.Pace.finish`'s record): the
    bursts before and after it, the run's own pace where recorded, and what pacing cannot correct in a speedup over
    this baseline (:func:`pace_noise`)."""
    t = Table(["quantity", "value"], title="The yardstick's pace around the baseline run")
    before, after, run = pace.get("before"), pace.get("after"), pace.get("run")
    mean = pace.get("rate") or ((before + after) / 2 if before and after else before)
    rows = [("bursts before (samples/s)", before), ("bursts after (samples/s)", after),
            ("mean: later lessons' reference (samples/s)", mean), ("the run itself (samples/s)", run)]
    for name, value in rows:
        t.add(quantity=name, value=round(value) if value else "—")
    if before and after:
        t.add(quantity="moved within the lesson", value=f"{after / before - 1:+.0%}")
    if run and mean:
        t.add(quantity="the run vs the bursts", value=f"{run / mean - 1:+.0%}")
    t.add(quantity="least uncertainty of a paced speedup", value=f"±{pace_noise(pace):.0%}")
    return t


# --------------------------------------------------------------------------- the data-loading ladder


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


def _loader_pass(data: ImplicitData, c: TrainConfig, run: dict, load_samples: int, train_steps: int) -> dict:
    """One pass of one rung of :func:`loader_comparison`: its first batch's wait, loading alone, and training."""
    device = run["device"]
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
    steady_s = many.train_time_s - one.train_time_s
    # a pass whose 1-step run took longer than its many-step run (a load spike between them) measured nothing:
    # None, not the 1e12 samples/s a floor on the difference would give
    return {"first_batch_s": first, "load_sps": sps,
            "train_sps": (many.samples - one.samples) / steady_s if steady_s > 0 else None}


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
    between two rungs can be paired pass by pass (:func:`loader_comparisons`). ``comp["rows"]`` holds
    the rungs; the first and the last (per-sample DataLoader, device sampler) also under their old
    keys, with their ratios; ``comp["train_steps"]`` the steps each training rate was timed over. Worker
    processes (``workers`` of them) are shut down after each rung, also when the measurement is interrupted.
    ``pin_memory`` is measured on CUDA only."""
    cfg = cfg or TrainConfig()
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)
    base = {"loader": "device", "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
            "persistent_workers": False}
    rungs = [(name, cfg.replace(**{**base, **change})) for name, change in loader_rungs(workers)]
    # pinned memory only speeds up a copy to a GPU: on a CPU its rung would measure its neighbour again
    rows = [{"rung": name, "measured": device.type == "cuda" or name != "+ pin_memory", "passes": [{}, {}]}
            for name, _ in rungs]
    run = dict(device=device, progress="none", hooks=RunHooks(evaluate_points=False, time_phases=False))
    train_to_target(data, cfg.replace(**base, max_steps=5), **run)  # the process's first steps pay one-time costs
    for p, order in enumerate((list(zip(rows, rungs)), list(zip(rows, rungs))[::-1])):
        for row, (_, c) in order:
            if row["measured"]:
                row["passes"][p] = _loader_pass(data, c, run, load_samples, train_steps)
    for row in rows:
        if row["measured"]:
            for key in ("load_sps", "train_sps"):
                row[key] = max((q[key] for q in row["passes"] if q[key] is not None), default=math.nan)
            row["first_batch_s"] = min(q["first_batch_s"] for q in row["passes"])
    first, last = rows[0], rows[-1]
    out = {"batch_size": cfg.global_batch_size, "device": str(device), "workers": workers,
           "cpu_cores": usable_cpu_cores(), "epoch_samples": samples_per_epoch(data, cfg), "rows": rows,
           "train_steps": train_steps,
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
        sps = lambda x: round(x) if x == x else "not measured"  # noqa: E731 (both passes hit a load spike)
        # a ratio to or from a rate not measured (nan) is not measured either, not "nanx"
        vs = lambda x, ref: f"{x / ref:.2f}x" if x == x and ref == ref else "not measured"  # noqa: E731
        t.add(rung=r["rung"], **{"first batch (ms, per epoch)": round(1000 * r["first_batch_s"], 1),
                                 "loading (samples/s)": sps(r["load_sps"]),
                                 "loading vs first": vs(r["load_sps"], first["load_sps"]),
                                 "training (samples/s)": sps(r["train_sps"]),
                                 "training vs first": vs(r["train_sps"], first["train_sps"])})
    return t


def _pass_ratio(question: str, a: dict, b: dict, key: str, *, higher_is_better: bool = True
                ) -> compare.Comparison | None:
    """Rung ``a`` over rung ``b`` on ``key`` (a rate, or with ``higher_is_better`` False a wait), paired pass by pass
    (:func:`loader_comparison` runs the ladder twice, the second time in reverse); None where fewer than two passes
    measured both."""
    pairs = [(pb[key], pa[key]) for pa, pb in zip(a["passes"], b["passes"]) if pa.get(key) and pb.get(key)]
    if len(pairs) < 2:
        return None
    ref, other = zip(*pairs) if higher_is_better else zip(*[(y, x) for x, y in pairs])
    return compare.paired_ratio(question, ref, other, needed=compare.SPEED_EFFECT, basis=f"{len(pairs)} passes")


def loader_comparisons(comp: dict) -> list[compare.Comparison]:
    """What the data-loading ladder decides, each a rung over another paired pass by pass: loading and training at
    the best DataLoader rung and with the device-resident sampler over the per-sample DataLoader, the device sampler
    over the best DataLoader rung, the first worker rung over none, and persistent workers over the rung before
    them (the wait for an epoch's first batch, shorter is higher, and training)."""
    rows = [r for r in comp["rows"] if r["measured"]]
    first, device = rows[0], rows[-1]
    known = lambda x: x if x == x else -math.inf  # noqa: E731 (a rung no pass measured ranks last)
    best = {key: max(rows[:-1], key=lambda r: known(r[key])) for key in ("load_sps", "train_sps")}
    plan = [("loading", "load_sps", best["load_sps"], first), ("loading", "load_sps", device, first),
            ("training", "train_sps", best["train_sps"], first), ("training", "train_sps", device, best["train_sps"]),
            ("loading", "load_sps", rows[1], first), ("training", "train_sps", rows[1], first)]
    names = [r["rung"] for r in rows]
    if "+ persistent_workers" in names:
        i = names.index("+ persistent_workers")
        plan += [("first-batch wait", "first_batch_s", rows[i], rows[i - 1]),
                 ("training", "train_sps", rows[i], rows[i - 1])]
    out = []
    for what, key, a, b in plan:
        if a is not b:
            c = _pass_ratio(f"{what}, {a['rung'].lstrip('+ ')} / {b['rung'].lstrip('+ ')}", a, b, key,
                            higher_is_better=key != "first_batch_s")
            out += [c] if c else []
    return out


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
                        hooks=RunHooks(evaluate_points=False, time_phases=False))
        r = train_to_target(data, cfg.replace(global_batch_size=b, max_steps=steps), device=device, progress="none",
                            hooks=RunHooks(evaluate_points=False, time_phases=False))
        t.add(**{"batch size": b, "steps": r.steps, "samples/s": round(r.samples_per_s),
                 "ms/step": 1000 * r.train_time_s / max(1, r.steps)})
    return t


def pace_noise(pace: dict) -> float:
    """The least uncertainty (a fraction) of a ratio of two timings taken at different moments in lesson 01: what
    :func:`pace_drift_table` shows for the speedups over the baseline (:func:`course_lib.ladder.pace_uncertainty`
    of the yardstick's record, ``pace``: :meth:`course_lib.ladder.Pace.finish`'s), 0 when it was timed once only."""
    from ..ladder import pace_uncertainty

    if not pace.get("before") or not pace.get("after"):
        return 0.0
    return pace_uncertainty({"pace": {**pace, "rate": pace.get("rate") or (pace["before"] + pace["after"]) / 2}})


# One timed run per batch size: where the yardstick timed no movement, a ratio of two of them is still no finer
# than the smallest speed difference that counts.
SINGLE_RUN_RESOLUTION = compare.SPEED_EFFECT


def throughput_comparisons(table: Table, *, noise: float = 0.0) -> list[compare.Comparison]:
    """Samples/s of a :func:`throughput_vs_batch` table: the largest batch over the smallest, and over the batch
    before it (is samples/s still growing at the largest batch?). Each point is one run at its own moment, so the
    interval is a resolution: ``noise`` (:func:`pace_noise`, the yardstick's movement in this lesson), at least
    :data:`SINGLE_RUN_RESOLUTION`, or the largest factor by which a larger batch's step took less time than a
    smaller one's (the same work and more cannot take less time: the machine's pace moved between the runs)."""
    rows = [(r["batch size"], r["samples/s"], r["ms/step"]) for r in table.rows]
    if len(rows) < 2:
        return []
    inverted = [a[2] / b[2] for i, a in enumerate(rows) for b in rows[i + 1:] if b[2] < a[2]]
    resolution = max([noise, SINGLE_RUN_RESOLUTION] + [x - 1 for x in inverted])
    basis = f"one run per batch; resolution {resolution:.0%}"
    (b0, s0, _), (bp, sp, _), (b1, s1, _) = rows[0], rows[-2], rows[-1]
    pairs = [(b0, s0)] + ([(bp, sp)] if bp != b0 else [])
    return [compare.ratio(f"samples/s, batch {b1} / batch {b}", [s], [s1], needed=compare.SPEED_EFFECT,
                          resolution=resolution, basis=basis) for b, s in pairs]


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
    run = dict(device=device, progress="none", hooks=RunHooks(evaluate_points=False, time_phases=True))
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
