"""Readings fixed after the tenth full run's read of lesson 12 (#37, r10f; lesson 12 re-run at 4e600d2)."""

from test_reading_agreement import disagreements

from course_lib.lessons import l12_hyperparameter_search as L12

# this run's trials, as the full-trial seconds their throughput gives (journals of /tmp/l12rerun, 12_studies)
ADAM_S = [2.18, 2.43, 2.53, 2.57, 2.71, 2.78, 2.84, 2.97, 3.2]
LAMB_S = [2.33, 2.4, 2.47, 2.48, 2.6, 2.7, 2.7, 2.94, 2.99, 3.15, 3.19, 3.2, 3.2, 3.31, 3.43, 3.45, 3.5, 4.47, 9.26]
PREDICTED = {"adam": 2.247, "lamb": 3.844}


def _records(adam_s, lamb_s):
    trial = lambda opt, s: {"params": {"optimizer": opt}, "samples_per_s": 1000.0 / s}
    return [{"trials": [trial("adam", s) for s in adam_s] + [trial("lamb", s) for s in lamb_s]}]


def test_the_pruning_reading_says_when_the_trials_straddle_the_limit():
    """r10f 12-H1: "lamb: pruned (model 3.84 s, trials 3.15 s, limit 3.05 s): the trials agree" read the median of 19
    LAMB trials, 3.5% over the limit, while 9 of the 19 ran a full trial under it: the trials do not decide the side.
    Opposite: LAMB trials all over the limit agree; Adam's 8 of 9 under it agree with its keep."""
    limit = L12.demo_time_limit(PREDICTED)
    t = L12.pruning_table(_records(ADAM_S, LAMB_S), PREDICTED, 1000, 1.0, time_limit_s=limit)
    rows = {r["optimizer"]: r for r in t.rows}
    assert rows["lamb"]["trials over the limit"] == "10 of 19" and rows["adam"]["trials over the limit"] == "1 of 9"
    said = L12.pruning_reading(t)
    assert "adam: kept (model 2.25 s, trials 2.71 s, limit 3.05 s): the trials agree (1 of 9 over the limit)" in said
    lamb = said.split("; lamb: ")[1]
    assert lamb.startswith("pruned (model 3.84 s, trials 3.15 s, limit 3.05 s): the trials do not decide: 10 of its "
                           "19 trials ran over the limit"), said
    assert "agree" not in lamb, said
    assert disagreements(said, t) == [], said

    slow = L12.pruning_table(_records(ADAM_S, [s + 1.0 for s in LAMB_S]), PREDICTED, 1000, 1.0, time_limit_s=limit)
    said = L12.pruning_reading(slow)
    assert ("lamb: pruned (model 3.84 s, trials 4.15 s, limit 3.05 s): the trials agree (19 of 19 over the limit)"
            in said), said
    assert disagreements(said, slow) == [], said
    fast = L12.pruning_table(_records(ADAM_S, [2.0] * 5), PREDICTED, 1000, 1.0, time_limit_s=limit)
    wrong = L12.pruning_reading(fast)
    assert "lamb: pruned" in wrong and "wrong side (0 of 5 over the limit)" in wrong, wrong
    none = L12.pruning_table(_records(ADAM_S, LAMB_S), {"adam": 2.2, "lamb": 2.3}, 1000, 1.0, time_limit_s=None)
    assert {r["trials over the limit"] for r in none.rows} == {"no limit"}
    assert L12.pruning_reading(none).startswith("No limit to prune on")

