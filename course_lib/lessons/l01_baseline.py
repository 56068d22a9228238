"""What lesson 01 measures about one device's training step once batches come from the device-resident
sampler: the optimizer step and torch.compile's launch overhead. Measurements, tables and readings.

* :func:`optimizer_share` / :func:`bottleneck_reading` — how much of the baseline's training clock
  the optimizer phase took, read from the baseline run and the profile; the embedding tables'
  share of the parameters, read from the model.
* :func:`optimizer_comparison` — the optimizer phase and the whole step at the baseline batch and
  a large batch, for dense Adam's three implementations (for-loop, foreach, fused) and for sparse
  tables with SparseAdam (:mod:`course_lib.optim.adam`), in paired repeats so a busy moment of a
  shared machine does not decide a row; :func:`optimizer_reading` compares each with the
  baseline's implementation, and calls a difference measurable only when every repeat agrees.
* :func:`lazy_adam_accuracy` — SparseAdam is "lazy" Adam, a different optimizer: its HR@10 after
  the same budget as dense Adam's, two seeds each; :func:`accuracy_reading` says whether the
  difference is larger than the seeds' spread and the evaluation's own sampling error.
* :func:`compile_comparison` — eager against ``torch.compile`` steps, the one-off compile time apart
  and counted against the saving ("pays back after N steps"); a compiler that fails is reported
  and the run stays eager. :func:`compile_reading`.

Every run is :func:`course_lib.train.train_to_target`'s loop with one setting changed
(``TrainConfig.adam_impl``, ``sparse_embeddings``, ``compile``): the engine the lessons train with.
"""

from __future__ import annotations

import math
import statistics

import torch

from ..data.movielens import ImplicitData
from ..hardware import default_device
from ..metrics import hr_standard_error, paired_speedup
from ..optim import resolved_adam_impl
from ..tables import Table, cell_text
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


def optimizer_share(result: TrainResult) -> float | None:
    """The optimizer phase's share of a run's timed training phases (None: phases not timed)."""
    phases = {k: v for k, v in result.phase_time_s.items() if k != "evaluation"}
    total = sum(phases.values())
    return phases["optimizer"] / total if total and "optimizer" in phases else None


def profile_phase_shares(profile_rows: dict[str, float]) -> dict[str, float]:
    """Each phase's share of the profiled steps, from the profile's phase rows ({phase: seconds})."""
    total = sum(profile_rows.values())
    return {k: v / total for k, v in profile_rows.items()} if total else {}


def bottleneck_reading(result: TrainResult, model: torch.nn.Module, profile=None) -> str:
    """Which phase of the baseline's step is the bottleneck, from its timed phases and, when given, the
    ``profile`` (:class:`course_lib.bench.StepProfile`: ``phase_s`` and ``steps``)."""
    phases = {k: v for k, v in result.phase_time_s.items() if k != "evaluation"}
    total = sum(phases.values())
    if not total:
        return "phases were not timed in this run (time_phases=False): no bottleneck to read"
    name, sec = max(phases.items(), key=lambda kv: kv[1])
    share = result.clock_shares()  # of the training clock, as the phase table shows them
    per_step = 1000 * phases.get("optimizer", 0.0) / max(1, result.steps)
    # read r10a 01-S1 (tenth full run): "is optimizer (54%); the optimizer phase took 54% (2.92 ms per step)": one
    # share said twice when the largest phase is the optimizer
    text = (f"the largest phase of the baseline's training clock is {name} ({share[name]:.0%})"
            + (f", {per_step:.2f} ms per step" if name == "optimizer" else
               f"; the optimizer phase took {share.get('optimizer', 0.0):.0%} ({per_step:.2f} ms per step)")
            + f", sampling {share.get('sampling', 0.0):.0%}")
    if profile is not None and profile.phase_s:
        prof = profile_phase_shares(profile.phase_s)
        # of the three phase rows' time, not the profile's "CPU total %" (of all its self time: read r3a 01-2,
        # "the optimizer took 52%" over a profile row of 50.18%)
        text += (f"; in the {profile.steps} profiled steps the optimizer took {prof.get('optimizer', 0.0):.0%} and "
                 f"sampling {prof.get('sampling', 0.0):.0%} of the phase rows' time (the profile's own percentages "
                 "are of all its self time)")
        if prof.get("sampling", 0.0) > 2 * share.get("sampling", 0.0) + 0.02:
            text += (" — sampling's share is larger, because the profiled run starts an epoch: its shuffle, paid "
                     f"once per {result.steps_per_epoch} steps in a run, falls into {profile.steps} steps here, so the "
                     "run's own shares are the ones to go by")
    optimizer = {"adam": "Adam", "sgd": "SGD", "lars": "LARS", "lamb": "LAMB"}.get(result.config.get("optimizer"),
                                                                                  "optimizer")
    text += (f". The embedding tables hold {embedding_share(model):.0%} of the parameters, and a dense {optimizer} "
             "step reads and writes every row of them at every step, whichever rows the batch used")
    return text


def sgd_reading(runs, floor_hr: float, *, users: int) -> str:
    """Where the lr sweep's plain-SGD run ended against the popularity ranking (read r8a 01-3, eighth full run: the
    markdown's "the model sits at popularity level for a long time" and lesson 02's "Lesson 01's sweep shows plain SGD
    stuck at the floor" were fixed text over a run that ended at HR@10 0.3907 against the floor's 0.3929): level
    with it within twice the evaluation's sampling error over ``users`` users, below it, or above it. ``runs``: the
    sweep's results (:func:`course_lib.sweeps.lr_sweep`), HR@10 as its table prints them (four decimals)."""
    sgd = [r for r in runs if r.config.get("optimizer") == "sgd"]
    others = [r for r in runs if r.config.get("optimizer") != "sgd"]
    if not sgd:
        return "no plain-SGD run in this sweep: nothing to compare with the popularity ranking"
    noise = 2 * hr_standard_error(floor_hr, users)
    parts = []
    for r in sgd:
        hr = round(r.final_hr, HR_DIGITS)
        diff = hr - round(floor_hr, HR_DIGITS)
        where = ("level with" if abs(diff) <= noise else "below" if diff < 0 else "above")
        parts.append(f"plain SGD (lr {r.config['peak_lr']:g}, momentum {r.config.get('momentum', 0):g}) ended its "
                     f"{r.epochs:.2g} epoch at HR@10 {hr:.4f}, {where} the popularity ranking's {floor_hr:.4f} (a "
                     f"difference of {diff:+.4f} against twice the evaluation's sampling error, {noise:.4f})"
                     + (": it learned more than the items' popularity" if where == "above" else ""))
    text = "; ".join(parts)
    if others:
        best = max(others, key=lambda r: r.final_hr)
        text += (f"; the best {best.config.get('optimizer', '')} run reached {round(best.final_hr, HR_DIGITS):.4f} "
                 "in the same budget")
    return text


