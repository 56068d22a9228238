"""Lesson 03 (course_lib.lessons.l03_warmup): the sweep's steps and the deciding runs become rows, and each
verdict's outcome follows from its own interval (the evaluation spacing, the seeds' spread)."""

from types import SimpleNamespace

from course_lib.compare import LOWER, UNRESOLVED
from course_lib.lessons import l03_warmup as study
from course_lib.sweeps import Confirmed

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


def test_the_deciding_table_adds_the_first_loss_and_the_pace():
    d = Confirmed(["no warmup", "linear 20"], [[_run(12.0, 120, 0, loss1=0.508)], [_run(6.0, 60, 20, loss1=0.620)]], 1)
    rows = study.deciding_table(d, "linear 20").rows
    assert [r["loss at the first evaluation"] for r in rows] == [0.508, 0.620]
    assert [r["s per step"] for r in rows] == [0.1, 0.1]
