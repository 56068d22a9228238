"""Lesson 02, the linear scaling rule: what a batch sweep shows (Shallue's regimes from the
steps-to-target slope, the generalization gap against its sampling error).
"""

from __future__ import annotations
import math
from ..metrics import hr_standard_error
from ..tables import Table, cell_text


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
            row.update({"slope": slope, "resolved": min(abs(slope - perfect), abs(slope - flat)) > uncertainty,
                        "regime": regime, "near regime": near})
        out.append(row)
        prev = best
    return out


def regime_reading(regimes: list[dict]) -> str:
    """The regimes as sentences: each step up in batch, its slope and regime, and where perfect scaling ended."""
    lines, boundary, last = [], None, None  # last: the latest batch that reached the target
    tendency = False  # #37 (full run 2026-12-01): the end of perfect scaling rests on a step known only as a tendency
    for r in regimes:
        if r["steps to target"] is None:
            lines.append(f"batch {r['batch size']}: {r['regime']}")
            boundary = boundary or last
            continue
        if r["slope"] is not None:
            coarse = "" if r["resolved"] else f" (within one evaluation interval of {r['near regime']}: a tendency)"
            lines.append(f"batch {r['from batch']} -> {r['batch size']}: slope {r['slope']:.2f}, {r['regime']}{coarse}")
            if r["regime"] != REGIMES[0] and boundary is None:
                boundary, tendency = r["from batch"], not r["resolved"]
        last = r["batch size"]
    if not any(r["slope"] is not None for r in regimes):
        return "\n".join(lines + ["fewer than two batch sizes reached the target: no slope to read"])
    if boundary and tendency:
        lines.append(f"perfect scaling tended to end after batch {boundary}: the step that says so is within one "
                     "evaluation interval of perfect scaling, so it is a tendency, not a measured end")
    else:
        lines.append(f"perfect scaling ended after batch {boundary}" if boundary else
                     "perfect scaling held over every batch measured")
    return "\n".join(lines)


def rule_reading(rows) -> str:
    """Per rule, up to which batch it reached the target and how it missed beyond it, then which rules reached it at
    the largest batch: the verdicts on the lesson's "Predict first" questions, read from the sweep table's rows
    (:func:`course_lib.sweeps.sweep_rows`; read r10b 02-H2, tenth full run: the linear rule missed the target at
    16384 and 65536, final HR@10 0.6273 and 0.4184 after 3 epochs, while the sqrt rule reached it at every batch,
    and no sentence said so: :func:`regime_reading` reads only the better rule at each batch). HR@10 and epochs are
    quoted as the table's cells print them."""
    by_rule: dict[str, list[dict]] = {}
    for r in rows:
        by_rule.setdefault(r["rule"], []).append(r)
    if not by_rule:
        return "no runs to read"

    def how(missed):
        said = "; ".join(f"batch {r['batch size']}: diverged" if r.get("diverged") else
                         f"batch {r['batch size']}: final HR@10 {cell_text(r['final HR@10'])} after "
                         f"{cell_text(r['epochs run'])} epochs" for r in missed)
        return f" ({said}{'' if any(r.get('diverged') for r in missed) else '; none diverged'})"

    lines = []
    for rule, rs in by_rule.items():
        rs = sorted(rs, key=lambda r: r["batch size"])
        hit = [r for r in rs if r["time to target (s)"] is not None]
        miss = [r for r in rs if r["time to target (s)"] is None]
        if not miss:
            lines.append(f"{rule}: reached the target at every batch measured, {rs[0]['batch size']} to "
                         f"{rs[-1]['batch size']}")
        elif not hit:
            lines.append(f"{rule}: reached the target at no batch measured{how(miss)}")
        elif miss[0]["batch size"] > hit[-1]["batch size"]:
            lines.append(f"{rule}: reached the target up to batch {hit[-1]['batch size']}, missed it from batch "
                         f"{miss[0]['batch size']} on{how(miss)}")
        else:
            lines.append(f"{rule}: missed the target at batch {', '.join(str(r['batch size']) for r in miss)}"
                         f"{how(miss)}, reached it at batch {', '.join(str(r['batch size']) for r in hit)}")
    top = max(r["batch size"] for r in rows)
    at_top = {rule: any(r["batch size"] == top and r["time to target (s)"] is not None for r in rs)
              for rule, rs in by_rule.items() if any(r["batch size"] == top for r in rs)}
    yes, no = [k for k, v in at_top.items() if v], [k for k, v in at_top.items() if not v]
    if len(at_top) > 1:
        lines.append(f"at the largest batch, {top}: " + (
            "every rule reached the target" if not no else "no rule reached the target" if not yes else
            f"{' and '.join(yes)} reached the target, {' and '.join(no)} did not"))
    return "\n".join(lines)