def pace_intervals(result: TrainResult, *, min_share: float = 0.1) -> list[tuple[int, int, float]]:
    """The evaluation intervals :func:`pace_reading` compares: ``(first step, steps, ms per step)`` for
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


def pace_drift_reading(pace: dict) -> str:
    """What the yardstick's own movement during lesson 01 means for every speedup quoted over the baseline
    (#37: the baseline's pace moved 11-39 % between its two measurements in the full runs of 2026-12-01, and
    lesson 01 did not say so). ``pace``: :meth:`course_lib.ladder.Pace.finish`'s record. Pacing puts later
    rungs at the mean of the two measurements; the movement within the lesson is what it cannot correct, so
    it is the least uncertainty of every paced speedup (each rung adds its own lesson's movement), and it sets
    the significant figures the ladder shows (:func:`course_lib.ladder.speedup_figures`)."""
    from ..ladder import run_off_pace, speedup_figures

    before, after = pace.get("before"), pace.get("after")
    if not before or not after:
        return "the yardstick's pace was timed once only: the ladder cannot say how far it moved during this lesson"
    moved = after / before - 1
    mean = pace.get("rate") or (before + after) / 2  # the ladder's reference: Pace.rate, the mean
    # read r7a 01-1 (seventh full run): "47,605 samples/s before its runs" for bursts timed after the lesson's lr sweep
    # (five runs) and right after the baseline, before its other cells: a record with the run's own pace
    # (Pace.finish(run=...)) is of bursts around that run, not around the lesson's runs
    span = ("across the baseline run ({} samples/s in the bursts before it, {} after)" if pace.get("run") else
            "during this lesson ({} samples/s before its runs, {} after)")
    text = (f"the yardstick's pace moved {moved:+.0%} " + span.format(f"{before:,.0f}", f"{after:,.0f}")
            + f"; later lessons put their times at the mean, {mean:,.0f} samples/s")
    # read r5a 01-1 (fifth full run): "+1% ... uncertain by at least ±1% ... 2 significant figures" under a baseline
    # that trained at 49,592 samples/s, -47% from the bursts around it: the ladder then showed 17x (±34%)
    off = run_off_pace({**pace, "rate": mean})
    uncertainty = pace_noise({**pace, "rate": mean})
    if off is not None and abs(off) > abs(moved):
        # no cause named: no cell measured one (read r3a 01-3's rule for the pace reading)
        text += (f". But the baseline run itself trained at {pace['run']:,.0f} samples/s, {off:+.0%} from that pace: "
                 f"the same step ran {'slower' if off < 0 else 'faster'} during the run than in the bursts around it "
                 "(on a shared machine, other jobs' load; no cell here measured which)")
    if uncertainty < 0.005:
        return text + (": the machine held its pace, so pacing adds no uncertainty of this lesson's to the speedups "
                       "over this baseline (each later rung still adds its own lesson's movement)")
    figures = speedup_figures(uncertainty)
    what = "a movement within a lesson" if uncertainty == abs(moved) else "a pace that differed during the run"
    # read r7a 02-1 (seventh full run): "to 1 significant figure" over a ladder that showed '+sqrt scaling' at
    # "11x (±86%)": speedup_cell writes a speedup of 10**figures or more as a whole number, not in e-notation
    return text + (f". Pacing cannot correct {what}, so every speedup over this baseline is "
                   f"uncertain by at least ±{uncertainty:.0%} from this lesson alone (each rung adds its own lesson's "
                   f"movement): the ladder shows such speedups to {figures} significant figure"
                   f"{'s' if figures > 1 else ''}, or as a whole number from {_WHOLE_FROM.get(figures, 'a thousand')} "
                   "up, and two rungs closer than their lessons' movements added count as no measurable difference")


_WHOLE_FROM = {1: "ten", 2: "a hundred"}  # speedup_cell: from 10 ** figures up, a whole number (11x, not 1e+01x)


def pace_reading(result: TrainResult) -> str:
    """How steady the run's training pace was: ms of training clock per step in each evaluation interval
    (:func:`pace_intervals`: intervals of comparable length, each labelled with its own). On a shared
    machine other jobs' load shows up here, and it stretches the time to target of the run it hits."""
    spans = pace_intervals(result)
    if len(spans) < 2:
        return "fewer than two comparable evaluation intervals: no pace to compare"
    per = [ms for _, _, ms in spans]
    lengths = sorted({n for _, n, _ in spans})
    length = f"{lengths[0]} steps" if len(lengths) == 1 else f"{lengths[0]} to {lengths[-1]} steps"
    lo, hi = min(per), max(per)
    text = (f"the {len(per)} evaluation intervals of {length} ran at {lo:.2f} to {hi:.2f} ms per step "
            f"(the slowest {hi / lo:.2f}x the fastest)")
    if hi / lo > 1.25:
        fastest = sum(n for _, n, _ in spans) * lo / 1000
        ran = sum(n * ms for _, n, ms in spans) / 1000
        text += (f": the same steps at the fastest interval's pace would have taken {fastest:.1f} s instead of "
                 f"{ran:.1f} s. The same step ran at different paces within one run, so something outside it "
                 "moved (on a shared machine, other jobs' load, or more threads than free cores; no cell here "
                 "measured which): compare times measured side by side")
    else:
        text += ": a steady pace"
    return text


# --------------------------------------------------------------------------- the optimizer step


def optimizer_comparison(data: ImplicitData, cfg: TrainConfig, batch_sizes, *, samples_per_point: int = 25_600,
                         min_steps: int = 8, repeats: int = 3, variants=OPTIMIZER_VARIANTS, device=None) -> dict:
    """The optimizer phase and the whole step, per batch size and Adam variant (``variants``: names and
    the ``TrainConfig`` changes). Each repeat runs every point once, back to back (every other repeat in
    reverse order), so each variant has
    a *paired* ratio to the baseline's implementation per repeat (:func:`course_lib.metrics.paired_speedup`);
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


def table_speedup(ref_ms: float, ms: float, ratios: list[float]) -> tuple[float, bool]:
    """``(ratio, measurable)``: the speedup a table shows is the ratio of the medians in its own ms
    columns (``ref_ms / ms``), so a reader can check it; whether it counts is decided by the paired
    repeats (:func:`course_lib.metrics.paired_speedup`: every repeat on the same side of 1 as it)."""
    ratio = ref_ms / ms
    median, measurable = paired_speedup(ratios)
    return ratio, measurable and (median > 1) == (ratio > 1)


def _ratio_cell(ref_ms: float, ms: float, ratios: list[float]) -> str:
    ratio, measurable = table_speedup(ref_ms, ms, ratios)
    return f"{ratio:.2f}x" + ("" if measurable else " (within noise)")


def _ratio_text(ref_ms: float, ms: float, ratios: list[float]) -> str:
    ratio, measurable = table_speedup(ref_ms, ms, ratios)
    if not measurable:
        return f"no measurable difference ({ratio:.2f}x)"
    return f"{ratio:.2f}x faster" if ratio > 1 else f"{1 / ratio:.2f}x slower"


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
                 "optimizer speedup": "—" if r["baseline"] else _ratio_cell(ref["optimizer_ms"], r["optimizer_ms"],
                                                                            r["optimizer_ratios"]),
                 "step speedup": "—" if r["baseline"] else _ratio_cell(ref["step_ms"], r["step_ms"],
                                                                       r["step_ratios"])})
    return t


def _baseline_row(comp: dict, batch: int) -> dict:
    return next(r for r in comp["rows"] if r["batch size"] == batch and r["baseline"])


def _ladder_clause(comp: dict, dense_faster: list[dict]) -> str:
    """What a faster dense Adam would do to the ladder's ratios, read from the optimizer table: every rung pays
    about the same optimizer step per step, but its share of the step falls with the batch, so the whole-step
    gain at the baseline's batch (the smallest) and at the largest batch differ (read r4a 01-1: "every rung pays
    the same optimizer step, so the ladder's ratios are not moved by it" over fused's 2.48x at batch 256 and
    1.01x at 16384)."""
    batches = sorted({r["batch size"] for r in comp["rows"]})
    lo_b, hi_b = batches[0], batches[-1]
    small = [r for r in dense_faster if r["batch size"] == lo_b] or dense_faster
    name = max(small, key=lambda r: _baseline_row(comp, r["batch size"])["step_ms"] / r["step_ms"])["variant"]
    row = {b: next((r for r in comp["rows"] if r["batch size"] == b and r["variant"] == name), None) for b in batches}
    if lo_b == hi_b or row[lo_b] is None or row[hi_b] is None:
        return ""
    ref = {b: _baseline_row(comp, b) for b in (lo_b, hi_b)}
    gain = {b: ref[b]["step_ms"] / row[b]["step_ms"] for b in (lo_b, hi_b)}
    share = {b: ref[b]["optimizer_ms"] / ref[b]["step_ms"] for b in (lo_b, hi_b)}
    # read r7a 01-2 (seventh full run): "fused made the whole step 1.81x faster at batch 256 and 1.21x at 16384" over a
    # table whose 16384 cell reads "1.21x (within noise)", in a reading that said "no measurable difference (1.21x)"
    # of it: a gain the paired repeats did not resolve is said as such, and the ladder's factor without it too
    resolved = {b: table_speedup(ref[b]["step_ms"], row[b]["step_ms"], row[b]["step_ratios"])[1] for b in (lo_b, hi_b)}
    noise = {b: "" if resolved[b] else " (within the repeats' noise)" for b in (lo_b, hi_b)}
    # r7a (seventh full run, seen in 01 cells 19 and 23): "Every such rung pays about the same dense optimizer step
    # (3.69 ms at batch 256, ...)" while the baseline run itself timed 2.48 ms per step (cell 19): the ms are these
    # paired runs', and "about the same" is said only where the two batches' steps are within 25 % of each other
    opt_ms = (ref[lo_b]["optimizer_ms"], ref[hi_b]["optimizer_ms"])
    alike = max(opt_ms) <= 1.25 * min(opt_ms)
    pays = ("Every such rung pays about the same dense optimizer step whatever its batch" if alike else
            "Such rungs pay a dense optimizer step that " + ("grew" if opt_ms[1] > opt_ms[0] else "fell")
            + " with the batch here")
    said = (f". {pays} (in these paired runs {opt_ms[0]:.2f} ms at batch {lo_b}, {opt_ms[1]:.2f} at {hi_b}), "
            f"{'but it' if alike else 'and it'} is {share[lo_b]:.0%} of a step at batch "
            f"{lo_b} and {share[hi_b]:.0%} at {hi_b}: {name.split(', ')[1]} made the whole step "
            f"{gain[lo_b]:.2f}x faster at batch {lo_b}{noise[lo_b]} and {gain[hi_b]:.2f}x at {hi_b}{noise[hi_b]}")
    moved = gain[lo_b] / gain[hi_b]
    # the factor again with the unresolved gain taken as none (at most one is: the variant is in dense_faster)
    unresolved = [b for b in (lo_b, hi_b) if not resolved[b]]
    none = {b: 1.0 if b in unresolved else gain[b] for b in (lo_b, hi_b)}
    alt = _ladder_factor(none[lo_b] / none[hi_b])
    other = (f"; {alt} if the gain at batch {unresolved[0]} is none" if unresolved and alt != _ladder_factor(moved)
             else "")
    # read r10a 01-C1 (tenth full run): "fused made the whole step 2.00x faster at batch 256 and 1.26x at 16384" where
    # its optimizer phase saved 2.07 and 1.53 ms of steps that fell 2.74 and 8.18 ms: the factor again from the part
    # the implementation certainly owns, its optimizer phase's saving
    if any(_outside_optimizer(ref[b], row[b]) for b in (lo_b, hi_b)):
        own = {b: _optimizer_explained(ref[b], row[b]) for b in (lo_b, hi_b)}
        other += (f"; from its optimizer phase's saving alone ({own[lo_b]:.2f}x at batch {lo_b}, {own[hi_b]:.2f}x at "
                  f"{hi_b}) {_ladder_factor(own[lo_b] / own[hi_b])}")
    if moved > 1.05:
        return (said + f", so on it the baseline would gain more than a rung at batch {hi_b}, and the ladder's "
                f"speedups of such rungs would be {_ladder_factor(moved)}{other}")
    if moved < 1 / 1.05:
        return (said + f", so on it a rung at batch {hi_b} would gain more than the baseline, and the ladder's "
                f"speedups of such rungs would be {_ladder_factor(moved)}{other}")
    return said + ", about alike, so the ladder's ratios would barely move" + other


def _optimizer_explained(ref: dict, row: dict) -> float:
    """The whole-step speedup ``row``'s optimizer phase accounts for: the baseline's step with only its optimizer
    phase changed to ``row``'s (the rows :func:`optimizer_table` prints)."""
    return ref["step_ms"] / (ref["step_ms"] - ref["optimizer_ms"] + row["optimizer_ms"])


