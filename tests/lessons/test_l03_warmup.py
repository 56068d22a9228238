"""Lesson 03 (course_lib.lessons.l03_warmup): the sweep's steps and the deciding runs become rows, and each
verdict's outcome follows from its own interval (the evaluation spacing, the seeds' spread)."""

from types import SimpleNamespace

import _histories as H
from course_lib.compare import HIGHER, LOWER, SAME, UNRESOLVED
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
    assert row["steps to target"] == "diverged" and row["s/step"] is None
    assert study.steps_table(runs, LABELS).rows[2]["s/step"] == 0.1


def test_the_deciding_table_adds_the_first_loss_and_the_pace():
    d = Confirmed(["no warmup", "linear 20"], [[_run(12.0, 120, 0, loss1=0.508)], [_run(6.0, 60, 20, loss1=0.620)]], 1)
    rows = study.deciding_table(d, "linear 20").rows
    assert [r["first loss"] for r in rows] == [0.508, 0.620]
    assert [r["s/step"] for r in rows] == [0.1, 0.1]


TODAY = (65536, "sqrt", "4x the batch of the rung below (16384)")  # the next batch up from lesson 02's sqrt rung


def _chosen(history: str, **where):
    where = {"dataset": H.DATASET, "target_hr": H.TARGET_HR, "profile": "full", **where}
    return study.rule_break_batch(H.LESSON02_RULES[history], TODAY, **where)


def test_warmup_goes_to_the_smallest_batch_where_lesson02s_linear_rule_missed_the_target():
    assert _chosen("02 linear rule missed from 16384 on")[:2] == (16384, "linear")
    assert _chosen("02 linear rule diverged at 4096")[:2] == (4096, "linear")  # a diverged run missed it too


def test_where_the_linear_rule_missed_nowhere_here_the_batch_is_the_next_one_up_with_a_fixed_status_line():
    for history in ("02 missing", "02 linear rule reached everywhere", "02 on another dataset",
                    "02 from the other profile", "02 without its dataset"):
        batch, rule, why = _chosen(history)
        assert (batch, rule) == TODAY[:2], history
        assert why.endswith(TODAY[2])
    assert _chosen("02 linear rule missed from 16384 on", target_hr=0.7)[:2] == TODAY[:2]  # another target


def test_a_missed_batch_too_large_for_the_data_to_warm_up_over_is_passed_over():
    assert _chosen("02 linear rule missed from 16384 on", max_batch=32768)[0] == 16384
    assert _chosen("02 linear rule missed from 16384 on", max_batch=8192)[:2] == TODAY[:2]


def _decide(no_warmup_hrs, warmup_hrs):
    runs = [[_run(None, None, 0, hr=hr, seed=s) for s, hr in enumerate(no_warmup_hrs)],
            [_run(6.0, 60, 20, hr=hr, seed=s) for s, hr in enumerate(warmup_hrs)]]
    return Confirmed(["no warmup", "linear 20"], runs, 1)


def test_warmup_that_reached_the_target_where_none_stayed_far_below_it_is_a_rescue():
    c = study.rescue_comparison(_decide([0.39, 0.40], [0.65, 0.651]), "linear 20", users=6040)
    assert c.outcome == HIGHER and c.n == "2/2"


def test_warmup_and_none_both_at_the_target_are_the_same_and_seeds_that_disagree_leave_it_unresolved():
    both = _decide([0.650, 0.651, 0.650], [0.651, 0.650, 0.651])  # 3 seeds over ml-20m's users: within a point
    assert study.rescue_comparison(both, "linear 20", users=138493).outcome == SAME
    assert study.rescue_comparison(both, "linear 20", users=6040).outcome == UNRESOLVED  # ml-1m: too few users
    assert study.rescue_comparison(_decide([0.40, 0.62], [0.65, 0.651]), "linear 20", users=6040).outcome == UNRESOLVED


def test_a_diverged_run_counts_as_no_hr():
    runs = [[_run(None, None, 0, diverged=True, hr=None)], [_run(6.0, 60, 20, hr=0.65)]]
    c = study.rescue_comparison(Confirmed(["no warmup", "linear 20"], runs, 1), "linear 20", users=6040)
    assert c.estimate == 0.65 and c.outcome == HIGHER


LENGTHS = [("linear", 0.25), ("linear", 0.5), ("linear", 1.0), ("exponential", 0.5)]


def test_where_the_worst_case_is_over_the_budget_the_linear_warmups_go_from_the_ends_then_the_other_shapes():
    # 1 + 4 + 3 runs of 15 s = 120 s: it fits a 120 s budget
    assert study.sized_lengths(LENGTHS, run_s=15.0, budget_s=120, repeats=3)[0] == LENGTHS
    kept, line = study.sized_lengths(LENGTHS, run_s=20.0, budget_s=120, repeats=3)  # 160 s: two runs cut
    assert kept == [("linear", 0.5), ("exponential", 0.5)] and "linear 1 epoch" in line
    assert study.sized_lengths(LENGTHS, run_s=60.0, budget_s=120, repeats=3)[0] == [("linear", 0.5)]  # the floor
    assert study.sized_lengths(LENGTHS, run_s=None, budget_s=120, repeats=3) == (LENGTHS, "")


def test_a_run_without_warmup_costs_what_lesson02s_missed_run_took_and_nothing_where_it_reached_the_target():
    where = {"dataset": H.DATASET, "target_hr": H.TARGET_HR, "profile": "full"}
    record = H.LESSON02_RULES["02 linear rule missed from 16384 on"]
    assert study.missed_run_s(record, 16384, 200_000, **where) == 3.0 * 200_000 / 1e5  # its epochs at its pace
    assert study.missed_run_s(record, 4096, 200_000, **where) is None  # it reached the target there
    assert study.missed_run_s(H.LESSON02_RULES["02 on another dataset"], 16384, 200_000, **where) is None
