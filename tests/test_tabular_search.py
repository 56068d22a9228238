"""The tabular benchmark's mechanics: search strategies replayed on recorded learning curves."""

import math
import statistics

import pytest

from course_lib import optuna_search as search

from _search_curves import pool


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
    curves = pool()
    runs = search.replay_strategies(curves, budget=60 * 8, target=0.8, seeds=40, reduction_factor=2)
    med = {st: statistics.median([math.inf if r["reached_at"] is None else r["reached_at"] for r in rs])
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