def _outside_optimizer(ref: dict, row: dict) -> float | None:
    """The ms a dense variant's whole step saved beyond what its optimizer phase saved (negative: lost beyond it),
    where that is more than 5 % of the baseline's step (paired_speedup's min_effect) and the paired repeats resolved
    the whole step's difference; None otherwise, and for a variant that changes more than the optimizer (SparseAdam's
    sparse gradients change backward too). The dense implementations run the same sampling, forward and backward:
    time that moved there is not their arithmetic (read r10a 01-C1, tenth full run: "dense Adam, foreach: optimizer
    no measurable difference (0.95x), whole step 1.14x faster" and fused's "whole step 1.26x faster" at batch 16384,
    where the optimizer was 8 % of the step: at zero cost it could give 1.08x)."""
    if (row["baseline"] or not row["variant"].startswith("dense")
            or not table_speedup(ref["step_ms"], row["step_ms"], row["step_ratios"])[1]):
        return None
    outside = (ref["step_ms"] - row["step_ms"]) - (ref["optimizer_ms"] - row["optimizer_ms"])
    return outside if abs(outside) > 0.05 * ref["step_ms"] else None


def _ladder_factor(moved: float) -> str:
    """How the ladder's speedups of large-batch rungs would move if the baseline's step gained ``moved`` times more."""
    if moved > 1.05:
        return f"about {moved:.1f}x smaller"
    if moved < 1 / 1.05:
        return f"about {1 / moved:.1f}x larger"
    return "about the same"


