"""The trick ladder: the one writer and reader of its saved rungs (lessons 01-06).

baseline, +linear scaling, +warmup, +LARS, +mixed precision, +data parallel: the slots. A rung records its
slot (``step``, the one name the ladder calls it by) and what ran in it (``ran_as``: "sqrt scaling" in the
"+linear scaling" slot, "LAMB" in the "+LARS" one, :func:`trick_ran`; ``ran``: the whole setting in a few
words), saved once and shown as two columns. The rungs are **cumulative**, as in the
seed talk: each lesson starts from the best setting so far (:func:`start_from`: the rung below only when
it helped) and adds one trick: a bigger batch with a scaled lr (02), warmup to reach a bigger batch still
(03), a layer-wise optimizer to go bigger again (04), mixed precision on the same setting (05), data
parallel on the same global batch (06). A trick that does not help here keeps its rung with its measured
effect; the next rung builds on the setting the lesson names as its ``carry`` (lesson 05 carries fp32
when 16 bits were slower).

**Speedups that survive a busy machine.** Lessons run minutes apart on machines whose speed changes (a
shared login node, a laptop on battery). Each rung lesson times the *yardstick*, the baseline's own
step, before and after its runs (:class:`Pace`), so a rung's time can be put at the baseline's pace:
``paced time = time x pace now / pace in lesson 01``. Each rung is decided by a
:class:`~course_lib.compare.Comparison` of paced times (:func:`rung_comparison`): its speedup over the
baseline and over the rung it built on, with the interval its seeds' spread gives, widened by what
pacing cannot correct (how far the yardstick moved, :func:`pace_uncertainty`) and, for a rung run once,
by its evaluation spacing. The ladder refuses to compare rungs measured on different datasets
(:class:`LadderMismatch`).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from . import compare
from .compare import Comparison
from .hardware import detect
from .results import load_results, results_dir, save_result
from .tables import Table
from .tiers import largest_power_of_two_at_most
from .train.ncf import TrainConfig, TrainResult, samples_per_epoch, throughput

LADDER_STEPS = ("baseline", "+linear scaling", "+warmup", "+LARS", "+mixed precision", "+data parallel")
PACE_DRIFT_LIMIT = 0.2  # a pace more than 20 % away from lesson 01's (or moving that much within a lesson) is flagged
# How the ladder's lessons evaluate (TrainConfig.dense_eval_margin): once HR@10 is within 0.05 of the target,
# every 1/20 epoch, so a rung's steps to target are resolved to that rather than to the lessons' EVAL_EVERY
NEAR_TARGET = {"dense_eval_margin": 0.05, "dense_eval_every_epochs": 0.05}


class LadderMismatch(ValueError):
    """Rungs measured on different datasets cannot be compared."""


def adam_impl_ran(config: dict, device: str | None = None) -> str | None:
    """Which implementation of Adam a run with ``config`` ran ("for-loop", "foreach", "fused"): its ``adam_impl``,
    or for "auto" (and a setting saved before the choice existed) what "auto" is on ``device`` (fused on CUDA, torch's
    for-loop on CPU tensors, :func:`course_lib.optim.adam_kwargs`); None for another optimizer or an unknown device."""
    if config.get("optimizer") != "adam":
        return None
    impl = config.get("adam_impl", "auto")
    if impl != "auto":
        return impl
    return None if not device else "fused" if str(device).startswith("cuda") else "for-loop"


def what_ran(config: dict, world_size: int = 1, device: str | None = None) -> str:
    """The setting a rung actually trained with, in a few words: batch, optimizer (Adam's implementation,
    :func:`adam_impl_ran`) and lr (with its rule), warmup, precision, ranks — e.g.
    ``"batch 16384, lamb lr 0.008 (sqrt rule), linear warmup 40 steps, bf16"``, ``"batch 256, adam (fused) lr 0.001,
    fp32"``."""
    rule = config.get("lr_scaling")
    lr = config.get("peak_lr")
    impl = adam_impl_ran(config, device)
    parts = [f"batch {config['global_batch_size']}" if config.get("global_batch_size") else None,
             f"{config.get('optimizer', '?')}" + (f" ({impl})" if impl else "")
             + (f" lr {lr:.3g}" if lr is not None else "")
             + (f" ({rule} rule)" if rule not in (None, "none") else "")]
    if config.get("warmup_steps"):
        parts.append(f"{config.get('warmup', 'linear')} warmup {config['warmup_steps']} steps")
    parts.append(config.get("precision", "fp32"))
    if world_size > 1:
        parts.append(f"{world_size} ranks")
    return ", ".join(str(p) for p in parts if p)


