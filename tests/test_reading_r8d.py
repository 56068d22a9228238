"""Readings fixed after the eighth full-profile read (#37, helper r8d: lessons 11 and 12 of the run of 2026-12-02,
/tmp/course13; /work/notes/read-full-run-8-r8d.md). Each test feeds the reading that run's own numbers, under which it
printed a statement its tables contradict, and the opposite results."""

import json
from pathlib import Path

from test_reading_agreement import disagreements

from course_lib.lessons import l11_batch_size_science as L11
from course_lib.lessons import l12_hyperparameter_search as L12
from course_lib.tables import Table

ROOT = Path(__file__).resolve().parent.parent

# the eighth run's lesson 11, cell 30: test accuracy and ms/step at 4, 16, 64, 256 samples per rank, 2 ranks
EIGHTH_BN = {"local BN": ((0.858, 0.879, 0.906, 0.938), (3.4, 3.9, 3.5, 4.0)),
             "synchronized BN": ((0.857, 0.88, 0.918, 0.937), (10.6, 11.2, 11.0, 12.3)),
             "local BN, recomputed stats": ((0.88, 0.934, 0.961, 0.967), (3.0, 3.7, 3.9, 4.3)),
             "weight norm (no BN)": ((0.733, 0.826, 0.863, 0.921), (3.3, 2.6, 2.8, 3.9))}


def _bn_rows(table=EIGHTH_BN, batches=(4, 16, 64, 256)):
    return [{"per_rank_batch": b, "global_batch": 2 * b, "variant": v, "test_accuracy": acc[i], "step_ms": ms[i]}
            for v, (acc, ms) in table.items() for i, b in enumerate(batches)]


def test_the_bn_verdict_does_not_clear_the_batch_size_that_its_table_shows_costing_accuracy():
    """r8d 11-1: "Synchronized statistics did not help (0.857): the few samples per rank were not what cost accuracy
    ... the running averages, not the batch size, cost accuracy here" over a table where every variant fell from 256 to
    4 per rank (local BN 0.938 -> 0.858, weight norm, which has no batch statistics, 0.921 -> 0.733). Opposite: a table
    flat across the batches says no drop."""
    rows = _bn_rows()
    said = L11.bn_verdict(rows)
    assert "were not what cost accuracy" not in said and "not the batch size" not in said, said
    assert "statistics over both ranks' samples did no better than each rank's own 4" in said, said
    assert ("Every variant lost accuracy from 256 to 4 per rank (local BN 0.938 -> 0.858, and weight norm, which has "
            "no batch statistics, 0.921 -> 0.733)") in said, said
    assert "the running averages cost accuracy at every batch here" in said
    at = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 4}
    big = {r["variant"]: r["test_accuracy"] for r in rows if r["per_rank_batch"] == 256}
    # differences of two accuracy cells, bn_verdict's margin and the per-rank batches (in the column names)
    extra = (at["local BN, recomputed stats"] - at["local BN"], big["local BN, recomputed stats"] - big["local BN"],
             0.01, 4, 256,
             0.938 - 0.921, 0.858 - 0.733)  # f12i 11-H4: weight norm's smallest and largest gap to local BN
    assert disagreements(said, L11.bn_table(rows), extra=extra) == [], said

    flat = {v: ((a[-1],) * 4, ms) for v, (a, ms) in EIGHTH_BN.items()}
    other = L11.bn_verdict(_bn_rows(flat))
    assert "lost accuracy from" not in other, other
    only_local = {**flat, "local BN": ((0.858, 0.879, 0.906, 0.938), EIGHTH_BN["local BN"][1])}
    assert "1 of the 4 variants lost accuracy from 256 to 4 per rank (local BN 0.938 -> 0.858)" in \
        L11.bn_verdict(_bn_rows(only_local))


def _adaptive_row(run, batches, steps, samples=4_947_968, reached=True):
    return {"run": run, "reached": reached, "steps_to_target": steps, "samples_to_target": samples,
            "batches": batches, "final_hr": 0.77, "steps": steps, "samples": samples}


def test_the_adaptive_verdict_names_a_grown_run_that_never_grew_before_the_target():
    """r8d 11-2: "Against fixed batch 4,096: 0.75x the steps, 1.00x the samples. Against batch x 4 at epochs (1,): 0.75x
    the steps, 1.00x the samples" over a table whose grown run used "4,096" alone and reached the target in the fixed
    run's 1208 steps, at its first milestone: one run counted as two schedules. Opposite: a grown run is compared."""
    rows = [_adaptive_row("fixed batch 4,096", [4096], 1208), _adaptive_row("batch x 4 at epochs (1,)", [4096], 1208),
            _adaptive_row("batch = B_simple", [4096, 8192, 4096], 906)]
    said = L11.adaptive_verdict(rows)
    assert "Against batch x 4 at epochs (1,)" not in said and "Against fixed batch 4,096: 0.75x the steps" in said
    assert ("batch x 4 at epochs (1,) used batch 4,096 alone up to the target, in the same 1,208 steps as fixed batch "
            "4,096: it reached the target before its batch grew") in said, said
    assert disagreements(said, L11.adaptive_table(rows)) == [], said

    grew = [rows[0], _adaptive_row("batch x 4 at epochs (1,)", [4096, 16384], 1000, 5_200_000), rows[2]]
    other = L11.adaptive_verdict(grew)
    assert "Against batch x 4 at epochs (1,): 0.91x the steps" in other and "before its batch grew" not in other


