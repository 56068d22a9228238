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


POOL_MILLI = [  # this run's pool: 40 configurations x 16 evaluation points, HR@10 x 1000 (replay cell 16)
    [330, 292, 324, 378, 434, 490, 535, 564, 594, 604, 612, 621, 626, 624, 637, 656],
    [134, 326, 319, 299, 301, 362, 417, 467, 464, 433, 379, 397, 405, 373, 349, 322],
    [105, 110, 113, 117, 121, 130, 137, 143, 153, 171, 185, 205, 220, 231, 253, 258],
    [314, 288, 266, 229, 120, 112, 90, 114, 115, 113, 118, 135, 88, 69, 85, 102],
    [325, 321, 313, 313, 330, 393, 461, 531, 557, 593, 603, 622, 634, 638, 649, 659],
    [117, 228, 317, 328, 319, 323, 324, 314, 323, 327, 327, 326, 322, 326, 343, 343],
    [295, 333, 323, 316, 303, 319, 316, 317, 329, 343, 378, 422, 490, 562, 579, 606],
    [257, 323, 320, 313, 315, 321, 338, 348, 383, 418, 468, 504, 540, 581, 592, 596],
    [304, 262, 311, 333, 363, 391, 431, 421, 423, 367, 382, 436, 317, 278, 235, 289],
    [233, 321, 322, 332, 313, 318, 322, 329, 327, 330, 327, 327, 329, 329, 339, 339],
    [261, 176, 90, 77, 81, 98, 74, 99, 85, 66, 103, 71, 86, 76, 139, 105],
    [104, 113, 112, 119, 125, 130, 144, 166, 191, 204, 229, 255, 275, 283, 295, 300],
    [318, 318, 321, 348, 380, 415, 457, 493, 528, 525, 550, 593, 604, 601, 626, 623],
    [321, 294, 316, 326, 356, 387, 402, 454, 484, 487, 504, 518, 564, 563, 576, 578],
    [112, 209, 258, 254, 228, 270, 278, 248, 275, 283, 278, 242, 263, 264, 258, 281],
    [155, 331, 320, 299, 304, 326, 358, 469, 513, 549, 542, 540, 541, 521, 499, 498],
    [308, 293, 303, 335, 354, 387, 344, 92, 94, 82, 152, 127, 153, 94, 104, 147],
    [119, 269, 321, 326, 310, 317, 327, 322, 326, 330, 333, 343, 408, 469, 537, 574],
    [267, 320, 319, 315, 306, 322, 329, 324, 323, 326, 328, 324, 321, 316, 327, 331],
    [324, 312, 320, 315, 304, 319, 321, 322, 326, 327, 329, 331, 320, 316, 327, 328],
    [325, 313, 308, 301, 307, 308, 305, 298, 307, 312, 330, 311, 296, 308, 325, 317],
    [303, 251, 193, 84, 87, 92, 102, 111, 138, 124, 125, 86, 93, 80, 89, 93],
    [103, 120, 125, 170, 250, 308, 324, 331, 334, 332, 330, 327, 324, 323, 324, 325],
    [105, 122, 176, 293, 318, 335, 330, 329, 332, 331, 326, 324, 324, 318, 326, 321],
    [311, 287, 309, 315, 328, 257, 215, 138, 109, 104, 89, 113, 100, 85, 70, 120],
    [117, 170, 294, 317, 329, 329, 329, 330, 328, 329, 322, 323, 322, 318, 325, 322],
    [299, 333, 322, 294, 304, 342, 436, 506, 524, 538, 534, 529, 507, 500, 490, 488],
    [332, 309, 300, 303, 303, 315, 314, 307, 307, 319, 328, 309, 315, 317, 321, 325],
    [259, 325, 319, 321, 312, 323, 328, 329, 325, 332, 335, 345, 353, 385, 394, 404],
    [114, 119, 126, 140, 152, 188, 212, 236, 265, 289, 300, 309, 313, 326, 325, 324],
    [113, 116, 143, 132, 166, 130, 174, 231, 157, 187, 238, 210, 139, 210, 147, 174],
    [119, 241, 318, 329, 315, 323, 323, 319, 329, 325, 328, 325, 325, 336, 348, 353],
    [257, 315, 320, 301, 295, 315, 320, 314, 324, 323, 319, 318, 322, 320, 324, 324],
    [106, 113, 117, 124, 137, 181, 218, 253, 282, 294, 301, 319, 323, 326, 330, 328],
    [114, 145, 298, 323, 332, 329, 331, 328, 325, 325, 322, 325, 320, 323, 323, 328],
    [119, 257, 321, 328, 307, 323, 320, 319, 327, 326, 330, 326, 327, 350, 369, 379],
    [299, 330, 304, 262, 281, 294, 152, 112, 107, 85, 80, 91, 99, 84, 135, 91],
    [120, 270, 322, 332, 332, 325, 331, 327, 325, 324, 324, 325, 321, 323, 327, 327],
    [222, 312, 318, 314, 301, 319, 319, 323, 324, 326, 329, 325, 320, 324, 327, 327],
    [222, 105, 94, 104, 101, 146, 78, 103, 132, 77, 93, 107, 96, 105, 101, 72],
]


