"""Lesson 03 (Goyal et al.): warmup against none where lesson 02's linear rule missed; it changes steps to target."""

import math
import statistics

from .. import compare
from ..metrics import hr_standard_error
from ..sweeps import target_resolution
from ..tables import Table
from .l02_linear_scaling import STEPS_EFFECT


def linear_misses(saved02: dict | None, *, dataset: str, target_hr: float, profile: str,
                  max_batch: int | None = None) -> list[int]:
    """Ascending, the batches up to ``max_batch`` where lesson 02's linear rule missed (same data, target, profile)."""
    if not saved02 or [saved02.get(k) for k in ("dataset", "target_hr", "profile")] != [dataset, target_hr, profile]:
        return []
    return sorted({r["batch size"] for r in saved02.get("rows") or []
                   if r.get("rule") == "linear" and r.get("time to target (s)") is None
                   and (max_batch is None or r["batch size"] <= max_batch)})


def rule_break_batch(saved02: dict | None, today: tuple[int, str, str], *, dataset: str, target_hr: float,
                     profile: str, max_batch: int | None = None) -> tuple[int, str, str]:
    """``(batch, rule, why)``: the smallest batch where lesson 02's linear rule missed, else ``today``'s."""
    misses = linear_misses(saved02, dataset=dataset, target_hr=target_hr, profile=profile, max_batch=max_batch)
    if misses:
        return misses[0], "linear", "the smallest batch where lesson 02's linear rule missed"
    return today[0], today[1], ("lesson 02's linear rule missed nowhere saved for this dataset, target and profile; "
                                f"{today[2]}")


def missed_run_s(saved02: dict | None, batch: int, samples_per_epoch: int, **where) -> float | None:
    """Seconds of lesson 02's linear run that missed at ``batch`` (a run without warmup here); None if unsaved."""
    if batch not in linear_misses(saved02, **where):
        return None
    r = next(r for r in saved02["rows"] if r.get("rule") == "linear" and r["batch size"] == batch)
    return r["epochs run"] * samples_per_epoch / r["samples/s"] if r.get("samples/s") and r.get("epochs run") else None


def sized_lengths(lengths: list[tuple[str, float]], *, run_s: float | None, budget_s: float, repeats: int,
                  other_s: float = 0.0) -> tuple[list[tuple[str, float]], str]:
    """``(lengths kept, line)``: the warmups ``(kind, epochs)`` whose runs of ``run_s`` (none, each, ``repeats``)
    fit ``budget_s`` besides ``other_s``; cut first the linear ones from their ends inwards, then other shapes."""
    if run_s is None:
        return list(lengths), ""
    linear = sorted((x for x in lengths if x[0] == "linear"), key=lambda x: x[1])
    order = [linear[-1 - i // 2] if i % 2 == 0 else linear[i // 2] for i in range(len(linear) - 1)]
    order += [x for x in lengths if x[0] != "linear"]
    kept = list(lengths)
    worst = lambda ls: other_s + (1 + len(ls) + repeats) * run_s  # noqa: E731
    while worst(kept) > budget_s and order:
        kept.remove(order.pop(0))
    cut = ", ".join(f"{kind} {e:g} epoch" for kind, e in lengths if (kind, e) not in kept)
    head = f"budget {budget_s:.0f} s, {1 + len(lengths) + repeats} runs of {run_s:.0f} s: {worst(lengths):.0f} s"
    return kept, head + (f"; cut {cut}: {worst(kept):.0f} s" if cut else "; it fits")


def _hr_arm(runs, users: int) -> tuple[float, float]:
    """The mean best HR@10 and its standard error: the seeds' spread and each evaluation's sampling error."""
    hrs = [r.best_hr if r.best_hr is not None else 0.0 for r in runs]
    mean = statistics.fmean(hrs)
    spread = statistics.variance(hrs) / len(hrs) if len(hrs) > 1 else 0.0
    return mean, math.sqrt(spread + hr_standard_error(mean, users) ** 2 / len(hrs))


def rescue_comparison(decide, chosen: str, *, users: int, baseline_label: str = "no warmup") -> compare.Comparison:
    """Best HR@10 in the budget, ``chosen`` - no warmup, over :class:`~course_lib.sweeps.Confirmed`'s seeds."""
    a, b = decide.runs_of(baseline_label), decide.runs_of(chosen)
    (ma, sa), (mb, sb) = _hr_arm(a, users), _hr_arm(b, users)
    return compare.difference(f"best HR@10, {chosen} - {baseline_label}", ma, sa, mb, sb, needed=compare.HR_EFFECT,
                              df=len(a) + len(b) - 2 or None, n=f"{len(a)}/{len(b)}",
                              basis=f"binomial errors, {users} users")


def _per_step(r) -> float | None:
    return r.time_to_target_s / r.steps_to_target if r.time_to_target_s is not None and r.steps_to_target else None


def steps_table(results, labels) -> Table:
    """Each run's steps to target, ± the evaluations' spacing there, its time and seconds per step."""
    return Table(["run", "warmup steps", "steps to target", "± steps", "time to target (s)", "s/step"], [
        {"run": label, "warmup steps": r.config.get("warmup_steps") or 0, "time to target (s)": r.time_to_target_s,
         "steps to target": r.steps_to_target or ("diverged" if r.diverged else "not reached"),
         "± steps": target_resolution(r) if r.steps_to_target else None, "s/step": _per_step(r)}
        for r, label in zip(results, labels)])


def steps_comparisons(results, labels, *, baseline_label: str = "no warmup") -> list[compare.Comparison]:
    """Each warmup's steps to target / no warmup's (one seed each, those that reached it), within the evaluations."""
    base = results[labels.index(baseline_label)]
    out = []
    for r, label in zip(results, labels):
        if label == baseline_label or r.steps_to_target is None or base.steps_to_target is None:
            continue
        window = max(target_resolution(x) / x.steps_to_target for x in (r, base))
        out.append(compare.ratio(f"steps to target, {label} / {baseline_label}", [base.steps_to_target],
                                 [r.steps_to_target], needed=STEPS_EFFECT, resolution=window,
                                 basis=f"one seed; evaluations {window:.0%} apart"))
    return out


def deciding_table(decide, rung: str) -> Table:
    """:meth:`Confirmed.table` with each run's loss at its first evaluation (an early blow-up shows there), s/step."""
    t = decide.table(chosen=rung)
    t.columns = t.columns + ["first loss", "s/step"]
    runs = [r for label in decide.labels for r in decide.runs_of(label)]  # the order Confirmed.table adds them
    for row, r in zip(t.rows, runs):
        loss = (getattr(r, "curve", None) or {}).get("loss", [])
        row["first loss"] = loss[1] if len(loss) > 1 else None  # index 0 is before training
        row["s/step"] = _per_step(r)
    return t