_PARALLEL_COLS = ["processes", "search seconds", "wall seconds", "trials", "trials per process", "epochs spent",
                  "best HR@10", "epochs to target"]


def _parallel_table(one, many):
    t = Table(_PARALLEL_COLS)
    for r in (one, many):
        t.add(**dict(zip(_PARALLEL_COLS, r)))
    return t


def test_the_parallel_reading_blames_the_start_up_when_the_search_inside_the_processes_was_faster():
    """r8d 12-1: "12.7 s wall against 11 s for one (0.87x, slower; inside the processes 9.5 s against 11 s). They share
    this machine's cores, so each trial ran slower", where the two processes trained 20.5 epochs against 16.5 in less
    search time: the 3.2 s of start-up made the difference, not slower trials. Opposite: processes that each trained
    fewer epochs per second than the one did are said to share the cores."""
    t = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.5))
    said = L12.parallel_reading(t)
    assert "slower" in said and "share this machine's cores" not in said, said
    assert "Inside the processes it was faster, and trained 20.5 epochs against 16.5" in said
    assert "processes' start-up" in said
    assert disagreements(said, t) == [], said

    slow = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 12.0, 14.7, 9, "5, 4", 16.5, 0.656, 2.5))
    other = L12.parallel_reading(slow)
    assert "Each process trained fewer epochs per second than the one process did" in other
    assert "share this machine's cores" in other and "start-up" not in other
    assert disagreements(other, slow) == [], other


def test_the_replay_verdict_quotes_its_medians_as_the_table_prints_them():
    """r8d 12-3: "random search in 56.0" under a replay table whose cell reads 56."""
    t = Table(["strategy", "seeds", "reached", "median epochs to target", "quartiles (epochs)",
               "vs random (median ratio)", "90% interval"])
    t.add(strategy="random", seeds=1000, reached="801/1000", **{"median epochs to target": 56.0,
          "quartiles (epochs)": "28.0 to 104.0", "vs random (median ratio)": "-", "90% interval": "-"})
    t.add(strategy="hyperband", seeds=1000, reached="908/1000", **{"median epochs to target": 35.5,
          "quartiles (epochs)": "23.5 to 81.5", "vs random (median ratio)": 0.63, "90% interval": "0.59-0.91"})
    said = L12.replay_verdict(t)
    assert "random search in 56: ratio 0.63" in said and "56.0" not in said, said
    assert "in 35.5 epochs (median)" in said


def test_lesson12_states_the_search_budget_as_a_budget_its_last_trial_may_pass():
    """r8d 12-2: cell 2 printed "each search spends 16 epochs" above a table whose successive halving spent 18 and
    Hyperband 16.5 (the budget is checked between trials)."""
    nb = json.loads((ROOT / "notebooks" / "12_hyperparameter_search.ipynb").read_text())
    src = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "each search spends" not in src
    assert "checked between" in src and "the last one may take it past" in src


def test_lesson11_quotes_the_noise_scale_and_the_critical_batch_to_their_errors():
    """r8d 11-3: "B_simple = 11,506 +/- 2,243" (a 19% error), the noise table's "36379 +/- 11779", the trend's "+4,326
    per epoch, +/- 10,832" and "B_crit = 104,240 (93,184-117,601 within 2 standard errors)" quoted five or six digits of
    numbers known to two or three. Opposite: a precise estimate keeps its digits."""
    fit = L11.critical_batch([{"batch size": 4096, "steps to target": 1020, "resolution (steps)": 60},
                              {"batch size": 16384, "steps to target": 285, "resolution (steps)": 15},
                              {"batch size": 65536, "steps to target": 100, "resolution (steps)": 4}])
    said = L11.noise_verdict(11506.3, fit, stderr=2243.2)
    assert "B_simple = 11,500 +/- 2,200 is 0.11x B_crit" in said and "11,506" not in said, said
    assert "B_crit = 104,000" in said and "(93,200-118,000 within 2 standard errors)" in said, said
    bend = L11.bend_reading(fit)
    assert "B_crit = 104,000 (93,200-118,000" in bend and "104,240" not in bend, bend
    assert disagreements(bend, L11.fit_table(fit), extra=(16384, 65536, 285, 100, 4, 2.85)) == [], bend
    assert L11.with_error(86.2, 24.1) == "86 +/- 24" and L11.with_error(11506.3, 12.0) == "11,506 +/- 12"

    from types import SimpleNamespace
    probes = [{"epoch": e, "step": s, "hr": 0.5, "b_simple": b, "stderr": se, "trace_cov": 1.0, "grad_sq_norm": 1e-4,
               "repeats": 96} for e, s, b, se in ((0.25, 302, 9101.2, 1427.1), (0.5, 604, 36379.0, 11779.0),
                                                  (0.75, 906, 12869.0, 1990.0), (1.0, 1208, 11506.3, 2243.2))]
    table = L11.noise_table(SimpleNamespace(probes=probes))
    assert [(r["B_simple"], r["+/- (stderr)"]) for r in table.rows] == [(9100, 1400), (36000, 12000), (12900, 2000),
                                                                       (11500, 2200)]
    trend = L11.noise_trend(table)
    assert "B_simple over the run: 9,100, 36,000, 12,900, 11,500." in trend, trend


