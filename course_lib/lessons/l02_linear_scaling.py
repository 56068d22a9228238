"""Lesson 02, the linear scaling rule: what a batch sweep shows, as tables and verdicts.

- :func:`rule_table`: per rule, the batches that reached the target and those that did not;
- :func:`scaling_regimes` / :func:`regime_table`: Shallue's regimes from the steps-to-target slope, each
  slope with the evaluation spacing's uncertainty;
- :func:`gap_table` / :func:`gap_comparisons`: the generalization gap and whether it changed with the
  batch beyond its sampling error;
"""

from __future__ import annotations

import math

from .. import compare
from ..compare import Comparison
from ..metrics import hr_standard_error
from ..tables import Table


REGIMES = ("perfect scaling", "diminishing returns", "maximal data parallelism")


def scaling_regimes(rows, *, perfect: float = -0.8, flat: float = -0.2) -> list[dict]:
    """Shallue et al.'s (2018) regimes, read from a sweep's steps to target (lesson 02).

    Per batch size the best run that reached the target (fewest steps; their regimes assume an lr
    tuned per batch, the nearest here is the better of the two rules), then for each step up in batch
    the log-log slope of steps to target from the last batch that reached it: at most ``perfect`` (-1
    halves the steps per doubling): perfect scaling; at least ``flat``: maximal data parallelism (the
    steps stopped falling); between: diminishing returns. A batch where no run reached the target is
    "not reached (the rules broke)". ``resolved`` says whether the slope is further from the nearest
    threshold than one evaluation interval (:func:`target_resolution`) at either end could move it;
    ``near regime`` names the regime across that nearest threshold (the one a tendency leans to)."""
    by_batch: dict[int, list[dict]] = {}
    for r in rows:
        by_batch.setdefault(r["batch size"], []).append(r)
    out, prev = [], None
    for b in sorted(by_batch):
        reached = [r for r in by_batch[b] if r.get("steps to target") is not None]
        row = {"batch size": b, "from batch": prev["batch size"] if prev else None, "rule": "—",
               "steps to target": None, "slope": None, "regime": None, "resolved": None}
        if not reached:
            row["regime"] = "not reached (the rules broke)"
            out.append(row)
            continue
        best = min(reached, key=lambda r: r["steps to target"])
        row.update({"rule": best.get("rule", ""), "steps to target": best["steps to target"]})
        if prev is not None:
            ratio = math.log(b / prev["batch size"])
            slope = math.log(best["steps to target"] / prev["steps to target"]) / ratio
            uncertainty = sum((x.get("resolution (steps)") or 0) / x["steps to target"] for x in (best, prev)) / ratio
            regime = REGIMES[0] if slope <= perfect else REGIMES[2] if slope >= flat else REGIMES[1]
            # the regime across the nearest threshold: a diminishing slope can lie near either neighbour
            near = REGIMES[1] if regime != REGIMES[1] else (
                REGIMES[0] if abs(slope - perfect) <= abs(slope - flat) else REGIMES[2])
            row.update({"slope": slope, "slope uncertainty": uncertainty,
                        "resolved": min(abs(slope - perfect), abs(slope - flat)) > uncertainty,
                        "regime": regime, "near regime": near})
        out.append(row)
        prev = best
    return out


def regime_table(regimes: list[dict]) -> Table:
    """:func:`scaling_regimes` as a table: each step up in batch, its slope with the uncertainty one evaluation
    interval at either end leaves, its regime, and whether that uncertainty could move it across a threshold
    (then "tendency", and the regime it leans to)."""
    t = Table(["from batch", "batch size", "rule", "steps to target", "slope", "± (evaluations)", "regime",
               "resolved"], title="Shallue's regimes: the log-log slope of steps to target per step up in batch")
    for r in regimes:
        if r["from batch"] is None and r["steps to target"] is not None:
            continue  # the smallest batch: no step up to it
        tendency = f"tendency: near {r['near regime']}" if r.get("near regime") else "—"
        t.add(**{"from batch": r["from batch"], "batch size": r["batch size"], "rule": r["rule"],
                 "steps to target": r["steps to target"], "slope": r["slope"],
                 "± (evaluations)": r.get("slope uncertainty"), "regime": r["regime"],
                 "resolved": "—" if r["resolved"] is None else "yes" if r["resolved"] else tendency})
    return t


