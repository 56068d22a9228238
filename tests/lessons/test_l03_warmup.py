"""Lesson 03 (course_lib.lessons.l03_warmup): the sweep's steps and the deciding runs become rows, and each
verdict's outcome follows from its own interval (the evaluation spacing, the seeds' spread)."""

from types import SimpleNamespace

from course_lib.compare import HIGHER, LOWER, UNRESOLVED
from course_lib.lessons import l03_warmup as study

LABELS = ["no warmup", "linear 10", "linear 20", "linear 40", "exponential 20"]


def _run(t, steps, warm, kind="linear", diverged=False, hr=0.8, loss1=0.5, seed=0):
    curve = {"step": [0] + ([steps - 5, steps] if steps else [100]), "loss": [0.69, loss1]}
    return SimpleNamespace(time_to_target_s=t, steps_to_target=steps, diverged=diverged, best_hr=hr, final_hr=hr,
                           config={"warmup_steps": warm, "warmup": kind, "seed": seed}, curve=curve)


def _sweep():
    return [_run(12.0, 120, 0), _run(9.0, 90, 10), _run(6.0, 60, 20), _run(11.8, 118, 40),
            _run(7.0, 70, 20, "exponential")]


def test_warmups_that_took_far_fewer_steps_are_lower_and_a_close_one_is_unresolved():
    comps = {c.question: c for c in study.steps_comparisons(_sweep(), LABELS)}
    assert comps["steps to target, linear 20 / no warmup"].outcome == LOWER  # 60 against 120 steps
    assert comps["steps to target, linear 40 / no warmup"].outcome == UNRESOLVED  # 118 against 120, 5 apart
    assert comps["steps to target, linear 10 / no warmup"].n == "1/1"


def test_a_run_without_warmup_that_diverged_gives_no_steps_ratio_and_the_table_says_so():
    runs = _sweep()
    runs[0] = _run(None, None, 0, diverged=True, hr=None)
    assert study.steps_comparisons(runs, LABELS) == []
    row = study.steps_table(runs, LABELS).rows[0]
    assert row["steps to target"] == "diverged" and row["s per step"] is None
    assert study.steps_table(runs, LABELS).rows[2]["s per step"] == 0.1


def _decide(base, warm, other=None):
    runs = {"no warmup": base, "linear 20": warm, **({"linear 10": other} if other else {})}

    def table(chosen):
        t = SimpleNamespace(columns=["setting"], rows=[{"setting": label} for label, rs in runs.items() for _ in rs])
        return t

    return SimpleNamespace(labels=list(runs), best_label="linear 20", runs_of=lambda label: runs[label], table=table)


def test_warmup_faster_and_in_fewer_steps_on_every_seed_is_decided_both_ways():
    d = _decide([_run(12.0, 120, 0), _run(12.4, 124, 0, seed=1)], [_run(6.0, 60, 20), _run(6.1, 62, 20, seed=1)])
    time, steps = study.deciding_comparisons(d, "linear 20")
    assert time.question == "time to target, no warmup / linear 20" and time.outcome == HIGHER
    assert steps.outcome == HIGHER and steps.n == "2/2"


def test_faster_on_the_clock_in_the_same_steps_is_not_credited_to_warmup():
    """Faster on both seeds (9.87 / 9.16 s against 11.72 / 10.80 s) in 95 / 96 steps against 100 / 92: what the clock
    saved is the pace the steps ran at, so the steps give no verdict."""
    d = _decide([_run(11.72, 100, 0), _run(10.80, 92, 0, seed=1)], [_run(9.87, 95, 20), _run(9.16, 96, 20, seed=1)])
    time, steps = study.deciding_comparisons(d, "linear 20")
    assert steps.outcome == UNRESOLVED and time.estimate > 1


def test_the_other_warmup_is_compared_with_the_chosen_one_too():
    d = _decide([_run(12.0, 120, 0), _run(12.4, 124, 0, seed=1)], [_run(9.579, 96, 20), _run(9.547, 100, 20, seed=1)],
                [_run(9.371, 95, 10), _run(9.914, 96, 10, seed=1)])
    comps = {c.question: c for c in study.deciding_comparisons(d, "linear 20")}
    assert comps["time to target, linear 10 / linear 20"].outcome == UNRESOLVED  # means 0.08 s apart, seeds disagree


def test_the_deciding_table_adds_the_first_loss_and_the_pace():
    d = _decide([_run(12.0, 120, 0, loss1=0.508)], [_run(6.0, 60, 20, loss1=0.620)])
    rows = study.deciding_table(d, "linear 20").rows
    assert [r["loss at the first evaluation"] for r in rows] == [0.508, 0.620]
    assert [r["s per step"] for r in rows] == [0.1, 0.1]