def test_lesson11s_introduction_numbers_its_sections_as_the_headings_do():
    """r8d 11-S1: the introduction listed "four ways" as 1 noise scale, 2 sharp minima, 3 growing, 4 BatchNorm, while
    the headings are 1 noise scale, 2 critical batch, 3 sharp minima, 4 growing, 5 BatchNorm (and "section 2's rule-lr
    points" and "section 3" read the headings' numbers)."""
    import re

    nb = json.loads((ROOT / "notebooks" / "11_batch_size_science.ipynb").read_text())
    md = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    heads = {int(n): t for n, t in re.findall(r"^## (\d) · (.+)$", "\n".join(md), re.M)}
    intro = dict((int(n), t) for n, t in re.findall(r"^(\d)\. \*\*(.+?)\*\*", md[0], re.M))
    assert sorted(intro) == sorted(heads) == [1, 2, 3, 4, 5]
    for n, words in ((2, "critical batch"), (3, "Sharp and flat minima"), (4, "Growing the batch"), (5, "BatchNorm")):
        assert words in intro[n] and words in heads[n], (n, intro[n], heads[n])


def test_a_spent_study_names_the_unit_of_its_budget():
    """r8d 12-S1: "has already spent its budget (32 of 32)" under a lesson that states budgets in epochs (16)."""
    from course_lib.journal import spent_note

    assert "(32 of 32 evaluation points" in spent_note("random-seed0", "/tmp/x.log", 32, 32)


def test_the_bert_verdict_says_when_no_trial_is_as_long_as_lesson07s_lamb_run():
    """r8d 12-4: "A trial trains at most 48 steps at batch 32; lesson 07's Adam baseline needed 36 at batch 32 to reach
    it, its LAMB run (the optimizer searched here) 52." and no conclusion: at that pace no trial could reach the target.
    Opposite: trials longer than lesson 07's LAMB run, or at another batch, draw none."""
    from test_search_study import BSPEC, _bert_record, _lr

    rand = _lr(_bert_record("random", 0, [[7.0, 6.5, 6.0, 5.8]]), 6.43e-3)
    hb = _lr(_bert_record("hyperband", 0, [[7.0, 6.5, 6.0, 5.8], [7.0, 6.9]], ["COMPLETE", "PRUNED"]), 6.43e-3, 1e-3)
    spec = {**BSPEC, "batch": 32, "optimizer": "lamb", "target_loss": 4.586, "max_steps": 48, "target_steps": 36,
            "target_batch": 32, "lamb_steps": 52}
    said = L12.bert_verdict(L12.bert_rows([rand, hb], spec), spec)
    assert ("its LAMB run (the optimizer searched here) 52: at lesson 07's pace a trial is 4 steps too short to reach "
            "the target") in said, said
    longer = {**spec, "max_steps": 60}
    assert "too short" not in L12.bert_verdict(L12.bert_rows([rand, hb], longer), longer)
    other = {**spec, "target_batch": 8}
    assert "too short" not in L12.bert_verdict(L12.bert_rows([rand, hb], other), other)


def test_the_growth_verdict_states_the_tolerance_it_calls_the_same_accuracy():
    """r8d 11-S6: "final HR@10 0.7858 vs 0.7911 (-0.0053) ...: the same accuracy in fewer, larger steps" without the
    0.01 it was read within. Opposite: a larger drop is not called the same."""
    from types import SimpleNamespace

    def run(steps, hr, ttt):
        return SimpleNamespace(steps=steps, final_hr=hr, reached=True, time_to_target_s=ttt, steps_to_target=304)

    said = L11.growth_verdict(run(455, 0.7911, 10.29), run(341, 0.7858, 7.877))
    assert "(-0.0053)" in said and "the same accuracy (within 0.01 HR@10) in fewer, larger steps" in said, said
    assert "the same accuracy" not in L11.growth_verdict(run(455, 0.7911, 10.29), run(341, 0.7611, 7.877))


def test_the_parallel_reading_names_what_its_epochs_to_target_count():
    """r8d 12-S2: "Epochs to the target: 2.5 against 2: ... so the pruner kept other ones", a cause nothing measured."""
    t = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.5))
    said = L12.parallel_reading(t)
    assert "the pruner kept other ones" not in said and "Epochs to the target: 2.5 against 2" in said, said
    assert "the epochs of those finished before the one that reached it" in said
