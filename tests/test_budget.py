"""The lessons' time budgets and the sizing of a lesson's runs from a measured pace."""

import pytest

from course_lib.budget import BUDGETS_S, Runs, budget_line, budget_s, size_plan, total_s


def lesson07_runs(step_small, step_large):
    # lesson 07's full plan on a CPU: 6 small-batch sweep runs (+1 extension each of 2 sweeps) of 240 steps,
    # 10 large-batch runs (6 sweep + 2 seeds + 2 ablations, +2 extensions each of 2 sweeps) of 120 steps
    return [Runs("batch 32", 6, 240, step_small, sweeps=2, extensions=1, overhead_s=3),
            Runs("batch 256", 10, 120, step_large, sweeps=2, extensions=2, overhead_s=3)]


def test_budgets_sum_to_about_55_minutes_on_a_cpu():
    assert 45 * 60 <= total_s("cpu") <= 58 * 60
    assert budget_s("07_bert_lamb") == budget_s("07") == 700 and budget_s("04_lars") == 480
    assert all(GPU <= BUDGETS_S[k] for k, GPU in __import__("course_lib.budget").budget.GPU_BUDGETS_S.items())
    assert "07 700" in budget_line() and f"{total_s('cpu')} s" in budget_line()
    with pytest.raises(ValueError, match="no budget"):
        budget_s("99_nothing")


def test_a_fast_machine_runs_the_full_plan():
    plan = size_plan(lesson07_runs(0.01, 0.08), 700, floor_scale=1 / 3, other_s=30, min_extensions=1)
    assert not plan.cut and plan.scale == 1 and plan.extensions == 2 and plan.planned_s <= 700
    assert "nothing cut" in plan.line() and "budget 700 s" in plan.line()


def test_a_slow_machine_cuts_extensions_then_steps_to_fit():
    plan = size_plan(lesson07_runs(0.13, 0.96), 700, floor_scale=1 / 3, other_s=30, min_extensions=1)
    assert plan.cut and not plan.over_budget and plan.planned_s <= 700
    assert plan.extensions == 1 and 1 / 3 <= plan.scale < 1  # one edge extension kept: a best at the edge is unfound
    line = plan.line()
    assert "edge extensions per sweep 2 -> 1" in line and "steps per run x" in line and "0.96 s/step" in line
    assert f"batch 256 120 -> {plan.steps(120)}" in line


def test_a_too_slow_machine_runs_the_floor_and_says_so():
    plan = size_plan(lesson07_runs(1.0, 8.0), 700, floor_scale=1 / 3, other_s=30, min_extensions=1)
    assert plan.over_budget and plan.scale == pytest.approx(1 / 3) and plan.planned_s > 700
    assert "Even this floor is over the budget" in plan.line()


def test_no_extensions_to_cut_goes_straight_to_steps():
    plan = size_plan([Runs("race", 12, 456, 0.05)], 200, floor_scale=0.5)
    assert plan.extensions == 0 and plan.scale < 1 and "edge extensions" not in plan.line()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="floor_scale"):
        size_plan([Runs("x", 1, 10, 0.1)], 10, floor_scale=0)
    with pytest.raises(ValueError, match="positive"):
        size_plan([Runs("x", 1, 10, 0.0)], 10, floor_scale=0.5)


def test_make_course_states_the_budgets_up_front():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci"))
    import run_notebooks

    nbs = [Path("notebooks/04_lars.ipynb"), Path("notebooks/07_bert_lamb.ipynb")]
    each, line = run_notebooks.budgets(nbs, "full")
    assert each == {"04_lars.ipynb": 480, "07_bert_lamb.ipynb": 700} and "1180 s" in line and "07 700" in line
    assert run_notebooks.budgets(nbs, "smoke") == ({}, "")
