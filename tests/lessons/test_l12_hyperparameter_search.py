"""Lesson 12: budgets to the target, progress, brackets, the tables, and the comparisons of the searches
(live, replayed, in parallel, BERT, the model's price) on clear and unclear cases."""

import functools
import math

import pytest

from course_lib import compare
from course_lib import optuna_search as search
from course_lib.lessons import l12_bert as bert
from course_lib.lessons import l12_hyperparameter_search as study
from course_lib.lessons import l12_replay as replay

from _search_curves import pool

optuna = pytest.importorskip("optuna")

BSPEC = {"budget": 12, "eval_every": 2, "model": "tiny", "batch": 8, "target_loss": 5.0, "max_steps": 6}
SPEC = {"pool_eval_every": 0.5, "replay_budget": 60 * 8, "replay_seeds": 40, "top_fraction": 0.05,
        "reduction_factor": 2}


def _trial(budget, curve, state="COMPLETE", optimizer="adam", speed=1000.0):
    return {"number": 0, "state": state, "budget": budget, "value": max(curve[1:], default=None),
            "curve_hr": curve, "params": {"optimizer": optimizer}, "samples_per_s": speed}


def _record(strategy, seed, trials, seconds=10.0):
    return {"strategy": strategy, "seed": seed, "seconds": seconds, "trials": trials}


def test_epochs_to_target_counts_earlier_trials_and_the_points_of_the_reaching_one():
    r = _record("random", 0, [_trial(4, [0.1, 0.2, 0.3, 0.3, 0.3]), _trial(4, [0.1, 0.3, 0.6, 0.7, 0.7])])
    assert study.epochs_to_target(r, 0.5, per_point=0.5) == (4 + 2) * 0.5
    assert study.epochs_to_target(r, 0.9, per_point=0.5) is None
    assert study.progress(r, 0.5) == [(2.0, 0.3), (4.0, 0.7)]


def test_the_strategy_table_counts_per_seed_the_trials_that_reached_the_target():
    rows = _rows((None, 2), (3, None))
    assert [r["at target"] for r in rows] == [[0, 1], [1, 0]]
    assert study.strategy_table(rows).rows[0]["at target"] == "0, 1"


def test_edge_extension_runs_grow_toward_the_best_lr():
    assert study.edge_extension_runs(1.0) == [0.5, 1.0, 2.0]
    assert study.edge_extension_runs(4.0) == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_grid_cost_is_k_to_the_axes():
    t = study.grid_cost_table(2.0, axes=5, points=(3,))
    assert t.rows[0]["runs"] == 243 and t.rows[0]["epochs"] == 486


def _rows(random_reach, hb_reach):
    recs = []
    for seed, (a, b) in enumerate(zip(random_reach, hb_reach)):
        for name, reach in (("random", a), ("hyperband", b)):
            curve = [0.0] + [0.1] * 8 if reach is None else [0.0] + [0.1] * (reach - 1) + [0.9]
            recs.append(_record(name, seed, [_trial(len(curve) - 1, curve)]))
    return study.strategy_rows(recs, 0.5, per_point=1.0)


def test_hyperband_brackets_match_optunas_own(tmp_path):
    s = search.open_study("hb", tmp_path / "j.log", strategy="hyperband", seed=0, max_resource=8,
                          reduction_factor=2)
    search.run_search(s, functools.partial(search.quadratic_objective, steps=8), budget=8 * 3)
    ours = study.hyperband_brackets(8, 1, 2)
    assert len(ours) == s.pruner._n_brackets == 4
    alloc = s.pruner._trial_allocation_budgets
    assert [b["share"] for b in ours] == pytest.approx([a / sum(alloc) for a in alloc])
    assert ours[0]["rungs"] == [1, 2, 4] and ours[-1]["rungs"] == []