def _replay_rows(curves, seeds):
    spec = {**L12.lesson_spec("full"), "replay_seeds": seeds}
    rep = L12.replay({"curves": curves}, spec)
    t = L12.replay_table(rep, spec)
    return {r["strategy"]: r for r in t.rows}, t


def test_the_replays_brackets_draw_configurations_as_random_search_does():
    """r10f 12-C1: random search drew the pool's configurations with replacement and the brackets without, so a
    bracket of 16 of the 40 held one of the 2 top configurations more often (0.65) than 16 of random search's draws
    would (1 - 0.95^16 = 0.56). The verdict read "hyperband ... ratio 0.63, 90% interval 0.59-0.91 ...
    successive_halving: ratio 1.07 (0.80-1.15), not decided"; drawn alike, this run's pool gives 0.85 (0.63-0.91) and
    0.86 (0.80-0.92). Opposite: on a pool whose top configurations lead at no rung the brackets cannot find them
    early, and random search is not beaten."""
    pool = [[v / 1000 for v in c] for c in POOL_MILLI]
    rows, t = _replay_rows(pool, 1000)
    assert rows["random"]["median epochs to target"] == 56 and rows["random"]["reached"] == "801/1000"
    assert (rows["hyperband"]["vs random (median ratio)"], rows["hyperband"]["90% interval"]) == (0.85, "0.63-0.91")
    assert (rows["successive_halving"]["vs random (median ratio)"],
            rows["successive_halving"]["90% interval"]) == (0.86, "0.80-0.92")
    said = L12.replay_verdict(t)
    assert "Decided: hyperband's early cuts" in said and "successive_halving: ratio 0.86 (0.80-0.92), fewer" in said

    # the mechanism, at this run's sizes: 2 top curves of 40 that lead at every point; a budget of 16 points trains
    # the first 16 draws of a successive-halving bracket (R 16, eta 2) to its first rung, where a top one shows
    from course_lib import optuna_search as search

    leaders = [[0.1] * 16 for _ in range(38)] + [[0.9] * 16, [0.9] * 16]
    runs = [search.replay_search(leaders, "successive_halving", budget=16, target=0.5, seed=s, reduction_factor=2)
            for s in range(4000)]
    found = sum(r["reached_at"] is not None for r in runs) / len(runs)  # a top one among the bracket's 16 first draws
    assert abs(found - (1 - 0.95 ** 16)) < 0.03, found  # without replacement it was 1 - (24 * 23) / (40 * 39) = 0.65

    late = [[0.3] * 15 + [0.3] for _ in range(38)] + [[0.05] * 15 + [0.9], [0.05] * 15 + [0.9]]
    rows, _ = _replay_rows(late, 200)
    assert rows["hyperband"]["vs random (median ratio)"] == "inf" or rows["hyperband"]["vs random (median ratio)"] > 1


