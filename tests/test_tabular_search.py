"""Lesson 12's tabular benchmark: strategies replayed on recorded learning curves, its table and verdict."""

import math

import pytest

from course_lib import optuna_search as search
from course_lib.lessons import l12_hyperparameter_search as study
from course_lib.tables import Table

from _quoted import unquoted


def _pool(n_bad=30, R=8, late_bloomer=False):
    """``n_bad`` configurations that plateau below 0.5 and two that climb to 0.9 (late bloomers: last until the end)."""
    bad = [[0.1 + (0.1 + 0.01 * i) * min(1.0, r / 2) for r in range(1, R + 1)] for i in range(n_bad)]
    if late_bloomer:
        good = [0.05 + 0.85 * (r / R) ** 3 for r in range(1, R + 1)]
    else:
        good = [0.5 + 0.4 * r / R for r in range(1, R + 1)]
    return bad + [good, list(good)]


def test_pool_target_is_the_top_fraction():
    curves = [[0.1 * i] for i in range(1, 21)]
    assert search.pool_target(curves, 0.05) == pytest.approx(2.0)
    assert search.pool_target(curves, 0.1) == pytest.approx(1.9)
    with pytest.raises(ValueError, match="top_fraction"):
        search.pool_target(curves, 0.0)


def test_random_search_spends_full_curves_and_counts_the_points_to_the_target():
    curves = [[0.1, 0.2, 0.3], [0.1, 0.6, 0.9]]
    r = search.replay_search(curves, "random", budget=6, target=0.5, seed=0)
    assert r["spent"] == 6 and r["best"] == 0.9
    assert r["reached_at"] in (2, 5)  # the good one first (2 points in), or after one full bad curve (3 + 2)


def test_successive_halving_and_hyperband_find_an_early_leader_with_fewer_points():
    curves = _pool()
    runs = search.replay_strategies(curves, budget=60 * 8, target=0.8, seeds=40, reduction_factor=2)
    med = {st: study.statistics.median([math.inf if r["reached_at"] is None else r["reached_at"] for r in rs])
           for st, rs in runs.items()}
    assert med["successive_halving"] < med["random"] and med["hyperband"] < med["random"]
    assert all(r["spent"] <= 60 * 8 for rs in runs.values() for r in rs)


def test_hyperband_brackets_follow_li_et_al():
    assert search.hyperband_plan(81, 3) == [(81, 1), (34, 3), (15, 9), (8, 27), (5, 81)]  # their Table 1
    assert search.hyperband_plan(8, 2) == [(8, 1), (6, 2), (4, 4), (4, 8)]
    # one round of R = 8, eta = 2: 8@1 -> 4@2 -> 2@4 -> 1@8; 6@2 -> 3@4 -> 1@8; 4@4 -> 2@8; 4@8
    one_round = (8 + 4 + 2 * 2 + 4) + (6 * 2 + 3 * 2 + 4) + (4 * 4 + 2 * 4) + 4 * 8
    curves = [[0.1 * (i % 7) + 0.001 * r for r in range(1, 9)] for i in range(20)]
    r = search.replay_search(curves, "hyperband", budget=one_round + 1, target=99.0, seed=0, reduction_factor=2)
    assert r["spent"] == one_round + 1  # the second round had begun: one point into its first bracket
    rising = [[r / 10 for r in range(1, 9)]] * 20  # 0.8 only at the last point
    sh = search.replay_search(rising, "successive_halving", budget=20, target=0.8, seed=0, reduction_factor=2)
    assert sh["spent"] == 20 and sh["reached_at"] == 20  # the last survivor trains to the end


def test_replay_refuses_an_unknown_strategy():
    with pytest.raises(ValueError, match="strategy='grid'"):
        search.replay_search([[0.1]], "grid", budget=1, target=0.5, seed=0)


def test_median_ratio_interval_brackets_the_ratio():
    ratio, lo, hi = search.median_ratio_interval([1.0] * 50 + [2.0] * 50, [4.0] * 100)
    assert lo <= ratio <= hi and hi < 1
    assert search.median_ratio_interval([math.inf] * 3, [math.inf] * 3)[0] == 1.0


SPEC = {"pool_eval_every": 0.5, "replay_budget": 60 * 8, "replay_seeds": 40, "top_fraction": 0.05,
        "reduction_factor": 2}


def _reading(curves):
    rep = study.replay({"curves": curves}, SPEC)
    table = study.replay_table(rep, SPEC)
    return table, study.replay_verdict(table)


def test_replay_verdict_quotes_its_table_and_reads_both_outcomes():
    table, said = _reading(_pool())
    best = said.split(" ")[0]
    assert best in ("successive_halving", "hyperband") and f"Decided: {best}'s early cuts found" in said
    other = "hyperband" if best == "successive_halving" else "successive_halving"
    assert f" {other}: ratio " in said  # #37: the other pruning strategy's row is read too, not folded in
    assert unquoted(said, table, allowed={90}) == set()
    # the opposite: the one good configuration starts worst and overtakes at the end: the rungs cut it
    table, said = _reading(_pool(n_bad=10, late_bloomer=True))
    assert "early cuts needed more epochs" in said and "cutting runs early" not in said
    assert unquoted(said, table, allowed={90}) == set()


def test_replay_verdict_says_not_decided_within_the_spread():
    t = Table(["strategy", "seeds", "reached", "median epochs to target", "quartiles (epochs)",
               "vs random (median ratio)", "90% interval"])
    t.add(strategy="random", seeds=10, reached="10/10", **{"median epochs to target": 8.0, "quartiles (epochs)": "4-12",
          "vs random (median ratio)": 1.0, "90% interval": "1.00-1.00"})
    t.add(strategy="hyperband", seeds=10, reached="10/10", **{"median epochs to target": 7.0,
          "quartiles (epochs)": "3-12", "vs random (median ratio)": 0.88, "90% interval": "0.50-1.40"})
    assert "Not decided" in study.replay_verdict(t)
    assert "nothing to compare" in study.replay_verdict(Table(t.columns, rows=t.rows[:1]))


def test_confirm_reading_both_ways():
    win = {"pool_hr": 0.7}
    ok = study.confirm_table(win, [{"seed": 1, "best HR@10": 0.71, "epochs to target": 3.0}], 0.68)
    no = study.confirm_table(win, [{"seed": 1, "best HR@10": 0.6, "epochs to target": None}], 0.68)
    assert study.confirm_reading(ok, 0.68).startswith("Confirmed")
    assert study.confirm_reading(no, 0.68).startswith("Not confirmed")
