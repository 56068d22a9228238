"""Readings of lessons 00-04 fixed after the eighth full-profile run (2026-12-02, /tmp/course13/runs/20261202-162720,
main 7503d0a; read by r8a, /work/notes/read-full-run-8-r8a.md): each test feeds the reading that run's numbers and the
opposite results."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course_lib.lessons import l01_baseline as L01  # noqa: E402
from test_reading_agreement import disagreements  # noqa: E402

USERS = 6040  # synthetic ml-1m: every HR@10 is a count of hits over these users


def _lazy_rows(dense_hits, lazy_hits, *, steps=9668, epochs=0.5):
    """Lesson 01 cell 25's rows: each seed's HR@10 as hits over the users (the run's: 3773, 3623 dense; 3476, 3432
    lazy, which the table prints 0.6247, 0.5998, 0.5755, 0.5682)."""
    return [{"optimizer": name, "seed": seed, "steps": steps, "epochs": epochs, "users": USERS, "hr": hits / USERS,
             "ndcg": hits / USERS / 2, "train_s": 1.0, "from": "trained here", "curve": {}}
            for seed in (0, 1) for name, hits in (("dense Adam", dense_hits[seed]),
                                                  ("SparseAdam tables + Adam", lazy_hits[seed]))]


def test_the_lazy_adam_reading_computes_its_means_and_range_from_the_cells_it_prints():
    """r8a 01-1: "HR@10 0.6123 with dense Adam ... the larger of the seeds' range, 0.0248" over the table's dense rows
    0.6247 and 0.5998 (range 0.0249, mean 0.61225): the reading took the unrounded 3773 / 6040 and 3623 / 6040."""
    rows = _lazy_rows((3773, 3623), (3476, 3432))
    table = str(L01.accuracy_table(rows))
    assert "0.6247" in table and "0.5998" in table
    said = L01.accuracy_reading(rows)
    assert "the larger of the seeds' range, 0.0249," in said and "0.0248" not in said
    assert said.startswith("after 9668 steps (0.50 epochs), HR@10 0.6122 with dense Adam and 0.5718 with")
    assert "lazy Adam is behind by more than the noise" in said
    # every number is a cell, or the cells' mean, difference, range, or the binomial noise of their mean (10: HR@10)
    from course_lib.metrics import hr_standard_error

    dense, lazy = (0.6247 + 0.5998) / 2, (0.5755 + 0.5682) / 2
    extra = [dense, lazy, lazy - dense, 0.6247 - 0.5998, 2 * hr_standard_error((dense + lazy) / 2, USERS), 2, 10, USERS]
    assert disagreements(said, L01.accuracy_table(rows), extra=extra) == []
    # opposite: lazy Adam ahead, its seeds the wider pair, rounded the other way (3850 / 6040 and 3750 / 6040: cells
    # 0.6374 and 0.6209, range 0.0165, where the unrounded range is 0.01656)
    ahead = L01.accuracy_reading(_lazy_rows((3500, 3480), (3850, 3750)))
    assert "the larger of the seeds' range, 0.0165," in ahead and "lazy Adam is ahead by more than the noise" in ahead


def test_the_lr_sweep_table_prints_each_runs_steps(monkeypatch):
    """r8a 01-2: lesson 01's sweep printed "adam | 0.001 | 0.5 | HR@10 0.625" and its lazy Adam table "dense Adam | 0 |
    9668 | 0.5 | 0.6247 | the baseline run": one setting at "0.5 epochs" with two HRs. The sweep's loop ran
    ceil(0.5 x 19337) = 9669 steps, the baseline's evaluation point is 9668: the sweep's table now says its steps."""
    from types import SimpleNamespace

    from course_lib import sweeps
    from course_lib.train.ncf import TrainConfig

    def fake_train(data, cfg, **kw):
        hr = {1e-3: 0.6250, 2e-3: 0.6028, 5e-3: 0.5374}.get(cfg.base_lr, 0.5190)
        return SimpleNamespace(final_hr=hr, final_ndcg=hr / 2, epochs=0.5, steps=9669, curve={"loss": [0.41]},
                               config={"optimizer": cfg.optimizer, "peak_lr": cfg.base_lr, "base_lr": cfg.base_lr})

    monkeypatch.setattr(sweeps, "train_to_target", fake_train)
    table, best, _ = sweeps.lr_sweep(None, TrainConfig(global_batch_size=256, base_lr=1e-3), (1e-3, 2e-3, 5e-3),
                                     max_epochs=0.5, max_extensions=2)
    assert best == 1e-3 and "steps" in table.columns
    assert {r["steps"] for r in table.rows} == {9669}
    row = next(r for r in table.rows if r["lr"] == "0.001")  # r10a 01-S3: the lr as the runs say it, HR@10 to 4 places
    assert (row["steps"], row["epochs"], row["HR@10"]) == (9669, 0.5, "0.6250")


def _rung(d, step, seeds, before, after, changes, run=None):
    """A rung as lesson 01 or 02 saved it: ``seeds`` (time to target s, steps to target) per seed, the yardstick's
    bursts before and after the lesson's runs (and, for the baseline, the run's own samples/s)."""
    from course_lib import ladder
    from course_lib.train.ncf import TrainConfig

    cfg = TrainConfig(**changes).to_dict()
    pace = {"before": before, "after": after, "rate": (before + after) / 2, **({"run": run} if run else {})}
    ladder.save_ladder_row(step, time_to_target_s=sum(t for t, _ in seeds) / len(seeds), final_hr=0.7525,
                           target_hr=0.75, dataset="synthetic-ml-1m", steps_to_target=seeds[0][1],
                           seed_runs=[{"seed": i, "time_to_target_s": t, "steps_to_target": n}
                                      for i, (t, n) in enumerate(seeds)],
                           pace=pace, config=cfg, carry=cfg, directory=d)


def test_the_ladders_plus_minus_counts_the_seeds_step_times_of_one_setting(tmp_path):
    """r8a 02-1: lesson 02's ladder printed "+sqrt scaling | 285 | 13.6 (seeds: 7.5, 19.7) | 5x (±12%)": one setting
    reached the target in 285 steps at both seeds, in 7.53 and 19.67 s (0.026 and 0.069 s per step), while the
    yardstick's bursts moved -5 % (71,240 -> 67,562 samples/s) and lesson 01's +7 %. The seeds' step times lie
    ±45 % from their mean: the ± is that (plus lesson 01's 7 %), and the row is flagged."""
    from course_lib import ladder

    base = dict(global_batch_size=256, base_lr=1e-3)
    sqrt = dict(global_batch_size=16384, base_lr=1e-3, base_batch_size=256, lr_scaling="sqrt")
    _rung(tmp_path, "baseline", [(47.34, 17406)], 88_197, 94_574, base, run=94_131)
    _rung(tmp_path, "+linear scaling", [(7.53, 285), (19.67, 285)], 71_240, 67_562, sqrt)
    rows = {r["step"]: r for r in ladder.ladder_rows(tmp_path)}
    assert ladder.seeds_pace_spread(rows["+linear scaling"]) == pytest.approx(0.446, abs=0.001)
    table = {r["step"]: r for r in ladder.ladder_table(tmp_path).rows}
    row = table["+sqrt scaling"]
    assert row["time to target (s)"] == "13.6 (seeds: 7.5, 19.7)"
    assert row["speedup (paced)"] == "5x (±52%)", row
    assert "its seeds ran one setting at 0.0264 to 0.069 s per step: the pace moved between them: compare steps, " \
           "not seconds" in row["pace vs lesson 01"], row
    assert rows["+linear scaling"]["helped"]  # both seeds far below the baseline's 47.3 s: the path is unchanged
    # opposite: the seeds ran at one pace (7.53 and 7.60 s for 285 steps): the ± is the bursts' movement, as before
    steady = tmp_path / "steady"
    _rung(steady, "baseline", [(47.34, 17406)], 88_197, 94_574, base, run=94_131)
    _rung(steady, "+linear scaling", [(7.53, 285), (7.60, 285)], 71_240, 67_562, sqrt)
    row = {r["step"]: r for r in ladder.ladder_table(steady).rows}["+sqrt scaling"]
    assert row["speedup (paced)"] == "8x (±12%)" and "its seeds ran" not in row["pace vs lesson 01"], row


def test_the_gap_table_prints_the_gap_as_its_reading_quotes_it():
    """r8a 02-2: lesson 02's gap table printed "0.04338", "0.01109" (five decimals) beside a reading that quotes
    "+0.0434", "+0.0111" against "twice the sampling error, 0.0213": the table now prints the reading's "+0.0434"."""
    from course_lib.lessons import l02_linear_scaling as L02
    from test_train_tricks import gap_run

    base = gap_run(256, 0.7563, 0.7997, 0.90)
    linear = gap_run(65536, 0.4184, 0.4295, 3.0)
    sqrt = gap_run(65536, 0.757, 0.8046, 1.32)
    results, labels = [base, base, linear, sqrt], ["linear", "sqrt", "linear", "sqrt"]
    table = L02.gap_table(results[1:], labels[1:], baseline=base)
    assert [r["gap"] for r in table.rows] == ["+0.0434", "+0.0111", "+0.0476"]
    text = L02.gap_reading(results, labels, users=USERS)
    assert "linear: gap +0.0434 at batch 256 (0.90 epochs) -> +0.0111 at batch 65536 (3.00 epochs)" in text
    assert all(cell in text for cell in ("+0.0434", "+0.0111", "+0.0476"))
    # opposite: a negative gap (the test side above the train side) keeps its sign in both
    below = gap_run(65536, 0.80, 0.78, 1.0)
    table = L02.gap_table([base, below], ["sqrt", "sqrt"], baseline=base)
    assert table.rows[1]["gap"] == "-0.0200" and "-0.0200 at batch 65536" in L02.gap_reading(
        [base, below], ["sqrt", "sqrt"], users=USERS)


def test_the_warmup_takeaway_says_a_within_the_seed_range_verdict_once():
    """r8a 03-2: "Here warmup made no measurable difference (no measurable difference (time to target: linear warmup,
    19 steps 10.3 s vs no warmup 13 s, within the seed range 3.1 s)): without it nothing blew up": the run's seeds,
    9.764 / 10.87 s with the 19-step warmup and 14.51 / 11.43 s without. Opposite: seeds that disagree keep their
    words, and warmup faster beyond the range is another takeaway."""
    from course_lib.lessons import l03_warmup as L03
    from test_reading_agreement import _decided

    rung = "linear warmup, 38 steps"
    within = L03.takeaway(_decided([9.764, 10.87], [14.51, 11.43], (0.5878, 0.5801), (0.5081, 0.5054)), rung)
    assert within.startswith("Here warmup made no measurable difference (time to target: linear warmup, 38 steps "
                             "10.3 s vs no warmup 13 s, within the seed range 3.1 s): without it nothing blew up "
                             "(loss at the first evaluation: 0.505 to 0.508 over 2 seeds without warmup, "
                             "0.580 to 0.588 over 2 seeds with it)"), within
    assert within.count("no measurable difference") == 1
    disagree = L03.takeaway(_decided([6.778, 7.489], [7.754, 6.616]), rung)
    assert disagree.startswith("Here warmup made no measurable difference: the seeds disagree (time to target:")
    assert disagree.count("no measurable difference") == 1
    assert L03.takeaway(_decided([6.0, 6.1], [9.0, 9.2]), rung).startswith("Here warmup helped beyond the seeds' noise")


def test_the_warmup_reading_says_when_the_time_ratio_is_the_pace_not_the_steps():
    """r8a 03-1: "On this seed warmup took fewer steps: without it 1.05x the steps and 1.49x the time" over the sweep
    table's no warmup 14.51 s / 100 steps and 19-step warmup 9.764 s / 95: 0.145 against 0.103 s per step, at one
    batch and peak lr. Opposite: runs at one pace keep the line as it was."""
    from course_lib.lessons import l03_warmup as L03
    from test_reading_agreement_more import _warm_run

    from course_lib.sweeps import sweep_table

    labels = ["no warmup", "linear warmup, 19 steps", "linear warmup, 38 steps"]
    runs = [_warm_run(14.51, 100, 0), _warm_run(9.764, 95, 19), _warm_run(10.96, 96, 38)]
    said = L03.warmup_reading(runs, labels)
    # its numbers: cells of the sweep table, their ratios, and s per step (two cells of one row)
    paces = [r.time_to_target_s / r.steps_to_target for r in runs]
    assert disagreements(said, sweep_table(runs, labels), extra=(19, 38, 10, *paces)) == [], said
    assert ("without it 1.05x the steps and 1.49x the time; a step costs the same with or without warmup at one batch "
            "and peak lr, so the time beyond the steps' is the pace the runs' steps ran at (0.145 s per step without "
            "warmup, 0.103 with it), not warmup's (one seed: the comparison at two seeds decides)") in said, said
    steady = L03.warmup_reading([_warm_run(10.30, 100, 0), _warm_run(9.764, 95, 19), _warm_run(10.96, 96, 38)],
                                labels)
    assert "1.05x the time (one seed: the comparison at two seeds decides)" in steady and "pace" not in steady


def _sweep_runs(sgd_hr):
    """Lesson 01 cell 12's sweep: four Adam lrs and a plain-SGD run, half an epoch each (HR@10 as the table prints)."""
    from types import SimpleNamespace

    adam = [SimpleNamespace(config={"optimizer": "adam", "peak_lr": lr, "base_lr": lr}, final_hr=hr, final_ndcg=hr / 2,
                            epochs=0.5, steps=9669, curve={"loss": [0.41]})
            for lr, hr in ((5e-4, 0.5190), (1e-3, 0.6250), (2e-3, 0.6028), (5e-3, 0.5374))]
    sgd = SimpleNamespace(config={"optimizer": "sgd", "peak_lr": 0.1, "base_lr": 0.1, "momentum": 0.9},
                          final_hr=sgd_hr, final_ndcg=sgd_hr / 2, epochs=0.5, steps=9669, curve={"loss": [0.47]})
    return adam + [sgd]


def test_the_sgd_line_reads_the_sweeps_sgd_row_against_the_popularity_floor(monkeypatch):
    """r8a 01-3: lesson 01's markdown said "the model sits at popularity level for a long time" and lesson 02's "Lesson
    01's sweep shows plain SGD stuck at the floor", fixed text over the run's sgd row, HR@10 0.3907 against the
    popularity ranking's 0.3929. The line is read from the sweep's rows; opposite: an SGD run that learned."""
    from course_lib import sweeps
    from course_lib.metrics import hr_standard_error
    from course_lib.train.ncf import TrainConfig

    runs = iter(_sweep_runs(0.3907))
    monkeypatch.setattr(sweeps, "train_to_target", lambda data, cfg, **kw: next(runs))
    cfg = TrainConfig(global_batch_size=256, base_lr=1e-3)
    table, _, results = sweeps.lr_sweep(None, cfg, (5e-4, 1e-3, 2e-3, 5e-3), max_epochs=0.5,
                                        extra=(TrainConfig(optimizer="sgd", base_lr=0.1),))
    said = L01.sgd_reading(results, 0.3929, users=USERS)
    assert said == ("plain SGD (lr 0.1, momentum 0.9) ended its 0.5 epoch at HR@10 0.3907, level with the popularity "
                    "ranking's 0.3929 (a difference of -0.0022 against twice the evaluation's sampling error, 0.0126); "
                    "the best adam run reached 0.6250 in the same budget"), said
    # its numbers: the table's cells, the floor (cell 10's line), their difference, the noise, momentum 0.9, HR@10
    extra = (0.3929, 0.3907 - 0.3929, 2 * hr_standard_error(0.3929, USERS), 0.9, 10)
    assert disagreements(said, table, extra=extra) == [], said
    learned = L01.sgd_reading(_sweep_runs(0.5012), 0.3929, users=USERS)
    assert "at HR@10 0.5012, above the popularity ranking's 0.3929 (a difference of +0.1083" in learned
    assert "it learned more than the items' popularity" in learned and "level with" not in learned
    assert "below the popularity ranking's" in L01.sgd_reading(_sweep_runs(0.3500), 0.3929, users=USERS)


def test_a_speedup_at_two_significant_figures_keeps_its_trailing_zero():
    """r8a 04-1: lesson 04's ladder printed "+LAMB | 4x (±9%)" for a paced speedup of 3.99 at ±9 % (1 % to 10 %: two
    significant figures, lesson 01's line says), which :.2g wrote "4". Opposite: one figure, whole numbers, three."""
    from course_lib import ladder

    assert ladder.speedup_cell(3.99, 0.086) == "4.0x (±9%)"
    assert ladder.speedup_cell(4.58, 0.52) == "5x (±52%)"  # one figure: no trailing dot
    assert ladder.speedup_cell(20.04, 0.05) == "20x (±5%)"  # two figures of a whole number: "20", not "20."
    assert ladder.speedup_cell(123.4, 0.03) == "123x (±3%)" and ladder.speedup_cell(7.31, 0.04) == "7.3x (±4%)"
    assert ladder.speedup_cell(2.0, 0.001) == "2.00x"  # three figures, no ± under half a percent