def optimizer_reading(comp: dict) -> str:
    """What the optimizer comparison shows at each batch, read from the rows :func:`optimizer_table`
    prints: each variant against the baseline's implementation as the ratio of the table's ms columns
    (:func:`table_speedup`), measurable only when every paired repeat agrees (by more than 5 %)."""
    parts = []
    for b in sorted({r["batch size"] for r in comp["rows"]}):
        ref = _baseline_row(comp, b)
        others = [r for r in comp["rows"] if r["batch size"] == b and not r["baseline"]]
        opt = lambda r: (ref["optimizer_ms"], r["optimizer_ms"], r["optimizer_ratios"])  # noqa: E731
        step = lambda r: (ref["step_ms"], r["step_ms"], r["step_ratios"])  # noqa: E731
        said = "; ".join(f"{r['variant']}: optimizer {_ratio_text(*opt(r))}, whole step {_ratio_text(*step(r))}"
                         + (f" (its optimizer phase accounts for {_optimizer_explained(ref, r):.2f}x)"
                            if _outside_optimizer(ref, r) is not None else "")
                         for r in others)
        faster = [r for r in others if table_speedup(*step(r))[1] and table_speedup(*step(r))[0] > 1]
        best = max(faster, key=lambda r: table_speedup(*step(r))[0], default=None)
        # the fastest by the table's ms column, measurable or not (read r3a 01-4: "the fastest whole step: dense
        # Adam, foreach" at 24.79 ms over a fused row of 23.73 ms, whose 1.15x was within the repeats' noise)
        quickest = min(others, key=lambda r: r["step_ms"], default=None)
        if best is None:
            fastest = "no variant made the whole step measurably faster"
        elif quickest is best or quickest["step_ms"] >= ref["step_ms"]:
            fastest = f"the fastest whole step: {best['variant']}"
        else:
            fastest = (f"the largest measurable whole-step gain: {best['variant']} "
                       f"({table_speedup(*step(best))[0]:.2f}x; {quickest['variant']}'s "
                       f"{table_speedup(*step(quickest))[0]:.2f}x is larger, but within the repeats' noise)")
        parts.append(f"at batch {b} the baseline's optimizer (dense Adam, {comp['baseline_impl']}) took "
                     f"{ref['optimizer_ms']:.2f} of {ref['step_ms']:.2f} ms per step "
                     f"({ref['optimizer_ms'] / ref['step_ms']:.0%}); {said}; " + fastest)
    def step_gain(r):
        return table_speedup(_baseline_row(comp, r["batch size"])["step_ms"], r["step_ms"], r["step_ratios"])

    def optimizer_gain(r):
        return table_speedup(_baseline_row(comp, r["batch size"])["optimizer_ms"], r["optimizer_ms"],
                             r["optimizer_ratios"])

    outside = [(r, _outside_optimizer(_baseline_row(comp, r["batch size"]), r)) for r in comp["rows"]]
    outside = [(r, ms) for r, ms in outside if ms is not None]
    if outside:
        moved = "; ".join(f"{r['variant']} at batch {r['batch size']}: {abs(ms):.2f} ms "
                          f"{'more saved' if ms > 0 else 'more lost'}" for r, ms in outside)
        parts.append("the dense implementations run the same sampling, forward and backward and differ only in the "
                     f"optimizer step, yet some whole steps moved more than their optimizer phase did ({moved}): that "
                     "time came off phases they run alike, the machine's movement between the paired runs or the "
                     "implementation's effect on the rest of the step (caches, the allocator), which no cell here "
                     "measured; only the optimizer phase's part is certainly the implementation's")
    # a dense implementation counts as faster only where its own phase, the optimizer step, is measurably faster too
    # (read r10a 01-C1: "although foreach and fused made the whole step measurably faster" over foreach's 0.95x)
    dense_faster = [r for r in comp["rows"] if r["variant"].startswith("dense") and not r["baseline"]
                    and step_gain(r)[1] and step_gain(r)[0] > 1 and optimizer_gain(r)[1] and optimizer_gain(r)[0] > 1]
    if dense_faster:
        # #37 (review 01 #4): a faster implementation of the same update was measured; say what the course keeps
        names = sorted({r["variant"].split(", ")[1] for r in dense_faster})
        # read r6a 01-2 (sixth full run): "every rung of the ladder keep dense Adam" over a ladder whose '+LAMB' rung
        # (lesson 04) ran the course's LAMB: lesson 01 cannot know which rungs will run Adam, so it says which it means
        parts.append(f"the baseline and every rung of the ladder that trains with Adam (a layer-wise rung runs its "
                     f"own optimizer) keep dense Adam, {comp['baseline_impl']} (torch's default here), "
                     f"although {' and '.join(names)} made the whole step measurably faster above"
                     + _ladder_clause(comp, dense_faster) + " (TrainConfig.adam_impl would change it for all of them)")
    sparse = [r for r in comp["rows"] if r["variant"].startswith("SparseAdam")]
    if len(sparse) >= 2:
        lo, hi = sparse[0], sparse[-1]
        gain = lambda r: _baseline_row(comp, r["batch size"])["optimizer_ms"] / r["optimizer_ms"]  # noqa: E731
        why = (": a larger batch looks up more of the rows, so fewer are skipped, and its sparse gradient has more "
               "entries to sort and merge" if gain(hi) < gain(lo) else "")
        parts.append(f"SparseAdam's optimizer speedup went from {gain(lo):.2f}x at batch {lo['batch size']} to "
                     f"{gain(hi):.2f}x at batch {hi['batch size']}{why}")
    # one finding a line (read r9a 01-H1, ninth full run: one 1,500-character line, its verdict "the fastest whole
    # step: dense Adam, fused. at batch 16384 ..." buried mid-line)
    return "\n".join(parts)


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