def gap_table(results, labels, *, baseline=None):
    """The table :func:`gap_reading` reads (lesson 02, #37 item 1: one source for a table and its reading):
    train-side vs test HR@10 at the end of each run, a ``baseline`` run (lesson 01's) labelled "baseline"."""
    gap = Table(["rule", "batch size", "epochs run", "train-side HR@10", "test HR@10", "gap"],
                title="Train-side vs test HR@10 at the end of each run")
    for label, r in zip(labels, results):
        # the gap as gap_reading quotes it, to the HR@10 cells' four decimals (read r8a 02-2, eighth full run:
        # "0.04338", "0.01109" in the table, "+0.0434", "+0.0111" in the reading, whose noise is "twice the sampling
        # error, 0.0213")
        g = r.generalization_gap
        gap.add(**{"rule": "baseline" if r is baseline else label, "batch size": r.config["global_batch_size"],
                   "epochs run": round(r.epochs, 2), "train-side HR@10": r.final_train_hr,
                   "test HR@10": r.final_hr, "gap": "—" if g is None else f"{g:+.4f}"})
    return gap


def gap_reading(results, labels, *, users: int) -> str:
    """The generalization gap (train-side minus test HR@10 at the end) against the batch, per rule, read
    from the runs (lesson 02): at the smallest and the largest batch, whether it grew or shrank by more
    than twice its sampling error (each HR@10 is a fraction of ``users`` users: a binomial standard
    error), and the epochs each had run — a run that trained longer has seen its training items more often.

    Only runs that reached the target are compared (read r10b 02-H1, tenth full run: "linear: gap +0.0434 at batch
    256 (0.90 epochs) -> +0.0111 at batch 65536 (3.00 epochs): it shrank by 0.0323" over a 65536 run that missed the
    target at test HR@10 0.4184, train side 0.4295: a model that learned little has little to overfit, so its small
    gap says nothing of generalization). The runs that missed it are named, with their test HR@10 and gap."""
    by_rule: dict[str, list] = {}
    for r, label in zip(results, labels):
        if r.generalization_gap is not None:
            by_rule.setdefault(label, []).append(r)
    lines = []
    for rule, runs in by_rule.items():
        runs = sorted(runs, key=lambda r: r.config["global_batch_size"])
        if len(runs) < 2:
            continue
        reached = [r for r in runs if r.reached]
        missed = [r for r in runs if not r.reached]
        batches = lambda rs: ", ".join(str(r.config["global_batch_size"]) for r in rs)  # noqa: E731
        low = "" if not missed else (
            f"; batch {batches(missed)} missed the target (test HR@10 {', '.join(f'{r.final_hr:.4f}' for r in missed)}"
            f"): {'its gap' if len(missed) == 1 else 'their gaps'} "
            f"({', '.join(f'{r.generalization_gap:+.4f}' for r in missed)}) "
            f"{'is that of a model' if len(missed) == 1 else 'are those of models'} that learned less, not a "
            "measure of generalization")
        if len(reached) < 2:
            lines.append(f"{rule}: fewer than two of its runs reached the target, so no gap compares like with like"
                         + low)
            continue
        a, b = reached[0], reached[-1]
        se = lambda r: math.hypot(hr_standard_error(r.final_hr, users), hr_standard_error(r.final_train_hr, users))  # noqa: E731
        noise = 2 * math.hypot(se(a), se(b))
        change = b.generalization_gap - a.generalization_gap
        trend = (f"it grew by {change:.4f}" if change > noise else f"it shrank by {-change:.4f}" if change < -noise
                 else f"no measurable change (within twice the sampling error, {noise:.4f})")
        largest = ", the largest that reached the target" if b is not runs[-1] else ""
        lines.append(f"{rule}: gap {a.generalization_gap:+.4f} at batch {a.config['global_batch_size']} "
                     f"({a.epochs:.2f} epochs) -> {b.generalization_gap:+.4f} at batch {b.config['global_batch_size']} "
                     f"({b.epochs:.2f} epochs{largest}): {trend}{low}")
    if not lines:
        return "fewer than two runs per rule were evaluated on the train side: no gap to compare"
    return "\n".join(lines)