def rule_table(rows) -> Table:
    """Per rule, from the sweep table's rows (:func:`course_lib.sweeps.sweep_rows`): the batches at which it reached
    the target, those at which it did not (diverged or out of budget), and the largest it reached it at."""
    by_rule: dict[str, list[dict]] = {}
    for r in rows:
        by_rule.setdefault(r["rule"], []).append(r)
    t = Table(["rule", "reached the target at batch", "missed it at batch", "diverged at batch", "largest reached"],
              title="Where each rule reached the target")
    for rule, rs in by_rule.items():
        rs = sorted(rs, key=lambda r: r["batch size"])
        hit = [r["batch size"] for r in rs if r["time to target (s)"] is not None]
        miss = [r["batch size"] for r in rs if r["time to target (s)"] is None and not r.get("diverged")]
        diverged = [r["batch size"] for r in rs if r.get("diverged")]
        t.add(**{"rule": rule, "reached the target at batch": _batches(hit), "missed it at batch": _batches(miss),
                 "diverged at batch": _batches(diverged), "largest reached": max(hit) if hit else "—"})
    return t


def _batches(batches: list[int]) -> str:
    return ", ".join(str(b) for b in batches) or "—"


def gap_table(results, labels, *, baseline=None):
    """Train-side vs test HR@10 at the end of each run, a ``baseline`` run (lesson 01's) labelled "baseline"; the gap
    to the HR@10 cells' four decimals."""
    gap = Table(["rule", "batch size", "epochs run", "train-side HR@10", "test HR@10", "gap"],
                title="Train-side vs test HR@10 at the end of each run")
    for label, r in zip(labels, results):
        g = r.generalization_gap
        gap.add(**{"rule": "baseline" if r is baseline else label, "batch size": r.config["global_batch_size"],
                   "epochs run": round(r.epochs, 2), "train-side HR@10": r.final_train_hr,
                   "test HR@10": r.final_hr, "gap": "—" if g is None else f"{g:+.4f}"})
    return gap


def _gap_se(r, users: int) -> float:
    """The gap's standard error: each HR@10 is a fraction of ``users`` users (a binomial error each)."""
    return math.hypot(hr_standard_error(r.final_hr, users), hr_standard_error(r.final_train_hr, users))


def gap_comparisons(results, labels, *, users: int) -> list[Comparison]:
    """Per rule, the generalization gap (train-side minus test HR@10 at the end) at its largest batch that reached
    the target minus at its smallest, against the two gaps' sampling errors. Only runs that reached the target are
    compared: a run that missed it learned less, and a model that learned little has little to overfit."""
    by_rule: dict[str, list] = {}
    for r, label in zip(results, labels):
        if r.generalization_gap is not None and r.reached:
            by_rule.setdefault(label, []).append(r)
    out = []
    for rule, runs in by_rule.items():
        runs = sorted(runs, key=lambda r: r.config["global_batch_size"])
        if len(runs) < 2:
            continue
        a, b = runs[0], runs[-1]
        out.append(compare.difference(
            f"generalization gap, {rule} rule: batch {b.config['global_batch_size']} - {a.config['global_batch_size']}",
            a.generalization_gap, _gap_se(a, users), b.generalization_gap, _gap_se(b, users),
            needed=compare.HR_EFFECT, n="1 run each", basis=f"binomial errors over {users} users"))
    return out


STEPS_EFFECT = compare.TIME_EFFECT  # at one batch a step costs the same whatever the setting: steps count as time
