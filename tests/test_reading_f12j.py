"""Lesson 12's readings fixed after the twelfth full-profile read (read f12j: 12-H1, 12-H2, 12-H3, 12-H4, 12-S1 of run
20261204-012210). Each test feeds the reading the run's own numbers (they printed a statement its outputs contradict
or leave without a verdict) and an opposite case."""

from test_reading_agreement import disagreements

from course_lib.lessons import l12_hyperparameter_search as L12
from course_lib.tables import Table

# the run's journals (results/12_studies/20261204-021805-c8e425): HR@10 curves by configuration
_A = [0.11, 0.292, 0.378, 0.49, 0.564, 0.604, 0.621, 0.624, 0.656]  # trial 0 of every search (adam, lr 0.00229)
_B = [0.11, 0.321, 0.313, 0.393, 0.531, 0.593, 0.622, 0.638, 0.659]  # hyperband's trial 4 (adam, lr 0.00196)
_C = [0.11, 0.326, 0.299, 0.362, 0.467, 0.433, 0.397, 0.373, 0.322]  # trial 1 (lamb, lr 0.01618)
_T = [0.11, 0.314, 0.31, 0.438, 0.571, 0.614, 0.641, 0.656, 0.673]  # tpe_hyperband's trial 4 (adam, lr 0.00067)


def _t(lr, opt, state, curve, budget=None):
    return {"state": state, "budget": budget or len(curve) - 1, "curve_hr": curve,
            "params": {"base_lr": lr, "optimizer": opt}}


def _records(sh_b_state="PRUNED"):
    b = _B[:3] if sh_b_state == "PRUNED" else _B
    rnd = {"strategy": "random", "seed": 0, "trials": [_t(0.00229, "adam", "COMPLETE", _A),
                                                       _t(0.01618, "lamb", "COMPLETE", _C)]}
    sha = {"strategy": "successive_halving", "seed": 0,
           "trials": [_t(0.00229, "adam", "COMPLETE", _A), _t(0.01618, "lamb", "PRUNED", _C[:3]),
                      _t(0.00196, "adam", sh_b_state, b)]}
    hb = {"strategy": "hyperband", "seed": 0, "trials": [_t(0.00229, "adam", "COMPLETE", _A),
                                                         _t(0.01618, "lamb", "COMPLETE", _C),
                                                         _t(0.00196, "adam", "COMPLETE", _B)]}
    tpe = {"strategy": "tpe_hyperband", "seed": 0, "trials": [_t(0.00229, "adam", "COMPLETE", _A),
                                                              _t(0.00067, "adam", "COMPLETE", _T)]}
    return [rnd, sha, hb, tpe]


def test_the_cut_line_checks_every_cut_configuration_another_search_trained_to_the_end():
    """read f12j 12-H1: "The best configuration the searches trained to the end (HR@10 0.673, in tpe_hyperband's
    search) was drawn by no other search here.", while successive halving had cut at epoch 1 (HR@10 0.313) the
    configuration hyperband trained to 0.659, above successive halving's own best 0.656. Opposite: where successive
    halving trained it to the end too, the only cut (lamb, 0.467 elsewhere) ended below its best, and the single-best
    sentence stays."""
    recs = _records()
    said = L12.cut_best_reading(recs, 0.5)
    assert "was drawn by no other search here" not in said, said
    assert said.startswith("A pruner cut a configuration that another search trained to the end above the cutting "
                           "search's own best: successive_halving cut lr 0.00196 (adam) at epoch 1, at HR@10 0.313 "
                           "there, and hyperband trained it to 0.659, above successive_halving's own best 0.656. "
                           "It was a late bloomer"), said
    assert said.endswith("The other 1 cut(s) of a configuration another search trained to the end ended there at or "
                         "below the cutting search's own best."), said
    rows = L12.strategy_rows([{**r, "seconds": 8.7} for r in recs], 0.5, 0.5)
    # the table's best HR@10s (0.656, 0.659) are its cells; lr, cut epoch and the HR@10 at the cut are the trial's
    assert disagreements(said, L12.strategy_table(rows, 0.5), extra=[0.00196, 1, 0.313]) == []
    kept = L12.cut_best_reading(_records("COMPLETE"), 0.5)
    assert kept.startswith("The best configuration the searches trained to the end (HR@10 0.673, in tpe_hyperband's "
                           "search) was drawn by no other search here. All 1 cut(s)"), kept
    assert "late bloomer" not in kept


def _pruning(ratios_from):
    t = Table(["optimizer", "lesson 09's model (s per full trial)", "the trials' throughput (s)", "model / trials",
               "limit (s)", "pruned before training", "trials over the limit"])
    for opt, model, trials in ratios_from:
        t.add(**{"optimizer": opt, "lesson 09's model (s per full trial)": model, "the trials' throughput (s)": trials,
                 "model / trials": round(model / trials, 2), "limit (s)": "none", "pruned before training": "no limit",
                 "trials over the limit": "no limit"})
    return t


def test_the_no_limit_pruning_check_ends_with_a_verdict_on_the_model():
    """read f12j 12-H2: "The model against what the trials measured: adam: model 1.34 s, trials 1.84 s (model /
    trials 0.73); lamb: model 1.38 s, trials 1.93 s (model / trials 0.72)." and no verdict, with the model 27-28 %
    low on both. Opposite: a model within 10 % prices the trials as they ran; one too high would prune too much."""
    run = _pruning([("adam", 1.338, 1.844), ("lamb", 1.385, 1.934)])
    said = L12.pruning_reading(run)
    assert said.endswith("Verdict: the model is 27 % low on adam and 28 % low on lamb (a trial runs 1.37x-1.39x its "
                         "price): a limit set from it would keep trials that run over it."), said
    assert disagreements(said, run, extra=[27, 28, 10]) == []
    close = L12.pruning_reading(_pruning([("adam", 1.80, 1.844), ("lamb", 1.90, 1.934)]))
    assert close.endswith("Verdict: within 10% on adam and lamb: it prices those trials as they ran."), close
    high = L12.pruning_reading(_pruning([("adam", 2.4, 1.844), ("lamb", 1.90, 1.934)]))
    assert "the model is 30 % high on adam: a limit set from it would prune trials" in high, high
    assert "within 10% on lamb" in high