_OPTIMIZERS = {"lars": "LARS", "lamb": "LAMB", "adam": "Adam", "sgd": "SGD"}


def trick_ran(r: dict) -> str | None:
    """What ran in a rung's slot, from its record (its ``config``, ``precision``, ``world_size``): the lr rule in the
    "+linear scaling" slot ("sqrt scaling"), the warmup ("linear warmup", "no warmup"), the optimizer in the "+LARS"
    slot ("LAMB"), the precision ("bf16"), the ranks ("2 ranks"); None for the baseline or a record without a
    setting. Saved with the rung as ``ran_as`` (:func:`save_ladder_row`), beside its slot ``step``."""
    step, c = r["step"], r.get("config") or {}
    if not c or step == "baseline":
        return None
    if step == "+linear scaling":
        return f"{c.get('lr_scaling') or 'no'} scaling"
    if step == "+warmup":
        return f"{c.get('warmup', 'linear')} warmup" if c.get("warmup_steps") else "no warmup"
    if step == "+LARS":
        return _OPTIMIZERS.get(c.get("optimizer"), c.get("optimizer"))
    if step == "+mixed precision":
        return r.get("precision") or c.get("precision")
    return f"{r.get('world_size', 1)} ranks"


# --------------------------------------------------------------------------- the yardstick's pace