HR_DIGITS = 4  # the accuracy table's HR@10 and NDCG@10 decimals, the ones its reading computes from


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


def step_difference_resolved(comp: dict, batch: int) -> bool:
    """Whether the paired repeats of :func:`optimizer_comparison` resolved SparseAdam's whole-step difference from
    dense Adam's at ``batch`` (the table's "step speedup" cell without "(within noise)")."""
    lazy = next(r for r in comp["rows"] if r["batch size"] == batch and r["variant"].startswith("SparseAdam"))
    return table_speedup(_baseline_row(comp, batch)["step_ms"], lazy["step_ms"], lazy["step_ratios"])[1]


def accuracy_reading(rows: list[dict], step_ms: dict[str, float] | None = None, *,
                     resolved: bool | None = None) -> str:
    """Whether SparseAdam's HR@10 differs from dense Adam's by more than the noise: the larger of the
    two optimizers' seed ranges and twice the evaluation's binomial standard error
    (sqrt(p (1 - p) / users): each user's hit is a coin with the model's hit rate). With ``step_ms``
    (:func:`step_times`: paired step times), also what the budget costs each on the training clock; with
    ``resolved`` False (:func:`step_difference_resolved`), that those seconds differ by no measurable amount."""
    by = {}
    for r in rows:
        by.setdefault(r["optimizer"], []).append(r)
    (dense_name, dense), (lazy_name, lazy) = by.items()
    # the HR@10 cells accuracy_table prints (read r8a 01-1, eighth full run: "the larger of the seeds' range, 0.0248"
    # and a mean of 0.6123 over dense rows printed 0.6247 and 0.5998, whose range is 0.0249 and mean 0.61225)
    hr = lambda rs: [round(r["hr"], HR_DIGITS) for r in rs]  # noqa: E731
    d_mean, l_mean = statistics.mean(hr(dense)), statistics.mean(hr(lazy))
    users = rows[0]["users"]
    p = (d_mean + l_mean) / 2
    binomial = 2 * hr_standard_error(p, users)
    seed_range = max(max(hr(dense)) - min(hr(dense)), max(hr(lazy)) - min(hr(lazy)))
    noise = max(seed_range, binomial)
    diff = l_mean - d_mean
    text = (
        f"after {rows[0]['steps']} steps ({rows[0]['epochs']:.2f} epochs), HR@10 {d_mean:.4f} with {dense_name} and "
        f"{l_mean:.4f} with {lazy_name} (means of {len(dense)} seeds): a difference of {diff:+.4f} against a noise of "
        f"{noise:.4f} (the larger of the seeds' range, {seed_range:.4f}, and twice the evaluation's sampling error "
        f"over {users} users, {binomial:.4f})"
    )
    if abs(diff) <= noise:
        text += ": no measurable difference at this budget"
    elif diff > 0:
        text += ": lazy Adam is ahead by more than the noise"
    else:
        text += (": lazy Adam is behind by more than the noise, step for step — it is a different optimizer, "
                 "not a faster implementation of Adam")
    if step_ms:
        steps = rows[0]["steps"]
        d_s, l_s = steps * step_ms[dense_name] / 1000, steps * step_ms[lazy_name] / 1000
        text += (f". At the step times measured side by side above ({step_ms[dense_name]:.2f} and "
                 f"{step_ms[lazy_name]:.2f} ms), the budget costs {d_s:.1f} s of training with dense Adam and "
                 f"{l_s:.1f} s with lazy Adam")
        # read by r7a (seventh full run, seen in 01 cell 25): "the budget costs 72.3 s of training with dense Adam
        # and 61.4 s with lazy Adam" from 7.48 and 6.36 ms, a step difference the optimizer table calls "1.18x (within
        # noise)": the seconds are the paired medians times the steps, their difference no more resolved than those
        if resolved is False:
            text += (f", a difference the paired repeats did not resolve (the whole step's "
                     f"{step_ms[dense_name] / step_ms[lazy_name]:.2f}x is within their noise): neither is measurably "
                     "cheaper on the clock")
        elif d_s != l_s:
            text += _same_seconds_clause(by, step_ms, steps, noise, d_mean, l_mean)
    return text


def _hr_at_step(curve: dict, step: float) -> tuple[float, int, int] | None:
    """HR@10 on a run's curve at ``step``, on a straight line between the evaluations around it, with their steps;
    None where ``step`` is outside the curve."""
    pts = list(zip(curve["step"], curve["hr"]))
    for (s0, h0), (s1, h1) in zip(pts, pts[1:]):
        if s0 <= step <= s1 and s1 > s0:
            return h0 + (h1 - h0) * (step - s0) / (s1 - s0), s0, s1
    return None


def _same_seconds_clause(by: dict, step_ms: dict, steps: int, noise: float, d_mean: float, l_mean: float) -> str:
    """Lesson 01's second question, "and after the same number of seconds?" (read r10a 01-H1, tenth full run: the
    reading gave "53.0 s of training with dense Adam and 31.5 s with lazy Adam" and no verdict, while its figure's
    right panel had lazy Adam at 0.57 at 31.5 s and dense Adam near 0.45): the cheaper optimizer's HR@10 at its
    budget against the other's curves at the same seconds (at the paired step times), against the same noise."""
    (dense_name, dense), (lazy_name, lazy) = by.items()
    cheap, dear = ((lazy_name, dense_name) if step_ms[lazy_name] < step_ms[dense_name] else (dense_name, lazy_name))
    at = steps * step_ms[cheap] / step_ms[dear]  # the steps the dearer one runs in the cheaper one's seconds
    points = [_hr_at_step(r["curve"], at) for r in by[dear] if r.get("curve")]
    if not points or any(p is None for p in points):
        return ""
    dear_hr = statistics.mean(p[0] for p in points)
    cheap_hr = l_mean if cheap == lazy_name else d_mean
    short = {dense_name: "dense Adam", lazy_name: "lazy Adam"}
    evals = sorted({p[1] for p in points} | {p[2] for p in points})
    diff = cheap_hr - dear_hr
    verdict = ("no measurable difference on the training clock" if abs(diff) <= noise else
               f"{short[cheap]} is {'ahead' if diff > 0 else 'behind'} by more than the noise on the training clock")
    return (f". In the same {steps * step_ms[cheap] / 1000:.1f} s {short[dear]} runs {at:,.0f} steps, where its curves "
            f"read HR@10 {dear_hr:.4f} (mean of {len(points)} seeds, on a straight line between their evaluations at "
            f"steps {' and '.join(str(s) for s in evals)}) against {short[cheap]}'s {cheap_hr:.4f}: a difference of "
            f"{diff:+.4f} against the same noise ({noise:.4f}): {verdict}")


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