def test_the_brackets_and_replay_tables_print_their_numbers_as_they_are():
    """r10f 12-S1: "fraction past each rung 0.5, 0.25, 0.12" for 1/8; 12-S2: "quartiles 28.0 to 104.0" beside a median
    cell of 56. Opposite: a half-epoch quartile keeps its digit."""
    rows = L12.brackets_table(L12.hyperband_brackets(8, 1, 2), 0.5).rows
    assert rows[0]["fraction past each rung"] == "1/2, 1/4, 1/8", rows[0]
    assert L12.brackets_table(L12.hyperband_brackets(9, 1, 3), 1).rows[0]["fraction past each rung"] == "1/3, 1/9"
    pool = [[v / 1000 for v in c] for c in POOL_MILLI]
    got, _ = _replay_rows(pool, 200)
    assert got["random"]["quartiles (epochs)"] == "24 to 100", got["random"]
    assert got["hyperband"]["quartiles (epochs)"] == "23.5 to 81.5", got["hyperband"]


# this run's live searches (journals of /tmp/l12rerun): the configurations by their base lr, with their HR@10 curves
_A = [0.11, 0.292, 0.378, 0.49, 0.564, 0.604, 0.621, 0.624, 0.656]  # trial 0 of every search (adam, lr 0.00229)
_B = [0.11, 0.321, 0.313, 0.393, 0.531, 0.593, 0.622, 0.638, 0.659]  # hyperband's trial 4 (adam, lr 0.00196)


def _t(lr, state, curve, budget=None):
    return {"state": state, "budget": budget or len(curve) - 1, "curve_hr": curve, "params": {"base_lr": lr}}


def test_the_strategy_table_says_when_a_pruner_cut_the_best_configuration():
    """r10f 12-H2: the takeaway said the pruners stop "the bad ones"; this run's successive halving cut at 1 epoch
    (HR@10 0.313) the configuration Hyperband's search trained to 0.659, the best HR@10 of all the searches, and no
    line said so. Opposite: where every search that drew the best configuration trained it to the end, none cut it."""
    sha = {"strategy": "successive_halving", "seed": 0,
           "trials": [_t(0.00229, "COMPLETE", _A), _t(0.00196, "PRUNED", _B[:3])]}
    hb = {"strategy": "hyperband", "seed": 0, "trials": [_t(0.00229, "COMPLETE", _A), _t(0.00196, "COMPLETE", _B)]}
    rnd = {"strategy": "random", "seed": 0, "trials": [_t(0.00229, "COMPLETE", _A)]}
    said = L12.cut_best_reading([rnd, sha, hb], 0.5)
    # read f12j 12-H1: every cut configuration another search trained to the end is checked, not only the best
    assert said.startswith("A pruner cut a configuration that another search trained to the end above the cutting "
                           "search's own best: successive_halving cut lr 0.00196 at epoch 1, at HR@10 0.313 there, and "
                           "hyperband trained it to 0.659 (the best configuration the searches trained to the end), "
                           "above successive_halving's own best 0.656. It was a late bloomer"), said
    kept = {**sha, "trials": [_t(0.00229, "COMPLETE", _A), _t(0.00196, "COMPLETE", _B)]}
    said = L12.cut_best_reading([rnd, kept, hb], 0.5)
    assert said.endswith("was drawn by 2 searches, and no pruner cut it."), said
    assert L12.cut_best_reading([rnd, hb], 0.5).endswith("was drawn by no other search here.")
    assert L12.cut_best_reading([{"strategy": "random", "seed": 0, "trials": []}], 0.5) == ""


def _brackets(study, n=10):
    """The Hyperband bracket Optuna gives trials 0 .. n - 1 of ``study`` (its own hash of the study's name)."""
    import types

    study.pruner._try_initialization(study)
    return [study.pruner._get_bracket_id(study, types.SimpleNamespace(number=k)) for k in range(n)]


