"""Readings fixed after the ninth full run's read-only pass over lesson 12 (#37, r9e)."""

from test_reading_agreement import disagreements
from test_reading_r8d import _parallel_table

from course_lib.lessons import l12_hyperparameter_search as L12


def test_the_parallel_reading_says_the_other_processes_drew_configurations_of_their_own():
    """r9e 12-C1: "Epochs to the target: 2.5 against 2: in parallel the trials finished in another order" called the
    parallel search the same one, while search_worker seeds process r with seed + r: 4 of its 8 trials were
    configurations the one process never drew. Opposite: with the same epochs to target nothing is explained."""
    t = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.5))
    said = L12.parallel_reading(t)
    assert "Epochs to the target: 2.5 against 2: the other processes drew configurations of their own" in said, said
    assert "(process r with seed + r)" in said
    assert disagreements(said, t) == [], said

    level = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.0))
    assert "configurations of their own" not in L12.parallel_reading(level)


def _short_trials_spec(**over):
    from test_search_study import BSPEC

    return {**BSPEC, "batch": 32, "optimizer": "lamb", "target_loss": 4.586, "max_steps": 48, "target_steps": 36,
            "target_batch": 32, "lamb_steps": 52, "lamb_lr": 0.01,
            "lamb_curve": [[8, 7.1], [16, 6.2], [24, 5.4], [32, 4.95], [40, 4.74], [48, 4.620], [56, 4.55]], **over}


def test_the_bert_verdict_sets_the_best_trial_against_lesson07s_lamb_run_at_the_same_step():
    """r9e 12-H1: "at lesson 07's pace a trial is 4 steps too short to reach the target, whatever lr or warmup a search
    picks", over a best held-out loss of 5.627, where lesson 07's LAMB run (lr 0.01) was at 4.620 by step 48: the
    trials trained slower than that run, not only for fewer steps. Opposite: a best trial level with lesson 07's run
    at step 48 is kept from the target by its length."""
    from test_search_study import _bert_record, _lr

    def rows(last):
        rand = _lr(_bert_record("random", 0, [[7.0, 6.5, 6.0, last + 0.1]]), 6.43e-3)
        hb = _lr(_bert_record("hyperband", 0, [[7.0, 6.5, 6.0, last], [7.0, 6.9]], ["COMPLETE", "PRUNED"]), 6.43e-3,
                 1e-3)
        return L12.bert_rows([rand, hb], _short_trials_spec())

    spec = _short_trials_spec()
    said = L12.bert_verdict(rows(5.627), spec)
    assert "whatever lr" not in said, said
    assert ("by step 48 that run (peak lr 0.01) was at 4.620, and the best trial here at 5.627: the settings drawn "
            "here also trained slower") in said, said
    level = L12.bert_verdict(rows(4.622), spec)
    assert "at 4.622: level with it, so the trials' length is what kept them from the target" in level, level
    # lesson 07 saved no curve (an older result): the verdict says what it can and no more
    old = L12.bert_verdict(rows(5.627), {**spec, "lamb_curve": None})
    assert old.endswith("4 steps too short to reach the target."), old


def test_lesson07s_saved_setting_carries_its_lamb_runs_curve_and_lr():
    import types

    from course_lib.lessons import l07_bert_lamb as l07

    saved = {"profile": "full", "model": "mini", "seq_len": 64, "target_loss": 4.5,
             "runs": [{"label": "adam b=32", "steps_to_loss": 36, "global_batch_size": 32},
                      {"label": "lamb b=32", "steps_to_loss": 52, "global_batch_size": 32, "peak_lr": 0.01,
                       "eval_loss_curve": [(8, 7.1), (48, 4.62)]}]}
    plan = types.SimpleNamespace(bert_model="mini", bert_seq_len=64, bert_vocab_size=4096)
    got = l07.saved_setting(saved, "full", plan)
    assert (got["lamb_steps"], got["lamb_lr"], got["lamb_curve"]) == (52, 0.01, [[8, 7.1], [48, 4.62]])
    assert l07.saved_setting(saved, "smoke", plan)["lamb_curve"] is None


def _pruning_records():
    trial = lambda opt, sps: {"params": {"optimizer": opt}, "samples_per_s": sps}
    return [{"trials": [trial("adam", 100_000.0), trial("lamb", 95_000.0)]}]


def test_the_pruning_table_sets_the_model_against_the_trials_with_no_limit_too():
    """r9e 12-H2: with the two predictions within 10% the lesson printed "the model predicts adam 9.1 s, lamb 9.6 s per
    full trial ..." and no more: the trials' measured seconds, the check its markdown promises, were missing. Opposite:
    with a limit, the reading still says which side each optimizer fell on."""
    predicted = {"adam": 9.1, "lamb": 9.6}
    t = L12.pruning_table(_pruning_records(), predicted, 1_000_000, 1.0, time_limit_s=None)
    assert [r["pruned before training"] for r in t.rows] == ["no limit", "no limit"]
    said = L12.pruning_reading(t)
    assert said.startswith("No limit to prune on"), said
    assert "adam: model 9.1 s, trials 10 s (model / trials 0.91)" in said, said
    assert "lamb: model 9.6 s, trials 10.5 s (model / trials 0.91)" in said, said
    assert disagreements(said, t) == [], said
    limited = L12.pruning_table(_pruning_records(), {"adam": 9.1, "lamb": 19.0}, 1_000_000, 1.0, time_limit_s=14.0)
    said = L12.pruning_reading(limited)
    assert "No limit" not in said and "lamb: pruned (model 19 s, trials 10.5 s, limit 14 s)" in said, said


def test_the_confirmation_counts_epochs_as_the_replay_does_and_gives_the_pools_own_run():
    """r9e 12-H3: the retrained winner printed 3.549 and 3.803 epochs to the target (the engine's epochs, evaluated
    0.2535 apart) beside the replay's evaluation points x 0.25, and the pool's own run "-". Opposite: a pool run that
    never reached the target says so."""
    curve = [0.5, 0.6, 0.65, 0.69, 0.7]
    win = {"pool_hr": 0.7, "curve": curve}
    t = L12.confirm_table(win, [{"seed": 1, "best HR@10": 0.7, "epochs to target": 1.0}], 0.68, per=0.25)
    assert t.rows[0]["epochs to target"] == 1.0, t.rows
    assert "evaluations x 0.25" in t.title
    assert L12.confirm_table({**win, "curve": curve[:3]}, [], 0.68, per=0.25).rows[0]["epochs to target"] == \
        "not reached"
    assert L12._points_to(curve, 0.68) == 4 and L12._points_to(curve, 0.9) is None
