"""What lesson 01 measures about one device's training step once batches come from the device-resident
sampler, as tables and :class:`~course_lib.compare.Comparison` rows (``*_comparisons``).

* :func:`phase_table` -- the baseline run's phases, and the profile's.
* :func:`sgd_comparisons` -- where the lr sweep's plain-SGD run ended against the popularity ranking.
* :func:`pace_table` / :func:`pace_drift_table` -- how steady the baseline's pace was, within the run and in the
  yardstick's bursts around it (the least uncertainty of every paced speedup, :func:`pace_noise`).
* :func:`loader_comparison` -- the data-loading ladder, two passes; :func:`loader_comparisons` pairs them.
* :func:`throughput_vs_batch` -- samples/s per batch size; :func:`throughput_comparisons`.
* :func:`optimizer_comparison` -- the optimizer phase and the whole step for dense Adam's three implementations
  and SparseAdam tables, in paired repeats; :func:`optimizer_comparisons`.
* :func:`lazy_adam_accuracy` -- SparseAdam ("lazy" Adam) against dense Adam after the same budget;
  :func:`accuracy_comparisons` (the same steps, and the same seconds).
* :func:`compile_comparison` -- eager against ``torch.compile`` steps, the one-off compile time apart;
  :func:`compile_comparisons`, and :func:`payback_steps` where the saving is resolved.

Every run is :func:`course_lib.train.train_to_target`'s loop with one setting changed
(``TrainConfig.adam_impl``, ``sparse_embeddings``, ``compile``, ``loader``): the engine the lessons train with.
"""

from __future__ import annotations

import math
import statistics

import torch

from ..data.movielens import ImplicitData
from ..hardware import default_device
from .. import compare
from ..metrics import hr_standard_error
from ..optim import resolved_adam_impl
from ..tables import Table
from ..train.engine import RunHooks
from ..train.ncf import TrainConfig, TrainResult, build_model, make_optimizer, samples_per_epoch, train_to_target
import os
from dataclasses import dataclass
from torch.profiler import ProfilerActivity, profile
from ..data.sampler import time_loading
from ..hardware import usable_cpu_cores
from ..train.engine import PHASES
from ..train.ncf import make_batches

OPTIMIZER_VARIANTS = (
    ("dense Adam, for-loop", {"adam_impl": "for-loop"}),
    ("dense Adam, foreach", {"adam_impl": "foreach"}),
    ("dense Adam, fused", {"adam_impl": "fused"}),
    ("SparseAdam tables + Adam", {"sparse_embeddings": True}),
)


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else default_device()


def _timed_run(data: ImplicitData, cfg: TrainConfig, device, steps: int) -> TrainResult:
    return train_to_target(data, cfg.replace(max_steps=steps), device=device, progress="none",
                           hooks=RunHooks(evaluate_points=False, time_phases=True))


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


# --------------------------------------------------------------------------- the optimizer step


