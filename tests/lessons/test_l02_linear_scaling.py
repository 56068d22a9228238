"""Lesson 02 (course_lib.lessons.l02_linear_scaling): the regimes and the rules' reach are counted from the sweep's
rows, and each verdict's outcome follows from its own interval."""


import pytest

import course_lib.train.ncf as train
from course_lib.compare import HIGHER, SAME, UNRESOLVED
from course_lib.lessons import l02_linear_scaling as study


def _sweep(resolution=20):
    return [{"batch size": 256, "rule": "baseline", "steps to target": 19200, "resolution (steps)": 100},
            {"batch size": 1024, "rule": "sqrt", "steps to target": 4800, "resolution (steps)": 30},
            {"batch size": 4096, "rule": "linear", "steps to target": 2400, "resolution (steps)": resolution},
            {"batch size": 4096, "rule": "sqrt", "steps to target": 2600, "resolution (steps)": resolution},
            {"batch size": 16384, "rule": "sqrt", "steps to target": 2300, "resolution (steps)": resolution},
            {"batch size": 65536, "rule": "sqrt", "steps to target": None, "resolution (steps)": None}]


def test_regimes_are_read_from_the_steps_to_target_slope():
    regimes = study.scaling_regimes(_sweep())
    assert [r["regime"] for r in regimes] == [None, "perfect scaling", "diminishing returns",
                                              "maximal data parallelism", "not reached"]
    assert regimes[1]["slope"] == pytest.approx(-1.0) and regimes[2]["rule"] == "linear"  # the better rule per batch
    assert regimes[2]["slope"] == pytest.approx(-0.5) and regimes[2]["resolved"]
    table = study.regime_table(regimes)
    assert [r["batch size"] for r in table.rows] == [1024, 4096, 16384, 65536]  # the smallest batch has no step up
    assert table.rows[0]["resolved"] == "yes" and table.rows[-1].get("resolved") is None


def test_a_slope_one_evaluation_could_move_across_a_threshold_is_a_tendency():
    coarse = study.scaling_regimes([{"batch size": 256, "steps to target": 200, "resolution (steps)": 100},
                                    {"batch size": 1024, "steps to target": 60, "resolution (steps)": 30}])
    assert not coarse[1]["resolved"] and coarse[1]["slope uncertainty"] == pytest.approx((0.5 + 0.5) / 1.3863, 1e-3)
    assert study.regime_table(coarse).rows[0]["resolved"].startswith("tendency: near")


def test_the_rule_table_says_where_each_rule_reached_the_target():
    rows = [{"rule": "linear", "batch size": b, "time to target (s)": t, "diverged": d}
            for b, t, d in ((1024, 5.0, False), (16384, None, False), (65536, None, True))]
    rows += [{"rule": "sqrt", "batch size": b, "time to target (s)": 4.0, "diverged": False} for b in (1024, 65536)]
    linear, sqrt = study.rule_table(rows).rows
    assert linear["reached at"] == "1024" and linear["missed at"] == "16384"
    assert linear["diverged at"] == "65536" and sqrt["largest reached"] == 65536


def _run(batch, test_hr, train_hr, epochs=1.0, reached=True):
    return train.TrainResult(config={"global_batch_size": batch}, dataset="x", data_source="", synthetic=True,
                             device="cpu", world_size=1, target_hr=0.7, time_to_target_s=1.0 if reached else None,
                             steps_to_target=1 if reached else None, epochs_to_target=1.0 if reached else None,
                             epochs=epochs, steps=1, samples=1, train_time_s=1.0, eval_time_s=0.0, samples_per_s=1.0,
                             phase_time_s={}, final_hr=test_hr, final_train_hr=train_hr)


def test_a_gap_that_grew_by_ten_points_is_higher_and_one_that_held_is_not():
    runs = [_run(256, 0.77, 0.81), _run(65536, 0.76, 0.90, 3.0), _run(256, 0.77, 0.81), _run(65536, 0.77, 0.815)]
    linear, sqrt = study.gap_comparisons(runs, ["linear", "linear", "sqrt", "sqrt"], users=6040)
    assert linear.outcome == HIGHER and linear.estimate == pytest.approx(0.10)
    assert sqrt.outcome in (SAME, UNRESOLVED) and not sqrt.decided
    assert study.gap_comparisons(runs, ["linear", "linear", "sqrt", "sqrt"], users=50)[1].outcome == UNRESOLVED


def test_a_run_that_missed_the_target_is_not_compared_for_its_gap():
    runs = [_run(256, 0.7563, 0.7997, 0.9), _run(65536, 0.4184, 0.4295, 3.0, reached=False)]
    assert study.gap_comparisons(runs, ["linear", "linear"], users=6040) == []