def yardstick_pace(data, cfg: TrainConfig, *, device=None, steps: int | None = None, repeats: int = 3) -> float:
    """The training samples/s of ``cfg`` (the baseline's setting: lesson 01's batch, optimizer and lr)
    on this machine *now*: ``repeats`` bursts of ``steps`` steady-state steps of the course's engine
    (:func:`course_lib.train.ncf.throughput`: the sampler's next batch and ``Engine.step``, as the training
    clock counts them, after untimed ones); the median burst, so one burst that another process
    interrupted does not move it. ``steps`` (default): 100,000 samples or a tenth of an epoch, the
    fewer — a fraction of a second each on a CPU, long enough not to time the clock's own jitter."""
    cfg = cfg.replace(micro_batch_size=None)
    if steps is None:
        samples = min(100_000, samples_per_epoch(data, cfg) // 10)
        steps = max(10, samples // cfg.global_batch_size)
    return statistics.median(throughput(data, cfg, device=device, steps=steps,
                                        warmup_steps=min(10, steps))["samples_per_s"]
                             for _ in range(repeats))


def _percent(x: float) -> str:
    return f"{x:+.0%}"


class Pace:
    """The yardstick's pace timed around one lesson's runs: ``pace = Pace(data, base_cfg)`` before them
    (prints it next to lesson 01's), ``pace.finish()`` after them, into the rung's record."""

    def __init__(self, data, cfg: TrainConfig, *, device=None, steps: int | None = None, repeats: int = 3,
                 directory: Path | None = None, quiet: bool = False):
        self._args = dict(data=data, cfg=cfg, device=device, steps=steps, repeats=repeats)
        self.quiet = quiet
        self.baseline = (_saved_rungs(directory).get("baseline") or {}).get("pace", {}).get("rate")
        self.before = yardstick_pace(**self._args)
        self.after: float | None = None
        self._around_run = False  # finish(run=...): the bursts bracket that run (lesson 01's baseline), said as such
        if not quiet:
            print(self.describe())

    @property
    def rate(self) -> float:
        """The pace of the period: the mean of before and after (before alone until :meth:`finish`)."""
        return self.before if self.after is None else (self.before + self.after) / 2

    def describe(self) -> str:
        line = f"yardstick pace {self.before:,.0f} samples/s"
        if self.after is not None:
            # lesson 01 times its bursts around the baseline run alone (finish(run=)), not around its other runs
            span = "the run" if self._around_run else "this lesson's runs"
            line = (f"yardstick pace {self.before:,.0f} samples/s before {span}, {self.after:,.0f} after "
                    f"({_percent(self.after / self.before - 1)})")
        if self.baseline:
            line += f"; lesson 01 measured {self.baseline:,.0f} ({_percent(self.rate / self.baseline - 1)})"
        return line

    def finish(self, run: TrainResult | None = None) -> dict:
        """Times the yardstick again; returns what a rung records (``save_ladder_*(..., pace=...)``).

        ``run``: a run of the yardstick's own setting (lesson 01's baseline), whose training samples/s is then the
        pace of the same step *during* it, recorded as ``"run"``: the bursts before and after cannot see a pace that
        changed within the run, and :func:`pace_uncertainty` counts the difference."""
        if run is not None:
            cfg = self._args["cfg"]
            if run.config.get("global_batch_size") != cfg.global_batch_size:
                raise ValueError(
                    f"Pace.finish(run=...): the run's batch ({run.config.get('global_batch_size')}) is not the "
                    f"yardstick's ({cfg.global_batch_size}), so its samples/s is not the yardstick's pace: pass only "
                    "a run of the yardstick's own setting (lesson 01's baseline), or no run")
        self._around_run = run is not None
        self.after = yardstick_pace(**self._args)
        if not self.quiet:
            print(self.describe())
        out = {"before": self.before, "after": self.after, "rate": self.rate}
        if run is not None and run.samples_per_s:
            out["run"] = run.samples_per_s
        return out


# --------------------------------------------------------------------------- saving rungs


def _seed_run(r: TrainResult) -> dict:
    return {"seed": r.config.get("seed"), "time_to_target_s": r.time_to_target_s,
            "steps_to_target": r.steps_to_target, "epochs_to_target": r.epochs_to_target, "final_hr": r.final_hr}


def save_ladder_row(step: str, *, time_to_target_s: float | None, final_hr: float | None, target_hr: float,
                    dataset: str, directory: Path | None = None, **details) -> Path:
    """Save one rung of the trick ladder. ``time_to_target_s=None`` means "not reached" (or, with
    ``not_run="why"``, that the lesson did not train it to the target, and why).

    ``dataset`` is required: rungs of different datasets are never compared. Optional details the
    ladder reads: ``pace`` (:meth:`Pace.finish`), ``seed_runs`` (one dict per seed: time and steps to
    target), ``config`` (what ran) and ``carry`` (the setting the next rung builds on; default: config),
    ``reason`` (the lesson's note on what the trick did here: kept with the record, not shown by the ladder).
    The rung records what ran in its slot as ``ran_as`` (:func:`trick_ran`) beside the slot ``step``."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    if not dataset:
        raise ValueError(f"ladder step {step!r}: say which dataset it was measured on (dataset=...)")
    slug = LADDER_STEPS.index(step)
    row = {"step": step, "time_to_target_s": time_to_target_s, "final_hr": final_hr,
           "target_hr": target_hr, "dataset": dataset, **details}
    row.setdefault("tier", detect().tier)
    if "config" in row and "ran" not in row:
        row["ran"] = what_ran(row["config"], row.get("world_size", 1), row.get("device"))
    row.setdefault("ran_as", trick_ran(row))
    if isinstance(row.get("carry"), TrainConfig):
        row["carry"] = row["carry"].to_dict()
    return save_result(f"ladder_{slug}", row, directory)


def save_ladder_result(step: str, result: TrainResult, *, seeds=(), pace: dict | None = None, carry=None,
                       reason: str = "", directory: Path | None = None, **details) -> Path:
    """``save_ladder_row`` from the :class:`course_lib.train.TrainResult` of the rung's run (lessons 01-05).

    ``seeds``: the same setting's runs at other seeds. The rung's time to target is then the mean over
    all of them, or "not reached" unless every seed reached it (its steps to target likewise); each
    seed's numbers are kept in ``seed_runs``. ``carry``: the setting the next rung builds on (a
    TrainConfig; default: the run's own)."""
    runs = [result, *seeds]
    reached = all(r.time_to_target_s is not None for r in runs)
    c = result.config
    return save_ladder_row(
        step, directory=directory,
        time_to_target_s=statistics.fmean(r.time_to_target_s for r in runs) if reached else None,
        steps_to_target=statistics.fmean(r.steps_to_target for r in runs) if reached else None,
        epochs_to_target=statistics.fmean(r.epochs_to_target for r in runs) if reached else None,
        final_hr=result.final_hr, target_hr=result.target_hr, dataset=result.dataset,
        seed_runs=[_seed_run(r) for r in runs], pace=pace, carry=carry, reason=reason,
        batch_size=c["global_batch_size"], lr=c["peak_lr"], optimizer=c["optimizer"],
        precision=result.precision.get("mode", c["precision"]), warmup_steps=c.get("warmup_steps", 0),
        seed=c.get("seed"), samples_per_s=result.samples_per_s, device=result.device,
        world_size=result.world_size, config=c, **details)


# --------------------------------------------------------------------------- reading rungs


def _saved_rungs(directory: Path | None) -> dict[str, dict]:
    return {r["step"]: r for name, r in load_results(directory).items() if name.startswith("ladder_")}


def _pace_of(r: dict) -> float | None:
    return (r.get("pace") or {}).get("rate")


def pace_drift(pace: dict | None) -> float | None:
    """How far the yardstick's pace moved over a lesson's runs, signed (``after / before - 1`` of :meth:`Pace.finish`'s
    record); None when it was not timed both times."""
    p = pace or {}
    return p["after"] / p["before"] - 1 if p.get("before") and p.get("after") else None


def _pace_moved(r: dict) -> float:
    """How far the yardstick's pace moved between the start and the end of a rung's lesson (0 unknown)."""
    drift = pace_drift(r.get("pace"))
    return abs(drift) if drift is not None else 0.0


def run_off_pace(pace: dict | None) -> float | None:
    """How far a run of the yardstick's own setting trained from the yardstick's pace timed around it (``run`` /
    ``rate`` - 1, :meth:`Pace.finish`'s ``run``; None when no such run was recorded): a pace during the run that the
    bursts before and after it did not catch."""
    p = pace or {}
    return p["run"] / p["rate"] - 1 if p.get("run") and p.get("rate") else None


def seed_step_times(r: dict) -> list[float]:
    """Seconds per step of a rung's seed runs that reached the target (time / steps to target): one setting at
    every seed, so one step's cost; where they differ, the machine's pace moved between the runs."""
    return [s["time_to_target_s"] / s["steps_to_target"] for s in r.get("seed_runs") or []
            if s.get("time_to_target_s") and s.get("steps_to_target")]


def seeds_pace_spread(r: dict) -> float:
    """How far a rung's seed runs' step times lie from their mean (half their range over their mean; 0 with fewer
    than two): a movement of the machine's pace between them, which the yardstick's bursts before and after the
    lesson's runs need not catch."""
    per = seed_step_times(r)
    return (max(per) - min(per)) / (max(per) + min(per)) if len(per) > 1 else 0.0


def pace_uncertainty(r: dict) -> float:
    """What pacing cannot correct in a rung's seconds, the largest of: how far the yardstick moved within its
    lesson; for a run of the yardstick's own setting (the baseline), how far that run's pace was from the
    yardstick's (:func:`run_off_pace`); how far its seeds' step times lie apart (:func:`seeds_pace_spread`)."""
    off = run_off_pace(r.get("pace"))
    return max(_pace_moved(r), abs(off) if off is not None else 0.0, seeds_pace_spread(r))


# A limit of a rung's seconds its record does not state (a pace not timed, an evaluation spacing not recorded for a
# rung run once): its seconds are trusted only as far as the drift the ladder flags.
UNPACED_RESOLUTION = PACE_DRIFT_LIMIT


def eval_resolution(r: dict) -> float:
    """The relative resolution of a rung's time to target set by its evaluations: the target is seen at the first
    evaluation past it, up to one spacing late (the dense spacing near the target, :data:`NEAR_TARGET`), as a
    fraction of its fastest seed's epochs to target (0 where either is not recorded)."""
    c = r.get("config") or {}
    spacing = c.get("dense_eval_every_epochs") if c.get("dense_eval_margin") else c.get("eval_every_epochs")
    epochs = [s["epochs_to_target"] for s in r.get("seed_runs") or [] if s.get("epochs_to_target")]
    epochs = epochs or ([r["epochs_to_target"]] if r.get("epochs_to_target") else [])
    return spacing / min(epochs) if spacing and epochs else 0.0


def _times(r: dict) -> list[float]:
    return r["paced_seed_times_s"] or [r["paced_time_s"]]


def rung_resolution(r: dict, other: dict) -> float:
    """What bounds the ratio of two rungs' paced times beyond their seeds' spread, relative: each rung's pace
    movement (:func:`pace_uncertainty`, or :data:`UNPACED_RESOLUTION` where its pace was not timed), and for a rung
    measured once its evaluation spacing (:func:`eval_resolution`; :data:`UNPACED_RESOLUTION` where neither is
    recorded)."""
    total = 0.0
    for x in (r, other):
        total += pace_uncertainty(x) if x.get("paced") else UNPACED_RESOLUTION
        if len(_times(x)) < 2:
            total += eval_resolution(x) or UNPACED_RESOLUTION
    return total


def rung_comparison(r: dict, other: dict, question: str) -> Comparison:
    """``other``'s paced time to target over ``r``'s: the speedup of ``r`` over ``other`` (above 1: ``r`` is
    faster), from their seeds' paced times (:func:`course_lib.compare.ratio`), widened by
    :func:`rung_resolution`."""
    res = rung_resolution(r, other)
    parts = [f"pace {res:.0%}"] if res else []
    if min(len(_times(r)), len(_times(other))) > 1:
        parts.insert(0, f"seeds {len(_times(r))}/{len(_times(other))}")
    return compare.ratio(question, _times(r), _times(other), needed=compare.TIME_EFFECT, resolution=res,
                         basis="; ".join(parts) or "one run each", unit="x")


def _check_datasets(saved: dict[str, dict]) -> None:
    # a rung marked "not run" after its lesson failed may not know its data: it compares nothing
    datasets = {step: r.get("dataset") for step, r in saved.items() if r.get("dataset") or not r.get("failed")}
    if len(set(datasets.values())) > 1:
        listing = ", ".join(f"{step!r}: {d or 'not recorded'}" for step, d in datasets.items())
        raise LadderMismatch(
            f"the ladder's rungs were measured on different datasets ({listing}); a speedup between them would "
            "compare different problems. Rerun the lessons whose rungs differ with the same DATASET (the tier plan "
            "picks one for the whole course), or start a fresh results directory ($COURSE_RESULTS_DIR).")


def _paced(r: dict, base: dict) -> dict:
    """``r`` with its seconds at lesson 01's pace and its pace flags (short labels, :data:`FLAGS`)."""
    r = dict(r)
    ttt, pace, base_pace = r.get("time_to_target_s"), _pace_of(r), _pace_of(base)
    ratio = pace / base_pace if (pace and base_pace) else 1.0  # at lesson 01's pace: x this
    r["paced"] = bool(pace and base_pace)
    r["paced_time_s"] = ttt * ratio if ttt else None
    r["paced_seed_times_s"] = [s["time_to_target_s"] * ratio for s in r.get("seed_runs") or []
                               if s.get("time_to_target_s")]
    r["pace_drift"] = ratio - 1 if r["paced"] else None
    r["pace_moved"] = pace_uncertainty(r) if pace else None
    off = run_off_pace(r.get("pace"))
    r["flags"] = [flag for flag, on in (
        ("pace vs lesson 01", r["paced"] and abs(ratio - 1) > PACE_DRIFT_LIMIT),
        ("pace within the lesson", _pace_moved(r) > PACE_DRIFT_LIMIT),
        ("run off the yardstick's pace", off is not None and abs(off) > PACE_DRIFT_LIMIT),
        ("pace between seeds", seeds_pace_spread(r) > PACE_DRIFT_LIMIT)) if on]
    r["ran_as"] = r.get("ran_as") or trick_ran(r)  # a row saved without it: from its setting
    return r


def ladder_rows(directory: Path | None = None) -> list[dict]:
    """The saved rungs in the course's order, each with what the table shows:

    ``paced_time_s`` (its time at lesson 01's pace), ``comparison`` (its speedup over the baseline, a
    :class:`~course_lib.compare.Comparison`: :func:`rung_comparison`) with ``speedup`` its estimate, and ``vs_below``
    (its speedup over the best rung below, ``previous_step``: the setting it built on, see :func:`start_from`) with
    ``vs_previous`` its estimate; ``helped``: ``vs_below`` is ``higher``, or its lesson decided, on one setting at one
    pace, that the trick helped over that rung (``decided_by``: ``{"over": step, "by": how}``). A rung that helped is
    the best so far, the one the next rung builds on. ``pace_drift`` (its pace against lesson 01's),
    ``pace_moved`` (:func:`pace_uncertainty`) and ``flags`` (which of them passed :data:`PACE_DRIFT_LIMIT`).

    Raises :class:`LadderMismatch` when the rungs were measured on different datasets."""
    saved = _saved_rungs(directory)
    _check_datasets(saved)
    base = saved.get("baseline", {})
    base_row = _paced(base, base) if base else None
    rows, before = [], None  # before: the best rung below (the baseline, then each rung that helped)
    for step in LADDER_STEPS:
        if step not in saved:
            continue
        r = _paced(saved[step], base)
        r["comparison"] = r["vs_below"] = None
        if step != "baseline" and r["paced_time_s"] and base_row and base_row["paced_time_s"]:
            r["comparison"] = rung_comparison(r, base_row, f"{step} over baseline")
        r["speedup"] = r["comparison"].estimate if r["comparison"] else (1.0 if step == "baseline" else None)
        r["speedup_shown"] = f"{r['speedup']:.3g}x" if r["speedup"] else None
        r["previous_step"] = before["step"] if before else None
        if before and r["paced_time_s"]:
            r["vs_below"] = rung_comparison(r, before, f"{step} over {before['step']}")
        r["vs_previous"] = r["vs_below"].estimate if r["vs_below"] else None
        decided = r.get("decided_by") or {}
        r["decided"] = decided.get("by") if before and decided.get("over") == before["step"] else None
        r["helped"] = bool(r["decided"] or (r["vs_below"] and r["vs_below"].outcome == compare.HIGHER))
        rows.append(r)
        if r["paced_time_s"] and (before is None or r["helped"]):
            before = r
    return rows


def ladder_comparisons(directory: Path | None = None) -> list[Comparison]:
    """Every rung's verdicts, in the course's order: its speedup over the baseline, then over the rung it built on
    (where that is not the baseline)."""
    out = []
    for r in ladder_rows(directory):
        out += [c for c in (r["comparison"], r["vs_below"] if r["previous_step"] != "baseline" else None) if c]
    return out


def _time_cell(r: dict) -> str:
    if r.get("not_run"):
        return "not run"
    ttt = r.get("time_to_target_s")
    seeds = r.get("seed_runs") or []
    if ttt is None:
        got = sum(s.get("time_to_target_s") is not None for s in seeds)
        return f"not reached ({got}/{len(seeds)} seeds)" if got else "not reached"
    each = ", ".join(f"{s['time_to_target_s']:.1f}" for s in seeds) if len(seeds) > 1 else ""
    return f"{ttt:.1f}" + (f" ({each})" if each else "")


def _steps_cell(r: dict):
    """A rung's steps to target: the seeds' mean, with each seed's where they differ."""
    steps = r.get("steps_to_target")
    if steps is None:
        return "—"
    each = [s.get("steps_to_target") for s in r.get("seed_runs") or []]
    if len(each) > 1 and None not in each and len(set(each)) > 1:
        return f"{round(steps)} ({', '.join(str(x) for x in each)})"
    return round(steps)


def interval_cell(c: Comparison | None) -> str:
    """A comparison's interval as the ladder's tables print it ("—" where there is none)."""
    return c.row()["interval"] if c else "—"


def _pace_cell(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "—"
    return (_percent(x) if signed else f"{x:.0%}") + (" (!)" if abs(x) > PACE_DRIFT_LIMIT else "")


LADDER_COLUMNS = ["step", "ran as", "setting", "steps to target", "time to target (s)", "speedup", "interval",
                  "outcome", "built on", "vs built on", "vs interval", "vs outcome", "decided in lesson by",
                  "final HR@10", "pace vs lesson 01", "pace moved"]


def ladder_table(directory: Path | None = None) -> Table:
    """The trick ladder from saved rows, in the course's order: the slot and what ran, steps and seconds to the
    target (each seed's in brackets), the speedup over the baseline at lesson 01's pace with its 95% interval and
    outcome, the same against the rung it built on, and the pace each rung was measured at ((!): beyond
    :data:`PACE_DRIFT_LIMIT`)."""
    rows = ladder_rows(directory)
    dataset = rows[0].get("dataset", "") if rows else ""
    decided = any(r["decided"] for r in rows)  # a column only where a lesson decided a rung on one setting
    t = Table([c for c in LADDER_COLUMNS if decided or c != "decided in lesson by"],
              title=f"The trick ladder (measured on this machine{', ' + dataset if dataset else ''})")
    for r in rows:
        c, vs = r["comparison"], r["vs_below"]
        t.add(**{"step": r["step"], "ran as": r["ran_as"] or "—", "setting": r.get("ran") or r.get("setting", ""),
                 "steps to target": _steps_cell(r), "time to target (s)": _time_cell(r),
                 "speedup": r["speedup_shown"], "interval": interval_cell(c), "outcome": c.outcome if c else "—",
                 "built on": r["previous_step"], "vs built on": f"{vs.estimate:.3g}x" if vs else "—",
                 "vs interval": interval_cell(vs), "vs outcome": vs.outcome if vs else "—",
                 **({"decided in lesson by": r["decided"]} if decided else {}), "final HR@10": r.get("final_hr"),
                 "pace vs lesson 01": _pace_cell(r["pace_drift"]), "pace moved": _pace_cell(r["pace_moved"], False)})
    return t


# --------------------------------------------------------------------------- later lessons build on earlier rungs


def load_baseline(data, target_hr: float, directory=None) -> TrainResult | None:
    """Lesson 01's saved baseline run as a ``TrainResult`` when it was measured on the same data
    and target in this results directory; else None (the lesson then measures it itself)."""
    rec = load_results(directory).get("01_baseline")
    if not rec or rec.get("dataset") != data.name or rec.get("target_hr") != target_hr:
        return None
    try:
        return TrainResult.from_dict(rec)
    except TypeError:  # an older record without some required field
        return None


# What a later lesson takes from a rung is its recipe; the budget, the target, how often to evaluate
# and the seed stay the later lesson's own.
NOT_THE_RECIPE = ("max_epochs", "max_steps", "target_hr", "stop_at_target", "eval_every_epochs", "seed",
                  "dense_eval_margin", "dense_eval_every_epochs")


def _config(base_cfg: TrainConfig, saved: dict) -> TrainConfig:
    names = {f.name for f in dataclasses.fields(base_cfg)}
    return base_cfg.replace(**{k: v for k, v in saved.items() if k in names and k not in NOT_THE_RECIPE})


def _passed_over(r: dict) -> str | None:
    """Why the rung ``r`` is not built on, in a few fixed words (None: it may be)."""
    if r.get("failed"):
        return "not run"
    if not isinstance(r.get("carry") or r.get("config"), dict):
        return "saved no setting"
    if not r.get("time_to_target_s"):
        return "did not reach the target"
    if r.get("helped") or r.get("vs_below") is None:
        return None
    return f"speedup over {r['previous_step']!r}: {r['vs_below'].outcome}"


def start_from(step: str, default: TrainConfig, *, dataset: str | None = None,
               directory=None) -> tuple[TrainConfig, dict | None, str]:
    """``(cfg, rung, note)``: the setting the rung ``step`` adds its trick to: the ``carry`` recipe of the best
    rung below ``step`` (the baseline, or the highest rung that helped over the best one below it,
    :func:`ladder_rows`' ``helped``; measured on ``dataset`` when given), with ``default``'s budget, target and
    seed; ``note`` names the rung it starts from and the rungs above it passed over, each with why (its
    outcome). ``(default, None, note)`` when no rung below is saved here."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    below = LADDER_STEPS[:LADDER_STEPS.index(step)]
    rows = [r for r in ladder_rows(directory)  # a failed lesson's row has no dataset: it applies here
            if r["step"] in below and (dataset is None or r.get("dataset") == dataset
                                       or (r.get("failed") and not r.get("dataset")))]
    best = None
    for r in rows:
        why = _passed_over(r)
        if why is None or (best is None and why.startswith("speedup")):
            best = r
    saved = {r["step"] for r in rows}
    start = LADDER_STEPS.index(best["step"]) if best else -1
    passed = [f"{s!r} ({'not saved' if s not in saved else _passed_over(r)})"
              for s, r in ((s, next((r for r in rows if r["step"] == s), None)) for s in below)
              if LADDER_STEPS.index(s) > start and (s not in saved or _passed_over(r))]
    tail = f"; passed over: {', '.join(passed)}" if passed else ""
    if best is None:
        return default, None, "no usable rung is saved: this lesson's default setting" + tail
    recipe = best.get("carry") or best.get("config")
    carried = " (the setting it carries up)" if best.get("carry") and best["carry"] != best.get("config") else ""
    note = f"starting from the {best['step']!r} rung{carried}: {what_ran(recipe)}" + tail
    return _config(default, recipe), best, note


def grown_batch(batch: int, factor: int, data, cfg: TrainConfig, *, min_steps_per_epoch: int = 8) -> tuple[int, str]:
    """``(batch x factor, note)``: a rung's bigger batch (lessons 03 and 04 go ``factor`` times beyond the
    rung below), capped at the largest power of two that leaves ``min_steps_per_epoch`` optimizer steps
    in an epoch of ``data`` (fewer would leave nothing to warm up or to evaluate between)."""
    if factor < 1:
        raise ValueError(f"factor must be at least 1, got {factor}")
    samples = samples_per_epoch(data, cfg)
    cap = largest_power_of_two_at_most(max(1, samples // min_steps_per_epoch))
    want = batch * factor
    if want <= cap:
        return want, f"{factor}x the batch of the rung below ({batch})"
    if cap <= batch:
        return batch, (f"the batch of the rung below ({batch}): {want} would leave fewer than {min_steps_per_epoch} "
                       f"steps per epoch of {data.name}")
    return cap, (f"{cap} ({cap // batch}x the rung below's {batch}): {factor}x would leave fewer than "
                 f"{min_steps_per_epoch} steps per epoch of {data.name}")


# --------------------------------------------------------------------------- a lesson that failed

LESSON_RUNGS = {"01": "baseline", "02": "+linear scaling", "03": "+warmup", "04": "+LARS",
                "05": "+mixed precision", "06": "+data parallel"}  # the lesson that saves each rung


def mark_failed_lesson(lesson: str, cell: int | None, *, directory: Path | None = None,
                       since: float | None = None) -> str | None:
    """After lesson ``lesson`` ("05") failed at code cell ``cell``: its rung, when the lesson saved none
    (or only one older than ``since``, a time.time(): a previous run's), is saved as "not run: lesson 05
    failed at cell 5", so the table shows the gap and the next lessons say they start below it. Returns
    the step marked, or None (the lesson saves no rung, or saved its rung before it failed)."""
    step = LESSON_RUNGS.get(lesson)
    if step is None:
        return None
    path = Path(directory or results_dir()) / f"ladder_{LADDER_STEPS.index(step)}.json"
    if path.exists() and (since is None or path.stat().st_mtime >= since):
        return None
    datasets = {r.get("dataset") for s, r in _saved_rungs(directory).items() if s != step and r.get("dataset")}
    why = f"lesson {lesson} failed at cell {cell}" if cell is not None else f"lesson {lesson} failed"
    row = {"step": step, "time_to_target_s": None, "final_hr": None, "target_hr": None, "not_run": why,
           "failed": True, "dataset": datasets.pop() if len(datasets) == 1 else None}
    save_result(f"ladder_{LADDER_STEPS.index(step)}", row, directory)
    return step


def started_below(step: str, directory: Path | None = None) -> str | None:
    """The rung a saved rung ``step`` was built on, as :func:`start_from` chooses it (the best rung so far;
    None: no rung below is saved, it started from its lesson's defaults)."""
    _, row, _ = start_from(step, TrainConfig(), directory=directory)
    return None if row is None else row["step"]