def optimizer_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, samples_per_point: int = 25_600,
                         min_steps: int = 8, repeats: int = 3, variants=OPTIMIZER_VARIANTS, device=None) -> dict:
    """The optimizer phase and the whole step, per batch size and Adam variant (``variants``: names and
    the ``TrainConfig`` changes). Each repeat runs every point once, back to back (every other repeat in
    reverse order), so each variant has
    a *paired* ratio to the baseline's implementation per repeat (:func:`paired_speedup`);
    every point also runs once untimed first (its shapes' allocations, the optimizer's state).

    Returns ``{"rows": [...], "baseline_impl": ..., "device": ..., "repeats": ...}``; a row has the
    batch, the variant, ``optimizer_ms`` and ``step_ms`` per step (medians over the repeats) and
    ``optimizer_ratios`` / ``step_ratios`` (the baseline's time over this variant's, per repeat)."""
    device = _device(device)
    data = data.to(device)
    base = cfg.replace(optimizer="adam", adam_impl="auto", sparse_embeddings=False, compile="none")
    baseline_impl = resolved_adam_impl(make_optimizer(build_model(data, base).to(device), base))
    baseline_name = f"dense Adam, {baseline_impl}"
    if baseline_name not in [name for name, _ in variants]:
        raise ValueError(f"the variants must include the baseline's implementation, {baseline_name!r}")
    points = [(b, name, base.replace(global_batch_size=b, **changes))
              for b in batch_sizes for name, changes in variants]
    steps = {b: max(min_steps, samples_per_point // b) for b in batch_sizes}
    for b, _, c in points:
        _timed_run(data, c, device, 2)
    runs = {(b, name): [] for b, name, _ in points}  # per repeat: (optimizer s, step s) per step
    for rep in range(repeats):
        for b, name, c in points if rep % 2 == 0 else points[::-1]:  # alternate: a drifting load favours no point
            r = _timed_run(data, c, device, steps[b])
            runs[(b, name)].append((r.phase_time_s["optimizer"] / r.steps, r.train_time_s / r.steps))
    rows = []
    for b, name, _ in points:
        opt, step = zip(*runs[(b, name)])
        ref_opt, ref_step = zip(*runs[(b, baseline_name)])
        rows.append({"batch size": b, "variant": name, "steps": steps[b], "optimizer_ms": 1000 * statistics.median(opt),
                     "step_ms": 1000 * statistics.median(step), "baseline": name == baseline_name,
                     "optimizer_ratios": [r / x for r, x in zip(ref_opt, opt)],
                     "step_ratios": [r / x for r, x in zip(ref_step, step)]})
    return {"rows": rows, "baseline_impl": baseline_impl, "device": str(device), "repeats": repeats}


def paired_speedup(question: str, ratios: list[float], *, basis: str = "") -> compare.Comparison:
    """A speedup from paired repeats (``ratios``: the reference's time over the other's, one per repeat run back to
    back): :func:`course_lib.compare.paired_ratio`, above 1 where the other is faster."""
    return compare.paired_ratio(question, [1.0] * len(ratios), ratios, needed=compare.SPEED_EFFECT,
                                basis=basis or f"{len(ratios)} paired repeats")


def _ratio(ref_ms: float, ms: float) -> str:
    return f"{ref_ms / ms:.2f}x"


def optimizer_table(comp: dict) -> Table:
    t = Table(["batch size", "Adam", "optimizer (ms/step)", "step (ms/step)", "optimizer share",
               "optimizer speedup", "step speedup"],
              title=f"The optimizer step, median of {comp['repeats']} paired runs on {comp['device']} "
                    f"(speedup: over dense Adam, {comp['baseline_impl']}, the baseline's)")
    for r in comp["rows"]:
        ref = _baseline_row(comp, r["batch size"])
        t.add(**{"batch size": r["batch size"], "Adam": r["variant"] + (" (baseline)" if r["baseline"] else ""),
                 "optimizer (ms/step)": round(r["optimizer_ms"], 3), "step (ms/step)": round(r["step_ms"], 3),
                 "optimizer share": f"{r['optimizer_ms'] / r['step_ms']:.0%}",
                 "optimizer speedup": "—" if r["baseline"] else _ratio(ref["optimizer_ms"], r["optimizer_ms"]),
                 "step speedup": "—" if r["baseline"] else _ratio(ref["step_ms"], r["step_ms"])})
    return t


def _baseline_row(comp: dict, batch: int) -> dict:
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["baseline"])


def optimizer_comparisons(comp: dict) -> list[compare.Comparison]:
    """Each variant against the baseline's implementation (dense Adam, ``comp["baseline_impl"]``) at each batch, from
    :func:`optimizer_comparison`'s paired repeats: the optimizer phase's speedup, then the whole step's."""
    out = []
    for r in comp["rows"]:
        if r["baseline"]:
            continue
        for what, key in (("optimizer", "optimizer_ratios"), ("whole step", "step_ratios")):
            out.append(paired_speedup(f"{what}, {r['variant']} / {comp['baseline_impl']}, batch {r['batch size']}",
                                      r[key]))
    return out


# --------------------------------------------------------------------------- lazy Adam's accuracy


def lazy_adam_accuracy(data: ImplicitData, reference: TrainResult, *, budget_epochs: float, seeds=(0, 1),
                       device=None) -> list[dict]:
    """HR@10 and NDCG@10 after the same budget with dense Adam and with SparseAdam tables, per seed
    (the seed sets the initialization and the sampler), in the setting of the ``reference`` run (the
    baseline): its config with the budget of ``budget_epochs`` and no stop at the target.

    Dense Adam at the reference's own seed *is* the reference up to the budget — the same model,
    batches and steps, so the same numbers (tested) — and is read from its curve when it has an
    evaluation point there; every other run trains here. Each row keeps its curve (step, time, HR)."""
    device = _device(device)
    data = data.to(device)
    ref_cfg = TrainConfig.from_dict(reference.config)
    steps = max(1, round(budget_epochs * reference.steps_per_epoch))
    base = ref_cfg.replace(optimizer="adam", adam_impl="auto", sparse_embeddings=False, compile="none",
                           stop_at_target=False, max_steps=steps)
    rows = []
    for seed in seeds:
        for name, changes in (("dense Adam", {}), ("SparseAdam tables + Adam", {"sparse_embeddings": True})):
            c = base.replace(seed=seed, **changes)
            curve = reference.curve
            if c == ref_cfg.replace(stop_at_target=False, max_steps=steps) and steps in curve["step"]:
                i = curve["step"].index(steps)  # the reference run, cut at the budget
                row = {"hr": curve["hr"][i], "ndcg": curve["ndcg"][i], "train_s": curve["time_s"][i],
                       "from": "the baseline run",
                       "curve": {k: curve[k][:i + 1] for k in ("step", "time_s", "hr")}}
            else:
                r = train_to_target(data, c, device=device, progress="none")
                row = {"hr": r.final_hr, "ndcg": r.final_ndcg, "train_s": r.train_time_s, "from": "trained here",
                       "curve": {k: r.curve[k] for k in ("step", "time_s", "hr")}}
            rows.append({"optimizer": name, "seed": seed, "steps": steps, "epochs": steps / reference.steps_per_epoch,
                         "users": data.num_users, **row})
    return rows


HR_DIGITS = 4  # the accuracy table's HR@10 and NDCG@10 decimals: a point of HR@10 is 0.01


def accuracy_table(rows: list[dict]) -> Table:
    t = Table(["optimizer", "seed", "steps", "epochs", "HR@10", "NDCG@10", "training (s, as run)", "run"],
              title="Lazy Adam (SparseAdam tables) against dense Adam: the same budget, two seeds")
    for r in rows:
        t.add(
            optimizer=r["optimizer"],
            seed=r["seed"],
            steps=r["steps"],
            epochs=round(r["epochs"], 3),
            run=r["from"],
            **{
                "HR@10": round(r["hr"], HR_DIGITS),
                "NDCG@10": round(r["ndcg"], HR_DIGITS),
                "training (s, as run)": round(r["train_s"], 2),
            },
        )
    return t


def step_times(comp: dict, batch: int) -> dict[str, float]:
    """ms per step of dense Adam (the baseline's implementation) and of SparseAdam tables at ``batch``,
    from :func:`optimizer_comparison`'s paired runs: the names :func:`lazy_adam_accuracy` uses."""
    rows = [r for r in comp["rows"] if r["batch size"] == batch]
    dense = next(r for r in rows if r["baseline"])
    lazy = next(r for r in rows if r["variant"].startswith("SparseAdam"))
    return {"dense Adam": dense["step_ms"], "SparseAdam tables + Adam": lazy["step_ms"]}


def _hr_estimate(hrs: list[float], users: int) -> tuple[float, float]:
    """The mean HR@10 of a few seeds and its standard error: the seeds' spread, and at least the evaluation's
    sampling error over ``users`` users (one evaluation's own noise, which two seeds can underestimate)."""
    mean = statistics.mean(hrs)
    spread = statistics.stdev(hrs) if len(hrs) > 1 else 0.0
    return mean, max(spread, hr_standard_error(mean, users)) / math.sqrt(len(hrs))


def accuracy_comparisons(rows: list[dict], comp: dict | None = None, batch: int | None = None
                         ) -> list[compare.Comparison]:
    """Lazy Adam (SparseAdam tables) against dense Adam (:func:`lazy_adam_accuracy`'s rows): HR@10 after the same
    steps; with ``comp`` (:func:`optimizer_comparison`) and ``batch``, also the whole step's speedup there (what the
    budget costs on the clock) and HR@10 after the same seconds: the cheaper optimizer at the budget against the
    other's curves at those seconds (:func:`step_times`)."""
    by = {}
    for r in rows:
        by.setdefault(r["optimizer"], []).append(r)
    (dense_name, dense), (lazy_name, lazy) = by.items()
    users, df = rows[0]["users"], len(dense) + len(lazy) - 2
    d, l_ = _hr_estimate([r["hr"] for r in dense], users), _hr_estimate([r["hr"] for r in lazy], users)
    n = f"{len(dense)}/{len(lazy)} seeds"
    out = [compare.difference(f"HR@10, lazy - dense Adam, same {rows[0]['steps']} steps", *d, *l_,
                              needed=compare.HR_EFFECT, df=df or None, n=n)]
    if comp is None or batch is None:
        return out
    lazy_row = next(r for r in comp["rows"] if r["batch size"] == batch and r["variant"].startswith("SparseAdam"))
    out.append(paired_speedup(f"whole step, {lazy_row['variant']} / dense Adam, batch {batch}",
                              lazy_row["step_ratios"]))
    step_ms = step_times(comp, batch)
    cheap, dear = (lazy_name, dense_name) if step_ms[lazy_name] < step_ms[dense_name] else (dense_name, lazy_name)
    at = rows[0]["steps"] * step_ms[cheap] / step_ms[dear]  # the steps the dearer one runs in the same seconds
    points = [_hr_at_step(r["curve"], at) for r in by[dear] if r.get("curve")]
    if points and None not in points:
        other = _hr_estimate([p[0] for p in points], users)
        mine = d if cheap == dense_name else l_
        out.append(compare.difference(f"HR@10, {cheap} - {dear}, same seconds", *other, *mine,
                                      needed=compare.HR_EFFECT, df=df or None, n=n,
                                      basis="standard error; at the paired step times"))
    return out


def _hr_at_step(curve: dict, step: float) -> tuple[float, int, int] | None:
    """HR@10 on a run's curve at ``step``, on a straight line between the evaluations around it, with their steps;
    None where ``step`` is outside the curve."""
    pts = list(zip(curve["step"], curve["hr"]))
    for (s0, h0), (s1, h1) in zip(pts, pts[1:]):
        if s0 <= step <= s1 and s1 > s0:
            return h0 + (h1 - h0) * (step - s0) / (s1 - s0), s0, s1
    return None


# --------------------------------------------------------------------------- torch.compile


def _compile_counters() -> dict:
    from torch._dynamo.utils import counters

    return {"hit": counters["inductor"]["fxgraph_cache_hit"], "miss": counters["inductor"]["fxgraph_cache_miss"]}


def compile_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, mode: str = "default",
                       backend: str = "inductor", samples_per_point: int = 25_600, min_steps: int = 8,
                       repeats: int = 3, device=None) -> dict:
    """Eager against compiled training steps per batch size (``cfg.compile = mode`` with ``backend``).

    Per batch: the one-off compile time (a compiled run of one step, minus one compiled step), then
    ``repeats`` pairs of eager and compiled runs, back to back, each pair in the other order than the last
    (medians, and the paired ratios). The
    compile caches of this process are cleared first (``torch.compiler.reset``), so the time is a
    real compile; inductor's on-disk cache may still serve its graphs (``cache_hits``: a first
    compile on a fresh machine takes longer). A compiler that fails (no C++ compiler for inductor,
    say) is reported in ``error`` and the comparison stops there: training stays eager."""
    device = _device(device)
    data = data.to(device)
    eager = cfg.replace(compile="none", sparse_embeddings=False)
    compiled = eager.replace(compile=mode, compile_backend=backend)
    torch.compiler.reset()
    out = {"mode": mode, "backend": backend, "device": str(device), "repeats": repeats, "rows": [], "error": None,
           "epoch_samples": samples_per_epoch(data, cfg)}
    for b in batch_sizes:
        steps = max(min_steps, samples_per_point // b)
        e, c = eager.replace(global_batch_size=b), compiled.replace(global_batch_size=b)
        _timed_run(data, e, device, 2)  # eager warm-up at this shape
        before = _compile_counters()
        try:
            first = train_to_target(data, c.replace(max_steps=1), device=device, progress="none",
                                    hooks=RunHooks(evaluate_points=False))
        except Exception as err:  # noqa: BLE001 -- any compiler failure: report it, stay eager
            lines = str(err).strip().splitlines()
            out["error"] = f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
            break
        after = _compile_counters()
        times = {"eager": [], "compiled": []}
        for rep in range(repeats):
            pair = (("eager", e), ("compiled", c))
            for name, setting in pair if rep % 2 == 0 else pair[::-1]:  # alternate which runs first
                r = train_to_target(data, setting.replace(max_steps=steps), device=device, progress="none",
                                    hooks=RunHooks(evaluate_points=False))
                times[name].append(r.train_time_s / r.steps)
        eager_s, compiled_s = (statistics.median(times[k]) for k in ("eager", "compiled"))
        out["rows"].append({"batch size": b, "steps": steps, "eager_ms": 1000 * eager_s,
                            "compiled_ms": 1000 * compiled_s,
                            "compile_s": max(0.0, first.train_time_s - compiled_s),
                            "ratios": [a / x for a, x in zip(times["eager"], times["compiled"])],
                            "cache_hits": after["hit"] - before["hit"], "cache_misses": after["miss"] - before["miss"]})
    return out


def compile_speedup(row: dict) -> compare.Comparison:
    """The compiled step's speedup over eager at one batch (:func:`compile_comparison`'s paired repeats)."""
    return paired_speedup(f"step, compiled / eager, batch {row['batch size']}", row["ratios"])


def payback_steps(row: dict) -> int | None:
    """Steps after which the compile time is earned back by the faster steps (None: the paired repeats did not
    resolve a saving, :func:`compile_speedup`)."""
    saving_s = (row["eager_ms"] - row["compiled_ms"]) / 1000
    if compile_speedup(row).outcome != compare.HIGHER or saving_s <= 0:
        return None
    return math.ceil(row["compile_s"] / saving_s)


def compile_table(comp: dict) -> Table:
    mode = comp["mode"] if comp["backend"] == "inductor" else f"{comp['backend']}: capture only"
    t = Table(["batch size", "eager (ms/step)", "compiled (ms/step)", "step speedup", "compile (s, once)",
               "graphs from inductor's cache", "pays back after (steps)", "(epochs)"],
              title=f"torch.compile ({mode}) on {comp['device']}, median of {comp['repeats']} paired runs")
    for r in comp["rows"]:
        n = payback_steps(r)
        t.add(**{"batch size": r["batch size"], "eager (ms/step)": round(r["eager_ms"], 3),
                 "compiled (ms/step)": round(r["compiled_ms"], 3),
                 "step speedup": _ratio(r["eager_ms"], r["compiled_ms"]),
                 "compile (s, once)": round(r["compile_s"], 2),
                 "graphs from inductor's cache": f"{r['cache_hits']} of {r['cache_hits'] + r['cache_misses']}"
                 if comp["backend"] == "inductor" else "—",
                 "pays back after (steps)": "never" if n is None else n,
                 "(epochs)": "—" if n is None else round(n * r["batch size"] / comp["epoch_samples"], 3)})
    return t


def compile_comparisons(comp: dict) -> list[compare.Comparison]:
    """The compiled step against eager at each batch compiled (none where the compiler failed first)."""
    return [compile_speedup(r) for r in comp["rows"]]


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