@pytest.mark.slow
def test_neumf_trials_are_pruned_inside_the_engine(tmp_path):
    from course_lib.data import load_implicit

    data = load_implicit("synthetic", profile="smoke")
    spec = {**study.lesson_spec("smoke", seeds=1), "budget": 6}
    (rec,) = study.run_all(data, {**spec, "seeds": [0], "strategies": ["successive_halving"]}, 0.3, tmp_path)
    states = [t["state"] for t in rec["trials"]]
    assert "PRUNED" in states and "COMPLETE" in states
    pruned = [t for t in rec["trials"] if t["state"] == "PRUNED"]
    # cut at a rung before the end (never after its last report): the run stopped there, and its budget
    # is the points it trained
    assert all(t["budget"] < spec["max_resource"] and len(t["curve_hr"]) == t["budget"] + 1 for t in pruned)
    # a setting predicted too slow never trains
    s = search.open_study("slow", tmp_path / "slow.log", strategy="random", seed=0, max_resource=2)
    obj = search.neumf_objective(data, study.base_config(spec, 0.3), predicted_seconds=lambda cfg: 10.0,
                                 time_limit_s=1.0)
    search.run_search(s, obj, budget=1, max_trials=2)
    assert [t.state.name for t in s.trials] == ["PRUNED", "PRUNED"]
    assert math.isclose(search.budget_spent(s), 0.0)


def _bert_record(strategy, seed, curves, states=None):
    states = states or ["COMPLETE"] * len(curves)
    return {"strategy": strategy, "seed": seed, "seconds": 1.0,
            "trials": [{"number": i, "state": st, "budget": len(c) - 1, "value": min(c[1:]), "curve_loss": c,
                        "params": {}} for i, (c, st) in enumerate(zip(curves, states))]}


def test_bert_steps_to_the_target_count_earlier_trials():
    """The BERT search reads its trials with the NeuMF search's functions, minimizing the loss."""
    r = _bert_record("random", 0, [[7.0, 6.5, 6.0, 5.8], [7.0, 6.0, 4.9, 4.5]])
    to_loss = functools.partial(study.epochs_to_target, curve="curve_loss", minimize=True)  # steps, per_point=2
    assert to_loss(r, 5.0, 2) == (3 + 2) * 2
    assert to_loss(r, 4.0, 2) is None
    row = bert.bert_rows([r], BSPEC)[0]
    assert row["loss"] == 4.5 and row["steps"] == 12 and row["to target"] == 10
    assert study.progress(r, 2, curve="curve_loss", minimize=True) == [(6.0, 5.8), (12.0, 4.5)]