def test_tpe_hyperband_gets_hyperbands_brackets(tmp_path, monkeypatch):
    """r10f 12-H3: the markdown sets tpe_hyperband against hyperband to show "what a model of the results adds to the
    same cuts", but Optuna brackets a trial by a hash of the study's name: tpe_hyperband-seed0's trials 0-3, the same
    4 configurations as hyperband's, sat in brackets 3, 0, 1, 3 against 0, 1, 1, 0, and hyperband cut 2 of them,
    tpe_hyperband none. Opposite: successive halving (one bracket) keeps a study of its own name."""
    opened = {}

    def fake_search(st, objective, *, budget):
        opened[st.study_name] = st
        return {}

    monkeypatch.setattr(L12, "run_search", fake_search)
    monkeypatch.setattr(L12, "neumf_objective", lambda *a, **k: None)
    monkeypatch.setattr(L12, "trial_records", lambda st: [])
    spec = L12.lesson_spec("full")
    for strategy in ("hyperband", "tpe_hyperband", "successive_halving"):
        L12.run_one(None, spec, 0.5, strategy, 0, tmp_path)
    assert sorted(opened) == ["hyperband-seed0", "successive_halving-seed0"]
    assert {p.name for p in tmp_path.glob("*.log")} == {"hyperband-seed0.log", "tpe_hyperband-seed0.log",
                                                       "successive_halving-seed0.log"}
    hb = L12.open_study("hyperband-seed0", tmp_path / "hyperband-seed0.log", strategy="hyperband", seed=0,
                        max_resource=spec["max_resource"], reduction_factor=spec["reduction_factor"])
    assert _brackets(hb)[:4] == [0, 1, 1, 0]
    own = L12.open_study("tpe_hyperband-seed0", tmp_path / "own.log", strategy="tpe_hyperband", seed=0,
                         max_resource=spec["max_resource"], reduction_factor=spec["reduction_factor"])
    assert _brackets(own)[:4] == [3, 0, 1, 3]  # what this run's tpe_hyperband study, named for itself, got


def test_the_progress_figure_shows_every_search_and_ends_each_at_its_own_spend():
    """r10f 12-S4: random search's line, the same as tpe_hyperband's (0.656 from 4 to 16 epochs), lay hidden under it,
    and every line ran on to 18 epochs, successive halving's spend; 12-S5: the BERT target read "target 4.58593"
    beside the table's 4.586. Opposite: a search that spent the most runs to the figure's end."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    from course_lib.plots import plot_search_progress

    same = [(4.0, 0.656), (8.0, 0.656), (12.0, 0.656), (16.0, 0.656)]
    fig = plot_search_progress({"random": [same], "successive_halving": [[(4.0, 0.656), (18.0, 0.656)]],
                                "tpe_hyperband": [same]}, target_hr=4.585932945555142)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    rnd, sha, tpe = (lines[f"{s} (median of 1)"] for s in ("random", "successive_halving", "tpe_hyperband"))
    assert rnd.get_linestyle() != tpe.get_linestyle()
    last = lambda ln: max(x for x, y in zip(ln.get_xdata(), ln.get_ydata()) if not math.isnan(y))
    assert last(rnd) <= 16.0 and last(sha) == 18.0
    assert "target 4.586" in lines


def test_the_grid_table_prints_whole_epochs():
    """r10f 12-S6: "3125 runs, 1.25e+04 epochs" beside 128, 972 and 4096. Opposite: a quarter-epoch run keeps its
    fraction."""
    t = L12.grid_cost_table(4.0)
    assert [r["epochs (runs x epochs per run)"] for r in t.rows] == [128, 972, 4096, 12500]
    assert "12500" in str(t) and "e+04" not in str(t)
    assert L12.grid_cost_table(0.25).rows[1]["epochs (runs x epochs per run)"] == 60.75
