"""The trick ladder: the one writer and reader of its saved rungs (lessons 01-06).

baseline, +linear scaling, +warmup, +LARS, +mixed precision, +data parallel (the slots; each row is named
for what ran, :func:`rung_name`). The rungs are
**cumulative**, as in the seed talk: each lesson starts from the best setting so far
(:func:`start_from`: the rung below only when it helped beyond the noise, #37) and adds one trick —
a bigger batch with a scaled lr (02), warmup to reach a
bigger batch still (03), a layer-wise optimizer to go bigger again (04), mixed precision on the
same setting (05), data parallel on the same global batch (06). A trick that does not help here
keeps its rung, with its measured effect and the reason the lesson computed; the next rung then
builds on the setting the lesson names as its ``carry`` (lesson 05 carries fp32 when 16 bits were
slower).

**Speedups that survive a busy machine.** Lessons run minutes apart on machines whose speed
changes (a shared login node, a laptop on battery). Each rung lesson times the *yardstick* —
the baseline's own step, lesson 01's setting — before and after its runs (:class:`Pace`), so a
rung's time can be put at the baseline's pace: ``paced time = time x pace now / pace in lesson
01``. Speedups and "vs the rung below" are ratios of paced times; a rung whose pace drifted by
more than :data:`PACE_DRIFT_LIMIT` from lesson 01's, or within its own lesson, is flagged — its
seconds are not comparable, its steps to target are. Where a lesson ran its rung's setting at
more than one seed (the full profile), the rung's time is the mean and "vs the rung below" is
read against the seed-to-seed range (:func:`course_lib.metrics.noise_verdict`).

Every rung records how it was obtained (settings, dataset, tier, world size, precision, seeds,
device) and *what actually ran* (a "+LARS" rung that trained with LAMB says so). The ladder
refuses to compare rungs measured on different datasets (:class:`LadderMismatch`).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from .hardware import detect
from .metrics import noise_verdict, speedup
from .plots import plot_ladder
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


def what_ran(config: dict, world_size: int = 1) -> str:
    """The setting a rung actually trained with, in a few words: batch, optimizer and lr (with its rule),
    warmup, precision, ranks — e.g. ``"batch 16384, lamb lr 0.008 (sqrt rule), linear warmup 40 steps, bf16"``."""
    rule = config.get("lr_scaling")
    lr = config.get("peak_lr")
    parts = [f"batch {config['global_batch_size']}" if config.get("global_batch_size") else None,
             f"{config.get('optimizer', '?')}" + (f" lr {lr:.3g}" if lr is not None else "")
             + (f" ({rule} rule)" if rule not in (None, "none") else "")]
    if config.get("warmup_steps"):
        parts.append(f"{config.get('warmup', 'linear')} warmup {config['warmup_steps']} steps")
    parts.append(config.get("precision", "fp32"))
    if world_size > 1:
        parts.append(f"{world_size} ranks")
    return ", ".join(str(p) for p in parts if p)


def rung_name(r: dict) -> str:
    """The rung's name as what ran (#37): the "+linear scaling" slot that ran the sqrt rule is "+sqrt scaling",
    the "+LARS" slot that ran LAMB (or Adam) is "+LAMB"; "+mixed precision" names the precision it trained in.
    ``r["step"]`` stays the slot (the course's order, what lessons save and look up)."""
    step, c = r["step"], r.get("config") or {}
    if step == "+linear scaling" and c.get("lr_scaling") in ("sqrt", "linear"):
        return f"+{c['lr_scaling']} scaling"
    if step == "+LARS" and c.get("optimizer") in ("lars", "lamb", "adam", "sgd"):
        return "+" + {"lars": "LARS", "lamb": "LAMB", "adam": "Adam", "sgd": "SGD"}[c["optimizer"]]
    if step == "+mixed precision" and (r.get("precision") or c.get("precision")) not in (None, "auto"):
        return f"+{r.get('precision') or c.get('precision')} (the mixed-precision rung)"
    return step


def speedup_figures(uncertainty: float) -> int:
    """The significant figures a paced speedup keeps at a relative ``uncertainty`` (:func:`speedup_cell`'s rule):
    ±10 % or more: one, ±1 % or more: two, else three."""
    return 1 if uncertainty >= 0.1 else 2 if uncertainty >= 0.01 else 3


def speedup_cell(x: float | None, uncertainty: float | None) -> str:
    """A paced speedup with the significant figures its pace drift allows (#37): ``uncertainty`` is the
    relative uncertainty of the pacing (:func:`ladder_rows`' ``speedup_uncertainty``: how far the yardstick
    moved within the rung's lesson and within lesson 01's, or its seeds' step times apart: :func:`pace_uncertainty`),
    ±10 % or more: one figure, ±1 % or more: two,
    else three; None (pace not recorded): one decimal, as before, with nothing claimed."""
    if x is None:
        return "—"
    if uncertainty is None:
        return f"{x:.1f}x"
    figures = speedup_figures(uncertainty)
    # "#": the figures are kept when they are zeros (read r8a 04-1, eighth full run: "+LAMB | 4x (±9%)", 3.99 at two
    # figures, under lesson 01's "the ladder shows such speedups to 2 significant figures"); "20." loses its dot
    text = f"{x:#.{figures}g}".rstrip(".")
    if "e" in text:  # 3e+01: a speedup of 30 at one figure
        text = f"{x:.0f}"
    return f"{text}x" + (f" (±{uncertainty:.0%})" if uncertainty >= 0.005 else "")


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
            # read r7a 01-1 (seventh full run): lesson 01 times its bursts around the baseline run alone (finish(run=)),
            # after its lr sweep's five runs: "before this lesson's runs" was not what its bursts timed
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
        changed within the run (read r5a 01-1, fifth full run: bursts at 92,467 and 93,573 samples/s, +1 %,
        around a baseline that trained at 49,592), and :func:`pace_uncertainty` counts the difference."""
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
    ``reason`` (the lesson's computed sentence on what the trick did here)."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    if not dataset:
        raise ValueError(f"ladder step {step!r}: say which dataset it was measured on (dataset=...)")
    slug = LADDER_STEPS.index(step)
    row = {"step": step, "time_to_target_s": time_to_target_s, "final_hr": final_hr,
           "target_hr": target_hr, "dataset": dataset, **details}
    row.setdefault("tier", detect().tier)
    if "config" in row and "ran" not in row:
        row["ran"] = what_ran(row["config"], row.get("world_size", 1))
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
    lesson's runs need not catch (read r8a 02-1, eighth full run: '+sqrt scaling' at "13.6 (seeds: 7.5, 19.7)" and
    "5x (±12%)", its two seeds 285 steps each, 0.026 and 0.069 s per step, while the bursts moved -5 %)."""
    per = seed_step_times(r)
    return (max(per) - min(per)) / (max(per) + min(per)) if len(per) > 1 else 0.0


def pace_uncertainty(r: dict) -> float:
    """What pacing cannot correct in a rung's seconds: how far the yardstick moved within its lesson, or, when the
    rung's run is of the yardstick's own setting (the baseline: :func:`run_off_pace`), how far that run's own pace
    was from the yardstick's, or how far its seeds' step times lie apart (:func:`seeds_pace_spread`), the largest
    (read r5a 01-1: the baseline trained at -47 % of the bursts' pace around it while they moved +1 %, and the ladder
    showed '+sqrt scaling' at 17x (±34 %) over its 89.9 s)."""
    off = run_off_pace(r.get("pace"))
    return max(_pace_moved(r), abs(off) if off is not None else 0.0, seeds_pace_spread(r))


def ladder_rows(directory: Path | None = None) -> list[dict]:
    """The saved rungs in the course's order, each with what the table shows:

    ``paced_time_s`` (its time at lesson 01's pace), ``speedup`` over the baseline and ``vs_previous``
    over the best rung below (``previous_step``: the setting it built on, see :func:`start_from`), both
    paced; ``vs_noise`` (None, or "no measurable difference ..." when the paced seed times of the two
    rungs overlap); ``pace_drift`` (its pace against lesson 01's) and ``flags`` (drift beyond
    :data:`PACE_DRIFT_LIMIT`); ``speedup_uncertainty`` (how far the yardstick moved within this rung's lesson
    and lesson 01's, or the baseline run's own distance from it: :func:`pace_uncertainty`, what pacing cannot
    correct); ``helped`` (faster than the best rung below beyond the
    noise: then it is the best so far, the setting the next rung builds on); ``name`` (:func:`rung_name`).

    The best rung so far starts as the baseline and moves up only to a rung that helped beyond the noise.

    Raises :class:`LadderMismatch` when the rungs were measured on different datasets."""
    saved = _saved_rungs(directory)
    # a rung marked "not run" after its lesson failed may not know its data (issue 36): it compares nothing
    datasets = {step: r.get("dataset") for step, r in saved.items() if r.get("dataset") or not r.get("failed")}
    if len(set(datasets.values())) > 1:
        listing = ", ".join(f"{step!r}: {d or 'not recorded'}" for step, d in datasets.items())
        raise LadderMismatch(
            f"the ladder's rungs were measured on different datasets ({listing}); a speedup between them would "
            "compare different problems. Rerun the lessons whose rungs differ with the same DATASET (the tier plan "
            "picks one for the whole course), or start a fresh results directory ($COURSE_RESULTS_DIR).")
    base = saved.get("baseline", {})
    base_pace, base_t = _pace_of(base), base.get("time_to_target_s")
    rows, before = [], None  # before: the best rung below (the baseline, then each rung that helped beyond noise)
    for step in LADDER_STEPS:
        if step not in saved:
            continue
        r = dict(saved[step])
        ttt, pace = r.get("time_to_target_s"), _pace_of(r)
        ratio = pace / base_pace if (pace and base_pace) else 1.0  # at lesson 01's pace: x this
        r["paced"] = bool(pace and base_pace)
        r["paced_time_s"] = ttt * ratio if ttt else None
        r["paced_seed_times_s"] = [s["time_to_target_s"] * ratio for s in r.get("seed_runs") or []
                                   if s.get("time_to_target_s")]
        flags = []
        r["pace_drift"] = ratio - 1 if r["paced"] else None
        if r["paced"] and abs(ratio - 1) > PACE_DRIFT_LIMIT:
            flags.append(f"the machine ran {_percent(ratio - 1)} vs lesson 01's pace: compare steps, not seconds")
        p = r.get("pace") or {}
        if _pace_moved(r) > PACE_DRIFT_LIMIT:
            flags.append(f"the pace moved {_percent(p['after'] / p['before'] - 1)} during the lesson")
        off = run_off_pace(p)
        if off is not None and abs(off) > PACE_DRIFT_LIMIT:
            flags.append(f"the run itself trained at {_percent(off)} vs the yardstick's pace around it: compare "
                         "steps, not seconds")
        if seeds_pace_spread(r) > PACE_DRIFT_LIMIT:
            per = seed_step_times(r)
            flags.append(f"its seeds ran one setting at {min(per):.3g} to {max(per):.3g} s per step: the pace moved "
                         "between them: compare steps, not seconds")
        r["flags"] = flags
        r["speedup"] = speedup(base_t, r["paced_time_s"])
        # the baseline is the reference (1.0x by definition); every other rung carries both lessons' movement
        r["speedup_uncertainty"] = ((pace_uncertainty(r) + pace_uncertainty(base)) if r["paced"] and step != "baseline"
                                    else None)
        # its own part (the baseline's is common to every speedup, and cancels between two rungs: _within_drift)
        r["rung_uncertainty"] = pace_uncertainty(r) if r["paced"] else None
        # the speedup as the table and the figure both show it (read r5b 05-1, fifth full run: the figure printed
        # "16.8x" and "17.3x" beside the table's "17x (±34%)" and "17x (±8%)", ranking two rungs the pace drift
        # does not rank): one string, at the figures the drift allows
        r["speedup_shown"] = speedup_cell(r["speedup"], r["speedup_uncertainty"])
        r["name"] = rung_name(r)
        r["vs_previous"] = speedup(before["paced_time_s"], r["paced_time_s"]) if before else None
        r["previous_step"] = before["step"] if before else None
        # #37 (full run 2026-12-01): "0.67x: slower than '+linear scaling'" under a row printed "+sqrt scaling",
        # and "6.27x" beside "6x (±18%)": the rung below by the name the table shows, at the figures pacing allows
        r["previous_name"] = (before.get("name") or before["step"]) if before else None
        r["vs_previous_uncertainty"] = ((pace_uncertainty(r) + pace_uncertainty(before))
                                        if before and r["paced"] and before.get("paced") else None)
        r["vs_noise"] = None
        if r["vs_previous"] is not None:
            # the yardstick's own movement within each lesson bounds how well pacing can line the two up; the
            # two by the names the table shows (#37 full run: "vs +linear scaling 4.36 s" under "+sqrt scaling").
            # The resolution is the drift's share of the rung below's time: a difference within it is one whose
            # ratio, as the table prints it ("0.4x (±59%)"), has 1 inside its ± (read r4b 05-1, fourth full run:
            # "0.4x (±59%): no measurable difference" for +LAMB 16.4 s vs 7.32 s, where the share of the larger
            # time, 9.63 s, let a rung slower by a factor 2.2 pass as level). For a faster rung it is the share of
            # the larger time, as before, so which rungs helped (and what the next lesson builds on) is unchanged.
            resolution = (pace_uncertainty(r) + pace_uncertainty(before)) * before["paced_time_s"]
            winner, text = noise_verdict(r["paced_seed_times_s"] or [r["paced_time_s"]],
                                         before["paced_seed_times_s"] or [before["paced_time_s"]],
                                         names=(r["name"], r["previous_name"]), quantity="paced time to target",
                                         resolution=resolution)
            r["vs_noise"] = text if winner is None else None
        r["helped"] = bool(r["vs_previous"] is not None and r["vs_previous"] > 1 and r["vs_noise"] is None)
        # a lesson's own controlled comparison decided where the paced seconds cannot (lesson 05: the same steps in
        # both precisions, so the interleaved throughput runs decide; l05_mixed_precision.rung_decision, #37)
        decided = r.get("decided_by") or {}
        r["decided"] = None
        if decided.get("text") and before is not None and decided.get("over") == before["step"]:
            r["decided"], r["vs_noise"], r["helped"] = decided["text"], None, True
        rows.append(r)
        if r["paced_time_s"] and (before is None or r["helped"]):
            before = r
    return rows


def _time_cell(r: dict) -> str:
    if r.get("not_run"):
        return f"not run: {r['not_run']}"
    ttt = r.get("time_to_target_s")
    seeds = r.get("seed_runs") or []
    if ttt is None:
        got = [s for s in seeds if s.get("time_to_target_s") is not None]
        return f"not reached (on {len(got)} of {len(seeds)} seeds)" if got else "not reached"
    each = ", ".join(f"{s['time_to_target_s']:.1f}" for s in seeds) if len(seeds) > 1 else ""
    return f"{ttt:.1f}" + (f" (seeds: {each})" if each else "")


def _steps_cell(r: dict):
    """A rung's steps to target: the seeds' mean, with each seed's where they differ, as :func:`_time_cell` gives the
    seconds (read r10b 03-S3, tenth full run: "96" for '+warmup' over seeds of 95 and 96 steps, "386" for '+LAMB' over
    392 and 380, beside "12.5 (seeds: 11.5, 13.5)")."""
    steps = r.get("steps_to_target")
    if steps is None:
        return "—"
    each = [s.get("steps_to_target") for s in r.get("seed_runs") or []]
    if len(each) > 1 and None not in each and len(set(each)) > 1:
        return f"{round(steps)} (seeds: {', '.join(str(x) for x in each)})"
    return round(steps)


# what each rung's lesson compared on its own, at one pace (the ``reason`` it saved: its comparisons' outcomes)
OWN_COMPARISON = {"+warmup": "warmup against none", "+LARS": "the layer-wise optimizer against Adam",
                  "+mixed precision": "16 bits against fp32"}


def _own_comparison(r: dict) -> str:
    """A rung's saved ``reason`` introduced as what it is: its lesson's own comparison, within that lesson at one pace,
    not the ladder's comparison with the rung below ("" without a reason).

    Read f12d 06-H3 (twelfth full run): "+warmup was slower than '+sqrt scaling' (0.5x (±75%)): at batch 65536: no
    measurable difference: the seeds disagree (time to target: linear warmup, 38 steps 9.56 s vs no warmup 9.31 s on
    average)": lesson 03's warmup against no warmup at batch 65536, quoted after a colon as if it were the reason for a
    verdict on batch 65536 against '+sqrt scaling''s 16384, so a "slower" stood beside "no measurable difference"."""
    if not r.get("reason"):
        return ""
    lesson = next((n for n, step in LESSON_RUNGS.items() if step == r.get("step")), None)
    what = OWN_COMPARISON.get(r.get("step"))
    return (f"{'lesson ' + lesson if lesson else 'its lesson'}'s own comparison"
            + (f" ({what}, at one pace)" if what else " (at one pace)")
            + f": {r['reason']}")


def _capitalized(text: str) -> str:
    """``text`` with its first letter upper-cased and the rest as it is (``str.capitalize`` lowers the rest)."""
    return text[:1].upper() + text[1:]


def _below_cell(r: dict) -> str:
    vs = r.get("vs_previous")
    if vs is None:
        return "—"
    below = r.get("previous_name") or r.get("previous_step")
    cell = speedup_cell(vs, r.get("vs_previous_uncertainty")) if r.get("vs_previous_uncertainty") is not None \
        else f"{vs:.2f}x"
    if r.get("vs_noise"):
        u = r.get("vs_previous_uncertainty")
        if u is not None and not vs * (1 - u) <= 1 <= vs * (1 + u):
            # read r8b 05-3/06-2 (eighth full run): "+warmup ... 2x (±15%): no measurable difference: the seeds
            # disagree": a ratio whose ± leaves out 1, then level; the ± is the pace drift, the verdict the seeds'
            return f"{cell} in paced seconds (the ± is the pace drift alone, not the seeds' spread): {r['vs_noise']}"
        return f"{cell}: {r['vs_noise']}"
    if r.get("decided"):
        u = r.get("vs_previous_uncertainty")
        if u is not None and vs * (1 - u) <= 1 <= vs * (1 + u):
            # read r11 05-H1 (eleventh full run): "+bf16 ... 1x (±62%) in paced seconds; decided by bf16 against fp32
            # on the same setting in its lesson: bf16 lower on every seed", a level-looking ratio beside a win
            # (1.28x in the lesson): the paced ratio is said to resolve nothing, and where the decision came from
            return (f"{cell} in paced seconds against {below!r}: the pace drift alone leaves that unresolved (1 lies "
                    f"within its ±); decided in its own lesson, both at one pace, by {r['decided']}")
        return f"{cell} in paced seconds; decided by {r['decided']}"
    if vs >= 1:
        return cell + (f" (vs {below!r}, the best rung below)" if below else "")
    why = f"; {_own_comparison(r)}" if r.get("reason") else ""  # read f12d 06-H3: another comparison, said as such
    return f"{cell}: slower than {below!r}, this trick did not help here{why}"


def ladder_table(directory: Path | None = None) -> Table:
    """The trick ladder from saved rows, in the course's order: what ran, steps and seconds to the
    target, speedups at lesson 01's pace, and the pace each rung was measured at."""
    rows = ladder_rows(directory)
    dataset = rows[0].get("dataset", "") if rows else ""
    t = Table(["step", "setting (what ran)", "steps to target", "time to target (s)", "speedup (paced)",
               "vs the rung below", "final HR@10", "pace vs lesson 01"],
              title=f"The trick ladder (measured on this machine{', ' + dataset if dataset else ''})")
    for r in rows:
        pace = ("—" if r["step"] == "baseline" else "not measured") if r.get("pace_drift") is None \
            else _percent(r["pace_drift"])
        if r["flags"]:
            pace += " (!) " + "; ".join(r["flags"])
        t.add(**{"step": r.get("name") or r["step"], "setting (what ran)": r.get("ran") or r.get("setting", ""),
                 "steps to target": _steps_cell(r),
                 "time to target (s)": _time_cell(r),
                 "speedup (paced)": r["speedup_shown"],
                 "vs the rung below": _below_cell(r), "final HR@10": r.get("final_hr"),
                 "pace vs lesson 01": pace})
    return t


def _within_drift(a: dict, b: dict) -> bool:
    """Whether two rungs' paced speedups overlap within their pace drifts (``speedup x (1 ± uncertainty)``; a rung
    without a recorded pace counts as exact). The uncertainty is each rung's own (``rung_uncertainty``): both
    speedups divide the same baseline time, so the baseline's part cancels between them (read r5a 01-1: with the
    baseline's -47 % in both, '+LAMB' 5x (±66%) "lay within" '+sqrt scaling''s 17x (±79%) in the reading that also
    said it was measurably slower than that rung, 0.3x (±52%))."""
    def own(r):
        return (r["rung_uncertainty"] if "rung_uncertainty" in r else r.get("speedup_uncertainty")) or 0.0

    ua, ub = own(a), own(b)
    lo, hi = sorted((a, b), key=lambda r: r["speedup"])
    u_lo, u_hi = (ua, ub) if lo is a else (ub, ua)
    return lo["speedup"] * (1 + u_lo) >= hi["speedup"] * (1 - u_hi)


def ladder_reading(directory: Path | None = None) -> str:
    """What the ladder shows, read from its rows: the top rung's paced speedup, the tricks that helped,
    those that did not (with their reasons), and the rungs whose seconds are not comparable."""
    rows = ladder_rows(directory)
    if not rows:
        return "no rungs saved yet"
    reached = [r for r in rows if r.get("speedup")]
    lines = []
    if reached:
        top = max(reached, key=lambda r: r["speedup"])
        cell = speedup_cell(top["speedup"], top.get("speedup_uncertainty"))
        # read r3a 06-2 (full run 2026-12-01, /tmp/mc3): "the fastest rung is '+data parallel': 13x (±93%)" over
        # rungs whose speedups lie within that ± (8x (±23%), 6x ...), in a reading that says such rungs are not ranked
        ties = [r for r in reached if r is not top and _within_drift(top, r)]
        if ties:
            near = ", ".join(f"{r.get('name') or r['step']!r} "
                             f"({speedup_cell(r['speedup'], r.get('speedup_uncertainty'))})" for r in ties)
            lines.append(f"the highest paced speedup is {top.get('name') or top['step']!r}: {cell} the baseline at "
                         f"lesson 01's pace ({top.get('ran', '')}), but {near} lie within its pace drift: these paces "
                         "do not say which rung is the fastest")
        else:
            lines.append(f"the fastest rung is {top.get('name') or top['step']!r}: {cell} the baseline at lesson 01's "
                         f"pace ({top.get('ran', '')})")
    how = {"pace": " (by its pace on the same steps, measured in its lesson)",
           "time to target": " (by its time to target against the same setting, measured in its lesson)"}
    helped = [(r.get("name") or r["step"]) + (how.get((r.get("decided_by") or {}).get("by"), " (decided in its lesson)")
                                              if r.get("decided") else "")
              for r in rows
              if r.get("vs_previous") and (r.get("decided") or r["vs_previous"] >= 1 and not r.get("vs_noise"))]
    level = [r.get("name") or r["step"] for r in rows if r.get("vs_noise")]
    renamed = [f"{r['step']!r} ran as {r['name']!r}" for r in rows if r.get("name") and r["name"] != r["step"]]
    hurt = [r for r in rows if r.get("vs_previous") and r["vs_previous"] < 1 and not r.get("vs_noise")
            and not r.get("decided")]
    if helped:
        lines.append("faster than the rung below: " + ", ".join(helped))
    if level:
        lines.append("no measurable difference from the rung below: " + ", ".join(level))
    for r in hurt:
        vs = r["vs_previous"]
        cell = speedup_cell(vs, r["vs_previous_uncertainty"]) if r.get("vs_previous_uncertainty") is not None \
            else f"{vs:.2f}x"
        lines.append(f"{r.get('name') or r['step']} was slower than {r.get('previous_name') or r['previous_step']!r} "
                     f"({cell})"
                     # read f12d 06-H3: the lesson's own comparison in its own sentence, not the verdict's reason
                     + (". " + _capitalized(_own_comparison(r)) if r.get("reason") else ""))
    for r in rows:
        if not r.get("time_to_target_s"):
            lines.append(f"{r.get('name') or r['step']}: "
                         + (f"not run ({r['not_run']})" if r.get("not_run") else "did not reach the target")
                         + (f" — {_own_comparison(r)}" if r.get("reason") else ""))
    flagged = [r.get("name") or r["step"] for r in rows if r["flags"]]  # as the table names them (#37)
    if flagged:
        lines.append(f"paced seconds are unreliable for {', '.join(flagged)} (the machine's pace drifted more than "
                     f"{PACE_DRIFT_LIMIT:.0%}): their speedups are shown with the figures that drift allows (±), and "
                     "two rungs whose speedups overlap within it are not ranked by it")
    if renamed:
        lines.append("named by what ran: " + "; ".join(renamed))
    return "\n".join(lines)


def ladder_figure(directory: Path | None = None, path: Path | None = None):
    """The ladder as a bar chart (:func:`course_lib.plots.plot_ladder`); written to ``path`` as PNG
    when given (the run summary's ``ladder.png``). Returns the figure, or None without rows."""
    rows = ladder_rows(directory)
    if not rows:
        return None
    fig = plot_ladder(rows)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


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


def start_from(step: str, default: TrainConfig, *, dataset: str | None = None,
               directory=None) -> tuple[TrainConfig, dict | None, str]:
    """``(cfg, rung, note)``: the setting the rung ``step`` adds its trick to — the ``carry`` recipe of
    the best rung below ``step`` (#37: the baseline, or the highest rung that was faster than the best one
    below it beyond the noise, :func:`ladder_rows`' ``helped``; measured on ``dataset`` when given), with
    ``default``'s budget, target and seed — and a sentence saying where it came from and which rungs it
    passed over, and why. ``(default, None, note)`` when no rung below is saved here."""
    if step not in LADDER_STEPS:
        raise ValueError(f"unknown ladder step {step!r}; choose one of {LADDER_STEPS}")
    below = LADDER_STEPS[:LADDER_STEPS.index(step)]
    rows = [r for r in ladder_rows(directory)  # a failed lesson's row (issue 36) has no dataset: it applies here
            if r["step"] in below and (dataset is None or r.get("dataset") == dataset
                                       or (r.get("failed") and not r.get("dataset")))]
    best, passed = None, []
    for r in rows:
        recipe = r.get("carry") or r.get("config")
        if r.get("failed"):
            passed.append(f"the {r['step']!r} rung was not run ({r['not_run']})")
        elif not isinstance(recipe, dict):
            passed.append(f"the {r['step']!r} rung saved no setting")
        elif not r.get("time_to_target_s"):
            passed.append(f"the {r['step']!r} rung did not reach the target")
        elif best is None or r.get("helped"):
            best = r
        else:
            vs = r.get("vs_previous")
            below_name = r.get("previous_name") or r["previous_step"]
            cell = (speedup_cell(vs, r["vs_previous_uncertainty"]) if r.get("vs_previous_uncertainty") is not None
                    else f"{vs:.2f}x") if vs is not None else ""
            # the slot first (what `skipped` below parses), then the name the table shows (read r5b 05-2, fifth
            # full run: "the '+LARS' rung was slower ..." over a table whose row for it is '+LAMB')
            shown = f" (shown as {r['name']!r}: what ran)" if r.get("name") and r["name"] != r["step"] else ""
            if vs is not None and vs < 1 and not r.get("vs_noise"):  # measurably slower (read r4b 05-1)
                passed.append(f"the {r['step']!r} rung{shown} was slower than the {below_name!r} rung ({cell})")
                continue
            how = r.get("vs_noise") or (f"{cell} the {below_name!r} rung" if vs is not None else "")
            passed.append(f"the {r['step']!r} rung{shown} did not help beyond the noise ({how})")
    saved = {r["step"] for r in rows}
    missing = [f"no {s!r} rung is saved" for s in below if s not in saved]
    if best is None:
        why = "; ".join(missing + passed) or "no rung below is saved"
        return default, None, why + ": this lesson's default setting"
    recipe = best.get("carry") or best.get("config")
    cfg = _config(default, recipe)
    carried = " (the setting it carries up)" if best.get("carry") and best["carry"] != best.get("config") else ""
    skipped = [p for p in passed if below.index(p.split("'")[1]) > below.index(best["step"])] if passed else []
    skipped += [m for m in missing if below.index(m.split("'")[1]) > below.index(best["step"])]
    note = (("; ".join(skipped) + ", so this lesson starts from " if skipped else "starting from ")
            + f"the {best['step']!r} rung's setting"
            + (f" (shown as {best['name']!r}: what ran)" if best.get("name") and best["name"] != best["step"] else "")
            + f", the best so far{carried}: {what_ran(recipe)}")
    return cfg, best, note


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


# --------------------------------------------------------------------------- a lesson that failed (issue 36)

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