@pytest.mark.slow
def test_bert_grid_search_trains_lesson07s_lrs_to_the_end(tmp_path, monkeypatch):
    """The BERT grid: every trial one of lesson 07's lrs at its warmup, each trained to the end (no pruner),
    the loss reported at each evaluation; the journal counts the evaluations each trial trained."""
    import torch

    from course_lib.data.text import Corpus, build_mlm_data, pydoc_corpus

    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "cache"))
    data = build_mlm_data(Corpus("t", "test", tuple(pydoc_corpus().documents[:15])), vocab_size=300, seq_len=16,
                          max_tokens=6000)
    plan = type("Plan", (), {"bert_model": "tiny", "bert_seq_len": 16, "bert_vocab_size": 300})()
    bspec = bert.bert_spec("smoke", plan)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rec = bert.run_bert_one(data, bspec, "grid", 0, tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert sorted(t["params"]["base_lr"] for t in rec["trials"]) == pytest.approx(bspec["grid_lrs"])
    assert {t["params"]["warmup_fraction"] for t in rec["trials"]} == {bspec["grid_warmup"]}
    for t in rec["trials"]:
        assert len(t["curve_loss"]) == t["budget"] + 1  # step 0 and every evaluation trained
        if t["state"] == "COMPLETE":
            assert t["value"] == min(t["curve_loss"][1:]) and t["budget"] == bspec["max_resource"]


def test_bert_grid_centres_on_lesson07s_lamb_lr_scaled_to_this_batch():
    plan = type("Plan", (), {"bert_model": "mini", "bert_seq_len": 64, "bert_vocab_size": 4096})()
    assert bert.bert_spec("full", plan)["grid_lrs"] == pytest.approx([f * bert.LAMB_LR for f in bert.GRID_FACTORS])
    saved = {"profile": "full", "model": "mini", "target_loss": 4.6,
             "runs": [{"label": "adam b=128", "global_batch_size": 128, "steps_to_loss": 30},
                      {"label": "lamb b=128", "global_batch_size": 128, "peak_lr": 0.04, "eval_loss_curve": []}]}
    spec = bert.bert_spec("full", plan, saved)
    assert spec["grid_lrs"][1] == pytest.approx(0.04 * math.sqrt(32 / 128)) and spec["strategies"] == ["random", "grid"]


def test_lesson09s_model_prices_a_full_trial_and_the_table_prunes_over_the_limit():
    """Lesson 12's pruning before training: lesson 09's step model (probe, counted step, overhead)
    times the trial's steps; LAMB's step does more per parameter than Adam's, so it costs more."""
    import torch

    from course_lib.data import load_implicit
    from course_lib.perf.probe import probe_hardware

    data = load_implicit("synthetic", profile="smoke")
    spec = study.lesson_spec("smoke", seeds=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        curves = probe_hardware("cpu", matmul_sizes=(32, 64), copy_sizes=[2**12, 2**16], repeats=1).curves
        predicted = study.model_trial_seconds(data, spec, curves)
    finally:
        torch.set_num_threads(threads)
    assert set(predicted) == {"adam", "lamb"} and all(0 < s < 60 for s in predicted.values())
    records = [_record("random", 0, [_trial(2, [0.1, 0.2, 0.3], optimizer="adam", speed=1e5),
                                     _trial(2, [0.1, 0.2, 0.3], optimizer="lamb", speed=5e4)])]
    trial_s = study.trial_seconds(records, data, spec)
    per_sample = trial_s["adam"][0] * 1e5  # a full trial's samples
    assert trial_s == {"adam": [per_sample / 1e5], "lamb": [per_sample / 5e4]}
    tab = study.pruning_table({"adam": [1.0], "lamb": [2.0, 2.5]}, {"adam": 1.0, "lamb": 3.0}, time_limit_s=2.2)
    rows = {r["optimizer"]: r for r in tab.rows}
    assert rows["adam"]["pruned"] == "no" and rows["lamb"]["pruned"] == "yes"
    assert rows["lamb"]["trials over"] == "1 of 2"
    assert rows["adam"]["trials s"] == 1.0 and rows["lamb"]["model / trials"] == round(3.0 / 2.25, 2)
    assert study.pruning_table({}, {"adam": 1.0}, time_limit_s=2.0).rows[0]["trials s"] == "no trial"


def test_lesson07s_saved_setting_carries_its_lamb_runs_steps():
    import types

    from course_lib.bert_setting import saved_setting

    saved = {"profile": "full", "model": "mini", "seq_len": 64, "target_loss": 4.5,
             "runs": [{"label": "adam b=32", "steps_to_loss": 36, "global_batch_size": 32},
                      {"label": "lamb b=32", "steps_to_loss": 56, "global_batch_size": 32},
                      {"label": "lamb b=256 (best lr)", "steps_to_loss": 22, "global_batch_size": 256}]}
    plan = types.SimpleNamespace(bert_model="mini", bert_seq_len=64, bert_vocab_size=4096)
    got = saved_setting(saved, "full", plan)
    assert (got["target_steps"], got["target_batch"], got["lamb_steps"]) == (36, 32, 56)
    saved["runs"][1]["steps_to_loss"] = None
    assert saved_setting(saved, "full", plan)["lamb_steps"] is None



def test_live_comparison_is_lower_when_the_pruner_reaches_the_target_in_far_fewer_epochs():
    spec = {"eval_every": 1.0, "budget": 20}
    clear = study.live_comparisons(_rows((8, 8, 8), (2, 2, 3)), spec)
    assert [c.outcome for c in clear] == [compare.LOWER] and clear[0].question.startswith("epochs to target, hyperband")
    # one seed each, a step apart: one evaluation's spacing is as large as the gap
    close = study.live_comparisons(_rows((4,), (3,)), spec)
    assert close[0].outcome == compare.UNRESOLVED


def test_live_comparison_counts_a_missed_target_at_the_budget():
    spec = {"eval_every": 1.0, "budget": 40}
    (c,) = study.live_comparisons(_rows((None, None, None), (2, 2, 3)), spec)
    assert c.outcome == compare.LOWER and c.estimate < 0.1
    # both missed: each needed more than the budget, which bounds neither
    (c,) = study.live_comparisons(_rows((None,), (None,)), spec)
    assert c.outcome == compare.UNRESOLVED and math.isinf(c.high)
    assert study.live_comparisons([r for r in _rows((2,), (2,)) if r["strategy"] != "random"], spec) == []


def test_late_cuts_table_marks_a_cut_configuration_that_ended_above_the_cutters_best():
    cut = _trial(1, [0.0, 0.2], state="PRUNED")
    cut["params"] = {"base_lr": 1e-3, "optimizer": "adam"}
    other = _trial(4, [0.0, 0.5, 0.6], state="COMPLETE")
    other["params"] = {"base_lr": 5e-3, "optimizer": "adam"}
    full = _trial(4, [0.0, 0.2, 0.7], state="COMPLETE")
    full["params"] = dict(cut["params"])
    t = study.late_cuts_table([_record("successive_halving", 0, [cut, other]), _record("random", 0, [full])], 0.5)
    (row,) = t.rows
    assert row["cut by"] == "successive_halving" and row["cut at epoch"] == 0.5 and row["final HR@10"] == 0.7
    assert row["cutter's best"] == 0.6 and row["late bloomer"] == "yes"


def _par(seq_wall, par_wall, seq_speeds, par_speeds):
    seq = _record("hyperband", 0, [_trial(2, [0, 0.5], speed=s) for s in seq_speeds], seconds=seq_wall)
    par = {**_record("hyperband", 0, [_trial(2, [0, 0.5], speed=s) for s in par_speeds], seconds=par_wall),
           "wall_s": par_wall, "processes": 2}
    return study.parallel_comparisons(seq, par)


def test_parallel_comparisons_read_the_wall_time_and_each_trials_speed():
    wall, speed = _par(40.0, 20.0, [1000, 1010, 990, 1000] * 3, [500, 505, 495, 500] * 3)
    assert wall.outcome == compare.LOWER and speed.outcome == compare.LOWER
    # a search is known to about one trial: 4 trials of 10 s cannot tell 40 s from 38 s
    wall, speed = _par(40.0, 38.0, [1000, 1200, 800, 1000], [1000, 800, 1200, 1000])
    assert wall.outcome == compare.UNRESOLVED and speed.outcome != compare.LOWER


def test_pruning_comparisons_say_where_the_model_prices_trials_too_low():
    trial_s = {"adam": [2000 / s for s in (1000.0, 1010.0, 990.0)], "lamb": [2000 / s for s in (500.0, 400.0, 600.0)]}
    comps = study.pruning_comparisons(trial_s, {"adam": 1.0, "lamb": 4.0})
    by = {c.question.split("(")[-1].rstrip(")"): c for c in comps}
    assert by["adam"].outcome == compare.LOWER  # 1 s predicted, 2 s measured
    assert by["lamb"].outcome in (compare.SAME, compare.UNRESOLVED) and by["lamb"].low < 1 < by["lamb"].high
    assert study.pruning_comparisons({}, {"adam": 1.0}) == []


BSPEC2 = {**BSPEC, "strategies": ["random", "grid"]}


def test_bert_comparison_is_lower_when_every_grid_trial_beats_every_random_one():
    rand = _bert_record("random", 0, [[7.0, 6.5, 6.0, 5.8], [7.0, 6.6, 6.2, 6.1], [7.0, 6.4, 6.0, 5.9]])
    grid = _bert_record("grid", 0, [[7.0, 6.0, 4.9, 4.8], [7.0, 5.9, 4.9, 4.85], [7.0, 6.0, 5.0, 4.82]])
    recs = [rand, grid]
    c = bert.bert_comparisons(recs, bert.bert_rows(recs, BSPEC2), BSPEC2)[0]
    assert c.outcome == compare.LOWER and c.estimate == pytest.approx(-1.0)


def test_bert_comparison_is_unresolved_when_a_best_is_one_lucky_trial_or_there_are_too_few():
    rand = _bert_record("random", 0, [[7.0, 6.5, 6.0, 4.5], [7.0, 6.9, 6.8, 6.7], [7.0, 6.9, 6.9, 6.9]])
    grid = _bert_record("grid", 0, [[7.0, 6.0, 5.0, 4.8], [7.0, 5.9, 5.0, 4.85], [7.0, 6.0, 5.0, 4.82]])
    c = bert.bert_comparisons([rand, grid], bert.bert_rows([rand, grid], BSPEC2), BSPEC2)[0]
    assert c.estimate == pytest.approx(0.3) and c.outcome == compare.UNRESOLVED
    one = _bert_record("grid", 0, [[7.0, 6.0, 4.0, 3.0]])
    c = bert.bert_comparisons([rand, one], bert.bert_rows([rand, one], BSPEC2), BSPEC2)[0]
    assert c.outcome == compare.UNRESOLVED and math.isinf(c.high)
    assert bert.bert_comparisons([rand], bert.bert_rows([rand], BSPEC2), BSPEC2) == []


def test_bert_comparison_sets_the_best_found_against_token_frequencies_and_lesson07s_lamb_run():
    rand = _bert_record("random", 0, [[7.0, 6.5, 6.0, 5.8], [7.0, 6.6, 6.2, 6.1]])
    grid = _bert_record("grid", 0, [[7.0, 6.6, 6.2, 6.1], [7.0, 6.5, 6.1, 5.9]])
    spec = {**BSPEC2, "lamb_curve": [(2, 6.0), (6, 4.6), (10, 4.0)]}
    comps = bert.bert_comparisons([rand, grid], bert.bert_rows([rand, grid], spec), spec, unigram_loss=4.9)
    assert len(comps) == 3 and "unigram" in comps[1].question and "by step 6" in comps[2].question
    assert comps[1].outcome == compare.HIGHER  # 5.8 against the frequencies' 4.9: no context learned
    assert comps[2].outcome == compare.HIGHER  # 5.8 against lesson 07's 4.6: the trials trained slower
    tab = bert.bert_table(bert.bert_rows([rand, grid], spec), spec, unigram_loss=4.9)
    assert tab.rows[-1]["strategy"] == "unigram" and tab.rows[-1]["loss"] == 4.9


def test_replay_comparison_is_lower_for_an_early_leader_and_higher_for_a_late_bloomer():
    rep = replay.replay({"curves": pool()}, SPEC)
    comps = replay.replay_comparisons(rep, SPEC)
    assert {c.question.split(",")[1].split("/")[0].strip() for c in comps} == {"successive_halving", "hyperband"}
    assert all(c.outcome == compare.LOWER for c in comps)
    assert "reached" in replay.replay_table(rep, SPEC).columns
    late = replay.replay({"curves": pool(n_bad=10, late_bloomer=True)}, SPEC)
    assert any(c.outcome == compare.HIGHER for c in replay.replay_comparisons(late, SPEC))


def test_tpe_comparison_uses_the_retrainings_spread_and_needs_the_models_draws():
    win = {"pool_hr": 0.70}
    rows = [{"strategy": "hyperband", "seeds": 1, "trials": 10, "best HR@10": 0.60},
            {"strategy": "tpe_hyperband", "seeds": 1, "trials": 10, "best HR@10": 0.70}]
    tight = replay.confirm_table(win, [{"seed": s, "best HR@10": 0.70 + 0.001 * s, "epochs to target": 1.0}
                                       for s in (1, 2, 3)], 0.65)
    (c,) = replay.tpe_comparisons(rows, tight)
    assert c.outcome == compare.HIGHER
    loose = replay.confirm_table(win, [{"seed": 1, "best HR@10": 0.55, "epochs to target": None}], 0.65)
    assert replay.tpe_comparisons(rows, loose)[0].outcome == compare.UNRESOLVED
    rows[1]["trials"] = search.TPE_STARTUP_TRIALS
    assert replay.tpe_comparisons(rows, tight) == []


def test_confirm_table_counts_epochs_as_the_replay_does():
    win = {"pool_hr": 0.7, "curve": [0.5, 0.69, 0.7]}
    t = replay.confirm_table(win, [{"seed": 1, "best HR@10": 0.6, "epochs to target": "not reached"}], 0.68, per=0.5)
    assert t.rows[0]["epochs to target"] == 1.0 and t.rows[1]["epochs to target"] == "not reached"
