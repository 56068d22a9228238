"""Lesson 03, warmup: warmup against none, as tables and verdicts.

- :func:`steps_table` / :func:`steps_comparisons`: the sweep at one seed: each run's steps to target with the
  evaluation spacing that bounds them, and each warmup's steps over no warmup's;
- :func:`deciding_table`: the deciding runs at every seed (their comparisons: the chosen warmup against no warmup
  and the other warmup, in time and in steps, are :meth:`course_lib.sweeps.Confirmed.comparisons`).

At one batch and peak lr a step costs the same whatever the warmup, so steps to target are what warmup
changes; the seconds also hold the pace the machine ran the steps at (the tables' seconds per step).
"""

from __future__ import annotations

from .. import compare
from ..compare import Comparison
from ..sweeps import target_resolution
from ..tables import Table
from .l02_linear_scaling import STEPS_EFFECT


def _per_step(r) -> float | None:
    """Seconds per step to the target (two cells of the sweep table's row), None where it was not reached."""
    return r.time_to_target_s / r.steps_to_target if r.time_to_target_s is not None and r.steps_to_target else None


def steps_table(results, labels) -> Table:
    """The sweep's runs: warmup kind and length, steps to target with the evaluation spacing near it (a run's
    steps to target lie between the evaluation before the one that reached it and that one), and the seconds per
    step the run's steps took."""
    t = Table(["run", "warmup steps", "steps to target", "evaluations apart (steps)", "time to target (s)",
               "s per step"], title="Steps to target: what warmup changes at one batch and peak lr")
    for r, label in zip(results, labels):
        reached = r.steps_to_target is not None
        t.add(**{"run": label, "warmup steps": r.config.get("warmup_steps") or 0,
                 "steps to target": r.steps_to_target if reached else ("diverged" if r.diverged else "not reached"),
                 "evaluations apart (steps)": target_resolution(r) if reached else None,
                 "time to target (s)": r.time_to_target_s, "s per step": _per_step(r)})
    return t


def steps_comparisons(results, labels, *, baseline_label: str = "no warmup") -> list[Comparison]:
    """Each warmup run's steps to target over the run without warmup (one seed each): the interval is the
    evaluation spacing near the target, the larger of the two runs' (relative to their steps). A run that did not
    reach the target gives no ratio (the table says whether it diverged)."""
    base = next(r for r, label in zip(results, labels) if label == baseline_label)
    out = []
    for r, label in zip(results, labels):
        if label == baseline_label or r.steps_to_target is None or base.steps_to_target is None:
            continue
        window = max(target_resolution(x) / x.steps_to_target for x in (r, base))
        out.append(compare.ratio(f"steps to target, {label} / {baseline_label}", [base.steps_to_target],
                                 [r.steps_to_target], needed=STEPS_EFFECT, resolution=window,
                                 basis=f"one seed; evaluations {window:.0%} apart"))
    return out


def first_eval_loss(r) -> float | None:
    """The training loss at a run's first evaluation (``curve["loss"][1]``; index 0 is before training), or None."""
    loss = (getattr(r, "curve", None) or {}).get("loss", [])
    return loss[1] if len(loss) > 1 else None


def deciding_table(decide, rung: str):
    """The deciding comparison seed by seed (:meth:`course_lib.sweeps.Confirmed.table`, ``rung`` marked), with the
    loss at each run's first evaluation (a run that blew up early shows it there) and the seconds per step."""
    t = decide.table(chosen=rung)
    t.columns = t.columns + ["loss at the first evaluation", "s per step"]
    runs = [r for label in decide.labels for r in decide.runs_of(label)]  # the order Confirmed.table adds them
    for row, r in zip(t.rows, runs):
        row["loss at the first evaluation"] = first_eval_loss(r)
        row["s per step"] = _per_step(r)
    return t
