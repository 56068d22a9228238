"""Lesson 02, the linear scaling rule: where each rule reached the target, Shallue's regimes, the generalization gap."""

import math

from .. import compare
from ..metrics import hr_standard_error
from ..sweeps import sweep_table
from ..tables import Table

REGIMES = ("perfect scaling", "diminishing returns", "maximal data parallelism")
STEPS_EFFECT = compare.TIME_EFFECT  # at one batch a step costs the same whatever the setting: steps count as time


def _by(items, key) -> dict:
    out = {}
    for x in items:
        out.setdefault(key(x), []).append(x)
    return out


def scaling_regimes(rows, *, perfect: float = -0.8, flat: float = -0.2) -> list[dict]:
    """Shallue et al.'s (2018) regimes from the log-log slope of each batch's fewest steps to target (their regimes
    assume an lr tuned per batch); ``resolved``: the evaluation intervals cannot move it across a threshold."""
    out, prev = [], None
    for b, runs in sorted(_by(rows, lambda r: r["batch size"]).items()):
        reached = [r for r in runs if r.get("steps to target") is not None]
        row = {"batch size": b, "from batch": prev["batch size"] if prev else None, "rule": "—",
               "steps to target": None, "slope": None, "regime": None if reached else "not reached", "resolved": None}
        out.append(row)
        if not reached:
            continue
        best = min(reached, key=lambda r: r["steps to target"])
        row.update({"rule": best.get("rule", ""), "steps to target": best["steps to target"]})
        if prev is not None:
            ratio = math.log(b / prev["batch size"])
            slope = math.log(best["steps to target"] / prev["steps to target"]) / ratio
            uncertainty = sum((x.get("resolution (steps)") or 0) / x["steps to target"] for x in (best, prev)) / ratio
            regime = REGIMES[0] if slope <= perfect else REGIMES[2] if slope >= flat else REGIMES[1]
            near = REGIMES[1] if regime != REGIMES[1] else (
                REGIMES[0] if abs(slope - perfect) <= abs(slope - flat) else REGIMES[2])
            row.update({"slope": slope, "slope uncertainty": uncertainty, "regime": regime, "near regime": near,
                        "resolved": min(abs(slope - perfect), abs(slope - flat)) > uncertainty})
        prev = best
    return out


def regime_table(regimes: list[dict]) -> Table:
    """Each step up in batch: its slope ± the evaluations, its regime, and where unresolved its tendency."""
    cols = ["from batch", "batch size", "rule", "steps to target", "slope", "±", "regime", "resolved"]
    return Table(cols, [
        {**{k: r.get(k) for k in cols}, "±": r.get("slope uncertainty"), "resolved": None if r["resolved"] is None
         else "yes" if r["resolved"] else f"tendency: near {r['near regime']}"}
        for r in regimes if r["from batch"] is not None or r["steps to target"] is None])


def rule_table(rows) -> Table:
    """Per rule: the batches where it reached the target, missed it and diverged, and the largest reached."""
    t = Table(["rule", "reached at", "missed at", "diverged at", "largest reached"])
    for rule, rs in _by(rows, lambda r: r["rule"]).items():
        hit = sorted(r["batch size"] for r in rs if r["time to target (s)"] is not None)
        missed = [r for r in rs if r["time to target (s)"] is None]
        cells = {"reached at": hit, "missed at": [r["batch size"] for r in missed if not r.get("diverged")],
                 "diverged at": [r["batch size"] for r in missed if r.get("diverged")]}
        t.add(rule=rule, **{k: ", ".join(str(b) for b in sorted(v)) or None for k, v in cells.items()},
              **{"largest reached": max(hit, default=None)})
    return t


def gap_table(results, labels, *, baseline=None) -> Table:
    """Train-side and test (final) HR@10 at each run's end and their gap; ``baseline`` labelled so."""
    labels = ["baseline" if r is baseline else label for r, label in zip(results, labels)]
    t = sweep_table(results, labels, columns=["rule", "batch size", "epochs run", "train HR@10", "final HR@10"])
    t.columns.append("gap")
    for row, r in zip(t.rows, results):
        row["gap"] = None if r.generalization_gap is None else f"{r.generalization_gap:+.4f}"
    return t


def gap_comparisons(results, labels, *, users: int) -> list[compare.Comparison]:
    """Per rule, the gap at the largest batch that reached the target minus at the smallest (a run that missed
    learned less, so had less to overfit: left out), within binomial errors over ``users``."""
    reached = [(label, r) for r, label in zip(results, labels) if r.generalization_gap is not None and r.reached]
    out = []
    for rule, pairs in _by(reached, lambda p: p[0]).items():
        runs = sorted((r for _, r in pairs), key=lambda r: r.config["global_batch_size"])
        a, b = runs[0], runs[-1]
        if a is not b:
            batches = f"batch {b.config['global_batch_size']} - {a.config['global_batch_size']}"
            se = [math.hypot(hr_standard_error(r.final_hr, users), hr_standard_error(r.final_train_hr, users))
                  for r in (a, b)]
            out.append(compare.difference(
                f"generalization gap, {rule} rule: {batches}", a.generalization_gap, se[0], b.generalization_gap,
                se[1], needed=compare.HR_EFFECT, n="1 run each", basis=f"binomial errors over {users} users"))
    return out