def _rows(tpe_hr, hb_hr=0.6589999794960022, tpe_trials=7):
    base = {"seeds": 1, "epochs to target (per seed)": [2.0], "median epochs to target": 2.0, "pruned (median)": 4,
            "epochs spent (median)": 16.5, "seconds (median)": 8.7}
    return [{**base, "strategy": "hyperband", "trials (median)": 7, "best HR@10 (median)": hb_hr},
            {**base, "strategy": "tpe_hyperband", "trials (median)": tpe_trials, "best HR@10 (median)": tpe_hr}]


def _confirm():
    win = {"pool_hr": 0.6589999794960022, "curve": []}
    runs = [{"seed": 1, "best HR@10": 0.6729999780654907, "epochs to target": 3.5},
            {"seed": 2, "best HR@10": 0.6740000247955322, "epochs to target": 3.75}]
    return L12.confirm_table(win, runs, 0.656000018119812)


def test_tpes_best_is_set_against_one_configurations_training_seed_spread():
    """read f12j 12-H3: "tpe_hyperband ran 7 trials (one seed): past TPE's 4 random startup trials, its model drew the
    other 3." beside its best 0.673 against hyperband's 0.659, one seed, while one configuration's training seeds alone
    moved HR@10 from 0.659 to 0.674. Opposite: a gap beyond that spread is read as one; TPE drawing nothing, no line."""
    rows, conf = _rows(0.6729999780654907), _confirm()
    said = L12.tpe_reading(rows)
    assert said.endswith("Its best HR@10 0.673 is above hyperband's 0.659 (one seed, the same pruner): whether that is "
                         "what the model adds or training noise is read under the winner's retraining below (the "
                         "replay has no TPE row)."), said
    gap = L12.tpe_gap_reading(rows, conf)
    assert gap == ("tpe_hyperband's best HR@10 0.673 against hyperband's 0.659 (one seed): a gap of 0.014, where one "
                   "configuration's 3 training seeds alone span 0.015 (0.659 to 0.674, the table above): within that "
                   "spread, so it is not a measured gain of TPE's model; the replay, the lesson's many-seed "
                   "comparison, has no TPE row."), gap
    table = L12.strategy_table(rows, 0.5)
    assert disagreements(gap, table, extra=[0.014, 0.015, 3, 0.674]) == []
    assert disagreements(said, table, extra=[4, 3]) == []
    far = L12.tpe_gap_reading(_rows(0.70), conf)
    assert "beyond that spread, so tpe_hyperband's search found the better configuration here" in far, far
    assert L12.tpe_gap_reading(_rows(0.70, tpe_trials=4), conf) == ""


def test_the_confirmation_says_it_retrained_the_winner_only():
    """read f12j 12-H4: "Confirmed: retrained on 2 fresh seed(s), the winner reached 0.656 every time (the replay's
    target is not one run's luck)." where 2 of 40 pool configurations reach the target, it is the second one's best
    in its one pool run, and only the winner was retrained. Opposite: where the winner alone reaches it, it holds."""
    conf = _confirm()
    said = L12.confirm_reading(conf, 0.656000018119812, reached_by=2)
    assert "not one run's luck" not in said, said
    assert said == ("Confirmed for the winner: retrained on 2 fresh seed(s), it reached 0.656 every time. It is one of "
                    "the 2 pool configurations that reach the target, and the only one retrained: the other was not, "
                    "and it reaches the target only by its one pool run's best, which is the target itself, so a "
                    "replayed search that found only that one counts one run at the threshold."), said
    assert disagreements(said, conf, extra=[2]) == []
    alone = L12.confirm_reading(conf, 0.656000018119812, reached_by=1)
    assert alone.endswith("(the replay's target is not one run's luck)."), alone
    assert "the other 3 were not" in L12.confirm_reading(conf, 0.656000018119812, reached_by=4)


def _parallel(wall_many):
    t = Table(["processes", "search seconds", "wall seconds", "trials", "trials per process", "epochs spent",
               "best HR@10", "epochs to target"])
    t.add(processes=1, **{"search seconds": 8.7, "wall seconds": 8.7, "trials": 7, "trials per process": "7",
                          "epochs spent": 16.5, "best HR@10": 0.659, "epochs to target": 2})
    t.add(processes=2, **{"search seconds": 7.6, "wall seconds": wall_many, "trials": 8, "trials per process": "4, 4",
                          "epochs spent": 20, "best HR@10": 0.656, "epochs to target": 2})
    return t


def test_a_longer_wall_time_is_called_longer():
    """read f12j 12-S1: "10.1 s wall against 8.7 s for one (0.86x, slower; ...) ... what made the wall time no shorter
    is the processes' start-up". Opposite: within the tolerance (8.9 s against 8.7 s) it is no shorter."""
    run = _parallel(10.1)
    said = L12.parallel_reading(run)
    assert "what made the wall time longer is the processes' start-up" in said, said
    assert disagreements(said, run) == []
    level = L12.parallel_reading(_parallel(8.9))
    assert "no faster" in level and "what made the wall time no shorter" in level, level