def payback_steps(row: dict) -> int | None:
    """Steps after which the compile time is earned back by the faster steps (None: no measurable saving)."""
    ratio, measurable = table_speedup(row["eager_ms"], row["compiled_ms"], row["ratios"])
    saving_s = (row["eager_ms"] - row["compiled_ms"]) / 1000
    if not (measurable and ratio > 1 and saving_s > 0):
        return None
    return math.ceil(row["compile_s"] / saving_s)


def compile_table(comp: dict) -> Table:
    mode = comp["mode"] if comp["backend"] == "inductor" else f"{comp['backend']}: capture only"
    t = Table(["batch size", "eager (ms/step)", "compiled (ms/step)", "step speedup", "compile (s, once)",
               "graphs from inductor's cache", "pays back after (steps)"],
              title=f"torch.compile ({mode}) on {comp['device']}, median of {comp['repeats']} paired runs")
    for r in comp["rows"]:
        n = payback_steps(r)
        t.add(**{"batch size": r["batch size"], "eager (ms/step)": round(r["eager_ms"], 3),
                 "compiled (ms/step)": round(r["compiled_ms"], 3),
                 "step speedup": _ratio_cell(r["eager_ms"], r["compiled_ms"], r["ratios"]),
                 "compile (s, once)": round(r["compile_s"], 2),
                 "graphs from inductor's cache": f"{r['cache_hits']} of {r['cache_hits'] + r['cache_misses']}"
                 if comp["backend"] == "inductor" else "—",
                 "pays back after (steps)": "never (no saving)" if n is None else n})
    return t


def compile_reading(comp: dict, baseline: TrainResult | None = None) -> str:
    """What the compile comparison shows: the step speedup (measurable when every paired repeat agrees),
    the one-off compile time, and after how many steps (and epochs) it pays back — at the ``baseline``
    run's batch, also against that run's steps to its target (or its whole run when it missed it)."""
    if comp["error"] and not comp["rows"]:
        return (f"torch.compile ({comp['backend']}) failed here, so nothing was compiled and training stays eager: "
                f"{comp['error']}")
    parts = []
    if comp["backend"] != "inductor":
        parts.append(f"the {comp['backend']} backend captures the graph without generating code (the smoke profile's "
                     "choice): these times measure the capture's overhead, not inductor's kernels")
    for r in comp["rows"]:
        n = payback_steps(r)
        # the ms cells as compile_table prints them (read r5a 01-2, fifth full run: "25.71 -> 34.08 ms per step"
        # over a table of 25.7 and 34.09, each rounded once more from the table's own rounding)
        times = f"{cell_text(round(r['eager_ms'], 3))} -> {cell_text(round(r['compiled_ms'], 3))} ms per step"
        if n is None:
            said = _ratio_text(r["eager_ms"], r["compiled_ms"], r["ratios"])
            # read r10a 01-S2 (tenth full run): "compiled steps no measurable difference (0.83x) (7.207 -> 8.692 ms
            # per step)": a verdict that is not a verb of "compiled steps", two parentheses in a row
            said = (f"compiled steps {said} ({times})" if not said.startswith("no measurable") else
                    f"no measurable difference between eager and compiled steps ({said.partition('(')[2][:-1]}: "
                    f"{times})")
            parts.append(f"at batch {r['batch size']}: {said}, so the {r['compile_s']:.1f} s of compiling never pays "
                         "back")
            continue
        epochs = n * r["batch size"] / comp["epoch_samples"]
        said = _ratio_text(r["eager_ms"], r["compiled_ms"], r["ratios"])
        text = (f"at batch {r['batch size']}: compiled steps {said} ({times}); the "
                f"{r['compile_s']:.1f} s of compiling pays back after {n} steps ({epochs:.2g} epochs)")
        if baseline is not None and baseline.config["global_batch_size"] == r["batch size"]:
            steps, what = ((baseline.steps_to_target, "steps to its target") if baseline.reached else
                           (baseline.steps, "steps (it missed its target)"))
            text += f", {'within' if n <= steps else 'beyond'} the baseline's {steps} {what}"
        parts.append(text)
    # read r10a 01-S4 (tenth full run): "the 16.1 s of compiling" and the markdown's "code generation and a build,
    # timed in the full profile's table" over a table whose graphs came "2 of 2" from inductor's cache
    cached = [r["batch size"] for r in comp["rows"] if comp["backend"] == "inductor" and r.get("cache_hits")
              and not r.get("cache_misses")]
    if cached:
        at = " and ".join(str(b) for b in cached)
        parts.append(f"inductor's on-disk cache served every graph at batch {at}: those compile times hold no code "
                     "generation or build, which a first compile on a fresh machine pays")
    if comp["error"]:
        parts.append(f"then torch.compile failed ({comp['error']}): the larger batches stay eager")
    return "; ".join(parts)


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
            steady_s = many.train_time_s - one.train_time_s
            # a pass whose 1-step run took longer than its many-step run (a load spike between them) measured
            # nothing: None, not the 1e12 samples/s a floor on the difference would give
            row["passes"][p] = {"first_batch_s": first, "load_sps": sps,
                                "train_sps": (many.samples - one.samples) / steady_s if steady_s > 0 else None}
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


def _rate(x: float, unit: str = "") -> str:
    """A rung's rate as the reading quotes it; nan (both passes hit a load spike: :func:`loader_comparison`)
    said as not measured."""
    return f"{x:,.0f}{unit}" if x == x else "a rate not measured (both passes hit a load spike)"


def _paired(a: dict, b: dict, key: str, higher_is_better: bool = True) -> str:
    """Rung ``a`` against rung ``b`` on ``key``: the ratio of the values the table prints (each rung's
    better pass), "1.60x"; "no measurable difference (1.03x; pass by pass 1.03x and 1.03x: within 5%)" when the
    two passes, paired pass by pass, disagree with it (or agree within 5 %), with the passes' ratios that decided it."""
    ratio = a[key] / b[key] if higher_is_better else b[key] / a[key]
    ratios = [(pa[key] / pb[key]) if higher_is_better else (pb[key] / pa[key])
              for pa, pb in zip(a["passes"], b["passes"]) if pa.get(key) and pb.get(key)]
    if not ratios or ratio != ratio:
        return "not measured (no pass measured both)"
    median, measurable = paired_speedup(ratios)
    if measurable and (median > 1) == (ratio > 1):
        return f"{ratio:.2f}x"
    # #37 item 3: the resolution the verdict used, stated with it (read r4a, not counted in r3a's read and r4a's:
    # "batched Dataset, no workers: no measurable difference (1.52x)" printed without the passes that decided it)
    said = [f"{x:.2f}x" for x in ratios]
    passes = ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else said[0]
    agree = all(x > 1 for x in ratios) or all(x < 1 for x in ratios)
    close = [abs(x - 1) <= 0.05 for x in ratios]  # paired_speedup's min_effect
    why = ("the passes point the other way than the kept passes' ratio" if measurable else
           "the passes disagree" if not agree else "within 5%" if all(close) else "a pass within 5% of no change")
    return f"no measurable difference ({ratio:.2f}x; pass by pass {passes}: {why})"


