"""Lesson 03, warmup: warmup against none, as tables and verdicts.

- :func:`rule_break_batch`: the batch warmup is tried at: the smallest at which lesson 02's linear rule missed the
  target (Goyal et al.: warmup rescues the linear rule at large batch), else the next batch up from the rung below;
- :func:`sized_lengths`: the warmup lengths swept there, as many as the lesson's budget holds at the pace lesson 02
  measured for a run without warmup (which runs the whole budget);
- :func:`rescue_comparison`: the best HR@10 within the budget with the chosen warmup against without, over the
  seeds (the question where the run without warmup missed the target, so has no time to compare);
- :func:`steps_table` / :func:`steps_comparisons`: the sweep at one seed: each run's steps to target with the
  evaluation spacing that bounds them, and each warmup's steps over no warmup's;
- :func:`deciding_table`: the deciding runs at every seed (their comparisons: the chosen warmup against no warmup
  and the other warmup, in time and in steps, are :meth:`course_lib.sweeps.Confirmed.comparisons`).

At one batch and peak lr a step costs the same whatever the warmup, so steps to target are what warmup
changes; the seconds also hold the pace the machine ran the steps at (the tables' seconds per step).
"""

from __future__ import annotations

import math
import statistics

from .. import compare
from ..compare import Comparison
from ..metrics import hr_standard_error
from ..sweeps import target_resolution
from ..tables import Table
from .l02_linear_scaling import STEPS_EFFECT


def linear_misses(saved02: dict | None, *, dataset: str, target_hr: float, profile: str,
                  max_batch: int | None = None) -> list[int]:
    """The batches, ascending, at which lesson 02's linear rule missed the target (diverged or out of budget), from
    its saved record (``rows``: :func:`course_lib.sweeps.sweep_rows`), up to ``max_batch`` (a larger one leaves too
    few steps in an epoch to warm up over); [] where lesson 02 is not saved, or was run on another dataset, for
    another target or in another profile (its misses say nothing about this run)."""
    if not saved02 or (saved02.get("dataset"), saved02.get("target_hr"), saved02.get("profile")) != (
            dataset, target_hr, profile):
        return []
    return sorted({r["batch size"] for r in saved02.get("rows") or []
                   if r.get("rule") == "linear" and r.get("time to target (s)") is None
                   and (max_batch is None or r["batch size"] <= max_batch)})


RULE_HELD = "lesson 02's linear rule missed the target at no batch saved here for this dataset, target and profile"


def rule_break_batch(saved02: dict | None, today: tuple[int, str, str], *, dataset: str, target_hr: float,
                     profile: str, max_batch: int | None = None) -> tuple[int, str, str]:
    """``(batch, rule, why)`` for the warmup runs: the smallest batch at which lesson 02's linear rule missed the
    target (:func:`linear_misses`), with the linear rule; where it missed nowhere, ``today``'s choice (the next batch
    up from the rung below, with its rule) and ``why`` opens with :data:`RULE_HELD`."""
    misses = linear_misses(saved02, dataset=dataset, target_hr=target_hr, profile=profile, max_batch=max_batch)
    if misses:
        return misses[0], "linear", "the smallest batch at which lesson 02's linear rule missed the target"
    batch, rule, why = today
    return batch, rule, f"{RULE_HELD}; {why}"


def missed_run_s(saved02: dict | None, batch: int, samples_per_epoch: int, **where) -> float | None:
    """The training seconds lesson 02's linear-rule run at ``batch`` took where it missed the target (its epochs at
    its samples/s; ``where``: as :func:`linear_misses`): what a run without warmup costs here, the whole budget;
    None where lesson 02 saved no such run."""
    if batch not in linear_misses(saved02, **where):
        return None
    r = next(r for r in saved02["rows"] if r.get("rule") == "linear" and r["batch size"] == batch)
    if not r.get("samples/s") or not r.get("epochs run"):
        return None
    return r["epochs run"] * samples_per_epoch / r["samples/s"]


def sized_lengths(lengths: list[tuple[str, float]], *, run_s: float | None, budget_s: float, repeats: int,
                  other_s: float = 0.0) -> tuple[list[tuple[str, float]], str]:
    """``(lengths kept, line)``: the warmups ``[(kind, epochs)]`` to sweep so that the worst case fits ``budget_s``:
    every run the whole budget (``run_s`` each: no warmup, each warmup, and ``repeats`` runs again at more seeds),
    besides ``other_s``. The linear warmups go from the ends of their range inwards (the longest, then the
    shortest: one middle length stays), then the other shapes; the line states the estimate and what was cut.
    ``run_s`` None: nothing to size from, every length kept and no line."""
    if run_s is None:
        return list(lengths), ""
    linear = sorted((x for x in lengths if x[0] == "linear"), key=lambda x: x[1])
    order = []
    while len(linear) > 1:
        order.append(linear.pop())
        if len(linear) > 1:
            order.append(linear.pop(0))
    order += [x for x in lengths if x[0] != "linear"]
    kept = list(lengths)
    worst = lambda ls: other_s + (1 + len(ls) + repeats) * run_s  # noqa: E731
    while worst(kept) > budget_s and order:
        kept.remove(order.pop(0))
    head = (f"budget {budget_s:.0f} s; a run without warmup took {run_s:.0f} s in lesson 02; the worst case of "
            f"{1 + len(lengths) + repeats} runs takes {worst(lengths):.0f} s")
    cut = [f"{kind} {e:g} epoch" for kind, e in lengths if (kind, e) not in kept]
    return kept, head + (f": warmups cut ({', '.join(cut)}; {worst(kept):.0f} s)" if cut else ": it fits, nothing cut")


def _hr_arm(runs, users: int) -> tuple[float, float]:
    """The mean best HR@10 of ``runs`` and its standard error: the seeds' spread, and each evaluation's own
    sampling error over ``users`` users."""
    hrs = [r.best_hr if r.best_hr is not None else 0.0 for r in runs]
    mean = statistics.fmean(hrs)
    spread = statistics.variance(hrs) / len(hrs) if len(hrs) > 1 else 0.0
    return mean, math.sqrt(spread + hr_standard_error(mean, users) ** 2 / len(hrs))


def rescue_comparison(decide, chosen: str, *, users: int, baseline_label: str = "no warmup") -> Comparison:
    """The best HR@10 the chosen warmup reached within the budget minus no warmup's, over the seeds of the deciding
    runs (``decide``: :class:`course_lib.sweeps.Confirmed`): *higher* where warmup rescued a setting that missed the
    target without it (a run stops at the target, so a rescued run's best is the target); a diverged run counts 0."""
    a, b = decide.runs_of(baseline_label), decide.runs_of(chosen)
    (ma, sa), (mb, sb) = _hr_arm(a, users), _hr_arm(b, users)
    df = len(a) + len(b) - 2 or None
    return compare.difference(f"best HR@10 within the budget, {chosen} - {baseline_label}", ma, sa, mb, sb,
                              needed=compare.HR_EFFECT, df=df, n=f"{len(a)}/{len(b)}",
                              basis=f"{len(a)} and {len(b)} seeds; binomial errors over {users} users")


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