def _first_wait_clause(first: dict, before: dict, change: str) -> str:
    """What the first-batch wait was made of, where keeping the workers alive did not shorten it (read r6a 01-1,
    sixth full run: "went from 304.6 to 332.8 ms (1.09x longer)" under a markdown that called the column the workers'
    start-up, while the per-sample DataLoader, with no worker to start, waited 237.1 ms): ``first`` is that rung (a
    cell of the table), ``before`` the rung before persistent workers."""
    if change.endswith("shorter"):
        return ""
    if first["first_batch_s"] >= 0.5 * before["first_batch_s"]:
        return (f": the per-sample DataLoader, with no worker to start, waited {1000 * first['first_batch_s']:.1f} ms "
                "for its first batch too, so the wait is mostly the epoch's own set-up, which keeping the workers "
                "alive does not skip")
    return ": keeping the workers alive did not shorten it here"


def _loading_accounts(fast: dict, ref: dict) -> float | None:
    """The training speedup of rung ``fast`` over rung ``ref`` that their loading alone accounts for, where it
    falls more than 5 % short of the measured one: both rungs load in the training process (no workers, the rungs
    whose names do not start with "+"), so loading and training take turns and a sample's training time holds its
    loading time; ``ref``'s training time per sample less the loading time ``fast`` saves per sample. None for a rung
    with workers, rates not measured, or a measured speedup that loading accounts for (read r10a 01-H3, tenth full
    run: "training went from 37,264 samples/s to 55,351 at the best DataLoader rung (batched Dataset, no workers:
    1.49x)" where loading alone went from 298,743 to 1,486,491 samples/s, 2.68 us a sample of the first rung's 26.84:
    1.11x; the device sampler's 1.11x over it, 1.03x from loading)."""
    if any(r["rung"].startswith("+") for r in (fast, ref)):
        return None
    rates = (fast["load_sps"], ref["load_sps"], ref["train_sps"], fast["train_sps"])
    if not all(x == x and x for x in rates):
        return None
    rest = 1 / ref["train_sps"] - (1 / ref["load_sps"] - 1 / fast["load_sps"])
    accounted = 1 / ref["train_sps"] / rest if rest > 0 else math.inf
    return accounted if fast["train_sps"] / ref["train_sps"] > 1.05 * accounted else None


def _persistent_training_clause(comp: dict, before: dict, persistent: dict) -> str:
    """The persistent-workers rung's training step over the rung before it (read f12a 01-H2, twelfth full run: the
    table's "+ prefetch_factor=4 ... 37233 0.83x" then "+ persistent_workers ... 27144 0.60x", 0.73x from one rung to
    the next, printed and never read, under a markdown that promises a step beyond the passes' disagreement counts).
    Keeping the workers alive changes only what happens at an epoch's end; where training was timed inside one epoch
    (``comp["train_steps"]`` steps of an epoch's ``epoch_samples / batch_size``), a measurable step cannot be the
    setting's, so it measures how far the same work's rate moved between two rungs' runs."""
    said = _paired(persistent, before, "train_sps")
    text = (f"the persistent-workers rung trained at {_rate(persistent['train_sps'])}: against the rung before it "
            f"({_rate(before['train_sps'])}), {said}")
    steps, epoch = comp.get("train_steps"), math.ceil(comp["epoch_samples"] / comp["batch_size"])
    if said.startswith(("no measurable", "not measured")) or not steps or steps >= epoch:
        return text
    return text + (f": keeping the workers alive changes only an epoch's end, and training was timed over {steps} "
                   f"steps inside one epoch (of {epoch:,}), so that step is not the setting's: the same work's rate "
                   "moved that much between two rungs' runs (on a shared machine, other jobs' load; no cell here "
                   "measured its cause), and a step of that size between other rungs may be the machine's too")


def loader_reading(comp: dict) -> str:
    """What the data-loading ladder shows, read from the rows :func:`comparison_table` prints (each rung's
    better pass; a ratio is the ratio of two of its cells); a step between two rungs counts only when
    the two passes, paired pass by pass, agree on it (by more than 5 %)."""
    rows = [r for r in comp["rows"] if r["measured"]]
    first, device = rows[0], rows[-1]
    known = lambda x: x if x == x else -math.inf  # noqa: E731 (a rung no pass measured ranks last)
    best_load = max(rows[:-1], key=lambda r: known(r["load_sps"]))
    best_train = max(rows[:-1], key=lambda r: known(r["train_sps"]))
    parts = [f"loading alone went from {_rate(first['load_sps'], ' samples/s')} (per-sample DataLoader) to "
             f"{_rate(best_load['load_sps'])} at the best DataLoader rung ({best_load['rung'].lstrip('+ ')}, "
             f"{_paired(best_load, first, 'load_sps')}) and {_rate(device['load_sps'])} with the device-resident "
             f"sampler ({_paired(device, first, 'load_sps')})"]
    def accounts(fast, ref):
        said = _paired(fast, ref, "train_sps")
        acc = None if said.startswith("no measurable") else _loading_accounts(fast, ref)
        return said + ("" if acc is None else f", of which loading alone accounts for {acc:.2f}x"), acc is not None

    if best_train is first:
        trained, short = (f"training ran at {_rate(first['train_sps'], ' samples/s')} with it, "
                          "and no later DataLoader rung trained faster"), False
    else:
        said, short = accounts(best_train, first)
        trained = (f"training went from {_rate(first['train_sps'], ' samples/s')} to "
                   f"{_rate(best_train['train_sps'])} at the best "
                   f"DataLoader rung ({best_train['rung'].lstrip('+ ')}: {said})")
    said, short_device = accounts(device, best_train)
    parts.append(f"{trained}; the device sampler trained at {_rate(device['train_sps'])}: against the best "
                 f"DataLoader, {said}")
    if short or short_device:
        parts.append("a rung without workers loads and trains in turn, so the loading a rung saves per sample comes "
                     "off its training time per sample; a training gain beyond that came off the work every rung "
                     "shares: inside training, loading cost more than loading alone measured, or the machine moved "
                     "between the runs (no cell here measured which)")
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
        ratio = before["first_batch_s"] / persistent["first_batch_s"]  # the table's two cells
        change = ("no measurable change" if not measurable or (median > 1) != (ratio > 1) else
                  f"{ratio:.2f}x shorter" if ratio > 1 else f"{1 / ratio:.2f}x longer")
        epoch_s = comp["epoch_samples"] / before["load_sps"]
        # read f12a 01-S4 (twelfth full run): "went from 316.1 to 333.4 ms ...; paid once per epoch, it is 0.65% of an
        # epoch's loading here": "it" was the first of the two waits (the rung without persistent workers), at its rate
        parts.append(f"with persistent workers the wait for an epoch's first batch went from "
                     f"{1000 * before['first_batch_s']:.1f} to {1000 * persistent['first_batch_s']:.1f} ms ({change})"
                     f"{_first_wait_clause(first, before, change)}; "
                     f"paid once per epoch, the wait without them ({1000 * before['first_batch_s']:.1f} ms) is "
                     f"{before['first_batch_s'] / epoch_s:.2%} of an epoch's loading at that rung's rate here")
        parts.append(_persistent_training_clause(comp, before, persistent))
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
                        hooks=RunHooks(evaluate_points=False, time_phases=False))
        r = train_to_target(data, cfg.replace(global_batch_size=b, max_steps=steps), device=device, progress="none",
                            hooks=RunHooks(evaluate_points=False, time_phases=False))
        t.add(**{"batch size": b, "steps": r.steps, "samples/s": round(r.samples_per_s),
                 "ms/step": 1000 * r.train_time_s / max(1, r.steps)})
    return t


def pace_noise(pace: dict) -> float:
    """The least uncertainty (a fraction) of a ratio of two timings taken at different moments in lesson 01: what
    :func:`pace_drift_reading` states for the speedups over the baseline (:func:`course_lib.ladder.pace_uncertainty`
    of the yardstick's record, ``pace``: :meth:`course_lib.ladder.Pace.finish`'s), 0 when it was timed once only."""
    from ..ladder import pace_uncertainty

    if not pace.get("before") or not pace.get("after"):
        return 0.0
    return pace_uncertainty({"pace": {**pace, "rate": pace.get("rate") or (pace["before"] + pace["after"]) / 2}})


def throughput_reading(table: Table, *, noise: float = 0.0) -> str:
    """What a :func:`throughput_vs_batch` table shows, read from its rows. ``noise``: the least uncertainty of a ratio
    of two timings taken at different moments in this lesson, measured elsewhere (:func:`pace_noise` of the
    yardstick's record): the table's points are single runs, one per batch size, so none of its ratios resolves less
    than a factor of ``1 / (1 - noise)``; 0 (the default) when nothing else measured it."""
    rows = [(r["batch size"], r["samples/s"]) for r in table.rows]
    if len(rows) < 2:
        return "one batch size measured: nothing to compare"
    (b0, s0), (b1, s1) = rows[0], rows[-1]
    (bp, sp) = rows[-2]
    last = s1 / sp
    bm, sm = max(rows, key=lambda r: r[1])
    # read r10a 01-H2 (tenth full run): "from batch 256 to 65536 (256x) ... 13.7x" over a table where batch 256 ran
    # 7.492 ms per step and batch 1024 6.163: a step of more samples does at least the same work (the same optimizer
    # step, more sampling, forward and backward), so a larger batch's shorter step is the machine's pace moving
    # between these single runs, and it bounds what every ratio of the table can resolve
    ms = [(r["batch size"], r["ms/step"]) for r in table.rows]
    inverted = [(a, b) for i, a in enumerate(ms) for b in ms[i + 1:] if b[0] > a[0] and b[1] < a[1] / 1.05]
    spread = 1.0
    if inverted:
        (ba, ma), (bb, mb) = max(inverted, key=lambda p: p[0][1] / p[1][1])
        spread = ma / mb
    # read f12a 01-H1 (twelfth full run): "samples/s stopped growing: it peaked at batch 16384 (676,073) and the largest
    # batch ran at 0.87x of that peak" over a table without an inverted pair, in the lesson whose yardstick moved -14%
    # across its baseline run (and whose baseline ran 2.62 to 3.48 ms per step within one run): a dip of 1.16x inside
    # the 1.17x that movement means for a ratio of single runs is one these runs cannot tell
    drift = 1.0 if noise <= 0 else 1 / (1 - noise) if noise < 1 else math.inf  # ±100 % or more: no ratio resolves
    spread = max(spread, drift)
    # read r11 01-H1 (eleventh full run): "it peaked at batch ... and the largest batch ran at 0.9x of that peak" in the
    # reading that then says every ratio is uncertain by at least a larger factor: a trend inside that uncertainty is
    # one these runs cannot tell
    if sm > s1:  # a peak below the largest batch: the curve turned down, it did not merely flatten
        peak = f"peaked at batch {bm} ({sm:,}) and the largest batch ran at {s1 / sm:.2f}x of that peak"
        trend = (f"samples/s {peak}, less than the uncertainty below: these runs cannot tell whether it stopped growing"
                 if sm / s1 < spread else f"samples/s stopped growing: it {peak}")
    elif last < 1.2:
        trend = ("the last step up gained less than 20 %, but by less than the uncertainty below: these runs cannot "
                 "tell whether samples/s is flattening" if last * spread >= 1.2 else
                 "samples/s is flattening: the last step up gained less than 20 %")
    else:
        trend = ("the last step up gained more than 20 %, but by less than the uncertainty below: these runs cannot "
                 "tell whether samples/s was still growing at the largest batch" if last < spread else
                 "samples/s was still growing at the largest batch measured")
    text = (f"from batch {b0} to {b1} ({b1 // b0}x) samples/s went from {s0:,} to {s1:,} ({s1 / s0:.1f}x); "
            f"batch {bp} -> {b1}: {last:.2f}x; {trend}")
    if inverted:
        text += (f"; but batch {ba}'s step took {cell_text(ma)} ms and batch {bb}'s {cell_text(mb)}, {bb // ba}x the "
                 "samples in less time, which no step does by itself (the same optimizer step, more of everything "
                 "else): the machine's pace moved between these runs, one per batch, so every ratio here is "
                 f"uncertain by at least {ma / mb:.2f}x")
    if drift > 1.005 and drift > (ma / mb if inverted else 1.0):
        text += (f"; the yardstick's own timings in this lesson put ±{noise:.0%} on a ratio of timings taken at "
                 "different moments (the line under the baseline run): each point here is one run at its own moment, "
                 + (f"so every ratio here is uncertain by at least {drift:.2f}x (the same work {noise:.0%} slower)"
                    if drift < math.inf else "so no ratio here can be told from no change"))
    return text


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
